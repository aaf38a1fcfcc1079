"""The promise ledger (docs/promises/*.md) names only tests that exist: every row has a promise, where it is stated,
and at least one pytest node id (``tests/FILE.py::name`` or ``tests/FILE.py::Class::name``) that resolves to a test
function defined in that file."""

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEDGER = ROOT / "docs" / "promises"
NODE = re.compile(r"`(tests/[\w/]+\.py)::([\w:]+)`")


def ledger_pages() -> list[Path]:
    return sorted(path for path in LEDGER.glob("*.md") if path.name != "index.md")


def rows(page: Path) -> list[tuple[int, list[str]]]:
    """(line number, cells) of every table body row: header rows and separators are skipped."""
    out, lines = [], page.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        previous = lines[number - 2] if number > 1 else ""
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        if number < len(lines) and set(lines[number]) <= set("|-: ") and lines[number].startswith("|"):
            continue  # a header (the next line is the separator)
        if not previous.startswith("|"):
            continue  # not inside a table
        out.append((number, [cell.strip() for cell in line.strip().strip("|").split("|")]))
    return out


@cache
def defined_tests(path: str) -> frozenset[str]:
    """``name`` and ``Class::name`` of every test function and method defined in a test file."""
    tree = ast.parse((ROOT / path).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names.update(
                f"{node.name}::{item.name}"
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test")
            )
    return frozenset(names)


def unresolved(cell: str) -> list[str]:
    """The node ids in a Test cell that name no test (an empty list when every one exists)."""
    missing = []
    for path, name in NODE.findall(cell):
        if not (ROOT / path).is_file() or name not in defined_tests(path):
            missing.append(f"{path}::{name}")
    return missing


def test_the_ledger_has_pages():
    assert (LEDGER / "index.md").is_file()
    assert ledger_pages(), "docs/promises/ holds no area page"


@pytest.mark.parametrize("page", ledger_pages(), ids=lambda path: path.stem)
def test_every_promise_names_tests_that_exist(page):
    assert page.read_text().startswith("# Promises: "), f"{page.name} must start with '# Promises: <area>'"
    body = rows(page)
    assert body, f"{page.name} has no table rows"
    problems = []
    for number, cells in body:
        where = f"{page.name}:{number}"
        if len(cells) != 3 or not cells[0] or not cells[1]:
            problems.append(f"{where}: expected 'Promise | Stated in | Test' with all three filled, got {cells}")
            continue
        if not NODE.search(cells[2]):
            problems.append(f"{where}: no test node id (`tests/FILE.py::name`) in {cells[2]!r}")
        problems += [f"{where}: {node} does not exist" for node in unresolved(cells[2])]
    assert not problems, "\n".join(problems)


def test_the_check_itself_sees_a_missing_test():
    assert unresolved("`tests/test_promises.py::test_the_ledger_has_pages`") == []
    assert unresolved("`tests/test_promises.py::test_no_such_thing`") == ["tests/test_promises.py::test_no_such_thing"]
    assert unresolved("`tests/no_such_file.py::test_x`") == ["tests/no_such_file.py::test_x"]
