"""The API reference (docs/api/*.md) covers exactly the public API, as docs/api/index.md defines it:

* public names: ``transformer.__all__`` and the ``__all__`` of every public module, the modules the reference
  pages document with ``::: module``; every other module of the package is listed as internal on the index page;
* the built reference has an entry (an HTML id) for every public name, and none for a name outside its module's
  ``__all__`` (an internal helper);
* every module page opens with a short python example, before its first ``:::`` (tests/test_docs_code.py runs it).
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
from pathlib import Path

import pytest

import transformer

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api"
DIRECTIVE = re.compile(r"^::: ([\w.]+)", re.M)
_spec = importlib.util.spec_from_file_location("docs_tests", ROOT / "tests" / "test_docs.py")
docs_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_tests)


def documented(pages: dict[str, str]) -> dict[str, str]:
    """``{module: page name}`` for every ``::: module`` directive of the reference pages."""
    return {module: name for name, text in pages.items() for module in DIRECTIVE.findall(text)}


def internal_modules(index: str) -> set[str]:
    """The modules of the index page's "Internal modules" table (``a.b``, ``.c`` meaning ``a.c``)."""
    table = index.split("## Internal modules", 1)[1]
    found = set()
    for row in re.findall(r"^\| (.+?) \|", table, re.M):
        parent = None
        for name in re.findall(r"`([\w.]+)`", row):
            if name.startswith("."):
                found.add(f"{parent}{name}")
            else:
                found.add(name)
                parent = name.rsplit(".", 1)[0]
    return found


def package_modules() -> set[str]:
    """Every module of the package without a leading underscore in its name (kernels' private files excluded)."""
    names = {"transformer"}
    for info in pkgutil.walk_packages(transformer.__path__, "transformer."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.add(info.name)
    return names


def required_ids(modules: dict[str, str]) -> dict[str, set[str]]:
    """For each public name, the ids any one of which documents it: ``module.name`` under each public module that
    lists it in ``__all__``, or under the module that defines it."""
    wanted: dict[str, set[str]] = {}
    for module_name in ["transformer", *modules]:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            ids = wanted.setdefault(f"{module_name}.{name}", set())
            ids.add(f"{module_name}.{name}")
            home = getattr(obj, "__module__", None)
            if home in modules and name in importlib.import_module(home).__all__:
                ids.add(f"{home}.{name}")
            ids.update(
                f"{other}.{name}"
                for other in modules
                if name in importlib.import_module(other).__all__
                and getattr(importlib.import_module(other), name) is obj
            )
    return wanted


def rendered_ids(site: Path) -> set[str]:
    return {
        i
        for page in (site / "api").glob("*/index.html")
        for i in re.findall(r'id="(transformer\.[\w.]+)"', page.read_text())
    }


def problems(pages: dict[str, str], index: str, ids: set[str]) -> list[str]:
    """Everything that breaks the rule, given the pages' text, the index page and the ids of the built reference."""
    modules = documented(pages)
    found = []
    internal = internal_modules(index)
    for module in sorted(package_modules() - {"transformer"} - set(modules) - internal):
        found.append(f"{module} is neither documented in docs/api nor listed as internal in docs/api/index.md")
    for module in sorted(set(modules) & internal):
        found.append(f"{module} is documented and listed as internal")
    for module in modules:
        if not hasattr(importlib.import_module(module), "__all__"):
            found.append(f"{module} has no __all__: its public names are not defined")
    for name, candidates in sorted(required_ids(modules).items()):
        if not candidates & ids:
            found.append(f"{name} is public but has no entry in the API reference (looked for {sorted(candidates)})")
    for entry in sorted(ids):
        module, _, name = entry.rpartition(".")
        if entry not in modules and module in modules and name not in importlib.import_module(module).__all__:
            found.append(f"{entry} is in the API reference but not in {module}.__all__ (an internal name)")
    for page, text in pages.items():
        if not DIRECTIVE.search(text):
            continue
        head = text[: DIRECTIVE.search(text).start()]
        blocks = re.findall(r"^(?:<!--\s*skip:.*-->\s*\n)?```(\w*)\n", head, re.M)
        if not blocks or blocks[0] != "python" or "<!-- skip:" in head:
            found.append(
                f"docs/api/{page} does not open with a python example (run by tests/test_docs_code.py) "
                f"before its first ':::'"
            )
    return found


def read_pages() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(API.glob("*.md")) if p.name != "index.md"}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    result = docs_tests._build(site)
    assert (site / "api").is_dir(), result.stdout[-2000:] + result.stderr[-3000:]
    return site


def test_the_reference_documents_every_public_name_and_no_internal_one(site):
    found = problems(read_pages(), (API / "index.md").read_text(), rendered_ids(site))
    assert not found, "\n".join(found)


def test_the_rule_fails_when_a_name_goes_missing_or_an_internal_one_is_listed(site):
    pages, index, ids = read_pages(), (API / "index.md").read_text(), rendered_ids(site)
    assert problems(pages, index, ids) == []
    # a public name whose entry is gone (a page that no longer renders TransformerLM)
    assert problems(pages, index, ids - {"transformer.lm.TransformerLM"}) == [
        "transformer.TransformerLM is public but has no entry in the API reference (looked for "
        "['transformer.TransformerLM', 'transformer.lm.TransformerLM'])",
        "transformer.lm.TransformerLM is public but has no entry in the API reference (looked for "
        "['transformer.lm.TransformerLM'])",
    ]
    # an internal helper listed
    assert problems(pages, index, ids | {"transformer.backends.CHOICE"}) == [
        "transformer.backends.CHOICE is in the API reference but not in transformer.backends.__all__ (an internal name)"
    ]
    # a module dropped from its page, and a page that opens with its directive instead of an example
    lm_page = pages["lm.md"]
    assert any(
        "transformer.lm.generation is neither documented" in p
        for p in problems({**pages, "lm.md": lm_page.replace("::: transformer.lm.generation\n", "")}, index, ids)
    )
    assert problems({**pages, "lm.md": "# Language model\n\n" + lm_page[lm_page.index(":::") :]}, index, ids) == [
        "docs/api/lm.md does not open with a python example (run by tests/test_docs_code.py) before its first ':::'"
    ]
