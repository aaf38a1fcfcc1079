"""Every code block in the documentation runs: docs/**/*.md and README.md.

Conventions (also stated in docs/index.md, "About these pages"):

* ```python blocks of a page run in page order in one namespace, so a block may use what an earlier block of the
  same page defined (a model, a batch, a checkpoint directory). Each page runs in a fresh namespace and in its own
  empty working directory, with contracts on.
* A line followed by a comment ``# SomeError: message`` must raise that error (or a subclass of it), with a
  message that starts like the comment (up to a ``...``): that is how a page shows an error (README's tour does it).
* ```bash (and ```sh) blocks run with bash (-e, pipefail) in the page's working directory, in page order
  with the Python blocks (a command may use a file an earlier block wrote, and the other way round).
* ```text and other blocks are output or pseudo-code: never run.
* A block preceded by ``<!-- skip: reason -->`` (the last non-blank line before its fence) does not run; the reason
  is reported as a skipped test (``pytest -ra`` lists it). Use it only for what cannot run in CI: installs, a
  CUDA GPU, torchrun, jobs longer than a few seconds. The reason must say what runs it instead, if anything.
"""

from __future__ import annotations

import ast
import linecache
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>```+)(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$",
    re.M | re.S,
)
SKIP = re.compile(r"<!--\s*skip:(?P<reason>.*?)-->\s*$", re.S)
SHOWN_ERROR = re.compile(r"\s*# (?P<name>\w+(?:Error|Exception|Exit)): (?P<message>.*)")
RUNNABLE = {"python": "python", "py": "python", "bash": "bash", "sh": "bash"}
BASH_TIMEOUT_S = 300


@dataclass
class Block:
    page: Path
    line: int
    lang: str  # "python" or "bash"
    code: str
    skip: str | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page.name}:{self.line}"


def pages() -> list[Path]:
    return sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]


def blocks(page: Path, text: str | None = None) -> list[Block]:
    """The runnable blocks of a page, in order, with their skip reasons."""
    text = page.read_text() if text is None else text
    found = []
    for match in FENCE.finditer(text):
        lang = RUNNABLE.get(match.group("lang").lower())
        if lang is None:
            continue
        before = text[: match.start()].rstrip()
        last_line = before.rsplit("\n", 1)[-1]
        skip = SKIP.search(last_line)
        if skip and not skip.group("reason").strip():
            raise ValueError(f"{page.name}:{text[: match.start()].count(chr(10)) + 1}: a skip marker needs a reason")
        found.append(
            Block(
                page,
                text[: match.start()].count("\n") + 1,
                lang,
                textwrap.dedent(match.group("body")),
                skip.group("reason").strip() if skip else None,
            )
        )
    return found


def _expected_prefix(message: str) -> str:
    return message.split("(...)")[0].split("...")[0].strip()


def run_python(block: Block, namespace: dict) -> None:
    """Run one block statement by statement; a statement shown with ``# XError: message`` must raise it."""
    tree = ast.parse(block.code, filename=block.where)
    lines = block.code.splitlines()
    # the block's source, for tracebacks and for what reads it back (transformer.check names its tensor from it)
    linecache.cache[block.where] = (len(block.code), None, block.code.splitlines(keepends=True), block.where)
    for node in tree.body:
        code = compile(ast.Module([node], type_ignores=[]), block.where, "exec")
        following = lines[node.end_lineno] if node.end_lineno < len(lines) else ""
        shown = SHOWN_ERROR.fullmatch(following)
        if shown is None:
            exec(code, namespace)
            continue
        try:
            exec(code, namespace)
        except Exception as error:  # noqa: BLE001 - any error type may be shown
            line = block.line + node.lineno
            # the error shown, or a subclass of it (a compiled call raises CompiledContractError, a TypeCheckError)
            assert shown["name"] in [kind.__name__ for kind in type(error).__mro__], (
                f"{block.where} (line {line}): shows {shown['name']}, raised {type(error).__name__}: {error}"
            )
            prefix = _expected_prefix(shown["message"])
            assert prefix in str(error), (
                f"{block.where} (line {line}): the message shown is not the one raised:\n"
                f"shown:  {prefix}\nraised: {str(error)[:500]}"
            )
        else:
            raise AssertionError(
                f"{block.where} (line {block.line + node.lineno}): shows {shown['name']}, nothing was raised"
            )


def run_bash(block: Block, cwd: Path) -> None:
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-ec", block.code],
        cwd=cwd,
        text=True,
        timeout=BASH_TIMEOUT_S,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONWARNINGS": ""},
    )
    assert proc.returncode == 0, f"{block.where}: bash exited {proc.returncode}\n{proc.stdout[-3000:]}"


def run_page(page_blocks: list[Block], cwd: Path) -> int:
    """Run a page's blocks in page order (Python in one namespace, bash in ``cwd``); returns how many ran."""
    namespace: dict = {"__name__": "__docs__"}
    ran = 0
    previous, environ = Path.cwd(), dict(os.environ)  # a block may change both: the next page gets them back
    os.chdir(cwd)
    try:
        for block in page_blocks:
            if block.skip is not None:
                continue
            if block.lang == "bash":
                run_bash(block, cwd)
            else:
                try:
                    run_python(block, namespace)
                except AssertionError:
                    raise
                except Exception as error:
                    raise AssertionError(f"{block.where}: the block raised {type(error).__name__}: {error}") from error
            ran += 1
    finally:
        os.chdir(previous)
        os.environ.clear()
        os.environ.update(environ)
    return ran


ALL = {page: blocks(page) for page in pages()}
PAGES = [page for page, found in ALL.items() if any(b.skip is None for b in found)]
SKIPPED = [b for found in ALL.values() for b in found if b.skip is not None]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_code_block_of_the_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.delenv("TYPED_TRANSFORMER_CHECKS", raising=False)
    torch.manual_seed(0)
    torch._dynamo.reset()  # a page is read in a new process: earlier tests' graphs of the same methods would count
    assert run_page(ALL[page], tmp_path) >= 1  # toward Dynamo's recompile limit (8 per code object)


@pytest.mark.parametrize("block", SKIPPED, ids=[b.where for b in SKIPPED])
def test_a_skipped_block_says_why(block):
    assert len(block.skip) >= 10, f"{block.where}: give a real reason to skip"
    pytest.skip(f"{block.where} ({block.lang}) not run: {block.skip}")


def test_the_docs_have_code_blocks_and_most_of_them_run():
    runnable = [b for found in ALL.values() for b in found]
    assert len(runnable) >= 15
    assert len(SKIPPED) <= len(runnable) // 3, [b.where for b in SKIPPED]


# ---------------------------------------------------------------------------- the runner can fail

PAGE = """# A page

```python
x = 1
```

Some text.

```python
y = x + 1
assert y == 2
```

<!-- skip: needs a CUDA GPU (planted) -->

```python
raise RuntimeError("never runs")
```

```text
not run either
```
"""


def _page(tmp_path: Path, text: str) -> list[Block]:
    page = tmp_path / "page.md"
    page.write_text(text)
    return blocks(page)


def test_blocks_share_a_namespace_in_page_order_and_skips_are_honoured(tmp_path):
    found = _page(tmp_path, PAGE)
    assert [(b.line, b.lang, b.skip) for b in found] == [
        (3, "python", None),
        (9, "python", None),
        (16, "python", "needs a CUDA GPU (planted)"),
    ]
    assert run_page(found, tmp_path) == 2


def test_a_block_that_raises_fails_and_names_its_page_and_line(tmp_path):
    found = _page(tmp_path, PAGE.replace("y = x + 1", "y = x + undefined_name"))
    with pytest.raises(AssertionError, match=r"page\.md:9: the block raised NameError"):
        run_page(found, tmp_path)


def test_a_shown_error_must_be_the_error_raised(tmp_path):
    shown = "```python\nint('x')\n# ValueError: invalid literal for int() with base 10 ...\n```\n"
    assert run_page(_page(tmp_path, shown), tmp_path) == 1
    with pytest.raises(AssertionError, match="shows TypeError, raised ValueError"):
        run_page(_page(tmp_path, shown.replace("# ValueError", "# TypeError")), tmp_path)
    with pytest.raises(AssertionError, match="the message shown is not the one raised"):
        run_page(_page(tmp_path, shown.replace("invalid literal", "another message")), tmp_path)
    with pytest.raises(AssertionError, match="nothing was raised"):
        run_page(_page(tmp_path, shown.replace("int('x')", "int('1')")), tmp_path)


def test_bash_blocks_run_in_the_pages_directory_and_fail_on_error(tmp_path):
    ok = "```bash\necho hello > out.txt\ntest -s out.txt\n```\n"
    assert run_page(_page(tmp_path, ok), tmp_path) == 1 and (tmp_path / "out.txt").read_text() == "hello\n"
    with pytest.raises(AssertionError, match="bash exited 3"):
        run_page(_page(tmp_path, "```sh\nexit 3\n```\n"), tmp_path)


def test_a_skip_marker_needs_a_reason(tmp_path):
    with pytest.raises(ValueError, match="needs a reason"):
        _page(tmp_path, "<!-- skip: -->\n```python\nx = 1\n```\n")


# ------------------------------------------------------------------------- a page run as a reader runs it

AS_A_READER = """
import sys
sys.path.insert(0, sys.argv[1])
import test_docs_code as docs
from pathlib import Path
page = Path(sys.argv[2])
print("ran", docs.run_page(docs.blocks(page), Path(sys.argv[3])), "blocks")
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the kernel runs without the interpreter")
def test_the_integrations_page_runs_on_a_cpu_without_triton_interpret_in_the_environment(tmp_path):
    """The suite sets TRITON_INTERPRET=1 for every page (tests/conftest.py); a reader's shell does not. The
    integrations page asks for the kernel by name (``backend="triton"``), so it must set the interpreter itself,
    before the process's first kernel call: run it in a fresh process whose environment does not have it."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TYPED_TRANSFORMER_CHECKS")}
    page = ROOT / "docs" / "integrations.md"
    proc = subprocess.run(
        [sys.executable, "-c", AS_A_READER, str(ROOT / "tests"), str(page), str(tmp_path)],
        cwd=tmp_path,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    ran = sum(b.skip is None for b in blocks(page))
    assert f"ran {ran} blocks" in proc.stdout
