#!/usr/bin/env python
"""Recorded run: a language model learns the Python standard library's own source, on a CPU, in minutes.

Every machine with Python has the corpus: the standard library's top-level modules (``<stdlib>/*.py``, 168 files,
4.7 MB on Python 3.11). The last 5% of the token stream (the end of the last files in name order: text the model
never trains on) is held out. The run is the command a user types,

    typed-transformer train lm --text <stdlib>/*.py --out runs/stdlib-lm --no-progress      (900 steps: the default)

and this script times it, reads its RESULTS line, and compares the held-out perplexity with a unigram model's on
the same held-out tokens and the same tokenizer. It prints a table and writes benchmarks/results/lm_stdlib.json
(command, device, versions, date, machine load). Target: held-out perplexity well below the unigram baseline with
the whole command (tokenizer training included) within 5 minutes on the 2-core CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import glob
import io
import json
import os
import platform
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "lm_stdlib.json"


def stdlib_files() -> list[str]:
    return sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=900)
    parser.add_argument("--out", default=None, help="checkpoint directory (default: a temporary one)")
    parser.add_argument("--json", default=str(RESULTS))
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more flags for train lm")
    args = parser.parse_args(argv)

    import torch

    from transformer.cli import main as cli

    files = stdlib_files()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or os.path.join(tmp, "stdlib-lm")
        command = [
            "train",
            "lm",
            "--text",
            *files,
            "--out",
            out,
            "--steps",
            str(args.steps),
            "--no-progress",
            *args.extra,
        ]
        shown = (
            f"typed-transformer train lm --text {sysconfig.get_paths()['stdlib']}/*.py --out runs/stdlib-lm "
            f"--steps {args.steps} --no-progress {' '.join(args.extra)}"
        ).strip()
        print(f"$ {shown}", flush=True)
        buffer = io.StringIO()
        start = time.perf_counter()
        with contextlib.redirect_stdout(buffer):
            code = cli(command)
        wall = time.perf_counter() - start
        printed = buffer.getvalue()
        print(printed)
        if code != 0:
            print(f"train lm exited with {code}", file=sys.stderr)
            return code
        results = json.loads(next(line for line in printed.splitlines() if line.startswith("RESULTS "))[8:])
        sample = next((line for line in printed.splitlines() if line.startswith("sample: ")), "")
        generated = {}
        for name, flags in (
            ("greedy", []),
            ("sampled", ["--sample", "--temperature", "0.8", "--top-p", "0.95", "--seed", "0"]),
        ):
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                cli(["generate", "--checkpoint", out, "--max-new-tokens", "60", *flags, "def ", "import "])
            generated[name] = buffer.getvalue()
            print(f"generate ({name}):\n{generated[name]}")
    record = {
        "command": shown,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": f"cpu ({os.cpu_count()} cores)",
        "machine": platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "corpus_files": len(files),
        "corpus_bytes": sum(os.path.getsize(f) for f in files),
        "wall_seconds": round(wall, 1),
        "sample": sample[8:],
        "generate": generated,
        **results,
    }
    rows = [
        ("wall time (whole command)", f"{wall:.0f} s"),
        ("training", f"{results['train_seconds']:.0f} s, {results['steps']} steps"),
        ("tokens/s (training)", f"{results['tokens_per_second']:,.0f}"),
        ("held-out perplexity", f"{results['perplexity']:.2f}"),
        ("unigram perplexity (same tokens)", f"{results['unigram_perplexity']:.2f}"),
        ("held-out tokens", f"{results['valid_tokens']:,}"),
        ("parameters", f"{results['parameters']:,}"),
    ]
    print("\n| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(record, f, indent=2)
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
