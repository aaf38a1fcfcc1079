"""What the drop-in costs per call: transformer.scaled_dot_product_attention against F.scaled_dot_product_attention.

On the CPU both end in torch's own function (``auto`` runs the kernel on CUDA only), so the difference is the
drop-in's own work: torch's input checks redone in Python (to give the same errors on every backend), the backend
choice and the mask's form. Small shapes show that fixed cost; the medium shape shows it against real work.
Alternating rounds (F, then ours, then F, ...), the median per call of each; the load average is recorded because
a shared machine's load moves both.

    python benchmarks/dropin_overhead.py --out benchmarks/results/dropin_overhead.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import transformer as T

SHAPES = {  # name: (batch, heads, q_len, k_len, head_dim, call arguments)
    "tiny 1x1x8x16": (1, 1, 8, 8, 16, {}),
    "small 2x4x32x32": (2, 4, 32, 32, 32, {}),
    "small 2x4x32x32 causal": (2, 4, 32, 32, 32, {"is_causal": True}),
    "small 2x4x32x32 bool mask (32, 32)": (2, 4, 32, 32, 32, {"attn_mask": "bool"}),
    "small 2x8x32x32 GQA 8/2": (2, 8, 32, 32, 32, {"enable_gqa": True}),
    "medium 4x8x256x64": (4, 8, 256, 256, 64, {}),
}


def _inputs(batch, heads, q_len, k_len, d, kwargs):
    g = torch.Generator().manual_seed(0)
    kv_heads = 2 if kwargs.get("enable_gqa") else heads
    q = torch.randn(batch, heads, q_len, d, generator=g)
    k, v = (torch.randn(batch, kv_heads, k_len, d, generator=g) for _ in range(2))
    kwargs = dict(kwargs)
    if kwargs.get("attn_mask") == "bool":
        kwargs["attn_mask"] = torch.rand(q_len, k_len, generator=g) > 0.2
    return (q, k, v), kwargs


def _per_call_us(fn, args, kwargs, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args, **kwargs)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15, help="alternating rounds (torch's, then ours)")
    parser.add_argument("--calls", type=int, default=400, help="calls per round for the small shapes")
    parser.add_argument("--medium-calls", type=int, default=10, help="calls per round for the medium shape")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/dropin_overhead.json"))
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)
    load_before = os.getloadavg()

    rows = []
    with torch.no_grad():
        for name, (batch, heads, q_len, k_len, d, call) in SHAPES.items():
            args, kwargs = _inputs(batch, heads, q_len, k_len, d, call)
            calls = opts.medium_calls if name.startswith("medium") else opts.calls
            torch.testing.assert_close(
                T.scaled_dot_product_attention(*args, **kwargs), F.scaled_dot_product_attention(*args, **kwargs)
            )  # the same answer
            times = {"torch": [], "ours": []}
            for fn in (F.scaled_dot_product_attention, T.scaled_dot_product_attention):  # warm-up
                _per_call_us(fn, args, kwargs, max(1, calls // 10))
            for _ in range(opts.rounds):
                times["torch"].append(_per_call_us(F.scaled_dot_product_attention, args, kwargs, calls))
                times["ours"].append(_per_call_us(T.scaled_dot_product_attention, args, kwargs, calls))
            theirs, ours = statistics.median(times["torch"]), statistics.median(times["ours"])
            rows.append(
                {
                    "shape": name,
                    "torch_us": round(theirs, 2),
                    "ours_us": round(ours, 2),
                    "overhead_us": round(ours - theirs, 2),
                    "ratio": round(ours / theirs, 3),
                }
            )

    load_after = os.getloadavg()
    print(
        f"per call, median of {opts.rounds} alternating rounds, CPU, {opts.threads} thread(s), torch "
        f"{torch.__version__}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after"
    )
    print(f"{'shape':<38}{'F.sdpa (us)':>12}{'ours (us)':>11}{'overhead (us)':>15}{'ratio':>8}")
    for r in rows:
        print(f"{r['shape']:<38}{r['torch_us']:>12.1f}{r['ours_us']:>11.1f}{r['overhead_us']:>15.1f}{r['ratio']:>8.2f}")
    record = {
        "date": datetime.date.today().isoformat(),
        "command": "python benchmarks/dropin_overhead.py",
        "machine": {
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": opts.threads,
            "load_average_1_5_15_before": [round(x, 2) for x in load_before],
            "load_average_1_5_15_after": [round(x, 2) for x in load_after],
        },
        "rounds": opts.rounds,
        "calls_per_round": opts.calls,
        "medium_calls_per_round": opts.medium_calls,
        "backend": "auto (torch's function on the CPU)",
        "rows": rows,
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
