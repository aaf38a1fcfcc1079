#!/usr/bin/env python
"""Recorded runs of the synthetic tasks, exactly as a user types them (docs/training.md, "Measured results").

    python benchmarks/train_tasks.py [--tasks copy dates] [--json benchmarks/results/train_tasks.json]

Runs ``typed-transformer train copy --out DIR`` and ``typed-transformer train dates --out DIR --no-progress`` (default
flags, seed 0) in fresh processes, times each whole command (wall time, start-up included), reads the figures the
command prints on its ``RESULTS`` line (steps, training time, losses, held-out exact match) and the examples it
decodes, prints a table and writes them with the device, versions, date and load to the JSON file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "train_tasks.json"
FLAGS = {"copy": [], "dates": ["--no-progress"]}


def run_task(task: str, out: str) -> dict:
    command = ["typed-transformer", "train", task, "--out", out, *FLAGS[task]]
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    lines = proc.stdout.splitlines()
    results = json.loads(next(line for line in lines if line.startswith("RESULTS "))[len("RESULTS ") :])
    examples = [line.strip() for line in lines if line.startswith("  ") and " -> " in line]
    shown = " ".join(["typed-transformer", "train", task, "--out", f"runs/{task}", *FLAGS[task]])
    return {"command": shown, "wall_seconds": round(wall, 1), "examples": examples, **results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=sorted(FLAGS), default=["copy", "dates"])
    parser.add_argument("--json", default=str(RESULTS))
    args = parser.parse_args(argv)

    import torch

    load_before = os.getloadavg()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for task in args.tasks:
            runs.append(run_task(task, os.path.join(tmp, task)))
    record = {
        "benchmark": "the synthetic tasks trained by the CLI, default flags",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": f"cpu ({platform.machine()}, {os.cpu_count()} cores)",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "runs": runs,
    }
    print("| command | wall time | training | eval loss | exact match | example |\n|---|---|---|---|---|---|")
    for r in runs:
        print(
            f"| `{r['command']}` | {r['wall_seconds']:.1f} s | {r['steps']} steps, {r['train_seconds']:.1f} s | "
            f"{r['eval_loss']:.4f} | {r['exact_match']:.1%} ({r['eval_examples']}) | {r['examples'][0]} |"
        )
    with open(args.json, "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
