"""The documentation reads the same in the repository (GitHub, an editor) as on the site: every relative link of
docs/**/*.md and README.md resolves to a file of the repository (the strict site build, tests/test_docs.py, checks
the site's side, anchors included), links to a notebook lead to its tutorial page on the site, and the examples
import the package as ``tt``: ``T`` is the sequence length of PyTorch model code (nanoGPT's ``B, T, C = x.size()``),
and an example that binds the package to it breaks there."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "scripts" / "docs_hooks.py")
docs_hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_hooks)

FENCED = re.compile(r"^[ \t]*(```+).*?^[ \t]*\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s[^)]*)?\)")  # images are drawn by the site's hooks


def broken_links(page: Path, text: str | None = None) -> list[str]:
    """The relative link targets of ``page`` (code blocks and code spans aside) that name no file or folder of the
    repository, resolved from the page's folder as GitHub does; anchors are not checked here."""
    text = INLINE_CODE.sub("", FENCED.sub("", page.read_text() if text is None else text))
    broken = []
    for match in LINK.finditer(text):
        target = match["target"]
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    return broken


PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves_in_the_repository(page):
    assert broken_links(page) == []


def test_the_checker_finds_a_link_only_the_site_resolves(tmp_path):
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "05_x.ipynb").write_text("{}")
    text = (
        "[site only](tutorials/05_x.md) [repo](../notebooks/05_x.ipynb#a-heading) [web](https://example.org)\n"
        '[here](#top) `[in code](nowhere.md)` ![plot](assets/plots/p.png) [gone](../nowhere.md "title")\n'
        "```python\n# [in a block](nowhere.md)\n```\n"
    )
    assert broken_links(page, text) == ["tutorials/05_x.md", "../nowhere.md"]


@pytest.mark.parametrize(
    "src_uri, markdown, site",
    [
        ("integrations.md", "[t](../notebooks/05_your_own_model.ipynb)", "[t](tutorials/05_your_own_model.md)"),
        ("index.md", "[t](../notebooks/01_a.ipynb#model-section-3)", "[t](tutorials/01_a.md#model-section-3)"),
        ("api/lm.md", "[t](../../notebooks/04_lm.ipynb)", "[t](../tutorials/04_lm.md)"),
        ("api/lm.md", "[t](../notebooks/04_lm.ipynb)", "[t](../notebooks/04_lm.ipynb)"),  # docs/notebooks/: not ours
        ("index.md", "[t](contracts.md) [n](notebook.ipynb)", "[t](contracts.md) [n](notebook.ipynb)"),
    ],
)
def test_a_docs_pages_link_to_a_notebook_leads_to_its_tutorial_page_on_the_site(src_uri, markdown, site):
    assert docs_hooks.docs_page_links(markdown, src_uri) == site


# ------------------------------------------------------------------------------- the alias of the examples

ALIAS_T = re.compile(r"\bimport transformer as T\b")


def examples() -> list[Path]:
    """Every file a reader copies examples from: the docs, README, the notebooks, the package's docstrings."""
    found = [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md", *(ROOT / "notebooks").glob("*.py")]
    found += [*(ROOT / "notebooks").glob("*.ipynb"), *(ROOT / "transformer").rglob("*.py")]
    return sorted(found + list((ROOT / "kernels").rglob("*.py")))


def test_no_example_imports_the_package_as_T():
    offenders = {str(p.relative_to(ROOT)) for p in examples() if ALIAS_T.search(p.read_text())}
    assert offenders == set(), "write `import transformer as tt` (T is the sequence length in model code)"


def test_the_alias_check_sees_the_import_in_code_text_and_notebooks():
    assert ALIAS_T.search("x = 1\nimport transformer as T\n")
    assert ALIAS_T.search('    "import transformer as T\\n",')  # a notebook's JSON
    assert ALIAS_T.search('probe = "import transformer as T; print(T.checks_enabled())"')
    assert not ALIAS_T.search("import transformer as tt\nimport transformer as Tx")
