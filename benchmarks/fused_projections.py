"""Issue 45's lever "query/key/value and gate/up projections as one product each", measured before it is built.

    python benchmarks/fused_projections.py            # 30M and 120M Llama shapes, 15 alternating rounds
    python benchmarks/fused_projections.py --quick    # a dry run (seconds)

One layer's projections that read the same input, on the CPU in float32 with torch's threads, two ways side by side:

* **separate** (what the model computes): ``q = x Wq^T``, ``k = x Wk^T``, ``v = x Wv^T``; ``act(x Wg^T) * x Wu^T``;
* **fused** (the lever): one product with the weights concatenated at load, ``x [Wq; Wk; Wv]^T`` split into q, k and
  v (views), and ``x [Wg; Wu]^T`` split into its halves before ``act(g) * u``.

Cases: a decode step at batch 1 and 8 (eager, and each function under ``torch.compile``: the compiled decode step's
situation, where inductor keeps every matrix product a library call), a 512-token prefill, and a training step's
share (2048 tokens, forward and backward: the fused weight is one parameter, its gradient one product). Each round
times every variant (the order rotated) over ``--calls`` calls; medians of the rounds, microseconds per layer.

The saving per token is the saving per layer times the layers, set against the step time our compiled decode step
reached on an idle machine (``benchmarks/results/generate_roofline_idle.json``): the share of a token the lever can
take at most. Writes ``benchmarks/results/fused_projections.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
#: (d_model, heads, key/value heads, intermediate, layers) of benchmarks/generate_roofline.py's sizes
SIZES = {
    "30M": dict(hidden=384, heads=6, kv_heads=2, ffn=1024, layers=6),
    "120M": dict(hidden=768, heads=12, kv_heads=4, ffn=2048, layers=12),
    "tiny": dict(hidden=64, heads=4, kv_heads=2, ffn=128, layers=2),
}
CASES = {"decode b1": 1, "decode b8": 8, "prefill 512": 512, "training 16x128": 2048}


def layer_functions(size: dict, generator: torch.Generator, grad: bool):
    """(separate, fused): each maps x (tokens, d_model) to every layer's (q, k, v, the gated hidden), each layer
    with its own weights (the same in both), so that one call is one step's projections (a compiled call's guards
    paid once per step, as in the compiled decode step)."""
    h = size["hidden"]
    head = h // size["heads"]
    q_out, kv_out, f = h, size["kv_heads"] * head, size["ffn"]
    layers = []
    for _ in range(size["layers"]):
        wq, wk, wv, wg, wu = (torch.randn(o, h, generator=generator) * 0.02 for o in (q_out, kv_out, kv_out, f, f))
        w_qkv, w_gu = torch.cat([wq, wk, wv]), torch.cat([wg, wu])
        for w in (wq, wk, wv, wg, wu, w_qkv, w_gu):
            w.requires_grad_(grad)
        layers.append((wq, wk, wv, wg, wu, w_qkv, w_gu))

    def separate(x):
        out = []
        for wq, wk, wv, wg, wu, _, _ in layers:
            out += [F.linear(x, wq), F.linear(x, wk), F.linear(x, wv), F.silu(F.linear(x, wg)) * F.linear(x, wu)]
        return out

    def fused(x):
        out = []
        for *_, w_qkv, w_gu in layers:
            q, k, v = F.linear(x, w_qkv).split([q_out, kv_out, kv_out], dim=-1)
            g, u = F.linear(x, w_gu).chunk(2, dim=-1)
            out += [q, k, v, F.silu(g) * u]
        return out

    return separate, fused


def timed(fn, x, calls: int, backward: bool) -> float:
    """Seconds per call of ``fn(x)`` (and, with ``backward``, the backward of the sum of its outputs)."""
    start = time.perf_counter()
    for _ in range(calls):
        out = fn(x)
        if backward:
            sum(o.sum() for o in out).backward()
    return (time.perf_counter() - start) / calls


def run_case(size: dict, tokens: int, args, generator: torch.Generator) -> dict:
    training = tokens == CASES["training 16x128"]
    separate, fused = layer_functions(size, generator, grad=training)
    variants = {"separate": separate, "fused": fused}
    if tokens <= 8:  # the decode step: compiled as the compiled decode step compiles it
        variants |= {f"{n}, compiled": torch.compile(fn, fullgraph=True) for n, fn in list(variants.items())}
    x = torch.randn(tokens, size["hidden"], generator=generator)
    calls = max(2, args.calls // max(1, tokens // 8)) if not args.quick else 2
    grad_ctx = torch.enable_grad() if training else torch.no_grad()
    with grad_ctx:
        for fn in variants.values():
            timed(fn, x, 2, training)
        for a, b in zip(separate(x), fused(x), strict=True):
            torch.testing.assert_close(a, b)  # the same function
        times: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                times[name].append(timed(variants[name], x, calls, training))
    us = {name: 1e6 * statistics.median(t) / size["layers"] for name, t in times.items()}
    return {"tokens": tokens, "calls_per_round": calls, "us_per_layer": {n: round(v, 2) for n, v in us.items()}}


def step_ms(size_name: str, batch: int) -> float | None:
    """Our compiled decode step's ms per step on the idle machine (generate_roofline_idle.json), or None."""
    path = ROOT / "benchmarks" / "results" / "generate_roofline_idle.json"
    if not path.exists():
        return None
    for row in json.loads(path.read_text())["rows"]:
        if (row["size"], row["batch"], row["variant"]) == (size_name, batch, "ours, compiled"):
            return 1e3 * batch / row["decode_tokens_per_s"]
    return None


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny shapes, two rounds")
    p.add_argument("--sizes", default="30M,120M")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=200, help="calls per round at batch <= 8 (fewer for more tokens)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "fused_projections.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.rounds = "tiny", 2
    if args.threads:
        torch.set_num_threads(args.threads)
    pairs = _sibling("generate_vs_transformers")
    load_before = os.getloadavg()
    generator = torch.Generator().manual_seed(0)
    rows = []
    for size_name in args.sizes.split(","):
        size = SIZES[size_name]
        for case, tokens in CASES.items():
            row = {"size": size_name, "case": case} | run_case(size, tokens, args, generator)
            for mode in ("", ", compiled"):
                sep, fus = row["us_per_layer"].get("separate" + mode), row["us_per_layer"].get("fused" + mode)
                if sep is None:
                    continue
                saving = size["layers"] * (sep - fus)
                row["saving_us_per_step" + mode] = round(saving, 1)
                step = step_ms(size_name, tokens) if case.startswith("decode") else None
                if step is not None:
                    row["saving_share_of_compiled_step" + mode] = round(saving / (1e3 * step), 4)
            rows.append(row)
            print(_line(row), flush=True)
    result = {
        "benchmark": "one layer's q/k/v and gate/up projections: separate products against one fused product each",
        "command": "python benchmarks/fused_projections.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "setup": {k: v for k, v in vars(args).items() if k != "json"} | {"sizes_detail": SIZES},
        "rows": rows,
        **pairs.run_record(load_before, os.getloadavg()),
    }
    return pairs.write_result(args.json, result)


def _line(row: dict) -> str:
    per_layer = ", ".join(f"{n} {v:.1f}" for n, v in row["us_per_layer"].items())
    extra = ", ".join(f"{k} {v}" for k, v in row.items() if k.startswith("saving"))
    return f"{row['size']:5s} {row['case']:16s} us/layer: {per_layer}; {extra}"


def _sibling(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    main()
