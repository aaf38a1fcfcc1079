"""The promise ledgers of the training, command-line, data and distributed areas (docs/promises/*.md): every row
names at least one test, and every test named exists (a ledger that points at nothing checks nothing)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["training", "cli", "data", "distributed"]
NODE = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


@pytest.mark.parametrize("area", PAGES)
def test_every_promise_names_tests_that_exist(area):
    text = (ROOT / "docs" / "promises" / f"{area}.md").read_text()
    assert text.startswith(f"# Promises: {area}\n")
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| Promise")]
    assert len(rows) >= 10
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        assert len(cells) == 3 and cells[0] and cells[1], row
        nodes = NODE.findall(cells[2])
        assert nodes, f"{area}: no test named in {row}"
        for file, name in nodes:
            source = (ROOT / file).read_text()
            assert re.search(rf"^def {name}\(", source, re.M), f"{area}: {file}::{name} does not exist"
