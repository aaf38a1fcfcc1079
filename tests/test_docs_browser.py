"""The built documentation site in a real browser: headless Chromium from the system packages, driven by Playwright.

Every page loads with no console error, no uncaught page error and no failed request; every link within the site
reaches a page, and its anchor exists there; every image loads; the search box finds a class by name; the
screenshot command writes pictures of the main pages. scripts/docs_browser.py does the work (run it by hand with
`python scripts/docs_browser.py check`).

Chromium comes from Debian's `chromium` package, which .ci/run installs. Where it is absent these tests skip and
say so, except in CI (the CI variable set), where a missing browser is a failure: the check must not silently
stop running.
"""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("docs_browser", ROOT / "scripts" / "docs_browser.py")
docs_browser = importlib.util.module_from_spec(_spec)
sys.modules["docs_browser"] = docs_browser  # its dataclasses look their module up
_spec.loader.exec_module(docs_browser)

if docs_browser.chromium() is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI is set but Chromium is not installed: .ci/run installs it (apt-get install chromium)")
    pytest.skip(
        "Chromium is not installed (apt-get install chromium chromium-driver): the browser check of the docs "
        "site did not run",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return docs_browser.build_site(tmp_path_factory.mktemp("site") / "site")


@pytest.fixture(scope="module")
def report(site):
    return docs_browser.check(site)


def test_every_page_loads_without_console_errors_or_failed_requests(site, report):
    pages = docs_browser.page_paths(site)
    assert report.pages == len(pages) >= 20
    for expected in ("", "getting-started/", "api/attention/", "tutorials/01_annotated_transformer/"):
        assert expected in pages
    page_problems = [
        p for p in report.problems if "console error" in p or "page error" in p or "request failed" in p or "HTTP " in p
    ]
    assert not page_problems, "\n".join(page_problems)


def test_no_broken_links_or_images(report):
    assert report.links >= 100
    broken = [p for p in report.problems if "link" in p or "image" in p]
    assert not broken, "\n".join(broken)


def test_search_finds_a_class_by_name(report):
    assert not [p for p in report.problems if p.startswith("search")], report.problems


def test_screenshots_of_the_main_pages(site, tmp_path):
    written = docs_browser.screenshots(site, tmp_path, paths=["", "api/attention/"])
    assert [p.name for p in written] == ["home.png", "api-attention.png"]
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000


# ---------------------------------------------------------------------------- the checks can fail

BAD_PAGE = """<!doctype html><html><head><title>planted</title></head><body>
<h1 id="top">Planted problems</h1>
<a href="other/">a page that exists</a> <a href="other/#here">an anchor that exists</a>
<a href="missing/">a page that does not exist</a> <a href="other/#nowhere">an anchor that does not exist</a>
<img src="missing.png" alt="an image that does not exist">
<script>console.error("planted console error")</script>
<script>undefined_function()</script>
</body></html>"""


def test_the_check_reports_planted_problems(tmp_path):
    (tmp_path / "index.html").write_text(BAD_PAGE)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "index.html").write_text(
        '<html><body><h2 id="here">Here</h2><a href="../">home</a></body></html>'
    )
    report = docs_browser.check(tmp_path, search=False)
    problems = "\n".join(report.problems)
    assert report.pages == 2
    assert "/: console error: planted console error" in problems
    assert "/: page error:" in problems and "undefined_function" in problems
    assert "missing.png" in problems and "image did not load" in problems
    assert "broken link http://127.0.0.1:" in problems and "/missing/" in problems
    assert "has no anchor #nowhere" in problems
    assert "#here" not in problems.replace("#here:", "")  # the anchor that exists is not reported
    assert len([p for p in report.problems if "link" in p]) == 2


def test_a_search_for_a_name_the_site_does_not_have_lists_nothing(site):
    with docs_browser.serve(site) as base, docs_browser.browser() as chrome:
        context = chrome.new_context()
        found = docs_browser.search_results(context, base, "Qwxzyv")
        context.close()
    assert found == []
