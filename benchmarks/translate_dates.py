#!/usr/bin/env python
"""Recorded run: translation through the file path, on the dates task written to tab-separated files.

Writes ``train.tsv`` (dates in words -> ISO 8601, never a held-out day) and ``valid.tsv`` (only held-out days: every
tenth day, ``date.toordinal() % 10 == 0``, as transformer.tasks.DatesTask holds them out), then runs the command a
user types,

    typed-transformer train translate --train train.tsv --valid valid.tsv --out runs/dates-files ...

which trains a tokenizer on the training file, the encoder-decoder, and scores greedy decodes of the held-out lines
with sacrebleu (BLEU and chrF on the text). Prints a table and writes benchmarks/results/translate_dates.json.
Target: BLEU >= 95 on the held-out lines.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "translate_dates.json"


def write_dates(path: str, n: int, *, held_out: bool, seed: int) -> None:
    """``n`` lines ``<date in words>\\t<ISO date>``: held-out days only, or never one."""
    from transformer.tasks.dates import _FIRST, _LAST, DatesTask

    task, rng = DatesTask(), random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(n):
            ordinal = rng.randrange(_FIRST, _LAST + 1)
            if held_out:
                ordinal = ordinal - ordinal % 10 if ordinal - ordinal % 10 >= _FIRST else ordinal - ordinal % 10 + 10
            elif task.is_held_out(ordinal):
                ordinal = ordinal + 1 if ordinal < _LAST else ordinal - 1
            date = dt.date.fromordinal(ordinal)
            source = task.source_text(task.src_vocab.encode(task.words(date, rng.randrange(3))))
            f.write(f"{source}\t{''.join(task.iso(date))}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-lines", type=int, default=30000)
    parser.add_argument("--valid-lines", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--json", default=str(RESULTS))
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more flags for train translate")
    args = parser.parse_args(argv)

    import torch

    from transformer.cli import main as cli

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        train, valid = os.path.join(tmp, "train.tsv"), os.path.join(tmp, "valid.tsv")
        write_dates(train, args.train_lines, held_out=False, seed=0)
        write_dates(valid, args.valid_lines, held_out=True, seed=1)
        flags = ["--steps", str(args.steps), "--eval-examples", str(args.valid_lines), "--no-progress", *args.extra]
        command = ["train", "translate", "--train", train, "--valid", valid, "--out", os.path.join(tmp, "run"), *flags]
        shown = (
            f"typed-transformer train translate --train train.tsv --valid valid.tsv --out runs/dates-files "
            f"{' '.join(flags)}"
        )
        buffer = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(buffer):
            code = cli(command)
        wall = time.perf_counter() - start
        printed = buffer.getvalue()
        print(printed)
        if code != 0:
            return code
        results = json.loads(next(line for line in printed.splitlines() if line.startswith("RESULTS "))[8:])
    record = {
        "command": shown,
        "data": f"python benchmarks/translate_dates.py: {args.train_lines} training lines, "
        f"{args.valid_lines} held-out lines (held-out days only)",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": f"cpu ({os.cpu_count()} cores)",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "wall_seconds": round(wall, 1),
        **results,
    }
    print(
        f"\n| measure | value |\n|---|---|\n| BLEU (held-out) | {results['bleu']:.2f} |\n"
        f"| chrF | {results['chrf']:.2f} |"
        f"\n| exact match | {results['exact_match']:.1%} |\n| training | {results['train_seconds']:.0f} s, "
        f"{results['steps']} steps |\n| wall time | {wall:.0f} s |"
    )
    with open(args.json, "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
