#!/usr/bin/env python
"""Mutation testing: do our tests catch plausible bugs?

For each mutant below: copy the package (``transformer/``, with ``kernels/`` as
``transformer/kernels``), the tests, ``scripts/``, ``docs/``, ``notebooks/``, ``pyproject.toml``, README.md and
mkdocs.yml into a fresh temporary directory,
apply one textual mutation (exact string replacement; every ``old`` string must occur exactly
once in the current source, otherwise the script stops and says which mutant is stale), then run
pytest there with ``PYTHONPATH`` pointing at the copy *first*, so the mutant shadows the
editable install. A small pytest plugin (``-p _mutant_guard``) checks inside the pytest process
that ``transformer.__file__`` is the mutant's, and aborts the whole run otherwise.

A mutant is *caught* when the tests fail (pytest exit code 1, or 2 when collection fails), and
*survives* when they pass. The unmutated copy runs first and must pass, or nothing is measured.

Usage (from the repository root; not part of the normal test run)::

    python tests/mutation/run_mutants.py                 # every mutant, 2 workers
    python tests/mutation/run_mutants.py -k mask -j 1    # mutants whose id contains "mask"
    python tests/mutation/run_mutants.py --list          # list the mutants and exit
    python tests/mutation/run_mutants.py --module blind_decoding --tests tests/test_decoding.py ...
                                                         # one catalog module only (e.g. a blind review's)

Prints a table, writes JSON (``--json``, default ``tests/mutation/results.json``), and exits 1
if any mutant survives (2 if the baseline fails or a mutation target is missing).
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import datetime as dt
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from catalog import ALL as MUTANTS  # tests/mutation/catalog/: one module of mutants per area
from catalog import Mutant
from catalog.base import TEST_FILES

ROOT = Path(__file__).resolve().parents[2]


GUARD = """
import os, pytest
from hypothesis import Phase, settings

# A failing example is enough to catch a mutant: skip shrinking it (minutes), keep no database.
settings.register_profile("mutation", phases=[Phase.explicit, Phase.reuse, Phase.generate], database=None)
settings.load_profile("mutation")

def pytest_sessionstart(session):
    import transformer
    expected = os.environ["MUTANT_ROOT"]
    if not os.path.realpath(transformer.__file__).startswith(os.path.realpath(expected) + os.sep):
        pytest.exit(f"mutant guard: transformer imported from {transformer.__file__}, not {expected}", returncode=99)
"""


def _copy_tree(workdir: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", "results.json")
    shutil.copytree(ROOT / "transformer", workdir / "transformer", ignore=ignore)
    if (ROOT / "kernels").is_dir():
        shutil.rmtree(workdir / "transformer" / "kernels", ignore_errors=True)
        shutil.copytree(ROOT / "kernels", workdir / "transformer" / "kernels", ignore=ignore)
    shutil.copytree(ROOT / "tests", workdir / "tests", ignore=ignore)
    for name in (
        "scripts",
        "docs",
        "notebooks",
        "benchmarks",
    ):  # what the docs, README, install and benchmark tests read (and mutants of scripts/)
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, workdir / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md", "mkdocs.yml"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, workdir / name)
    (workdir / "_mutant_guard.py").write_text(GUARD)


def check_targets(mutants: list[Mutant]) -> list[str]:
    """Every edit's old text must occur exactly once in the current source."""
    problems = []
    for m in mutants:
        path = ROOT / m.file
        if not path.exists():
            problems.append(f"{m.id}: {m.file} does not exist")
            continue
        text = path.read_text()
        for old, _ in m.edits:
            count = text.count(old)
            if count != 1:
                problems.append(f"{m.id}: {old!r} occurs {count} times in {m.file} (expected exactly once)")
    return problems


def run_one(mutant: Mutant | None, tests: list[str], timeout: float, first: list[str] = ()) -> dict:
    """Run ``tests`` against ``mutant``; when ``first`` names tests (the ones that caught it last time), run them
    alone first, and the whole suite only if they pass."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutant-") as tmp:
        workdir = Path(tmp)
        _copy_tree(workdir)
        if mutant is not None:
            in_copy = "transformer/" + mutant.file if mutant.file.startswith("kernels/") else mutant.file
            path = workdir / in_copy
            text = path.read_text()
            for old, new in mutant.edits:
                if text.count(old) != 1:
                    raise SystemExit(f"mutant {mutant.id}: target text not found exactly once in {mutant.file}")
                text = text.replace(old, new)
            path.write_text(text)
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "TYPED_TRANSFORMER_CHECKS", "JAXTYPING_DISABLE")
        }
        env.update(
            PYTHONPATH=str(workdir),
            MUTANT_ROOT=str(workdir),
            PYTHONDONTWRITEBYTECODE="1",
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
        )
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-x",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "_mutant_guard",
            "--no-header",
            "-W",
            "ignore::DeprecationWarning",
        ]
        rc, output = 0, ""
        for selection in ([list(first)] if first else []) + [tests]:
            try:
                proc = subprocess.run(
                    cmd + selection, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
                )
                rc, output = proc.returncode, proc.stdout + proc.stderr
            except subprocess.TimeoutExpired as error:
                rc, output = -1, f"timeout after {timeout:.0f}s\n{error.stdout or ''}"
            if rc != 0:
                break
    if rc == 99:
        raise SystemExit(f"mutant guard failed: the tests did not import the mutant's package\n{output}")
    failed = next((line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))), "")
    return {
        "id": mutant.id if mutant else "baseline",
        "file": mutant.file if mutant else "",
        "what": mutant.what if mutant else "unmutated copy",
        "returncode": rc,
        "status": "passed"
        if rc == 0
        else ("caught" if rc in (1, 2) else ("timeout" if rc == -1 else f"error rc={rc}")),
        "killed_by": failed.split(" - ")[0].removeprefix("FAILED ").removeprefix("ERROR ").strip(),
        "seconds": round(time.monotonic() - start, 1),
        "tried_first": list(first),
        "tail": "\n".join(output.splitlines()[-15:]),
    }


def earlier_killers(paths: list[str], suites: list[tuple[str, ...]]) -> dict[str, str]:
    """Mutant id -> the test that caught it in earlier results, kept only if that test is still collected."""
    killers: dict[str, str] = {}
    for path in paths:  # later files win
        for r in json.loads(Path(path).read_text()).get("mutants", []):
            if r.get("status") == "caught" and "::" in r.get("killed_by", ""):
                killers[r["id"]] = r["killed_by"]
    files = sorted({f for s in suites for f in s})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    collected = {line.strip() for line in proc.stdout.splitlines() if "::" in line}
    kept = {m: t for m, t in killers.items() if t in collected}
    print(f"hints: {len(kept)} of {len(killers)} earlier killing tests still collected")
    return kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-k",
        dest="select",
        default="",
        help="run only mutants whose id contains this text (comma-separated: any of them)",
    )
    parser.add_argument("-j", "--jobs", type=int, default=2, help="mutants run in parallel (default 2)")
    parser.add_argument("--json", default=str(ROOT / "tests" / "mutation" / "results.json"))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--tests", nargs="+", help="test files to run instead of TEST_FILES")
    parser.add_argument(
        "--module",
        help="take the mutants of this module of tests/mutation/catalog/ only "
        "(e.g. blind_decoding), whether or not the catalog's ALL lists it",
    )
    parser.add_argument(
        "--hints",
        nargs="+",
        default=[],
        help="earlier results JSON files: run the test that caught each mutant there first (a test that still "
        "exists and passes unmutated), and the whole suite only if it no longer fails",
    )
    parser.add_argument(
        "--one-baseline",
        action="store_true",
        help="run one unmutated baseline over every suite's files together instead of one per suite "
        "(one long run instead of dozens when many catalog modules name their own suites)",
    )
    args = parser.parse_args()

    pool_of = importlib.import_module(f"catalog.{args.module}").MUTANTS if args.module else MUTANTS
    mutants = [m for m in pool_of if any(part in m.id for part in args.select.split(","))]
    if args.list:
        for m in mutants:
            print(f"{m.id:34s} {m.file:28s} {m.what}")
        return 0
    # mutants of files that do not exist yet (work in progress elsewhere) are skipped, loudly
    missing = [m for m in mutants if not (ROOT / m.file).exists()]
    for m in missing:
        print(f"SKIP {m.id}: {m.file} does not exist")
    mutants = [m for m in mutants if m not in missing]
    problems = check_targets(mutants)
    if problems:
        print("stale mutants (the source changed; update MUTANTS):\n  " + "\n  ".join(problems))
        return 2
    tests = [t for t in (args.tests or TEST_FILES) if (ROOT / t).exists()]

    def suite(m: Mutant) -> list[str]:
        return list(m.tests) if m.tests and not args.tests else tests

    suites = sorted({tuple(suite(m)) for m in mutants}) or [tuple(tests)]
    print(f"{len(mutants)} mutants; test suites: " + "; ".join(" ".join(s) for s in suites))

    if args.one_baseline:  # every file of every suite, once, in the suites' order: each suite is a part of it
        union = list(dict.fromkeys(f for s in suites for f in s))
        baselines = [run_one(None, union, max(args.timeout, 3600.0))]
    else:
        baselines = [run_one(None, list(s), args.timeout) for s in suites]  # each suite must pass unmutated
    for baseline in baselines:
        print(f"baseline: {baseline['status']} in {baseline['seconds']}s: {baseline['tail'].splitlines()[-1]}")
        if baseline["status"] != "passed":
            print(baseline["tail"])
            return 2

    killers = earlier_killers(args.hints, suites) if args.hints else {}

    def first(m: Mutant) -> list[str]:
        test = killers.get(m.id, "")
        return [test] if test.split("::")[0] in suite(m) else []

    results: list[dict] = []
    started = time.monotonic()
    with futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        jobs = {pool.submit(run_one, m, suite(m), args.timeout, first(m)): m for m in mutants}
        for job in futures.as_completed(jobs):
            r = job.result()
            results.append(r)
            print(f"  {r['status']:9s} {r['id']:34s} {r['seconds']:6.1f}s  {r['killed_by']}", flush=True)
    order = {m.id: i for i, m in enumerate(mutants)}
    results.sort(key=lambda r: order[r["id"]])

    caught = [r for r in results if r["status"] == "caught"]
    survived = [r for r in results if r["status"] != "caught"]
    width = max(len(r["id"]) for r in results) if results else 10
    print(f"\n{'mutant':{width}s}  {'result':8s}  first failing test")
    print(f"{'-' * width}  --------  ------------------")
    for r in results:
        print(f"{r['id']:{width}s}  {r['status']:8s}  {r['killed_by']}")
    print(
        f"\nscore: {len(caught)}/{len(results)} mutants caught in {time.monotonic() - started:.0f}s "
        f"(baselines {', '.join(str(b['seconds']) + 's' for b in baselines)})"
    )
    for r in survived:
        print(f"\nSURVIVED {r['id']} ({r['what']}):\n{r['tail']}")

    report = {
        "date": dt.date.today().isoformat(),
        "python": sys.version.split()[0],
        "tests": [list(s) for s in suites],
        "baseline_seconds": [b["seconds"] for b in baselines],
        "baseline": [b["tail"].splitlines()[-1] for b in baselines],
        "caught": len(caught),
        "total": len(results),
        "skipped": [m.id for m in missing],
        "mutants": [{k: v for k, v in r.items() if k != "tail"} for r in results],
    }
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0 if not survived else 1


if __name__ == "__main__":
    sys.exit(main())
