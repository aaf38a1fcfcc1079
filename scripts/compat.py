#!/usr/bin/env python
"""The compatibility run: the supported range of torch, triton, transformers, jaxtyping, beartype and Python, tested.

Each point of the matrix (``POINTS``) is a virtual environment that gets the point's versions first, as a user's
project already has them, then this checkout as a user installs it (``pip install -e ".[triton,text,hf]"``, no pins,
no constraints), and must then:

* still hold the versions it was given (``kept``): the package's requirements, the ``triton`` extra included, never
  replace a torch, triton, transformers, jaxtyping or beartype a user already has inside the supported range;
* run README's tour (``TOUR``): build a model, encode, decode, greedy-decode, a wrong mask refused eagerly, the same
  decode compiled (``torch.compile(fullgraph=True)``), valid and wrong;
* pass the test subset (``SUBSET``, below: which tests and why they suffice);
* run the main job: README's ``typed-transformer train copy`` with the exact-match line and no warning
  (``scripts/readme_setup.py``'s check);
* at the ``gpu`` point (the GPU machine's set), dry-run the one-call GPU script on the CPU
  (``scripts/gpu_check.sh --dry-run``: no failed check, no stage but the time-bounded sweep cut short).

Each point's results go to ``benchmarks/results/compat/POINT.json`` (versions as installed, date, machine, every
test file's counts, each check); ``table`` writes them into docs/install.md's "Supported versions" table.

    python scripts/compat.py list                    # the matrix
    python scripts/compat.py run floor gpu newest    # build (or reuse) each point's environment and run it
    python scripts/compat.py table                   # docs/install.md's table from the results files

Environments are cached under ``$TT_COMPAT_VENVS`` (default ``~/.cache/typed-transformer/compat``), one per point,
keyed by the point's requirements: a second run reuses it (``--fresh`` builds it anew). Older torch releases are
CUDA builds of 1-3 GB: the first build of a point downloads them. Standard library only.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "compat"
INSTALL_PAGE = ROOT / "docs" / "install.md"
VENVS = Path(os.environ.get("TT_COMPAT_VENVS", Path.home() / ".cache" / "typed-transformer" / "compat"))

# The points of the matrix: what a user's environment already holds before installing the package. ``numpy<2.4``
# where the triton is 3.6 or older: that interpreter fails with NumPy 2.4 (kernels/_validate.py says so at run time).
POINTS: dict[str, dict] = {
    "floor": {
        "what": "the oldest of everything supported",
        "python": "3.11",
        "pins": [
            "torch==2.9.1",
            "triton==3.5.1",
            "transformers==5.4.0",
            "jaxtyping==0.2.37",
            "beartype==0.23.0",
            "einops==0.8.0",
            "safetensors==0.4.3",
            "tqdm==4.60.0",
            "tokenizers==0.22.2",
            "numpy<2.4",
        ],
    },
    "gpu": {
        "what": "the GPU machine's set (scripts/gpu_check.sh runs there)",
        "python": "3.12",
        "pins": [
            "torch==2.11.0",
            "triton==3.6.0",
            "transformers==5.17.0",
            "jaxtyping==0.3.11",
            "beartype==0.23.1",
            "numpy<2.4",
        ],
        "gpu_dry_run": True,  # scripts/gpu_check.sh --dry-run here too, so its first GPU run is not its first run here
    },
    "pin": {
        "what": "README's pin (CI runs the whole suite there)",
        "python": "3.11",
        "pins": ["torch==2.13.0"],
    },
    "newest": {
        "what": "the newest installable, on the newest Python",
        "python": "3.13",
        "pins": ["torch==2.14.1"],
    },
}
#: the distributions whose installed versions a point records, and checks are kept by the package's install
WATCHED = ["torch", "triton", "transformers", "jaxtyping", "beartype", "numpy", "tokenizers", "safetensors", "einops"]

# The subset, and why it suffices. Everything a torch, triton, transformers, jaxtyping or beartype release can change
# for us is in these files; the rest of the suite (data, CLI flags, checkpoints, docs, notebooks) runs on torch's
# stable eager API, which these files already exercise, and runs in full at README's pin in CI.
SUBSET = {
    # the fast eager checker against jaxtyping + beartype as installed: every supported version must decide as the
    # fast path assumes (it mimics their rules)
    "eager contracts": [
        "tests/test_contracts_fast.py",
        "tests/test_contract_edges.py",
        "tests/test_contracts_user.py",
        "tests/test_contracts_switch.py",
    ],
    # the traced checker runs inside Dynamo, which changes with every torch release: valid calls compile, wrong calls
    # raise the contract's error, for every annotation form, nested calls, containers, modules and check(...)
    "compiled contracts": [
        "tests/test_contracts_compiled.py",
        "tests/test_contracts_compiled_forms.py",
        "tests/test_contracts_compiled_containers.py",
        "tests/test_compiled_contracts_of_modules.py",
        "tests/test_contracts_check.py",
    ],
    # the modules against torch.nn.Transformer and F.scaled_dot_product_attention, every backend, grouped queries
    "models": [
        "tests/test_modules.py",
        "tests/test_parity.py",
        "tests/test_attention.py",
        "tests/test_backends.py",
        "tests/test_gqa.py",
    ],
    # the Triton kernel under the installed triton's interpreter, forward and backward, every mask and layout; and
    # compiled by the installed triton for sm_90 (its wheel ships ptxas: what a GPU's first launch compiles)
    "kernel": [
        "tests/kernels/test_flash_attention.py",
        "tests/kernels/test_api.py",
        "tests/kernels/test_compile_for_gpu.py::test_kernels_compile_for_sm90",
    ],
    # the language model, its blocks, Hugging Face folders loaded against the installed transformers, its attention
    # interface, and the drop-in with torch's SDPA registry (a feature of newer torch: refused in one line before)
    "language model and loading": [
        "tests/test_lm.py",
        "tests/test_lm_blocks.py",
        "tests/test_pretrained_parity.py",
        "tests/test_pretrained_folders.py",
        "tests/test_huggingface.py",
        "tests/test_sdpa_dropin.py",
        "tests/test_sdpa_registry.py",
    ],
}

TOUR = r"""
import torch, transformer as tt
model = tt.make_model(src_vocab=11, tgt_vocab=11, N=2, d_model=32, d_ff=64, h=4, dropout=0.0).eval()
src = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]])
src_mask = tt.padding_mask(src, pad_id=0)
memory = model.encode(src, src_mask)
tgt = torch.tensor([[1, 2, 3]])
hidden = model.decode(memory, src_mask, tgt, tt.target_mask(tgt, pad_id=0))
out = tt.greedy_decode(model, src, tt.AttentionMask.padding(src, pad_id=0), max_len=10, start_symbol=1)
assert out.shape == (1, 10), out.shape
wrong = tt.target_mask(torch.tensor([[1, 2, 3, 4]]), 0)
try:
    model.decode(memory, src_mask, tgt, wrong)
    raise SystemExit("a wrong mask was accepted eagerly")
except tt.TypeCheckError as error:
    eager = str(error).splitlines()[0]
compiled = torch.compile(model.decode, fullgraph=True, backend="aot_eager")
torch.testing.assert_close(compiled(memory, src_mask, tgt, tt.target_mask(tgt, pad_id=0)), hidden)
try:
    compiled(memory, src_mask, tgt, wrong)
    raise SystemExit("a wrong mask was accepted compiled")
except tt.TypeCheckError as error:
    assert str(error).splitlines()[0] == eager, (str(error), eager)
print("tour: encode, decode, greedy, a wrong mask refused eagerly and compiled with the same line")
"""


def _key(point: dict) -> str:
    return hashlib.sha256(json.dumps([point["python"], point["pins"]]).encode()).hexdigest()[:12]


def _python_for(version: str) -> str:
    """An interpreter of Python ``version`` that runs (a pyenv shim on PATH may not: it names the interpreter only
    when that version is selected)."""
    pyenv = Path.home() / ".pyenv" / "versions"
    candidates = [shutil.which(f"python{version}")]
    candidates += [str(p) for p in sorted(pyenv.glob(f"{version}.*/bin/python{version}"))] if pyenv.is_dir() else []
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    raise SystemExit(f"no python{version} on this machine that runs (PATH or ~/.pyenv/versions)")


def _env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(command: list[str], env: dict[str, str], log: Path, timeout: float, cwd: Path = ROOT) -> tuple[int, str]:
    print("$", " ".join(command), flush=True)
    try:
        proc = subprocess.run(
            command, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout
        )
        code, output = proc.returncode, proc.stdout
    except subprocess.TimeoutExpired as expired:
        partial = expired.stdout or b""
        code, output = 124, partial.decode(errors="replace") if isinstance(partial, bytes) else partial
    with log.open("a") as handle:
        handle.write(f"$ {' '.join(command)}\n{output}\n[exit {code}]\n")
    return code, output


def installed(venv: Path) -> dict[str, str]:
    """The watched distributions' versions in ``venv``, and its Python's (one process)."""
    code = (
        "import importlib.metadata as m, json, platform, sys\nout = {}\nfor n in sys.argv[1:]:\n    try:\n"
        "        out[n] = m.version(n)\n    except m.PackageNotFoundError:\n        pass\n"
        "out['python'] = platform.python_version()\nprint(json.dumps(out))"
    )
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", code, *WATCHED], capture_output=True, text=True)
    return json.loads(proc.stdout)


def build(name: str, fresh: bool, log: Path) -> tuple[Path, dict]:
    """The point's environment: its versions first, then the package as a user installs it; what was kept."""
    point = POINTS[name]
    venv = VENVS / name
    marker = venv / "typed-transformer-compat.json"
    if not fresh and marker.is_file() and json.loads(marker.read_text()).get("key") == _key(point):
        return venv, json.loads(marker.read_text())["build"]
    shutil.rmtree(venv, ignore_errors=True)
    VENVS.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    subprocess.run([_python_for(point["python"]), "-m", "venv", str(venv)], check=True)
    env, pip = _env(venv), [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    code, output = _run([*pip, *point["pins"]], env, log, 3600)
    if code:
        raise SystemExit(f"{name}: installing the point's versions failed:\n{output[-3000:]}")
    before = installed(venv)
    code, output = _run([*pip, "-e", f"{ROOT}[triton,text,hf]", "pytest>=8", "hypothesis>=6.100"], env, log, 3600)
    if code:
        raise SystemExit(f"{name}: installing the package failed:\n{output[-3000:]}")
    after = installed(venv)
    changed = {n: [v, after.get(n)] for n, v in before.items() if after.get(n) != v}
    info = {"seconds": round(time.monotonic() - start), "before": before, "changed_by_the_install": changed}
    marker.write_text(json.dumps({"key": _key(point), "build": info}))
    return venv, info


def _junit_counts(path: Path) -> dict[str, dict[str, int]]:
    """Per test file: passed, failed, skipped (from pytest's junit XML)."""
    counts: dict[str, dict[str, int]] = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        file = case.get("classname", "").split(".")
        module = "/".join(file[: next((i for i, p in enumerate(file) if p.startswith("test_")), len(file) - 1) + 1])
        row = counts.setdefault(module + ".py", {"passed": 0, "failed": 0, "skipped": 0})
        kinds = {child.tag for child in case}
        row["failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"] += 1
    return counts


def run_point(name: str, fresh: bool) -> dict:
    RESULTS.mkdir(parents=True, exist_ok=True)
    VENVS.mkdir(parents=True, exist_ok=True)
    log = VENVS / f"{name}.log"  # the whole output, beside the environment (not committed)
    log.write_text("")
    venv, build_info = build(name, fresh, log)
    env = _env(venv)
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT)], env, log, 600)  # this checkout
    result: dict = {
        "point": name,
        "what": POINTS[name]["what"],
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "versions": installed(venv),
        "build": build_info,
        "kept": not build_info["changed_by_the_install"],
        "checks": {},
    }
    code, output = _run([python, "-W", "error::UserWarning:transformer", "-c", TOUR], env, log, 900)
    result["checks"]["tour"] = {"ok": code == 0, "tail": output.strip().splitlines()[-1:] if output.strip() else []}
    junit = RESULTS / f"{name}.junit.xml"
    files = [f for group in SUBSET.values() for f in group]
    start = time.monotonic()
    code, output = _run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *files], env, log, 3600
    )
    counts = _junit_counts(junit) if junit.is_file() else {}
    junit.unlink(missing_ok=True)
    failed = [line for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    result["checks"]["subset"] = {
        "ok": code == 0,
        "seconds": round(time.monotonic() - start),
        "summary": output.strip().splitlines()[-1] if output.strip() else "",
        "failed": failed,
        "files": counts,
    }
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))
    from readme_setup import check_main_job_output, setup_commands

    main_job = setup_commands((ROOT / "README.md").read_text())["main"].split("&&")[-1].split()
    with tempfile.TemporaryDirectory(prefix="compat-main-job-") as fresh:  # a newcomer's folder: no runs/ there yet
        code, output = _run([str(venv / "bin" / main_job[0]), *main_job[1:]], env, log, 1200, Path(fresh))
    problem = check_main_job_output(output) if code == 0 else f"exit status {code}"
    result["checks"]["main job"] = {"ok": problem is None, "problem": problem, "command": " ".join(main_job)}
    if POINTS[name].get("gpu_dry_run"):
        result["checks"]["gpu_check dry run"] = gpu_dry_run(venv, env, log)
    result["ok"] = result["kept"] and all(check["ok"] for check in result["checks"].values())
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"{name}: {'ok' if result['ok'] else 'FAILED'} ({result['checks']['subset']['summary']})", flush=True)
    return result


def gpu_dry_run(venv: Path, env: dict[str, str], log: Path) -> dict:
    """``scripts/gpu_check.sh --dry-run`` with this point's Python: every stage, on the CPU (the interpreter, short
    lengths); ok when its summary counts no failed check and no stage but the sweep (which draws cases until its time
    is up) was cut short."""
    out = VENVS / "gpu_check_dry_run"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    start = time.monotonic()
    dry_env = env | {"PYTHON": str(venv / "bin" / "python"), "OUT": str(out), "SITE": str(out / "site")}
    code, _ = _run(["bash", "scripts/gpu_check.sh", "--dry-run"], dry_env, log, 1800)
    lines = (out / "gpu_check.jsonl").read_text().splitlines() if (out / "gpu_check.jsonl").is_file() else []
    verdict = dry_run_verdict(code, [json.loads(line) for line in lines])
    return verdict | {"seconds": round(time.monotonic() - start)}


def dry_run_verdict(code: int, rows: list[dict]) -> dict:
    """The dry run's result from its exit status and its ``gpu_check.jsonl`` rows. The sweep draws cases until its
    time is up: cut short at its limit (6 workers on 2 cores, beside the other stages), it keeps every case it
    checked; any other stage cut short would leave checks unrun, and fails the run."""
    summary = rows[-1] if rows else {}
    failed = summary.get("failed_checks", -1)
    cut_short = [row["stage"] for row in rows if row.get("check") == "stage" and row.get("timed_out") is True]
    return {
        "ok": code == 0 and summary.get("stage") == "summary" and failed == 0 and set(cut_short) <= {"sweep"},
        "stages_cut_short": cut_short,
        "failed_checks": failed,
        "sweep_cases": summary.get("sweep_cases"),
    }


TABLE_START, TABLE_END = "<!-- compat table: start -->", "<!-- compat table: end -->"


def table() -> str:
    rows = [
        "| point | Python | torch | triton | transformers | jaxtyping | beartype | numpy | kept | tour | subset | "
        "main job | GPU script dry run | date |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in POINTS:
        path = RESULTS / f"{name}.json"
        if not path.is_file():
            continue
        r = json.loads(path.read_text())
        v, checks = r["versions"], r["checks"]
        subset = re.sub(r" in [0-9.]+s.*", "", checks["subset"]["summary"].strip("= "))
        mark = {True: "yes", False: "**no**"}
        dry_run = checks.get("gpu_check dry run")
        dry = "" if dry_run is None else f"{mark[dry_run['ok']]} ({dry_run['failed_checks']} failed checks)"
        rows.append(
            f"| {name} ({r['what']}) | {v['python']} | {v.get('torch')} | {v.get('triton')} | {v.get('transformers')} "
            f"| {v.get('jaxtyping')} | {v.get('beartype')} | {v.get('numpy')} | {mark[r['kept']]} "
            f"| {mark[checks['tour']['ok']]} | {subset} | {mark[checks['main job']['ok']]} | {dry} | {r['date']} |"
        )
    return "\n".join(rows)


def write_table() -> None:
    text = INSTALL_PAGE.read_text()
    if TABLE_START not in text or TABLE_END not in text:
        raise SystemExit(f"{INSTALL_PAGE} has no {TABLE_START} ... {TABLE_END} markers")
    head, rest = text.split(TABLE_START, 1)
    INSTALL_PAGE.write_text(head + TABLE_START + "\n" + table() + "\n" + TABLE_END + rest.split(TABLE_END, 1)[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the matrix")
    run = sub.add_parser("run", help="build (or reuse) each point's environment and run its checks")
    run.add_argument("points", nargs="+", choices=list(POINTS))
    run.add_argument("--fresh", action="store_true", help="build the environments anew")
    sub.add_parser("table", help="write docs/install.md's table from the results files")
    args = parser.parse_args(argv)
    if args.command == "list":
        for name, point in POINTS.items():
            print(f"{name:8} Python {point['python']}: {' '.join(point['pins'])}  ({point['what']})")
        return 0
    if args.command == "table":
        write_table()
        return 0
    results = [run_point(name, args.fresh) for name in args.points]
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
