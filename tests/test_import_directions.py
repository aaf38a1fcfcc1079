"""The package's import directions (docs/architecture.md): each part imports only parts below it.

Read from the source with ``ast`` (every import, function-local ones included), so a new import that runs against
the layering fails here, naming the file, the line and both parts.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Parts of the package, lowest first. A part may import parts of its own layer or below, never above.
LAYERS: list[tuple[str, ...]] = [
    ("kernels",),  # transformer.kernels: torch and triton only (checked separately: nothing of ours at all)
    ("common",),
    ("config", "contracts"),
    ("masks", "mask_inputs", "cache"),
    ("backends",),
    ("attention", "layers", "embeddings"),
    ("encoder", "decoder"),
    ("model", "decoding"),
    ("lm",),
    ("checkpoint", "data", "training", "distributed"),
    ("tasks", "integrations", "proofs"),
    ("cli", "__main__", "transformer"),  # the package face (transformer/__init__.py) gathers every part but cli
]
LAYER_OF = {part: level for level, parts in enumerate(LAYERS) for part in parts}


def _module_name(path: Path) -> str:
    if path.is_relative_to(ROOT / "kernels"):
        parts = ["transformer", "kernels", *path.relative_to(ROOT / "kernels").with_suffix("").parts]
    else:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path, source: str | None = None):
    """(line, absolute module imported) for every import in the file at ``path`` (or in ``source``, read as if it
    stood at ``path``)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text() if source is None else source, str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if node.module is None or node.level and not node.module:
                for alias in node.names:  # "from . import x": x may be a module
                    yield node.lineno, f"{target}.{alias.name}"
            else:
                yield node.lineno, target


def _package_graph(package: str, *, with_face: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` (``"transformer.lm"``) it imports (every import, function-local ones too);
    an import of a name from a package counts as an import of the package (its ``__init__``). ``with_face``: the
    package's own ``__init__`` counts too (else an import of the package itself is left out)."""
    paths = [p for p in _sources() if (_module_name(p) + ".").startswith(package + ".")]
    modules = {_module_name(p) for p in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        edges = set()
        for _, target in _imports(path):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            inside = target.startswith(package + ".") or (with_face and target == package)
            if target and target != _module_name(path) and inside:
                edges.add(target)
        graph[_module_name(path)] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle, as a path found by depth-first search (empty: none)."""
    found, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def _part(module: str) -> str | None:
    """The part of the package ``module`` belongs to; ``"transformer"`` for the package face (``transformer`` itself,
    or a name imported from it such as ``__version__``); None outside the package."""
    parts = module.split(".")
    if parts[0] != "transformer":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYER_OF else "transformer"


def _sources():
    return sorted((ROOT / "transformer").rglob("*.py")) + sorted((ROOT / "kernels").rglob("*.py"))


def test_every_part_of_the_package_has_a_layer():
    parts = {
        p.stem if p.is_file() else p.name
        for p in (ROOT / "transformer").iterdir()
        if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))
    }
    parts.discard("__init__")
    parts.add("transformer")
    assert parts - set(LAYER_OF) == set(), "add the new part to LAYERS here and to docs/architecture.md"


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_run_downwards(path: Path):
    wrong = _violations(path)
    assert not wrong, f"{path.relative_to(ROOT)}:\n" + "\n".join(wrong)


def _violations(path: Path, source: str | None = None) -> list[str]:
    importer = _part(_module_name(path))
    wrong = []
    for line, module in _imports(path, source):
        if path.is_relative_to(ROOT / "kernels"):
            if module.split(".")[0] == "transformer" and _part(module) != "kernels":
                wrong.append(f"line {line}: kernels/ imports {module}: kernels import torch and triton only")
            continue
        imported = _part(module)
        if importer == "transformer" and imported == "cli":
            wrong.append(
                f"line {line}: the package face imports {module}: importing transformer must not build the CLI"
            )
        if imported is None or imported == importer or importer == "transformer":
            continue
        if imported == "cli" and importer != "__main__":  # python -m transformer runs the command line
            wrong.append(f"line {line}: {importer} imports {module}: nothing imports the command line")
        elif LAYER_OF[imported] > LAYER_OF[importer]:
            wrong.append(
                f"line {line}: {importer} (layer {LAYER_OF[importer]}) imports {module} "
                f"(layer {LAYER_OF[imported]}): imports run downwards (docs/architecture.md)"
            )
    return wrong


def test_the_check_sees_planted_wrong_imports():
    """Function-local, relative and absolute imports against the layering are all found."""
    model, kernel = ROOT / "transformer" / "model.py", ROOT / "kernels" / "_api.py"
    planted = model.read_text() + "\n\ndef _late():\n    from .cli import main\n    from .lm import build_lm\n"
    wrong = _violations(model, planted)
    assert len(wrong) == 2 and "nothing imports the command line" in wrong[0] and "imports transformer.lm" in wrong[1]
    assert _violations(kernel, kernel.read_text() + "\nimport transformer.masks\n")
    assert _violations(model, model.read_text()) == []
