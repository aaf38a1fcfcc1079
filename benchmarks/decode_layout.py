"""One linear map's product on the CPU with its weight as loaded and laid out transposed (transformer.lm.decode_layout).

    python benchmarks/decode_layout.py              # the 30M and 120M Llama shapes, batch 1, 8 and 128
    python benchmarks/decode_layout.py --quick      # a dry run (seconds)

For every distinct (out_features, in_features) of benchmarks/generate_roofline.py's 30M and 120M models (q/o, k/v,
gate/up, down, the output head), ``F.linear(x, W)`` with ``W`` stored as loaded, (out, in) row by row, against the
same values stored (in, out) contiguous (``W`` its transposed view: what ``generate``'s ``weight_layout="auto"``
decodes with), float32, ``x`` of ``batch`` rows. Each timed call reads a weight not read by the one before (enough
copies to exceed 64 MB, so each product streams from memory as in a decode step); the best of 5 runs of many calls;
the two layouts alternate. ``speedup`` > 1: the transposed layout is faster. Writes
``benchmarks/results/decode_layout.json``; the rule :data:`transformer.lm.decode_layout.PAYS` is read off it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from transformer.lm.decode_layout import PAYS

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {
    "30M": {"q, o": (384, 384), "k, v": (128, 384), "gate, up": (1024, 384), "down": (384, 1024), "head": (32000, 384)},
    "120M": {
        "q, o": (768, 768),
        "k, v": (256, 768),
        "gate, up": (2048, 768),
        "down": (768, 2048),
        "head": (32000, 768),
    },
    "tiny": {"q": (64, 64), "head": (1000, 64)},
}


def best_per_call(weights: list[torch.Tensor], x: torch.Tensor, calls: int, runs: int = 5) -> float:
    """The best of ``runs`` runs of ``calls`` products, seconds per product, cycling through ``weights``."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        for i in range(calls):
            F.linear(x, weights[i % len(weights)])
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="the tiny shapes, batch 1, few calls")
    p.add_argument("--sizes", default="30M,120M")
    p.add_argument("--batches", default="1,8,128")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "decode_layout.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.batches = "tiny", "1"
    if args.threads:
        torch.set_num_threads(args.threads)
    pairs = _sibling("generate_vs_transformers")
    load_before = os.getloadavg()
    g = torch.Generator().manual_seed(0)
    rows = []
    for size in args.sizes.split(","):
        for name, (out_f, in_f) in SHAPES[size].items():
            copies = 2 if args.quick else max(1, 64_000_000 // (out_f * in_f * 4))
            loaded = [torch.randn(out_f, in_f, generator=g) * 0.02 for _ in range(copies)]
            relaid = [w.t().contiguous().t() for w in loaded]
            for batch in (int(b) for b in args.batches.split(",")):
                x = torch.randn(batch, in_f, generator=g)
                torch.testing.assert_close(F.linear(x, loaded[0]), F.linear(x, relaid[0]))  # the same product
                calls = 4 if args.quick else max(4, int(2e8 // (out_f * in_f * max(1, batch // 8))))
                calls = min(calls, 400)
                a, b = best_per_call(loaded, x, calls), best_per_call(relaid, x, calls)
                a, b = min(a, best_per_call(loaded, x, calls)), min(b, best_per_call(relaid, x, calls))
                ratio = out_f / in_f
                relaid_by_rule = any(batch <= largest and ratio >= smallest for largest, smallest in PAYS)
                row = {"size": size, "map": name, "out_features": out_f, "in_features": in_f, "batch": batch,
                       "as_loaded_us": round(1e6 * a, 1), "transposed_us": round(1e6 * b, 1),
                       "speedup": round(a / b, 3), "relaid_by_rule": relaid_by_rule}  # fmt: skip
                rows.append(row)
                print(
                    f"{size:5s} {name:9s} ({out_f:5d}, {in_f:4d}) batch {batch:3d}: "
                    f"as loaded {row['as_loaded_us']:9.1f} us, transposed {row['transposed_us']:9.1f} us, "
                    f"speedup {row['speedup']:.2f}" + ("  (relaid)" if relaid_by_rule else ""),
                    flush=True,
                )
    result = {
        "benchmark": "F.linear with the weight as loaded (out, in) and transposed (in, out) contiguous, float32 CPU",
        "command": "python benchmarks/decode_layout.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "rule": {"pays": PAYS},
        "rows": rows,
        **pairs.run_record(load_before, os.getloadavg()),
    }
    return pairs.write_result(args.json, result)


def _sibling(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    main()
