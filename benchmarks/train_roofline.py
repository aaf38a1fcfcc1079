"""Prefill and the training step at the matrix-product roofline: ours against transformers on the same weights.

    python benchmarks/train_roofline.py                # 30M Llama shape, 8 alternating rounds: an idle machine
    python benchmarks/train_roofline.py --profile      # and where each side's training step goes (torch.profiler)
    python benchmarks/train_roofline.py --compile      # and our training step with the model under torch.compile
    python benchmarks/train_roofline.py --quick        # a dry run at a tiny size, one round (seconds)

Issue 45's second half. The model is issue 45's 30M Llama shape (6 layers, d_model 384, grouped-query attention 6/2,
intermediate 1024, vocabulary 32000, untied head), random weights built by transformers' ``LlamaConfig`` and saved
with ``save_pretrained``, loaded by both libraries (``LlamaForCausalLM`` with its default attention, sdpa, and our
``TransformerLM.from_pretrained``), float32 on the CPU: the same weights on both sides.

* **prefill**: a 512-token prompt, batch 1, into an empty cache, to the next token's logits (as
  ``benchmarks/generate_vs_transformers.py``: theirs ``logits_to_keep=1``, ours ``next_token_log_probs``).
* **training step**: batch 16 x 128, forward, cross-entropy over the logits, backward, AdamW step, gradients cleared
  (``set_to_none``). Ours runs with every contract checked at every call (the default outside ``Trainer``'s
  ``checks="first"``). Both sides use the same optimizer in each compared pair: torch's ``AdamW`` with
  ``fused=True`` (transformers' ``Trainer`` default, ``adamw_torch_fused``) and torch's default ``AdamW``
  (a for-loop on the CPU). Rows "checks off" and "foreach" give the contracts' and the optimizer's share.
* **matmul peak**: every matrix product of one training step (forward: ``x @ W.T`` of each projection and the head;
  backward: the input's and the weight's gradients), as ``torch.mm`` on float32 tensors of the model's shapes with
  the same threads, timed in the same rotation of rounds as the steps (the same load): their FLOPs over their
  median time. **MFU** = 6 x parameters x tokens/s
  over that peak (issue 45's definition: every parameter, the input embedding too, although it multiplies nothing);
  ``mfu_matmul_parameters`` counts only the parameters in matrix products (stricter, also stated). Attention's own
  products (scores, values: about 2 % of the FLOPs at 128 positions) are not in either count.

Rounds alternate the variants (order rotated); medians and the median of per-round ratios (above 1: we are faster).
Goals (issue 45): prefill >= 1.1x, training step >= 1.05x transformers, MFU > 0.6; anything compiled below 60 s.
Writes ``benchmarks/results/train_roofline.json`` (command, versions, date, load average before and after). Figures
for the record come from an idle machine; under load they are provisional.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import transformer as T

ROOT = Path(__file__).resolve().parents[1]
#: (hidden, layers, heads, key/value heads, intermediate, vocabulary)
SIZES = {
    "30M": dict(hidden=384, layers=6, heads=6, kv_heads=2, ffn=1024, vocab=32000),
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=1000),
}
PRODUCTS = "matrix products of one step (the peak)"
GOALS = {"prefill": 1.1, "training step": 1.05, "mfu": 0.6, "compile_s": 60.0}


def _sibling(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def linear_shapes(size: dict) -> list[tuple[int, int]]:
    """(in, out) of every matrix product of one forward: per layer q, k, v, o, gate, up, down; then the head."""
    head_dim = size["hidden"] // size["heads"]
    h, kv, f = size["hidden"], size["kv_heads"] * head_dim, size["ffn"]
    layer = [(h, h), (h, kv), (h, kv), (h, h), (h, f), (h, f), (f, h)]
    return layer * size["layers"] + [(h, size["vocab"])]


def step_products(size: dict, tokens: int):
    """(a function running every float32 matrix product of one training step of ``tokens`` tokens once: forward
    ``x W^T``, backward ``dy W`` and ``dy^T x`` of each projection and the head; their FLOPs)."""
    g = torch.Generator().manual_seed(0)
    operands, flops = {}, 0
    for i, o in linear_shapes(size):
        if (i, o) not in operands:
            x, w, dy = (torch.randn(a, b, generator=g) for a, b in ((tokens, i), (o, i), (tokens, o)))
            operands[i, o] = ((x, w.t()), (dy, w), (dy.t(), x))
        flops += 6 * tokens * i * o
    shapes = linear_shapes(size)

    def run():
        for shape in shapes:
            for a, b in operands[shape]:
                torch.mm(a, b)

    return run, flops


def matmul_peak(size: dict, tokens: int, repeats: int) -> dict:
    """FLOP/s of :func:`step_products`, the best of ``repeats`` runs."""
    run, flops = step_products(size, tokens)
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return peak_record(flops, best)


def peak_record(flops: float, seconds: float) -> dict:
    return {"flops_per_step": flops, "seconds_per_step": seconds, "flop_per_s": flops / seconds}


def train_step(model, x, y, ours: bool, *, fused: bool | None, foreach: bool | None = None, checks: bool = True):
    """One step: logits, cross-entropy, backward, AdamW, zero_grad(set_to_none=True)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused, foreach=foreach)
    forward = model.logits if ours else (lambda tokens: model(input_ids=tokens).logits)

    def step():
        with T.checks(checks) if ours else _nothing():
            logits = forward(x)
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def measure(variants: dict, rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each variant over ``rounds`` rounds, the order rotated each round (one warm-up each)."""
    for fn in variants.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            variants[name]()
            times[name].append(time.perf_counter() - start)
    return times


def ratio(base: list[float], ours: list[float]) -> float:
    """The median of per-round ratios base / ours (above 1: ``ours`` is faster)."""
    return statistics.median(b / o for b, o in zip(base, ours, strict=True))


def profile_step(fn, top: int) -> list[dict]:
    """The operators (aten and our Python functions' record_function ranges) taking the most self time in one call."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:top]
    return [{"op": e.key, "calls": e.count, "self_ms": round(e.self_cpu_time_total / 1e3, 2)} for e in events]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a dry run: tiny size, short inputs, one round")
    p.add_argument("--size", default="30M", choices=sorted(SIZES))
    p.add_argument("--prefill", type=int, default=512)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--length", type=int, default=128)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--profile", action="store_true", help="profile one training step of each side")
    p.add_argument("--compile", action="store_true", help="add our step with the model under torch.compile")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "train_roofline.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.size, args.rounds, args.prefill, args.batch, args.length = "tiny", 1, 32, 2, 16
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    pairs = _sibling("generate_vs_transformers")
    size = SIZES[args.size]
    tokens = args.batch * args.length
    load_before = os.getloadavg()
    rows, notes = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / args.size
        params = pairs.write_llama(folder, size, max(args.prefill, args.length))
        ours, theirs = pairs.load_pair(folder)
        matmul_params = sum(i * o for i, o in linear_shapes(size))
        g = torch.Generator().manual_seed(1)
        prompt = torch.randint(0, size["vocab"], (1, args.prefill), generator=g)
        with torch.no_grad():
            prefill = {"ours": pairs._prefill(ours, prompt, True), "theirs": pairs._prefill(theirs, prompt, False)}
            error = (prefill["ours"]() - torch.log_softmax(prefill["theirs"](), -1)).abs().max().item()
            times = measure(prefill, args.rounds)
        rows.append(_row("prefill", times, "theirs", "ours", GOALS["prefill"]) | {"max_log_prob_difference": error})
        x = torch.randint(0, size["vocab"], (args.batch, args.length + 1), generator=g)
        x, y = x[:, :-1], x[:, 1:]
        ours_t, theirs_t = (m.train() for m in pairs.load_pair(folder))
        first = {"ours": train_step(ours_t, x, y, True, fused=True)().item(),
                 "theirs": train_step(theirs_t, x, y, False, fused=True)().item()}  # fmt: skip
        notes["first_step_loss"] = first
        steps = {
            "theirs, AdamW fused": train_step(theirs_t, x, y, False, fused=True),
            "ours, AdamW fused": train_step(ours_t, x, y, True, fused=True),
            "theirs, AdamW default": train_step(theirs_t, x, y, False, fused=None),
            "ours, AdamW default": train_step(ours_t, x, y, True, fused=None),
            "ours, AdamW foreach": train_step(ours_t, x, y, True, fused=None, foreach=True),
            "ours, AdamW fused, checks off": train_step(ours_t, x, y, True, fused=True, checks=False),
        }
        if args.compile:
            compiled = pairs.load_pair(folder)[0].train()
            compiled.logits = torch.compile(compiled.logits)
            step = train_step(compiled, x, y, True, fused=True)
            start = time.perf_counter()
            step()
            notes["compile_s"] = round(time.perf_counter() - start, 1)
            steps["ours, AdamW fused, compiled"] = step
        # the peak is timed in the same rotation as the steps: the same load, the same threads
        products, flops = step_products(size, tokens)
        times = measure(steps | {PRODUCTS: products}, args.rounds)
        peak = peak_record(flops, statistics.median(times[PRODUCTS]))
        peak["best_seconds_per_step"] = min(times[PRODUCTS])
        for who in steps:
            if who.startswith("ours") and who != PRODUCTS:
                base = "theirs, AdamW default" if "default" in who else "theirs, AdamW fused"
                goal = GOALS["training step"] if who in ("ours, AdamW fused", "ours, AdamW default") else None
                rows.append(_row("training step", times, base, who, goal))
        for who in ("theirs, AdamW fused", "theirs, AdamW default"):
            rows.append(_row("training step", times, who, who, None))
        for row in rows:
            if row["case"] == "training step":
                tokens_per_s = tokens / (row["ours_ms"] / 1e3)
                row["tokens_per_s"] = round(tokens_per_s, 1)
                row["mfu"] = round(6 * params * tokens_per_s / peak["flop_per_s"], 3)
                row["mfu_matmul_parameters"] = round(6 * matmul_params * tokens_per_s / peak["flop_per_s"], 3)
        profiles = {}
        if args.profile:
            for who in ("ours, AdamW fused", "theirs, AdamW fused"):
                profiles[who] = profile_step(steps[who], 20)
    load_after = os.getloadavg()
    _print(rows, peak, params, notes, profiles, transformers.__version__, load_before, load_after)
    result = {
        "benchmark": "prefill and training step at the matmul roofline: ours vs transformers LlamaForCausalLM",
        "command": "python benchmarks/train_roofline.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "setup": {k: v for k, v in vars(args).items() if k != "json"} | {"shape": size},
        "parameters": params,
        "matmul_parameters": matmul_params,
        "matmul_peak": {k: round(v, 4) if isinstance(v, float) else v for k, v in peak.items()},
        "goals": GOALS,
        "rows": rows,
        "notes": notes,
        "profile": profiles or None,
        "device": f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "load_average_before": [round(v, 2) for v in load_before],
        "load_average_after": [round(v, 2) for v in load_after],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return result


def _row(case: str, times: dict, base: str, who: str, goal: float | None) -> dict:
    return {
        "case": case,
        "variant": who,
        "against": base,
        "ours_ms": round(1e3 * statistics.median(times[who]), 2),
        "theirs_ms": round(1e3 * statistics.median(times[base]), 2),
        "speed": round(ratio(times[base], times[who]), 3),
        "goal": goal,
        "times_ms": [round(1e3 * t, 2) for t in times[who]],
    }


def _print(rows, peak, params, notes, profiles, version, before, after) -> None:
    print(
        f"ours vs transformers {version} (same weights, float32, CPU), {torch.get_num_threads()} threads, torch "
        f"{torch.__version__}, load average {before[0]:.2f} -> {after[0]:.2f}; {params / 1e6:.1f}M parameters; "
        f"matmul peak {peak['flop_per_s'] / 1e9:.1f} GFLOP/s ({1e3 * peak['seconds_per_step']:.1f} ms of products a "
        "step)"
    )
    print(f"{'case':14s} | {'variant':30s} | {'median':>10s} | {'against':>10s} | {'speed':>6s} | goal | MFU")
    for r in rows:
        label = r["against"]
        goal = "" if r["goal"] is None else f"{r['goal']:.2f} " + ("met" if r["speed"] >= r["goal"] else "MISSED")
        mfu = f"{r['mfu']:.2f} ({r['mfu_matmul_parameters']:.2f})" if "mfu" in r else ""
        print(
            f"{r['case']:14s} | {r['variant']:30s} | {r['ours_ms']:7.1f} ms | {r['theirs_ms']:7.1f} ms | "
            f"{r['speed']:5.2f}x | {goal:10s} | {mfu} vs {label}"
        )
    if "compile_s" in notes:
        print(f"compile (first compiled step): {notes['compile_s']} s (goal < {GOALS['compile_s']:.0f} s)")
    for who, ops in profiles.items():
        print(f"profile, {who}: " + "; ".join(f"{o['op']} {o['self_ms']} ms x{o['calls']}" for o in ops[:12]))


if __name__ == "__main__":
    main()
