"""The triage half of scripts/mutation_tool.py: rechecking survivors against the tests written (or found) for them,
the per-module counts, and tests/mutation/tool_runs/README.md."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "tests" / "mutation" / "tool_runs"

RECHECK = """
import json, os, sys
import pytest

class Failures:
    def __init__(self):
        self.failed = []
    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed.append(report.nodeid)

results = {}
for name in [""] + sys.argv[2:]:
    os.environ["MUTANT_UNDER_TEST"] = name
    failures = Failures()
    pytest.main(["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *sys.argv[1].split(",")],
                plugins=[failures])
    results[name] = failures.failed[0] if failures.failed else None
print("RECHECK " + json.dumps(results))
"""


def _tagged_result(code_and_args: list[str], tag: str, cwd: Path, what: str, env: dict | None = None):
    """Run ``python -c CODE ARGS...`` in ``cwd`` and return the JSON its last ``TAG ...`` line of stdout prints;
    stop with both outputs' tails, naming ``what``, when it printed none."""
    done = subprocess.run([sys.executable, "-c", *code_and_args], cwd=cwd, env=env, capture_output=True, text=True)
    line = [x for x in done.stdout.splitlines() if x.startswith(f"{tag} ")]
    if not line:
        raise SystemExit(f"{what} did not finish:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(line[-1].removeprefix(f"{tag} "))


def recheck(scratch: Path, module: str, survivors: list[str], tests: list[str]) -> dict[str, str | None]:
    """Run ``tests`` (default tests/test_tool_survivors_<module>.py) against each survivor (mutmut's trampoline picks
    the mutant from MUTANT_UNDER_TEST) in the scratch copy's mutants/ folder: the first test that fails under it, or
    None.

    mutmut itself cannot rerun them with another test selection: changing it resets every cached verdict. The
    unmutated run comes first and must pass."""
    tests = tests or [f"tests/test_tool_survivors_{module}.py"]
    for test in tests:  # a file, or one test of it (tests/test_x.py::test_y)
        shutil.copy2(REPO / test.split("::")[0], scratch / "mutants" / test.split("::")[0])
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    results = _tagged_result(
        [RECHECK, ",".join(tests), *survivors], "RECHECK", scratch / "mutants", f"the recheck of {module}", env
    )
    if results.pop("") is not None:
        raise SystemExit(f"{tests} fail on the unmutated package: fix them before rechecking")
    return results


# In the scratch copy: mutmut regenerates the mutated files from the current sources; each recorded survivor is
# found again by its changed lines within its function (mutmut numbers a function's mutants anew when it changes).
REGENERATE = """
import json, sys
from pathlib import Path
sys.argv[0] = "mutmut"
from mutmut.__main__ import create_mutants_for_file
from mutmut.mutation.diff_apply import get_diff_for_mutant
files, recorded = json.loads(sys.argv[1]), json.loads(sys.argv[2])
current = {}
for name in files:
    create_mutants_for_file(Path(name), Path("mutants") / name)
    current.update(json.loads(Path("mutants", name + ".meta").read_text())["exit_code_by_key"])
def changes(diff):
    return [x for x in diff.splitlines() if x[:1] in "+-" and not x.startswith(("+++", "---"))]
def hunk(diff):  # the changed lines with their context, without the line numbers
    return [x for x in diff.splitlines() if not x.startswith(("+++", "---", "@@"))]
found = {}
diffs = {}
for old, diff in recorded.items():
    function = old.rsplit("__mutmut_", 1)[0]
    mine = [n for n in current if n.rsplit("__mutmut_", 1)[0] == function]
    for n in mine:
        diffs.setdefault(n, get_diff_for_mutant(n))
    same = [n for n in mine if hunk(diffs[n]) == hunk(diff)] or [n for n in mine if changes(diffs[n]) == changes(diff)]
    found[old] = same[0] if len(same) == 1 else None
print("FOUND " + json.dumps(found))
"""


def regenerate(scratch: Path, files: tuple[str, ...], recorded: dict[str, str]) -> dict[str, str | None]:
    """Bring ``mutants/`` to the scratch copy's sources (the worktree's, copied and undecorated by the caller) before
    a recheck (tests written for today's code must pass on it unmutated): the package files mutmut does not mutate
    are copied in, ``files`` are mutated again. Returns each recorded survivor's name now (``recorded``: name ->
    diff), found by its changed lines with their context (else by the changed lines alone), or None where no single
    mutant makes that change now (the source it mutated is gone, or several places read alike): that one stays as
    it was."""
    for source in (scratch / "transformer").rglob("*.py"):
        name = str(source.relative_to(scratch))
        if name not in files:
            shutil.copy2(source, scratch / "mutants" / name)
    return _tagged_result(
        [REGENERATE, json.dumps(files), json.dumps(recorded)], "FOUND", scratch, f"regenerating the mutants of {files}"
    )


def change_in_context(diff: str) -> list[str]:
    """A mutant's diff without its file names and line numbers: what it changes, with the lines around it."""
    return [x for x in diff.splitlines() if not x.startswith(("+++", "---", "@@"))]


def carry_equivalents(previous: dict[str, dict], mutants: dict[str, dict]) -> int:
    """Give each survivor of a new run the reason of an earlier run's equivalent mutant that made the same change in
    the same function (mutmut renumbers a function's mutants when the function changes, so names alone could pair a
    reason with another mutant). Only reasons carry over: a test written for an earlier survivor is in the new run's
    selection and has had its say. Returns how many were carried."""
    reasons: dict[tuple[str, tuple[str, ...]], str] = {}
    for name, entry in previous.items():
        if "equivalent" in entry and "diff" in entry:
            reasons[(name.rsplit("__mutmut_", 1)[0], tuple(change_in_context(entry["diff"])))] = entry["equivalent"]
    carried = 0
    for name, entry in mutants.items():
        key = (name.rsplit("__mutmut_", 1)[0], tuple(change_in_context(entry.get("diff", ""))))
        if entry["status"] in ("survived", "no tests") and key in reasons:
            entry["equivalent"] = reasons[key]
            carried += 1
    return carried


def write_readme() -> None:
    """tests/mutation/tool_runs/README.md: the per-module table and every survivor's triage, from the JSON files."""
    lines = [
        "# Mutants no author chose (mutmut, module by module)",
        "",
        "Written by `python scripts/mutation_tool.py --readme` from the `<module>.json` files beside it (the command",
        "that produced each is `python scripts/mutation_tool.py --module <module> --max-children 1 --minutes N`;",
        "run by hand, not in CI). Each survivor has a test that kills it (`test`: written for it, in",
        "`tests/test_tool_survivors_<module>.py`; `wider test`: a test of the module that the run's test selection",
        "left out for time, run against the survivors with `--recheck --recheck-with FILE`) or the reason it is",
        "equivalent. Survivors include mutants that no selected test reached (`no tests`). Minutes: mutmut's run.",
        "",
        "| module | mutants | killed | equivalent | survived -> wider test | survived -> test added "
        "| still surviving | not run | minutes | ran fully |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    records = [json.loads(path.read_text()) for path in sorted(RESULTS.glob("*.json"))]
    for record in records:
        s = summarise(record["mutants"])
        minutes = sum(run.get("wall_seconds", 0) for run in record["runs"]) / 60
        full = "no" if s["other"] else "yes"  # every mutant checked, over one run or a continued one
        lines.append(
            f"| {record['module']} | {s['mutants']} | {s['killed']} | {s['equivalent']} | {s['wider']} "
            f"| {s['test_added']} | {s['still_surviving']} | {s['other']} | {minutes:.1f} | {full} |"
        )
    for record in records:
        lines += [
            "",
            f"## {record['module']}",
            "",
            f"Files: {', '.join(record['files'])}. Tests: {', '.join(record['tests'])}. Tool: {record['tool']}.",
            "",
            "| mutant | status | triage |",
            "|---|---|---|",
        ]
        for name, entry in record["mutants"].items():
            if entry["status"] in ("survived", "no tests"):
                triage = (
                    f"equivalent: {entry['equivalent']}"
                    if "equivalent" in entry
                    else f"test: `{entry['test'].split('::')[-1][:80]}`"
                    if "test" in entry
                    else f"wider test: `{entry['wider_test'][:100]}`"
                    if "wider_test" in entry
                    else "**untriaged**"
                )
                lines.append(f"| `{name.rsplit('.', 1)[-1]}` | {entry['status']} | {triage} |")
    (RESULTS / "README.md").write_text("\n".join(lines) + "\n")


def summarise(mutants: dict[str, dict]) -> dict[str, int]:
    """Counts: mutants, killed (timeouts included), equivalent, survived -> test added, still surviving, other."""
    counts = {
        "mutants": len(mutants),
        "killed": 0,
        "equivalent": 0,
        "wider": 0,
        "test_added": 0,
        "still_surviving": 0,
        "other": 0,
    }
    for entry in mutants.values():
        status = entry["status"]
        if "equivalent" in entry:
            counts["equivalent"] += 1
        elif "test" in entry:  # a survivor, killed by the test written for it (--recheck)
            counts["test_added"] += 1
        elif "wider_test" in entry:  # a survivor, killed by a test of the module left out of the run (--recheck-with)
            counts["wider"] += 1
        elif status in ("killed", "timeout", "caught by type check"):
            counts["killed"] += 1
        elif status in ("survived", "no tests"):
            counts["still_surviving"] += 1
        else:
            counts["other"] += 1
    return counts
