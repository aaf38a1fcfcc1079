"""What the run-time contracts cost: per checked call (before and after the eager fast path) and per forward pass.

    python benchmarks/contracts_overhead.py                  # about 3 minutes on an idle 2-core machine
    python benchmarks/contracts_overhead.py --quick          # about 40 s
    python benchmarks/contracts_overhead.py --threads 1 --out benchmarks/results/contracts_overhead_1thread.json

1. **Per call.** For checked functions of the package on tiny inputs (so that the tensor work is small and the
   contract shows): the bare function (``fn.unchecked``), the checked call with checks off, with checks on (the fast
   path, "after"), and the same call checked by jaxtyping + beartype as every call was before the fast path
   ("before": ``fn._jaxtyping``, the checker that now writes the report of a failing call). A contract's cost is the
   checked call's time minus the bare function's (calls nested inside are checked either way, so this is the cost of
   the outer contract alone). Each measurement is the fastest of many short batches, the variants interleaved, which
   is what survives on a shared machine. Target (issue 22): at most 20 us per checked call.
2. **Per forward.** ``make_model(1000, 1000, N=2, d_model=128)`` (d_ff 2048, 8 heads), batch 32 x 64, inference
   and a training forward, checks on against off in alternating rounds (medians), and how many contract probes one
   forward makes.

Prints tables, writes JSON (with the load average before and after) that docs/benchmarks.md's plots are drawn from.
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

import transformer as T
from transformer.contracts import checked
from transformer.contracts.grammar import resolved_signature
from transformer.layers import residual
from transformer.lm import build_lm
from transformer.lm.config import LMConfig


def _calls() -> dict[str, tuple]:
    """name -> (checked function, args, kwargs): the package's checked calls on tiny inputs."""
    torch.manual_seed(0)
    d, batch, seq = 16, 2, 3
    x = torch.randn(batch, seq, d)
    mha = T.MultiHeadedAttention(4, d, dropout=0.0).eval()
    lm = build_lm(
        LMConfig(vocab=50, n_layers=1, d_model=d, d_ff=32, n_heads=4, dropout=0.0, attention_dropout=0.0, max_len=16)
    ).eval()
    layer = lm.layers[0]
    model = T.make_model(50, 50, N=1, d_model=d, d_ff=32, h=4, dropout=0.0).eval()
    tokens = torch.randint(1, 50, (batch, seq))
    mask = torch.ones(batch, 1, seq, dtype=torch.bool)
    norm, ff = T.LayerNorm(d), T.PositionwiseFeedForward(d, 32, 0.0)
    return {
        "residual": (residual, (x, x), {}),
        "LayerNorm.forward": (T.LayerNorm.forward, (norm, x), {}),
        "PositionwiseFeedForward.forward": (T.PositionwiseFeedForward.forward, (ff, x), {}),
        "Generator.forward": (T.Generator.forward, (model.generator, x), {}),
        "MultiHeadedAttention.forward": (T.MultiHeadedAttention.forward, (mha, x, x, x, mask), {}),
        "DecoderOnlyLayer.forward": (type(layer).forward, (layer, x, T.AttentionMask(causal=True)), {}),
        "TransformerLM.forward": (T.TransformerLM.forward, (lm, tokens), {}),
        "EncoderDecoder.forward": (
            T.EncoderDecoder.forward,
            (model, tokens, tokens, mask, T.target_mask(tokens, 0)),
            {},
        ),
    }


def _fastest(fn, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def _stub(wrapper, out):
    """A function with ``wrapper``'s signature and annotations that returns ``out`` at once, and its checked form: the
    contract alone, without the tensor work of the body (which, on a shared machine, drowns microseconds)."""
    fn = wrapper.__wrapped__

    def stub(*args, **kwargs):
        return out

    stub.__signature__ = resolved_signature(fn)
    stub.__name__, stub.__qualname__, stub.__module__ = fn.__name__, fn.__qualname__, fn.__module__
    return stub, checked(stub)


def _best_of(variants: dict, batches: int, batch_us: float) -> dict[str, float]:
    """The fastest time per call of each variant (``name: (function, checks on or off)``): batches of about
    ``batch_us`` (short enough that many run without being preempted), the variants interleaved and their order
    rotated each round."""

    def timed(v, n):
        fn, enabled = variants[v]
        T.set_checks(enabled)
        try:
            return _fastest(fn, n)
        finally:
            T.set_checks(True)

    for v in variants:  # warm-up (and the fast checker's generation, at its first call)
        timed(v, 20)
    calls = {v: max(1, min(500, round(batch_us * 1e-6 / timed(v, 20)))) for v in variants}
    best = {v: float("inf") for v in variants}
    names = list(variants)
    for r in range(batches):
        for v in names[r % len(names) :] + names[: r % len(names)]:
            best[v] = min(best[v], timed(v, calls[v]))
    return {v: t * 1e6 for v, t in best.items()}


def per_call(batches: int, batch_us: float) -> dict[str, dict[str, float]]:
    """On one thread: these tensors are too small for a second one, which only adds waiting for it (on a loaded
    machine, a lot)."""
    results = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with torch.no_grad():
        for name, (wrapper, args, kwargs) in _calls().items():
            out = wrapper(*args, **kwargs)
            stub, checked_stub = _stub(wrapper, out)

            contract = _best_of(
                {
                    "bare": (lambda: stub(*args, **kwargs), True),  # noqa: B023 (timed before the loop moves on)
                    "checks on": (lambda: checked_stub(*args, **kwargs), True),  # noqa: B023 (timed before the loop moves on)
                    "checks off": (lambda: checked_stub(*args, **kwargs), False),  # noqa: B023 (timed before the loop moves on)
                    "jaxtyping": (lambda: checked_stub._jaxtyping(args, kwargs), True),  # noqa: B023 (timed before the loop moves on)
                },
                batches,
                batch_us,
            )
            whole = _best_of(
                {
                    "checks on": (lambda: wrapper(*args, **kwargs), True),  # noqa: B023 (timed before the loop moves on)
                    "checks off": (lambda: wrapper(*args, **kwargs), False),  # noqa: B023 (timed before the loop moves on)
                },
                batches,
                batch_us,
            )
            results[name] = {
                "contract_after_us": round(contract["checks on"] - contract["bare"], 2),
                "contract_before_us": round(contract["jaxtyping"] - contract["bare"], 2),
                "switch_off_us": round(contract["checks off"] - contract["bare"], 2),
                "call_checks_on_us": round(whole["checks on"], 1),
                "call_checks_off_us": round(whole["checks off"], 1),
            }
    torch.set_num_threads(threads)
    return results


def _checked_calls_per_forward(model, args) -> int:
    """How many contract probes one forward makes: each checked call (and each token-id guard) asks once whether
    torch.compile is tracing, so counting those questions counts them."""
    count = 0

    def counting_is_compiling():
        nonlocal count
        count += 1
        return False

    real = torch.compiler.is_compiling
    torch.compiler.is_compiling = counting_is_compiling
    try:
        with T.checks(True), torch.no_grad():
            model(*args)
    finally:
        torch.compiler.is_compiling = real
    return count


def per_forward(rounds: int, repeats: int, vocab: int = 1000, batch: int = 32, length: int = 64) -> dict:
    torch.manual_seed(0)
    model = T.make_model(vocab, vocab, N=2, d_model=128).eval()
    src = torch.randint(1, vocab, (batch, length))
    tgt = torch.randint(1, vocab, (batch, length))
    args = (src, tgt, T.padding_mask(src, 0), T.target_mask(tgt, 0))
    results = {}
    for mode, grad in (("inference (no_grad)", False), ("training forward", True)):
        model.train(grad)
        times = {True: [], False: []}
        with torch.set_grad_enabled(grad):
            for enabled in (True, False):  # warm-up
                with T.checks(enabled):
                    _fastest(lambda: model(*args), 2)
            for r in range(rounds):
                for enabled in (True, False) if r % 2 == 0 else (False, True):
                    with T.checks(enabled):
                        times[enabled].append(_fastest(lambda: model(*args), repeats))
        on, off = statistics.median(times[True]), statistics.median(times[False])
        paired = statistics.median(a / b for a, b in zip(times[True], times[False], strict=True))
        results[mode] = {
            "checks_on_ms": on * 1e3,
            "checks_off_ms": off * 1e3,
            "overhead_percent": (on / off - 1) * 100,
            "paired_overhead_percent": (paired - 1) * 100,
        }
    results["probes"] = {"contract_probes_per_forward": _checked_calls_per_forward(model, args)}
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer batches and rounds (about 40 s)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/contracts_overhead.json"))
    opts = parser.parse_args(argv)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    batches, batch_us, rounds, repeats = (40, 300, 4, 2) if opts.quick else (150, 300, 12, 3)
    load_before = os.getloadavg()
    calls = per_call(batches, batch_us)
    forward = per_forward(rounds, repeats)
    load_after = os.getloadavg()

    print(
        f"per checked call (tiny inputs, one thread; fastest of {batches} batches of about {batch_us} us), load "
        f"{load_before[0]:.2f} -> {load_after[0]:.2f}"
    )
    print(
        f"{'call':32s} | {'contract: before':>16s} {'after':>7s} {'switch off':>10s} | {'whole call: on':>14s} "
        f"{'off':>8s}  (us)"
    )
    for name, r in calls.items():
        print(
            f"{name:32s} | {r['contract_before_us']:16.1f} {r['contract_after_us']:7.2f} {r['switch_off_us']:10.2f} | "
            f"{r['call_checks_on_us']:14.1f} {r['call_checks_off_us']:8.1f}"
        )
    worst = max(r["contract_after_us"] for r in calls.values())
    print(f"target: at most 20 us per checked call: {'met' if worst <= 20 else 'MISSED'} (worst {worst:.2f} us)")
    print(f"\nforward of make_model(1000, 1000, N=2, d_model=128), batch 32 x 64, {rounds} alternating rounds")
    for mode in ("inference (no_grad)", "training forward"):
        r = forward[mode]
        print(
            f"{mode:22s} on {r['checks_on_ms']:8.2f} ms  off {r['checks_off_ms']:8.2f} ms  overhead "
            f"{r['overhead_percent']:+.2f}% (paired {r['paired_overhead_percent']:+.2f}%)"
        )
    print(f"contract probes per forward: {forward['probes']['contract_probes_per_forward']}")

    record = {
        "benchmark": "contracts_overhead",
        "date": datetime.date.today().isoformat(),
        "device": f"CPU: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "settings": {
            "threads": opts.threads,
            "quick": opts.quick,
            "batches": batches,
            "batch_us": batch_us,
            "rounds": rounds,
            "repeats": repeats,
            "out": str(opts.out),
        },
        "per_call": calls,
        "results": {k: v for k, v in forward.items() if k != "probes"} | {"probes": forward["probes"]},
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {opts.out}")
    return record


if __name__ == "__main__":
    main()
