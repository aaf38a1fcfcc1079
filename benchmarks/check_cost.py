"""What ``transformer.check`` costs, per call, with checks off and on (issue 30).

    python benchmarks/check_cost.py            # about 20 s

Each figure is the fastest of many short batches of calls, the variants interleaved (what survives on a shared
machine), in nanoseconds per call:

* ``bare``: a plain Python function returning its argument (the floor);
* ``check_off``: ``check(x, "b n")`` with checks off: one switch lookup, then return;
* ``checked_fast_path``: a checked function's generated eager checker called directly (no wrapper);
* ``checked_call``: the same function called through ``checked``'s wrapper, checks on: the switch, the frame a
  ``check`` would bind with (an append and a pop), the error handling;
* ``checked_call_with_one_check`` / ``..._two_checks``: the same function making one / two ``check`` calls inside
  (the first works out the call's names from its arguments).

Prints a table and writes ``benchmarks/results/check_cost.json`` (with the load average before and after).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import time
from pathlib import Path

import torch

import transformer as tt
from transformer import Float, Tensor, check, checked

ROOT = Path(__file__).resolve().parents[1]


def bare(x):
    return x


@checked
def plain(x: Float[Tensor, "b n"]) -> Float[Tensor, "b n"]:
    return x


@checked
def one_check(x: Float[Tensor, "b n"]) -> Float[Tensor, "b n"]:
    check(x, "b n")
    return x


@checked
def two_checks(x: Float[Tensor, "b n"]) -> Float[Tensor, "b n"]:
    check(x, "b n")
    check(x, "b n")
    return x


def _fastest_ns(call, x, batches: int = 200, per_batch: int = 200) -> float:
    best = float("inf")
    for _ in range(batches):
        start = time.perf_counter_ns()
        for _ in range(per_batch):
            call(x)
        best = min(best, (time.perf_counter_ns() - start) / per_batch)
    return best


def main() -> None:
    load_before = os.getloadavg()
    x = torch.randn(2, 3)
    fast = plain._fast_checker()[0]
    variants = {
        "bare": (True, bare),
        "check_off": (False, lambda x: check(x, "b n")),
        "checked_fast_path": (True, lambda x: fast((x,), {})),
        "checked_call": (True, plain),
        "checked_call_with_one_check": (True, one_check),
        "checked_call_with_two_checks": (True, two_checks),
    }
    results: dict[str, float] = {name: float("inf") for name in variants}
    for _ in range(5):  # interleaved rounds
        for name, (on, call) in variants.items():
            with tt.checks(on):
                call(x)
                results[name] = min(results[name], _fastest_ns(call, x, batches=40))
    load_after = os.getloadavg()
    print(f"{'variant':32} {'ns per call':>12}")
    for name, ns in results.items():
        print(f"{name:32} {ns:12.0f}")
    out = {
        "command": "python benchmarks/check_cost.py",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": f"CPU ({platform.machine()}, {os.cpu_count()} cores), {torch.get_num_threads()} torch threads",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "ns_per_call": results,
    }
    path = ROOT / "benchmarks" / "results" / "check_cost.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written {path.relative_to(ROOT)}; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after")


if __name__ == "__main__":
    main()
