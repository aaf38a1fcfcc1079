"""The promise ledgers (docs/promises/*.md): every row names a promise, where it is stated, and tests that exist.

A ledger row whose test was renamed or removed would claim a check that no longer runs; this keeps them honest.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEDGERS = sorted(p for p in (ROOT / "docs" / "promises").glob("*.md") if p.name != "index.md")  # index: the format
NODE = re.compile(r"`(tests/[\w/]+\.py)::([\w:]+)`")


def _rows(text: str):
    for line in text.splitlines():
        if line.startswith("|") and not set(line) <= set("|- ") and not line.startswith("| Promise |"):
            yield line


@pytest.mark.parametrize("ledger", LEDGERS, ids=[p.name for p in LEDGERS])
def test_every_row_of_a_ledger_names_tests_that_exist(ledger):
    text = ledger.read_text()
    assert text.startswith("# Promises: "), f"{ledger.name} must start with a '# Promises: <area>' heading"
    sources: dict[str, str] = {}
    rows = list(_rows(text))
    assert rows
    for row in rows:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
        assert len(cells) == 3 and cells[0] and cells[1], f"{ledger.name}: {row}"
        nodes = NODE.findall(cells[-1])
        assert nodes, f"{ledger.name}: no test named in {row}"
        for path, name in nodes:
            assert "[" not in name
            if path not in sources:
                assert (ROOT / path).is_file(), f"{ledger.name}: {path} does not exist"
                sources[path] = (ROOT / path).read_text()
            *classes, function = name.split("::")
            for cls in classes:
                assert re.search(rf"^class {cls}\b", sources[path], re.M), f"{ledger.name}: no class {cls} in {path}"
            assert re.search(rf"^\s*def {function}\(", sources[path], re.M), f"{ledger.name}: no {function} in {path}"


def test_the_ledgers_exist():
    assert {"attention.md", "decoding.md", "model.md"} <= {p.name for p in LEDGERS}
