"""A seeded differential fuzzer of the warm-up and decay schedules (``transformer.training.WarmupDecaySchedule``)
against transformers' (``get_constant_schedule_with_warmup``, ``get_linear_schedule_with_warmup``,
``get_cosine_schedule_with_warmup``), the oracle of docs/training.md's promise "value for value".

Each case draws a schedule (kind, peak log-uniform in [1e-7, 1], total steps 0 .. 3000 with small ones often, a
warm-up from 0 to past the total, equal to it often) and compares, at every step from 0 to ``total + 2``, our
learning rate with transformers' (their ``LambdaLR`` multiplier times the peak as its base learning rate): equal, bit
for bit; then the schedule goes through ``LambdaLR``'s state as JSON at a random step and must come back
giving the same values. ``tests/test_training_schedules.py`` runs a short fixed-seed budget; by hand:

    python tests/differential_schedules.py --cases 20000   # writes benchmarks/results/differential/schedules.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import random
import sys
from pathlib import Path

import torch

from transformer.training import WarmupDecaySchedule, schedule_from_state

KINDS = ("constant", "linear", "cosine")


def draw(rng: random.Random) -> tuple[str, float, int, int]:
    kind = rng.choice(KINDS)
    total = rng.choice([rng.randint(0, 12), rng.randint(0, 300), rng.randint(0, 3000)])
    warmup = rng.choice([0, total, rng.randint(0, total + 5), rng.randint(0, max(1, total // 10))])
    return kind, 10 ** rng.uniform(-7, 0), warmup, total


def theirs(transformers, kind: str, warmup: int, total: int):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    if kind == "constant":
        return transformers.get_constant_schedule_with_warmup(opt, warmup).lr_lambdas[0]
    make = (
        transformers.get_linear_schedule_with_warmup
        if kind == "linear"
        else transformers.get_cosine_schedule_with_warmup
    )
    return make(opt, warmup, total).lr_lambdas[0]


def run_case(transformers, seed: int) -> dict:
    rng = random.Random(seed)
    kind, peak, warmup, total = draw(rng)
    ours, oracle = WarmupDecaySchedule(kind, peak, warmup, total), theirs(transformers, kind, warmup, total)
    worst, bad_step = 0.0, None
    for step in range(total + 3):
        a, b = ours(step), peak * oracle(step)
        error = abs(a - b) / max(abs(b), 1e-300) if b else abs(a)
        if error > worst:
            worst = error
        if a != b and bad_step is None:
            bad_step = step
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, ours)
    for _ in range(rng.randint(0, total + 2)):
        opt.step()
        scheduler.step()
    back = schedule_from_state(json.loads(json.dumps(scheduler.state_dict()))["lr_lambdas"][0])
    restored = all(back(s) == ours(s) for s in range(total + 3))
    return {"seed": seed, "kind": kind, "peak": peak, "warmup": warmup, "total": total, "worst_relative_error": worst,
            "first_disagreeing_step": bad_step, "restored": restored}  # fmt: skip


def run_cases(transformers, seeds) -> dict:
    cases = [run_case(transformers, seed) for seed in seeds]
    disagreeing = [c for c in cases if c["first_disagreeing_step"] is not None or not c["restored"]]
    return {
        "cases": len(cases),
        "steps_compared": sum(c["total"] + 3 for c in cases),
        "by_kind": {kind: sum(c["kind"] == kind for c in cases) for kind in KINDS},
        "warmup_0": sum(c["warmup"] == 0 for c in cases),
        "warmup_equal_to_total": sum(c["warmup"] == c["total"] for c in cases),
        "warmup_past_total": sum(c["warmup"] > c["total"] for c in cases),
        "worst_relative_error": max((c["worst_relative_error"] for c in cases), default=0.0),
        "disagreements": len(disagreeing),
        "disagreeing_cases": disagreeing[:20],
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=20000)
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument(
        "--json", default=str(Path(__file__).resolve().parents[1] / "benchmarks/results/differential/schedules.json")
    )
    args = parser.parse_args(argv)
    import transformers

    report = run_cases(transformers, range(args.first_seed, args.first_seed + args.cases))
    report.update(
        command=f"python tests/differential_schedules.py --cases {args.cases} --first-seed {args.first_seed}",
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        python=platform.python_version(),
        torch=torch.__version__,
        transformers=transformers.__version__,
    )
    Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "disagreeing_cases"}))
    return report


if __name__ == "__main__":
    sys.exit(0 if main()["disagreements"] == 0 else 1)
