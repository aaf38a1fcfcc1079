"""Run a mutation-testing tool (mutmut 3) over the package, module by module, each with its own tests.

Issue 31's "mutants that no author chose": the hand-written catalog (``tests/mutation/catalog/``) holds bugs that
people planted; this script lets mutmut generate every mutant it can (operators, constants, strings, arguments)
in one module and runs only that module's own test files against each. It is run by hand, never in CI::

    python scripts/mutation_tool.py --module lm_config --max-children 1 --minutes 15

For each module it copies the repository's files (tracked and untracked-not-ignored) into a scratch folder
(``--scratch``, default ``/tmp/typed-transformer-mutmut/<module>``; the worktree never sees a ``mutants/`` folder),
writes the ``[tool.mutmut]`` table there (``source_paths`` = the package, ``only_mutate`` = the module's files,
the test files as ``pytest_add_cli_args_test_selection``), runs ``mutmut run`` under a wall-clock budget (SIGINT
when it runs out: the mutants already tried keep their results, the rest are "not checked"), and writes
``tests/mutation/tool_runs/<module>.json``: tool and version, commit, date, machine load, wall time, each mutant's
status (killed, survived, timeout, no tests, suspicious, not checked) and each survivor's diff. A survivor's
triage (a test that kills it, or the one-line reason it is equivalent) is kept in that file across reruns.

mutmut 3 leaves decorated functions alone (apart from ``staticmethod``/``classmethod``): functions under our
``checked`` contract decorator are not mutated, so the trampolines never wrap a checked signature; see
``tests/mutation/tool_runs/README.md``.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation_tool_scratch import copy_repository, undecorate  # noqa: E402 (scripts/ on the path)
from mutation_tool_triage import (  # noqa: E402 (scripts/ on the path)
    REPO,
    RESULTS,
    carry_equivalents,
    recheck,
    regenerate,
    summarise,
    write_readme,
)

# module -> (files to mutate, that module's own test files: those that import or exercise it)
MODULES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "lm_config": (
        ("transformer/lm/config.py", "transformer/lm/config_checks.py"),
        ("tests/test_lm.py", "tests/test_lm_positions.py", "tests/test_gqa.py", "tests/test_lm_rotary.py"),
    ),
    "data_token_store": (
        ("transformer/data/token_store.py",),
        ("tests/test_data_promises.py", "tests/test_data_batches.py", "tests/test_data_packing.py"),
    ),
    "checkpoint": (
        tuple(
            f"transformer/checkpoint/{name}.py"
            for name in ("__init__", "errors", "format", "load", "locate", "nonfinite", "save", "state_codec")
        ),
        (
            "tests/test_checkpoint.py",
            "tests/test_lm_checkpoint_compat.py",
            "tests/test_run_safety_disk.py",
            "tests/test_checkpoint_durability.py",
            "tests/test_resume_promises.py",
        ),
    ),
    "training_trainer": (
        ("transformer/training/trainer.py",),
        (
            "tests/test_training.py",
            "tests/test_training_promises.py",
            "tests/test_run_safety_resume.py",
            "tests/test_run_safety_divergence.py",
            "tests/test_resume_promises.py",
            "tests/test_training_edges.py",
        ),
    ),
    "contracts": (
        ("transformer/contracts/grammar.py", "transformer/contracts/dimensions.py"),
        ("tests/test_contracts_fast.py", "tests/test_contracts_user.py"),
    ),
    "cli": (
        ("transformer/cli/arguments.py", "transformer/cli/messages.py", "transformer/cli/errors.py"),
        (
            "tests/test_cli_flags.py",
            "tests/test_cli_lm.py",
            "tests/test_cli_reference.py",
            "tests/test_cli_generate_flags.py",
            "tests/test_cli_flags_reach.py",
        ),
    ),
}

STATUS = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    35: "suspicious",
    36: "timeout",
    24: "timeout",
    -24: "timeout",
    152: "timeout",
    255: "timeout",
    37: "caught by type check",
    2: "not checked",
    None: "not checked",
    -9: "segfault",
    -11: "segfault",
}
# Tests left out of every module's set: the Triton interpreter's and torch.compile's (seconds each, most of a
# module's test time on 2 shared cores); they exercise the kernel and the compiler, not the mutated Python.
DESELECT = "not triton and not torch_compile"
# Per module, a test that alone takes most of the selection's time and covers every function (so every surviving
# mutant would pay it): left out of the mutmut run, run against its survivors with --recheck --recheck-with.
SLOW = {"checkpoint": "test_exact_resume_2k_steps_equal_1k_plus_resume_plus_1k"}


# mutmut forks each mutant's worker from its main process by default; the trainer's and the command line's selections
# leave threads behind there (a forked child that trains then waits forever on a lock it inherited held): their
# workers are forked from a clean server process instead (mutmut's "forkserver", made for torch test setups).
ISOLATION = {"training_trainer": "forkserver", "cli": "forkserver"}
# timeouts, kills and interruptions (not None: never run): --retry-hung runs them again
HUNG = {
    code for code, status in STATUS.items() if code is not None and status in ("timeout", "segfault", "not checked")
}


def deselect(module: str) -> str:
    """The -k expression of ``module``'s run."""
    return DESELECT + (f" and not {SLOW[module]}" if module in SLOW else "")


MUTMUT = [sys.executable, "-c", "import sys; sys.argv[0] = 'mutmut'; from mutmut.__main__ import cli; cli()"]


def own_tests(module: str) -> tuple[str, ...]:
    """The module's test files plus the survivor tests added for it (tests/test_tool_survivors_<module>.py)."""
    files, tests = MODULES[module]
    extra = REPO / "tests" / f"test_tool_survivors_{module}.py"
    return tests + ((str(extra.relative_to(REPO)),) if extra.exists() else ())


def write_config(scratch: Path, module: str) -> None:
    """Append the [tool.mutmut] table to the scratch copy's pyproject.toml."""
    files, _ = MODULES[module]
    tests = own_tests(module)
    table = (
        "\n[tool.mutmut]\n"
        + "\n".join(
            [
                'source_paths = ["transformer"]',
                f"only_mutate = {json.dumps(list(files))}",
                f"pytest_add_cli_args_test_selection = {json.dumps(list(tests))}",
                f"pytest_add_cli_args = {json.dumps(['-p', 'no:cacheprovider', '-k', deselect(module)])}",
                f'process_isolation = "{ISOLATION.get(module, "fork")}"',
                "use_git_change_detection = false",
            ]
        )
        + "\n"
    )
    pyproject = scratch / "pyproject.toml"
    pyproject.write_text((REPO / "pyproject.toml").read_text() + table)


def run_mutmut(scratch: Path, max_children: int, minutes: float, names: list[str]) -> tuple[float, bool, str]:
    """``mutmut run`` in ``scratch`` for at most ``minutes``; returns (seconds, whether it finished, log tail)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    log = scratch / "mutmut_run.log"
    start = time.monotonic()
    with open(log, "w") as out:
        process = subprocess.Popen(
            [*MUTMUT, "run", "--max-children", str(max_children), *names],
            cwd=scratch,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            process.wait(timeout=minutes * 60)
            finished = process.returncode == 0
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            finished = False
    return time.monotonic() - start, finished, log.read_text()[-3000:]


def read_results(scratch: Path, module: str) -> dict[str, dict]:
    """Each mutant's status (and a survivor's diff) from mutmut's meta files in the scratch copy."""
    mutants: dict[str, dict] = {}
    for path in MODULES[module][0]:
        meta = scratch / "mutants" / (path + ".meta")
        if not meta.exists():
            continue
        data = json.loads(meta.read_text())
        for name, code in data["exit_code_by_key"].items():
            entry = {"file": path, "status": STATUS.get(code, "suspicious"), "exit_code": code}
            if entry["status"] in ("survived", "no tests", "timeout", "suspicious"):
                shown = subprocess.run([*MUTMUT, "show", name], cwd=scratch, capture_output=True, text=True)
                entry["diff"] = shown.stdout.split("\n", 1)[-1].strip()
            mutants[name] = entry
    return mutants


def forget_hung(scratch: Path, module: str) -> None:
    """Forget mutmut's verdicts on the mutants whose worker timed out, was killed or interrupted: a continued run
    checks them again."""
    for path in MODULES[module][0]:
        meta = scratch / "mutants" / (path + ".meta")
        if meta.exists():
            data = json.loads(meta.read_text())
            codes = data["exit_code_by_key"]
            codes.update({k: None for k, v in codes.items() if v in HUNG})
            meta.write_text(json.dumps(data))


def git_commit() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()


def version() -> str:
    from importlib.metadata import version as installed

    return installed("mutmut")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--readme", action="store_true", help="only rewrite tool_runs/README.md from the JSON files")
    parser.add_argument(
        "--module",
        action="append",
        choices=sorted(MODULES),
        default=[],
        help="a module of the table (repeat for several)",
    )
    parser.add_argument("--max-children", type=int, default=1, help="parallel mutmut workers (default 1)")
    parser.add_argument("--minutes", type=float, default=15.0, help="wall-clock budget per module (default 15)")
    parser.add_argument(
        "--scratch",
        type=Path,
        default=Path("/tmp/typed-transformer-mutmut"),
        help="folder for the scratch copies (one per module)",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="delete a module's scratch copy first and start its record anew (equivalents carried by their change)",
    )
    parser.add_argument(
        "--recheck-with",
        action="append",
        default=[],
        help="with --recheck: run these test files (repeat) instead of tests/test_tool_survivors_<module>.py, e.g. "
        "the module's wider tests left out of the first run for time",
    )
    parser.add_argument(
        "--retry-hung",
        action="store_true",
        help="run again the mutants whose worker timed out, was killed or interrupted (a continued run)",
    )
    parser.add_argument("--only", action="append", default=[], help="with --recheck: mutant names matching (glob)")
    parser.add_argument("--recheck-all", action="store_true", help="with --recheck: every survivor not equivalent")
    parser.add_argument(
        "--recheck",
        action="store_true",
        help="rerun only the recorded survivors (after adding tests), keeping the other results",
    )
    args = parser.parse_args()
    if args.readme or not args.module:
        write_readme()
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    rows = []
    for module in args.module:
        scratch = args.scratch / module
        if args.fresh and scratch.exists():
            shutil.rmtree(scratch)
        scratch.mkdir(parents=True, exist_ok=True)
        # mutmut generates mutants once, from the rewritten sources; a recheck mutates today's sources again
        sources = args.recheck or not (scratch / "mutants").exists()
        copy_repository(scratch, keep=() if sources else MODULES[module][0])
        if sources:
            for name in MODULES[module][0]:
                undecorate(scratch / name)
        write_config(scratch, module)
        if (scratch / "mutants" / "tests").exists():  # mutmut copies tests/ once: refresh it for new tests
            shutil.copytree(scratch / "tests", scratch / "mutants" / "tests", dirs_exist_ok=True)
            shutil.copytree(scratch / "kernels", scratch / "mutants" / "transformer" / "kernels", dirs_exist_ok=True)
        record_path = RESULTS / f"{module}.json"
        previous = json.loads(record_path.read_text()) if record_path.exists() else {"mutants": {}, "runs": []}
        if args.recheck:  # no mutmut run: the survivors against the test written for them
            # survivors not yet triaged (--recheck-all: those killed by a test too, after the tests changed)
            survivors = [
                n
                for n, e in previous["mutants"].items()
                if e["status"] in ("survived", "no tests")
                and "equivalent" not in e
                and (args.recheck_all or ("test" not in e and "wider_test" not in e))
                and (not args.only or any(fnmatch.fnmatch(n, pattern) for pattern in args.only))
            ]
            start = time.monotonic()
            now = regenerate(scratch, MODULES[module][0], {n: previous["mutants"][n]["diff"] for n in survivors})
            for name in [n for n in survivors if now[n] is None]:
                print(f"{name}: no single mutant of the current source makes its change; left as it was")
            current = {now[n]: n for n in survivors if now[n] is not None}
            for current_name, failed in recheck(scratch, module, list(current), args.recheck_with).items():
                name = current[current_name]
                entry = previous["mutants"][name]
                key = "wider_test" if args.recheck_with else "test"  # an existing test, or one written for it
                entry.pop(key, None)
                if failed:
                    entry[key] = failed
            previous["runs"].append(
                {
                    "date": datetime.now(UTC).isoformat(timespec="seconds"),
                    "recheck_seconds": round(time.monotonic() - start, 1),
                    "rechecked": len(survivors),
                    "recheck_tests": args.recheck_with or [f"tests/test_tool_survivors_{module}.py"],
                    "mutated_again_at": git_commit(),  # the sources the survivors were found again in
                    "renumbered": {old: new for old, new in now.items() if new not in (old, None)},
                    "load_after": os.getloadavg(),
                }
            )
            record_path.write_text(json.dumps(previous, indent=1, ensure_ascii=False) + "\n")
            rows.append((module, summarise(previous["mutants"]), time.monotonic() - start, True))
            continue
        names: list[str] = []
        if args.retry_hung:
            forget_hung(scratch, module)
        load_before = os.getloadavg()
        seconds, finished, tail = run_mutmut(scratch, args.max_children, args.minutes, names)
        load_after = os.getloadavg()
        mutants = read_results(scratch, module)
        if not any(entry["status"] != "not checked" for entry in mutants.values()):
            print(f"{module}: mutmut checked no mutant (its record is left as it was); its log ends:\n{tail[-1500:]}")
            continue
        carried = carry_equivalents(previous["mutants"], mutants)  # reasons follow the change they were given for
        if not args.fresh:  # the same mutants, more of them run: a test found for one still kills it
            for name, entry in mutants.items():
                old = previous["mutants"].get(name, {})
                if old.get("diff") == entry.get("diff"):
                    entry.update({key: old[key] for key in ("test", "wider_test") if key in old})
        commit = git_commit()
        run = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": commit,
            "wall_seconds": round(seconds, 1),
            "finished": finished,
            "max_children": args.max_children,
            "budget_minutes": args.minutes,
            "deselected": deselect(module),
            "recheck": args.recheck,
            "retry_hung": args.retry_hung,
            "load_before": load_before,
            "load_after": load_after,
            "log_tail": tail[-600:],
            "equivalents_carried": carried,
        }
        record = {
            "module": module,
            "tool": f"mutmut {version()}",
            "python": platform.python_version(),
            "machine": f"{platform.machine()} {os.cpu_count()} cores (shared)",
            "files": MODULES[module][0],
            "tests": own_tests(module),
            "runs": [run] if args.fresh else [*previous.get("runs", []), run],
            "mutants": mutants,
        }
        record_path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        rows.append((module, summarise(mutants), seconds, finished))
    print(
        f"{'module':18} {'mutants':>7} {'killed':>6} {'equiv':>5} {'wider':>5} {'test':>4} {'surv':>4} {'other':>5} "
        f"{'min':>5} finished"
    )
    for module, s, seconds, finished in rows:
        print(
            f"{module:18} {s['mutants']:7} {s['killed']:6} {s['equivalent']:5} {s['wider']:5} {s['test_added']:4} "
            f"{s['still_surviving']:4} {s['other']:5} {seconds / 60:5.1f} {finished}"
        )


if __name__ == "__main__":
    main()
