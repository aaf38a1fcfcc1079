#!/usr/bin/env python
"""The README's two set-up commands, read from README.md, and a newcomer's run of the first one.

README.md's "Set up" section holds exactly two ```bash blocks of one command each: the main job (train the copy
task and decode with it) and the tests. CI reads them from here, so README.md and CI cannot drift apart:

    python scripts/readme_setup.py print main          # the main-job command, as written
    python scripts/readme_setup.py print tests         # the test command, as written (.ci/run runs it)
    python scripts/readme_setup.py fresh-main-job      # a newcomer's machine, see below

``fresh-main-job`` creates a brand-new virtual environment, runs the main-job command in it exactly as written
(so the environment holds only what that command installs), and requires:

* the exact-match line ``exact match on N held-out inputs: X%`` with X >= 99 and the demo decode
  ``'1 2 3 4 5 6 7 8 9 10' -> '1 2 3 4 5 6 7 8 9 10'``;
* no Python warning anywhere in the output (e.g. torch's "Failed to initialize NumPy");

* that the core install holds no package of the ``text`` or ``hf`` extras (tokenizers, sacrebleu, transformers);

then uninstalls triton from that environment and requires that the package still imports and trains with
warnings turned into errors (``auto`` falls back), and that asking for ``--attention-backend triton`` exits with
status 2 and a one-line message that says how to install Triton. Last, it builds the wheel (``pip wheel . --no-deps``),
installs it there in place of the editable install (``--no-deps``: the core dependencies are already there) and
requires that the installed package, ``transformer.kernels`` and ``py.typed`` come from the wheel, outside the
checkout, and that ``typed-transformer --help`` runs. Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

EXACT_MATCH = re.compile(r"^exact match on (\d+) held-out inputs: ([0-9.]+)%$", re.MULTILINE)
DEMO_DECODE = "'1 2 3 4 5 6 7 8 9 10' -> '1 2 3 4 5 6 7 8 9 10'"
WARNING = re.compile(r"\b\w*Warning\b|\bW\d{4} ")  # Python warnings, and torch's glog-style "W1123 ..." lines
MIN_EXACT_MATCH = 99.0


def setup_commands(text: str) -> dict[str, str]:
    """``{"main": ..., "tests": ...}``: the two one-line ```bash blocks of README's "## Set up" section."""
    if "\n## Set up\n" not in text:
        raise ValueError("README.md has no '## Set up' section")
    section = text.split("\n## Set up\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    commands = [block.strip() for block in blocks]
    if len(commands) != 2 or any("\n" in c for c in commands):
        raise ValueError(
            f"README.md's 'Set up' section must hold exactly two one-line bash commands, found {commands!r}"
        )
    main, tests = commands
    if "typed-transformer train copy" not in main or "pytest" not in tests:
        raise ValueError(f"README.md's set-up commands are out of order: main={main!r}, tests={tests!r}")
    return {"main": main, "tests": tests}


def _run(command: str, env: dict[str, str], cwd: Path, log: Path) -> subprocess.CompletedProcess:
    """Run ``command`` under bash (-e, pipefail), echoing and saving its merged output."""
    print(f"$ {command}", flush=True)
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-ec", command],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    log.write_text(proc.stdout)
    return proc


def _venv_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "TRITON_INTERPRET")}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _fail(message: str, output: str = "") -> int:
    tail = "\n".join(output.splitlines()[-40:])
    print(f"FAIL: {message}\n--- last lines of output ---\n{tail}", file=sys.stderr)
    return 1


def check_main_job_output(output: str) -> str | None:
    """None when the main job's output shows a trained, warning-free run; else what is wrong."""
    found = EXACT_MATCH.findall(output)
    if not found:
        return "no line 'exact match on N held-out inputs: X%'"
    accuracy = float(found[-1][1])
    if accuracy < MIN_EXACT_MATCH:
        return f"exact match {accuracy}% is below {MIN_EXACT_MATCH}%"
    if DEMO_DECODE not in output:
        return f"the demo decode {DEMO_DECODE} is missing"
    warnings = [line for line in output.splitlines() if WARNING.search(line)]
    if warnings:
        return f"warnings in the output: {warnings[:3]}"
    return None


WITHOUT_TRITON = r"""
import importlib.util, torch, transformer as tt
assert importlib.util.find_spec("triton") is None, "triton is still installed"
model = tt.make_model(11, 11, N=1, d_model=16, d_ff=32, h=2)
src = torch.randint(1, 11, (2, 6))
loss = model.generator(model(src, src, tt.padding_mask(src, 0), tt.target_mask(src, 0))).sum()
loss.backward()
print("without triton: auto backend trains, no warning")
"""


CORE_ONLY = r"""
import importlib.util
found = [name for name in ("tokenizers", "sacrebleu", "transformers") if importlib.util.find_spec(name)]
assert not found, f"the core install holds packages of the text or hf extras: {found}"
print("core install: no tokenizers, sacrebleu or transformers")
"""

FROM_THE_WHEEL = r"""
import importlib.util, pathlib, transformer
site = pathlib.Path(transformer.__file__).resolve().parents[1]
assert site.name == "site-packages", f"transformer imported from {transformer.__file__}, not from the wheel"
kernels = importlib.util.find_spec("transformer.kernels")  # found, not imported: triton was uninstalled above
assert pathlib.Path(kernels.origin).resolve().parent == site / "transformer" / "kernels", kernels.origin
assert (site / "transformer" / "py.typed").is_file(), "py.typed is not in the wheel"
assert importlib.util.find_spec("kernels") is None, "a top-level kernels module was installed"
print(f"wheel: transformer and transformer.kernels from {site}, py.typed there, no top-level kernels")
"""


def _python(venv: Path, code: str, env: dict[str, str], cwd: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(venv / "bin" / "python"), *flags, "-c", code],
        env=env,
        cwd=cwd,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def install_the_wheel(venv: Path, env: dict[str, str], tmp: Path) -> int:
    """Build the wheel, install it into ``venv`` in place of the editable install, check what it holds."""
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    wheels = tmp / "wheel"
    for command in (
        [*pip, "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
        [*pip, "uninstall", "-q", "-y", "typed-transformer"],
    ):
        subprocess.run(command, env=env, check=True, cwd=tmp)
    (wheel,) = wheels.glob("typed_transformer-*.whl")
    subprocess.run([*pip, "install", "-q", "--no-deps", str(wheel)], env=env, check=True, cwd=tmp)
    proc = _python(venv, FROM_THE_WHEEL, env, tmp)
    if proc.returncode != 0:
        return _fail(f"the wheel {wheel.name} does not install as it should", proc.stdout)
    print(proc.stdout.strip(), flush=True)
    command = [str(venv / "bin" / "typed-transformer"), "--help"]
    help_run = subprocess.run(command, env=env, cwd=tmp, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if help_run.returncode != 0:
        return _fail("typed-transformer --help fails when installed from the wheel", help_run.stdout)
    return 0


def fresh_main_job() -> int:
    command = setup_commands(README.read_text())["main"]
    with tempfile.TemporaryDirectory(prefix="fresh-venv-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        env = _venv_env(venv)
        start = time.monotonic()
        proc = _run(command, env, ROOT, Path(tmp) / "main.log")
        print(f"main job: exit {proc.returncode} after {time.monotonic() - start:.0f} s", flush=True)
        if proc.returncode != 0:
            return _fail(f"the README's first command exited with {proc.returncode}", proc.stdout)
        problem = check_main_job_output(proc.stdout)
        if problem:
            return _fail(problem, proc.stdout)
        examples, accuracy = EXACT_MATCH.findall(proc.stdout)[-1]
        print(
            f"main job: exact match {accuracy}% on {examples} held-out inputs, demo decode right, no warnings",
            flush=True,
        )

        proc = _python(venv, CORE_ONLY, env, ROOT)
        if proc.returncode != 0:
            return _fail("the core install is not the core", proc.stdout)
        print(proc.stdout.strip(), flush=True)

        python = str(venv / "bin" / "python")
        subprocess.run([python, "-m", "pip", "uninstall", "-q", "-y", "triton"], env=env, check=True)
        proc = _python(venv, WITHOUT_TRITON, env, ROOT, "-W", "error")
        if proc.returncode != 0 or WARNING.search(proc.stdout):
            return _fail("without triton the package does not run cleanly", proc.stdout)
        print(proc.stdout.strip(), flush=True)
        proc = subprocess.run(
            [
                str(venv / "bin" / "typed-transformer"),
                "train",
                "copy",
                "--steps",
                "1",
                "--attention-backend",
                "triton",
                "--out",
                str(Path(tmp) / "run"),
            ],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 2 or len(lines) != 1 or "pip install" not in lines[0]:
            return _fail(
                "asking for the triton backend without triton must exit 2 with a one-line install hint", proc.stdout
            )
        print(f"without triton, --attention-backend triton: {lines[0]}", flush=True)
        return install_the_wheel(venv, env, Path(tmp))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("print", help="print one of README's set-up commands")
    show.add_argument("which", choices=["main", "tests"])
    sub.add_parser("fresh-main-job", help="run the main-job command in a brand-new virtual environment")
    args = parser.parse_args(argv)
    if args.command == "print":
        print(setup_commands(README.read_text())[args.which])
        return 0
    return fresh_main_job()


if __name__ == "__main__":
    sys.exit(main())
