"""MkDocs hooks (mkdocs.yml: ``hooks``): the tutorials and the benchmark plots become part of the site.

* **Tutorials.** Each committed notebook ``notebooks/NAME.ipynb`` (executed, outputs kept; its reviewed source is
  the paired ``notebooks/NAME.py``) becomes the page ``tutorials/NAME.md``: markdown cells as they are, code cells
  as Python blocks, their outputs as text blocks, and their figures as PNG files beside the page. The notebooks
  are *not* executed here: ``tests/test_notebooks.py`` executes them in CI and checks that the committed
  outputs belong to the committed source. The nav entry ``- Tutorials: notebooks/*.ipynb`` in mkdocs.yml is
  replaced by one page per notebook, in file-name order, titled by the notebook's first heading, so adding a
  tutorial is adding a notebook. Links written for GitHub (``../docs/PAGE.md``) are rewritten for the site, and so
  are the docs pages' links to a notebook (``../notebooks/NAME.ipynb``, which the repository resolves): on the site
  they lead to its page ``tutorials/NAME.md``.
* **Benchmark plots.** ``assets/plots/*.png`` are drawn at build time from the committed results in
  ``benchmarks/results/`` (the figures are never re-measured here), each titled with its device, versions and
  date. ``docs/benchmarks.md`` shows them.
* **The promise ledger.** The nav entry ``- Promise ledger: promises/*.md`` is replaced by every page of
  ``docs/promises/`` (``index.md`` first, then by file name), titled by its first heading, so adding an area's
  ledger is adding a page. ``tests/test_promises.py`` checks that every test a ledger names exists.

Standard library, nbformat and matplotlib (all in the ``dev`` extra).
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import io
import json
import re
from pathlib import Path
from typing import Any

import nbformat
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
RESULTS = ROOT / "benchmarks" / "results"
TUTORIALS_MARKER = "notebooks/*.ipynb"
TUTORIALS_DIR = "tutorials"
PROMISES_MARKER = "promises/*.md"
PROMISES = ROOT / "docs" / "promises"
PLOTS_DIR = "assets/plots"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
DOCS_LINK = re.compile(r"\]\(\.\./docs/([^)]*)\)")
NOTEBOOK_LINK = re.compile(r"\]\(([\w-]+)\.ipynb(#[^)]*)?\)")
REPOSITORY_NOTEBOOK_LINK = re.compile(r"\]\((?P<up>(?:\.\./)+)notebooks/(?P<stem>[\w-]+)\.ipynb(?P<anchor>#[^)]*)?\)")


# ------------------------------------------------------------------------------------------------ notebooks


def notebooks() -> list[Path]:
    """The committed, executed notebooks, in file-name order."""
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def notebook_title(nb: nbformat.NotebookNode, fallback: str) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def site_links(markdown: str) -> str:
    """Links written for GitHub, from notebooks/, made to work from the tutorial pages of the site."""
    markdown = DOCS_LINK.sub(r"](../\1)", markdown)  # ../docs/PAGE.md -> the page
    return NOTEBOOK_LINK.sub(lambda m: f"]({m.group(1)}.md{m.group(2) or ''})", markdown)  # NAME.ipynb -> its page


def docs_page_links(markdown: str, src_uri: str) -> str:
    """Links from the docs page ``src_uri`` (``integrations.md``, ``api/lm.md``) to a notebook, written as the
    repository resolves them (``../notebooks/NAME.ipynb#anchor``), made to lead to its tutorial page on the site."""
    depth = src_uri.count("/")

    def tutorial_page(match: re.Match) -> str:
        if len(match["up"]) // 3 != depth + 1:  # not the repository's notebooks/ folder
            return match[0]
        return f"]({'../' * depth}{TUTORIALS_DIR}/{match['stem']}.md{match['anchor'] or ''})"

    return REPOSITORY_NOTEBOOK_LINK.sub(tutorial_page, markdown)


def _text_block(text: str) -> str:
    text = ANSI.sub("", text).rstrip("\n")
    fence = "````" if "```" in text else "```"
    return f'<div class="nb-output" markdown>\n\n{fence}text\n{text}\n{fence}\n\n</div>'


def notebook_markdown(nb: nbformat.NotebookNode, stem: str) -> tuple[str, dict[str, bytes]]:
    """The page for one executed notebook: ``(markdown, {image file name: PNG bytes})``.

    Image files are named ``STEM/cellN-K.png``, relative to the page (``tutorials/STEM.md``).
    """
    parts: list[str] = [
        f'!!! note "A notebook"\n    This page is `notebooks/{stem}.ipynb` as CI last executed it; its source is '
        f"`notebooks/{stem}.py` (a jupytext script). Open the notebook in Jupyter to run it yourself, or run "
        f"`python scripts/notebooks.py run {stem}` from the repository."
    ]
    images: dict[str, bytes] = {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            parts.append(site_links(cell.source))
        elif cell.cell_type == "code":
            if cell.source.strip():
                parts.append(f"```python\n{cell.source.rstrip()}\n```")
            stream: list[str] = []
            for k, output in enumerate(cell.get("outputs", [])):
                kind = output.get("output_type")
                if kind == "stream":
                    stream.append(output.get("text", ""))
                    continue
                if stream:
                    parts.append(_text_block("".join(stream)))
                    stream = []
                if kind == "error":
                    parts.append(_text_block("\n".join(output.get("traceback", [])) or output.get("evalue", "")))
                    continue
                data = output.get("data", {})
                if "image/png" in data:
                    name = f"{stem}/cell{index}-{k}.png"
                    images[name] = base64.b64decode(data["image/png"])
                    parts.append(f"![Figure from cell {index}]({name})")
                elif "text/markdown" in data:
                    parts.append(site_links(data["text/markdown"]))
                elif "text/plain" in data:
                    parts.append(_text_block(data["text/plain"]))
            if stream:
                parts.append(_text_block("".join(stream)))
    return "\n\n".join(parts) + "\n", images


# ------------------------------------------------------------------------------------------------ plots


def _attention_benchmark_module():
    spec = importlib.util.spec_from_file_location("attention_benchmark", ROOT / "benchmarks" / "attention.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def attention_plots(tmp: Path) -> dict[str, bytes]:
    """TFLOP/s against sequence length from every committed attention result (``benchmarks/results/*.json`` in the
    attention benchmark's format: ``attention.json`` once a GPU run writes it, ``h100-anchors-*.json``), one figure
    per file and head width (``STEM-dD.png``), drawn by ``benchmarks/attention.py``'s own ``plot``."""
    bench = _attention_benchmark_module()
    plots = {}
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text())
        if not (
            isinstance(data, dict)
            and isinstance(data.get("rows"), list)
            and "meta" in data
            and data["rows"]
            and "provider" in data["rows"][0]
        ):
            continue
        for head_dim in sorted({row["head_dim"] for row in data["rows"]}):
            out = tmp / f"{path.stem}-d{head_dim}.png"
            rows = [row for row in data["rows"] if row["head_dim"] == head_dim and "tflops" in row]
            with contextlib.redirect_stdout(io.StringIO()):  # plot() prints the path it wrote
                bench.plot(rows, out, data["meta"])
            plots[out.name] = out.read_bytes()
    return plots


def decoding_plot() -> bytes:
    import matplotlib.pyplot as plt

    data = json.loads((RESULTS / "decoding.json").read_text())
    setup = data["setup"]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for backend in dict.fromkeys(r.get("backend", "auto") for r in data["rows"]):  # one pair of lines per backend
        rows = [r for r in data["rows"] if r.get("backend", "auto") == backend]
        n = [r["generated_tokens"] for r in rows]
        ax.plot(
            n, [r["full_recompute_s"] for r in rows], marker="o", linestyle="--", label=f"{backend}: full recompute"
        )
        ax.plot(n, [r["kv_cache_s"] for r in rows], marker="o", label=f"{backend}: KV cache")
        for r in rows:
            ax.annotate(
                f"{r['speedup']:.1f}x",
                (r["generated_tokens"], r["kv_cache_s"]),
                textcoords="offset points",
                xytext=(0, 8),
                ha="center",
                fontsize=7,
            )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="generated tokens",
        ylabel="seconds",
        title=f"Greedy decoding, batch {setup['batch']}, d_model {setup['d_model']}, {setup['layers']} layers",
    )
    ax.legend()
    fig.text(
        0.01,
        0.01,
        f"{setup['device'].upper()}, {data['cpus']} cores, {setup['threads']} thread, torch {data['torch']}, "
        f"{data['date']} (benchmarks/results/decoding.json)",
        fontsize=7,
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    png = _png(fig)
    plt.close(fig)
    return png


def contracts_plot() -> bytes:
    import matplotlib.pyplot as plt

    runs = [
        json.loads((RESULTS / name).read_text())
        for name in ("contracts_overhead.json", "contracts_overhead_1thread.json")
        if (RESULTS / name).exists()
    ]
    labels, on, off = [], [], []
    for run in runs:
        threads = run["settings"]["threads"] or 2
        for mode in ("inference (no_grad)", "training forward"):
            result = run["results"][mode]
            labels.append(f"{mode}\n{threads} thread{'s' if threads > 1 else ''}")
            on.append(result["checks_on_ms"])
            off.append(result["checks_off_ms"])
    fig, ax = plt.subplots(figsize=(7, 3.4))
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], off, width=0.4, label="checks off")
    ax.bar([i + 0.2 for i in x], on, width=0.4, label="checks on")
    for i, (a, b) in enumerate(zip(on, off, strict=True)):
        ax.annotate(
            f"+{(a / b - 1) * 100:.1f}%",
            (i + 0.2, a),
            textcoords="offset points",
            xytext=(0, 3),
            ha="center",
            fontsize=8,
        )
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set(ylabel="ms per forward", title="Cost of the run-time contracts (median)")
    ax.legend(fontsize=8)
    first = runs[0]
    fig.text(
        0.01,
        0.01,
        f"{first['device'].split(',')[0]}, Python {first['python']}, torch {first['torch']}, {first['date']} "
        "(benchmarks/results/contracts_overhead*.json)",
        fontsize=7,
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    png = _png(fig)
    plt.close(fig)
    return png


def contract_call_plot() -> bytes:
    """The cost of one checked call's contract, before (jaxtyping + beartype at every call) and after (the eager fast
    path), from ``benchmarks/results/contracts_overhead.json`` (``per_call``)."""
    import matplotlib.pyplot as plt

    run = json.loads((RESULTS / "contracts_overhead.json").read_text())
    calls = run["per_call"]
    names = list(calls)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    y = range(len(names))
    before = [calls[n]["contract_before_us"] for n in names]
    after = [max(calls[n]["contract_after_us"], 0.01) for n in names]
    ax.barh([i + 0.2 for i in y], before, height=0.4, label="before: jaxtyping + beartype")
    ax.barh([i - 0.2 for i in y], after, height=0.4, label="after: the eager fast path")
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        ax.annotate(f"{b:.0f}", (b, i + 0.2), textcoords="offset points", xytext=(3, -3), fontsize=7)
        ax.annotate(f"{a:.1f}", (a, i - 0.2), textcoords="offset points", xytext=(3, -3), fontsize=7)
    ax.set_yticks(list(y), names, fontsize=7)
    ax.invert_yaxis()
    ax.set(
        xscale="log",
        xlabel="microseconds per call (the contract alone)",
        title="Cost of one checked call's contract (fastest of many batches)",
    )
    ax.legend(fontsize=7, loc="lower right")
    load = run.get("load_average_before", [None])[0]
    fig.text(
        0.01,
        0.01,
        f"{run['device'].split(',')[0]}, one thread, Python {run['python']}, torch {run['torch']}, "
        f"{run['date']}, load {load} (benchmarks/results/contracts_overhead.json)",
        fontsize=6,
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    png = _png(fig)
    plt.close(fig)
    return png


def plots() -> dict[str, bytes]:
    import tempfile

    import matplotlib

    matplotlib.use("Agg")
    with tempfile.TemporaryDirectory() as tmp:
        out = attention_plots(Path(tmp))
    out["decoding.png"] = decoding_plot()
    out["contracts-overhead.png"] = contracts_plot()
    out["contracts-per-call.png"] = contract_call_plot()
    return out


# ------------------------------------------------------------------------------------------------ hooks


def tutorial_pages() -> list[dict[str, str]]:
    """One nav page per notebook, titled by its first heading."""
    pages = []
    for path in notebooks():
        nb = nbformat.read(path, as_version=4)
        pages.append({notebook_title(nb, path.stem): f"{TUTORIALS_DIR}/{path.stem}.md"})
    return pages


def _fill_tutorials(nav: list[Any]) -> bool:
    return _fill_marker(nav, TUTORIALS_MARKER, tutorial_pages)


def promise_pages() -> list[Path]:
    """The promise ledger's pages: ``index.md`` first, then one page per area in file-name order."""
    return sorted(PROMISES.glob("*.md"), key=lambda path: (path.name != "index.md", path.name))


def promise_nav_pages() -> list[dict[str, str]]:
    return [{page_title(path): f"promises/{path.name}"} for path in promise_pages()]


def page_title(path: Path) -> str:
    """A markdown page's first heading (its nav title), or its file name."""
    heading = next((line for line in path.read_text().splitlines() if line.startswith("# ")), f"# {path.stem}")
    return heading[2:].strip()


def _fill_marker(nav: list[Any], marker: str, pages: Any) -> bool:
    """Replace the nav entry whose value is ``marker`` by ``pages()`` (a list of {title: path}); True if found."""
    for i, item in enumerate(nav):
        if isinstance(item, dict):
            ((title, value),) = item.items()
            if value == marker:
                nav[i] = {title: pages()}
                return True
            if isinstance(value, list) and _fill_marker(value, marker, pages):
                return True
    return False


def on_config(config):
    if config.nav and not _fill_tutorials(config.nav):
        raise ValueError(f"mkdocs.yml: the nav has no '{TUTORIALS_MARKER}' entry for the tutorials")
    if config.nav and not _fill_marker(config.nav, PROMISES_MARKER, promise_nav_pages):
        raise ValueError(f"mkdocs.yml: the nav has no '{PROMISES_MARKER}' entry for the promise ledger")
    return config


@event_priority(100)  # before the other plugins, so that they see the generated pages
def on_files(files: Files, config) -> Files:
    for path in notebooks():
        nb = nbformat.read(path, as_version=4)
        markdown, images = notebook_markdown(nb, path.stem)
        files.append(File.generated(config, f"{TUTORIALS_DIR}/{path.stem}.md", content=markdown))
        for name, png in images.items():
            files.append(File.generated(config, f"{TUTORIALS_DIR}/{name}", content=png))
    for name, png in plots().items():
        files.append(File.generated(config, f"{PLOTS_DIR}/{name}", content=png))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri.startswith(f"{TUTORIALS_DIR}/"):  # generated from a notebook: site_links did it
        return markdown
    return docs_page_links(markdown, page.file.src_uri)
