#!/usr/bin/env python
"""The tutorial notebooks: reviewed as scripts, committed with their outputs, executed by CI.

Each tutorial is a pair in ``notebooks/``:

* ``NAME.py``, a jupytext "percent" script (``# %%`` code cells, ``# %% [markdown]`` text cells): the source
  that is written and reviewed; its diffs are plain Python;
* ``NAME.ipynb``, the same cells executed top to bottom with their outputs and figures kept, so that a reader
  sees results on GitHub and on the documentation site (``scripts/docs_hooks.py`` renders it) without running
  anything. It is generated from the script by ``build`` and never edited by hand.

Commands::

    python scripts/notebooks.py build [NAME ...]   # execute NAME.py (all by default), write NAME.ipynb
    python scripts/notebooks.py check              # every NAME.ipynb holds NAME.py's cells, executed, no errors
    python scripts/notebooks.py run [NAME ...]     # execute from NAME.py without writing anything; print times

``tests/test_notebooks.py`` runs ``check`` and ``run`` in CI. The kernel runs in ``notebooks/`` (so a notebook
reads ``../benchmarks/results/...`` as a reader's Jupyter would) with the environment of the caller. Adding a
tutorial is adding ``NAME.py`` and running ``build NAME``: the docs site and the tests find it by itself.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
TIMEOUT_S = 600  # per cell
KERNEL = "python3"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # colours in tracebacks


def scripts(names: list[str] | None = None) -> list[Path]:
    """``notebooks/NAME.py`` for the given names (all of them, in file-name order, by default)."""
    if names:
        paths = [NOTEBOOKS / f"{Path(name).stem}.py" for name in names]
        missing = [str(p.relative_to(ROOT)) for p in paths if not p.exists()]
        if missing:
            raise SystemExit(f"no such notebook script: {', '.join(missing)}")
        return paths
    return sorted(NOTEBOOKS.glob("*.py"))


def read_script(path: Path) -> nbformat.NotebookNode:
    """The notebook a jupytext percent script describes (cells and metadata, no outputs)."""
    nb = jupytext.read(path, fmt="py:percent")
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": KERNEL}
    nb.metadata.setdefault("jupytext", {})["formats"] = "ipynb,py:percent"
    return nb


class NotebookFailed(RuntimeError):
    """A cell raised: the message names the notebook and the cell and shows the error."""


def execute(nb: nbformat.NotebookNode, name: str = "notebook", cwd: Path = NOTEBOOKS) -> float:
    """Run every cell of ``nb`` in a fresh kernel (in place: outputs are filled in); return the seconds taken."""
    client = NotebookClient(
        nb, timeout=TIMEOUT_S, kernel_name=KERNEL, record_timing=False, resources={"metadata": {"path": str(cwd)}}
    )
    start = time.monotonic()
    try:
        client.execute()
    except CellExecutionError as error:
        failed = next(
            (
                i
                for i, cell in enumerate(nb.cells)
                if cell.cell_type == "code" and any(o.get("output_type") == "error" for o in cell.get("outputs", []))
            ),
            None,
        )
        where = f"cell {failed}" if failed is not None else "a cell"
        raise NotebookFailed(f"{name}: {where} raised\n{ANSI.sub('', str(error))}") from None
    return time.monotonic() - start


def cells(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """``(cell type, source)`` of every cell: what must agree between a script and its notebook."""
    return [(cell.cell_type, cell.source.strip()) for cell in nb.cells]


def problems(script: Path) -> list[str]:
    """What is wrong with the committed notebook of ``script``: missing, out of date, not executed, or failing."""
    notebook = script.with_suffix(".ipynb")
    rebuild = f"run: python scripts/notebooks.py build {script.stem}"
    if not notebook.exists():
        return [f"{notebook.relative_to(ROOT)} is missing ({rebuild})"]
    expected, committed = cells(read_script(script)), cells(nbformat.read(notebook, as_version=4))
    found = []
    if expected != committed:
        index = next(
            (i for i, (a, b) in enumerate(zip(expected, committed, strict=False)) if a != b),
            min(len(expected), len(committed)),
        )
        found.append(
            f"{notebook.relative_to(ROOT)} is out of date with {script.relative_to(ROOT)}: cell {index} differs "
            f"({len(expected)} cells in the script, {len(committed)} in the notebook; {rebuild})"
        )
    nb = nbformat.read(notebook, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code" and cell.source.strip()]
    counts = [cell.get("execution_count") for cell in code]
    if counts != list(range(1, len(code) + 1)):
        found.append(
            f"{notebook.relative_to(ROOT)} was not executed top to bottom in one run "
            f"(execution counts {counts}; {rebuild})"
        )
    errors = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and any(o.get("output_type") == "error" for o in cell.get("outputs", []))
    ]
    if errors:
        found.append(f"{notebook.relative_to(ROOT)}: cells {errors} hold errors")
    return found


def build(script: Path) -> float:
    nb = read_script(script)
    seconds = execute(nb, script.stem)
    nbformat.write(nb, script.with_suffix(".ipynb"))
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("build", "execute the scripts and write the notebooks"),
        ("run", "execute the scripts, write nothing"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("names", nargs="*", help="notebook names (default: all)")
    sub.add_parser("check", help="the committed notebooks match their scripts and were executed")
    args = parser.parse_args(argv)
    if args.command == "check":
        found = [p for script in scripts() for p in problems(script)]
        print("\n".join(found) if found else f"{len(scripts())} notebooks match their scripts")
        return 1 if found else 0
    total = 0.0
    for script in scripts(args.names):
        if args.command == "build":
            seconds = build(script)
        else:
            seconds = execute(read_script(script), script.stem)
        total += seconds
        verb = "built" if args.command == "build" else "ran"
        print(f"{verb} {script.relative_to(ROOT)} in {seconds:.1f} s", flush=True)
    print(f"total {total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
