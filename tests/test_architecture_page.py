"""docs/architecture.md describes the package as it is: every module in its tree, the import layers of
tests/test_import_directions.py in its table, every old module path in its table of moved modules."""

from __future__ import annotations

import re
from pathlib import Path

from test_import_directions import LAYERS

from transformer.common.moved_modules import MOVED_MODULES

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "architecture.md").read_text()


def _tree_files() -> set[str]:
    """The files the page's tree lists, as paths relative to the repository (``transformer/lm/model.py``)."""
    block = PAGE.split("## The tree", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    files, stack = set(), []
    for line in block.splitlines():
        name = line.strip().split()[0]
        depth = (len(line) - len(line.lstrip())) // 4
        stack[depth:] = [name.split("/")[0] + "/" if name.endswith("/") or line.startswith("kernels/") else name]
        if name.endswith(".py"):
            files.add("".join(stack))
    return files


def test_the_tree_lists_every_module_and_nothing_else():
    actual = {str(p.relative_to(ROOT)) for p in (ROOT / "transformer").rglob("*.py")}
    actual |= {str(p.relative_to(ROOT)) for p in (ROOT / "kernels").rglob("*.py")}
    listed = _tree_files()
    assert actual - listed == set(), "modules missing from docs/architecture.md's tree"
    assert listed - actual == set(), "docs/architecture.md's tree lists modules that do not exist"


def test_the_layer_table_is_the_tested_layering():
    table = PAGE.split("## Which way imports run", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (.+?) \|", table, re.M)
    documented = [tuple(re.findall(r"`([\w.]+)`", parts)) for _, parts in rows]
    tested = [tuple(p for p in layer if p != "transformer") for layer in LAYERS]
    assert documented == tested


def test_every_old_module_path_is_in_the_table_and_imports_as_its_new_module():
    import importlib

    for old, new in MOVED_MODULES.items():
        assert f"| `{old}` | `{new}` |" in PAGE
        assert importlib.import_module(old) is importlib.import_module(new)
