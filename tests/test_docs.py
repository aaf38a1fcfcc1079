"""The documentation site builds with every page, link and anchor resolved (mkdocs --strict: a warning fails), with
the tutorials rendered as pages, the API reference generated from the docstrings (showing the shape contracts),
and the benchmark plots drawn from the committed results (scripts/docs_hooks.py)."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "scripts" / "docs_hooks.py")
docs_hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_hooks)


def _build(site: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess:
    if shutil.which("mkdocs") is None and subprocess.run([sys.executable, "-c", "import mkdocs"]).returncode:
        pytest.fail("mkdocs is not installed: it is part of the 'dev' extra")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    start = time.monotonic()
    result = _build(site)
    print(f"mkdocs build --strict: {time.monotonic() - start:.1f} s")
    assert result.returncode == 0, result.stdout + result.stderr
    return site


def test_docs_site_builds_strictly(site):
    assert (site / "index.html").exists()
    assert (site / "search" / "search_index.json").exists()


def test_every_notebook_is_a_page_of_the_site_with_its_outputs_and_figures(site):
    for notebook in docs_hooks.notebooks():
        page = site / "tutorials" / notebook.stem / "index.html"
        assert page.exists(), f"{notebook.name} is not rendered"
        html = page.read_text()
        nb = nbformat.read(notebook, as_version=4)
        assert docs_hooks.notebook_title(nb, "") in html
        images = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
        assert len(re.findall(r'<img [^>]*src="[^"]*cell\d+-\d+\.png"', html)) == images
        assert 'class="nb-output"' in html


def test_the_api_reference_shows_the_shape_contracts(site):
    html = (site / "api" / "attention" / "index.html").read_text()
    assert 'id="transformer.attention.MultiHeadedAttention"' in html
    text = re.sub(r"<[^>]+>", "", html).replace("&quot;", '"').replace("&#39;", "'")
    assert '"batch q_len {self.d_model}"' in text  # MultiHeadedAttention.forward's contract
    kernels = (site / "api" / "kernels" / "index.html").read_text()
    assert 'id="transformer.kernels.flash_attention"' in kernels  # kernels/ documented under its import name
    assert ":class:" not in text and ":func:" not in text  # Sphinx roles became links or code


def test_the_benchmark_plots_are_drawn_from_the_committed_results(site):
    plots = site / "assets" / "plots"
    for name in (
        "contracts-overhead.png",
        "decoding.png",
        "h100-anchors-2026-11-22-d64.png",
        "h100-anchors-2026-11-22-d128.png",
    ):
        assert (plots / name).read_bytes()[:4] == b"\x89PNG", name
    assert "h100-anchors-2026-11-22-d64.png" in (site / "benchmarks" / "index.html").read_text()


def test_the_tutorials_nav_entry_lists_every_notebook():
    nav = [{"Home": "index.md"}, {"Tutorials": docs_hooks.TUTORIALS_MARKER}]
    assert docs_hooks._fill_tutorials(nav)
    pages = nav[1]["Tutorials"]
    assert [list(p.values())[0] for p in pages] == [f"tutorials/{n.stem}.md" for n in docs_hooks.notebooks()]
    assert not docs_hooks._fill_tutorials([{"Home": "index.md"}])


def test_notebook_pages_keep_outputs_and_make_github_links_work_on_the_site():
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell(
                "# Title\nSee [Contracts](../docs/contracts.md#switching) and [the next](02_next.ipynb)."
            ),
            nbformat.v4.new_code_cell(
                "print(1)",
                outputs=[
                    nbformat.v4.new_output("stream", name="stdout", text="\x1b[31m1\x1b[0m\n"),
                    nbformat.v4.new_output(
                        "display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}
                    ),
                    nbformat.v4.new_output(
                        "execute_result", data={"text/markdown": "| a |\n|---|\n| 1 |", "text/plain": "x"}
                    ),
                ],
            ),
        ]
    )
    markdown, images = docs_hooks.notebook_markdown(nb, "demo")
    assert "](../contracts.md#switching)" in markdown and "](02_next.md)" in markdown
    assert "```python\nprint(1)\n```" in markdown
    assert "```text\n1\n```" in markdown  # terminal colours removed
    assert "![Figure from cell 1](demo/cell1-1.png)" in markdown and list(images) == ["demo/cell1-1.png"]
    assert "| a |\n|---|\n| 1 |" in markdown


def test_a_broken_link_or_anchor_fails_the_build(tmp_path):
    """Plant a broken link and a broken anchor in a copy of the docs: the strict build must refuse both."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    config = (ROOT / "mkdocs.yml").read_text()
    for old, new in (
        ("docs_dir: docs", f"docs_dir: {docs}"),
        ("- scripts/docs_hooks.py", f"- {ROOT}/scripts/docs_hooks.py"),
        ("paths: [.]", f"paths: [{ROOT}]"),
        ("- scripts/griffe_extensions.py", f"- {ROOT}/scripts/griffe_extensions.py"),
    ):
        assert old in config, old
        config = config.replace(old, new)
    (tmp_path / "mkdocs.yml").write_text(config)
    page = docs / "concepts.md"
    page.write_text(page.read_text() + "\n[gone](no-such-page.md) and [nowhere](paper-to-code.md#no-such-heading)\n")
    result = _build(tmp_path / "site", tmp_path / "mkdocs.yml")
    assert result.returncode != 0
    assert "no-such-page.md" in result.stderr and "no-such-heading" in result.stderr, result.stderr[-2000:]
