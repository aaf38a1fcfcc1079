"""Incremental (KV-cache) greedy decoding vs full recompute, on CPU by default.

    python benchmarks/decoding.py [--lengths 100 500] [--backends auto eager] [--json benchmarks/results/decoding.json]

Prints a table and writes JSON. The model is random (weights do not change the cost); both paths
must produce identical tokens, which the script checks. Contracts are switched off while timing
(they are per-call overhead, the same on both paths). Each attention backend in ``--backends`` is
timed in the same run (``auto`` is SDPA on the CPU; ``eager`` is the reference, as before the
attention-interface redesign).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch

import transformer as T
from transformer.backends import BACKENDS
from transformer.decoding import greedy_decode


def run(lengths, *, d_model, n_layers, heads, d_ff, batch, src_len, repeats, threads, device, backend):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = T.make_model(
        1000, 1000, N=n_layers, d_model=d_model, d_ff=d_ff, h=heads, dropout=0.0, max_len=max(max(lengths) + 1, src_len)
    )
    model.eval().to(device)
    src = torch.randint(1, 1000, (batch, src_len), device=device)
    mask = T.padding_mask(src, 0)
    rows = []
    with T.checks(False), torch.no_grad(), T.use_backend(backend):
        greedy_decode(model, src, mask, 8, 1)  # warm-up
        for n in lengths:
            max_len = n + 1  # n generated tokens after the start symbol
            timings = {}
            outputs = {}
            for name, use_cache in (("cached", True), ("full", False)):
                best = float("inf")
                for _ in range(repeats):
                    start = time.perf_counter()
                    outputs[name] = greedy_decode(model, src, mask, max_len, 1, use_cache=use_cache)
                    best = min(best, time.perf_counter() - start)
                timings[name] = best
            same = bool(torch.equal(outputs["cached"], outputs["full"]))
            rows.append(
                {
                    "backend": backend,
                    "generated_tokens": n,
                    "full_recompute_s": round(timings["full"], 4),
                    "kv_cache_s": round(timings["cached"], 4),
                    "speedup": round(timings["full"] / timings["cached"], 2),
                    "cached_tokens_per_s": round(batch * n / timings["cached"], 1),
                    "identical_tokens": same,
                }
            )
            print(
                f"{backend:>7} | {n:>6} | {timings['full']:>10.3f} | {timings['cached']:>9.3f} | "
                f"{rows[-1]['speedup']:>7.2f}x | {same}",
                flush=True,
            )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[100, 500])
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--src-len", type=int, default=32)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--backends", nargs="+", default=["auto", "eager"], choices=BACKENDS)
    p.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "decoding.json"))
    args = p.parse_args()
    load = os.getloadavg()[0]
    setup = {
        k: getattr(args, k)
        for k in ("d_model", "layers", "heads", "d_ff", "batch", "src_len", "repeats", "threads", "device")
    }
    print(
        f"greedy decoding, model {setup}, torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, load {load:.2f}"
    )
    print(f"{'backend':>7} | {'tokens':>6} | {'full (s)':>10} | {'cache (s)':>9} | {'speedup':>8} | identical")
    rows = [
        row
        for backend in args.backends
        for row in run(
            args.lengths,
            d_model=args.d_model,
            n_layers=args.layers,
            heads=args.heads,
            d_ff=args.d_ff,
            batch=args.batch,
            src_len=args.src_len,
            repeats=args.repeats,
            threads=args.threads,
            device=args.device,
            backend=backend,
        )
    ]
    result = {
        "benchmark": "greedy decoding: KV cache vs full recompute",
        "setup": setup,
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "load_average_at_start": round(load, 2),
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
