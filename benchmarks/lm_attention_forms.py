#!/usr/bin/env python
"""The cost of the functional transformer's per-head values against the paper's W^O, one attention layer.

Forward and backward of ``CausalSelfAttention`` (W^O) and ``PerHeadValueAttention`` (each head's value d_model wide,
summed) on the CPU, per backend that runs here (eager, torch; the fused kernel needs CUDA to be timed: under the
interpreter it only checks correctness), median of ``--repeat`` runs, checks off, one thread. Besides the times it
counts what the fused kernel would be given: problems (batch x heads) and score FLOPs (2 L^2 d_k per problem,
halved for causal). Prints a table and writes benchmarks/results/lm_attention_forms.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _time(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--heads", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--repeat", type=int, default=31)
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "lm_attention_forms.json"))
    args = parser.parse_args(argv)

    import transformer as T
    from transformer.lm.attention import CausalSelfAttention, PerHeadValueAttention

    torch.set_num_threads(1)
    T.set_checks(False)
    load = os.getloadavg()
    rows = []
    x = torch.randn(args.batch, args.length, args.d_model)
    mask = T.AttentionMask(causal=True)
    for h in args.heads:
        d_k = args.d_model // h
        for form, cls in (("W^O", CausalSelfAttention), ("per-head", PerHeadValueAttention)):
            module = cls(h, args.d_model, 0.0)
            for backend in ("eager", "torch"):

                def step(module=module, backend=backend):
                    module.zero_grad()
                    with T.use_backend(backend):
                        module(x, mask).sum().backward()

                seconds = _time(step, args.repeat)
                problems = args.batch * (h if form == "W^O" else h * (h + 1))
                score_flops = problems * args.length**2 * d_k  # 2 L^2 d_k, halved for causal
                rows.append(
                    {
                        "heads": h,
                        "d_k": d_k,
                        "form": form,
                        "backend": backend,
                        "ms_forward_backward": round(seconds * 1e3, 2),
                        "kernel_problems": problems,
                        "kernel_score_gflop": round(score_flops / 1e9, 4),
                    }
                )
    print("| heads | form | backend | fwd+bwd (ms) | kernel problems | kernel score GFLOP |\n|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['heads']} | {r['form']} | {r['backend']} | {r['ms_forward_backward']:.1f} | {r['kernel_problems']} "
            f"| {r['kernel_score_gflop']:.3f} |"
        )
    record = {
        "command": "python benchmarks/lm_attention_forms.py",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": f"cpu ({os.cpu_count()} cores), 1 thread",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "batch": args.batch,
        "length": args.length,
        "d_model": args.d_model,
        "load_average": [round(v, 2) for v in load],
        "rows": rows,
    }
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(record, f, indent=2)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
