#!/usr/bin/env python
"""The built documentation site, checked in a real browser (headless Chromium, driven by Playwright).

    python scripts/docs_browser.py check [--site DIR]                   # every page, every link, search
    python scripts/docs_browser.py screenshots [--site DIR] [--out DIR] # PNGs of the main pages, for review

Without ``--site`` the site is built first (``mkdocs build --strict`` into a temporary folder). The site is served
on 127.0.0.1 (a free port) and visited with the system's Chromium (``/usr/bin/chromium`` from Debian's
``chromium`` package, or the ``CHROMIUM`` environment variable); Playwright's own browser downloads are never
used. ``check`` loads every page of the site and reports:

* console errors and uncaught page errors;
* requests that failed or answered with an HTTP error (a missing asset, a script from another host);
* links to pages of the site that do not exist, or to an anchor that the target page does not have;
* images that did not load;
* a search for a class name (``MultiHeadedAttention``) that does not list its API reference entry.

Links to other hosts are not followed (this machine has no network beyond the package registries); the site
itself must load nothing from other hosts (mkdocs.yml: ``theme.font: false``). ``tests/test_docs_browser.py``
runs the same checks in CI.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
MAIN_PAGES = [
    "",
    "getting-started/",
    "concepts/",
    "paper-to-code/",
    "tutorials/01_annotated_transformer/",
    "tutorials/03_attention_backends/",
    "benchmarks/",
    "troubleshooting/",
    "api/attention/",
]
SEARCH_QUERY = "MultiHeadedAttention"
SEARCH_TARGET = "api/attention/#transformer.attention.MultiHeadedAttention"


def chromium() -> str | None:
    """The system Chromium, or None when it is not installed."""
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def build_site(out: Path) -> Path:
    """``mkdocs build --strict`` into ``out``; raises with mkdocs' output when it fails."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"mkdocs build failed:\n{proc.stdout[-4000:]}")
    return out


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no access log on stderr
        pass


@contextlib.contextmanager
def serve(site: Path) -> Iterator[str]:
    """Serve ``site`` on 127.0.0.1 at a free port; yields the base URL (ending in /)."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def browser() -> Iterator:
    """A headless Chromium (a fresh profile each time) driven by Playwright."""
    from playwright.sync_api import sync_playwright

    executable = chromium()
    if executable is None:
        raise RuntimeError("Chromium is not installed (apt-get install chromium chromium-driver)")
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield instance
        finally:
            instance.close()


def page_paths(site: Path) -> list[str]:
    """Every HTML page of the built site, as URL paths relative to its root ("" for the home page)."""
    paths = []
    for html in sorted(site.rglob("*.html")):
        relative = html.relative_to(site).as_posix()
        if relative == "404.html":
            continue
        paths.append(relative.removesuffix("index.html"))
    return paths


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs) -> None:
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)


@dataclass
class Report:
    pages: int = 0
    links: int = 0
    problems: list[str] = field(default_factory=list)


def _fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, ""


def check_links(base: str, links: dict[str, set[str]], report: Report) -> None:
    """Every same-site link resolves, and its anchor exists on the target page. ``links``: target -> pages using it."""
    anchors: dict[str, set[str] | None] = {}
    for link, sources in sorted(links.items()):
        url, fragment = urldefrag(link)
        if urlparse(url).netloc != urlparse(base).netloc:
            continue
        report.links += 1
        where = ", ".join(sorted(sources)[:3]) + (" ..." if len(sources) > 3 else "")
        if url not in anchors:
            status, body = _fetch(url)
            if status != 200:
                anchors[url] = None
            else:
                parser = _Anchors()
                parser.feed(body)
                anchors[url] = parser.ids
        if anchors[url] is None:
            report.problems.append(f"broken link {link} (on {where})")
        elif fragment and fragment not in anchors[url]:
            report.problems.append(f"link {link}: the page has no anchor #{fragment} (on {where})")


def check(site: Path, paths: list[str] | None = None, search: bool = True) -> Report:
    """Load every page in Chromium and check it; see the module docstring."""
    report = Report()
    links: dict[str, set[str]] = {}
    with serve(site) as base, browser() as chrome:
        context = chrome.new_context(viewport={"width": 1280, "height": 900})
        for path in page_paths(site) if paths is None else paths:
            url = urljoin(base, path)
            label = f"/{path}"
            page = context.new_page()
            page.on(
                "console",
                lambda message, label=label: (
                    message.type == "error" and report.problems.append(f"{label}: console error: {message.text}")
                ),
            )
            page.on("pageerror", lambda error, label=label: report.problems.append(f"{label}: page error: {error}"))
            page.on(
                "requestfailed",
                lambda request, label=label: report.problems.append(
                    f"{label}: request failed: {request.url} ({request.failure})"
                ),
            )
            page.on(
                "response",
                lambda response, label=label: (
                    response.status >= 400
                    and report.problems.append(f"{label}: HTTP {response.status} for {response.url}")
                ),
            )
            response = page.goto(url, wait_until="load")
            if response is None or response.status != 200:
                report.problems.append(f"{label}: HTTP {response.status if response else 'no response'}")
            page.wait_for_load_state("networkidle")
            for href in page.eval_on_selector_all("a[href]", "elements => elements.map(e => e.href)"):
                if href.startswith(("http://", "https://")):
                    links.setdefault(href, set()).add(label)
            broken = page.eval_on_selector_all(
                "img", "images => images.filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)"
            )
            report.problems.extend(f"{label}: image did not load: {src}" for src in broken)
            report.pages += 1
            page.close()
        check_links(base, links, report)
        if search:
            found = search_results(context, base, SEARCH_QUERY)
            target = urljoin(base, SEARCH_TARGET)
            if not any(_without_query(link) == target for link in found):  # results carry ?h=QUERY (highlighting)
                report.problems.append(
                    f"search for {SEARCH_QUERY!r} does not list {SEARCH_TARGET}; it found {found[:8]}"
                )
        context.close()
    return report


def _without_query(url: str) -> str:
    parts = urlparse(url)
    return parts._replace(query="").geturl()


def search_results(context, base: str, query: str) -> list[str]:
    """The links that the site's search box lists for ``query`` (typed as a reader types it)."""
    page = context.new_page()
    page.goto(base, wait_until="networkidle")
    page.click(".md-search__input") if page.is_visible(".md-search__input") else page.click("label[for='__search']")
    page.keyboard.type(query, delay=20)
    try:
        page.wait_for_selector(".md-search-result__item", timeout=15000)
    except Exception:  # noqa: BLE001 - no result within the time: report what is there (nothing)
        pass
    links = page.eval_on_selector_all(".md-search-result__link", "links => links.map(a => a.href)")
    page.close()
    return links


def screenshots(site: Path, out: Path, paths: list[str] = MAIN_PAGES, width: int = 1280) -> list[Path]:
    """Full-page PNGs of ``paths`` into ``out`` (home.png, getting-started.png, ...)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with serve(site) as base, browser() as chrome:
        context = chrome.new_context(viewport={"width": width, "height": 900})
        for path in paths:
            page = context.new_page()
            page.goto(urljoin(base, path), wait_until="networkidle")
            name = path.strip("/").replace("/", "-") or "home"
            target = out / f"{name}.png"
            page.screenshot(path=str(target), full_page=True)
            written.append(target)
            page.close()
        context.close()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("check", "screenshots"):
        p = sub.add_parser(name)
        p.add_argument("--site", type=Path, help="a built site (default: build one into a temporary folder)")
        if name == "screenshots":
            p.add_argument("--out", type=Path, default=ROOT / "build" / "docs-screenshots", help="where the PNGs go")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="site-") as tmp:
        site = args.site or build_site(Path(tmp) / "site")
        if args.command == "check":
            report = check(site)
            for problem in report.problems:
                print(problem)
            print(
                f"{report.pages} pages, {report.links} site links checked, search for {SEARCH_QUERY!r}: "
                f"{len(report.problems)} problems"
            )
            return 1 if report.problems else 0
        for path in screenshots(site, args.out):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
