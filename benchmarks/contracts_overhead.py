"""What the run-time contracts cost: forward time with checks on and off.

Model: make_model(V, V, N=2, d_model=128) (d_ff 2048, 8 heads), CPU, batch 32, length 64.
Target: checks on cost at most 10% more than checks off. Prints a table, writes JSON.

    python benchmarks/contracts_overhead.py --out benchmarks/results/contracts_overhead.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import time
from pathlib import Path

import torch

import transformer as T


def _time_forward(model, args, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        model(*args)
    return (time.perf_counter() - start) / repeats


def _checked_calls_per_forward(model, args) -> int:
    """How many contract probes one forward makes: each checked call, and each value check, asks once
    whether torch.compile is tracing, so counting those questions counts the checks."""
    count = 0

    def counting_torch_is_compiling():
        nonlocal count
        count += 1
        return False

    real = torch.compiler.is_compiling
    torch.compiler.is_compiling = counting_torch_is_compiling
    try:
        with T.checks(True), torch.no_grad():
            model(*args)
    finally:
        torch.compiler.is_compiling = real
    return count


def _off_wrapper_cost_ns(repeats: int = 200_000) -> float:
    """Extra time of a checked function with checks off, over the bare function, in nanoseconds per call."""
    from transformer.contracts import Float, Tensor, checked

    def bare(x: Float[Tensor, "batch d_model"]) -> Float[Tensor, "batch d_model"]:
        return x

    wrapped = checked(bare)
    x = torch.zeros(1, 1)
    with T.checks(False):
        timings = {}
        for name, fn in (("bare", bare), ("wrapped", wrapped)):
            best = float("inf")
            for _ in range(5):
                start = time.perf_counter()
                for _ in range(repeats):
                    fn(x)
                best = min(best, time.perf_counter() - start)
            timings[name] = best / repeats
    return (timings["wrapped"] - timings["bare"]) * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=10, help="alternating on/off rounds")
    parser.add_argument("--repeats", type=int, default=3, help="forwards per round")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: leave torch's default)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/contracts_overhead.json"))
    opts = parser.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)

    torch.manual_seed(0)
    model = T.make_model(opts.vocab, opts.vocab, N=2, d_model=128).eval()
    src = torch.randint(1, opts.vocab, (opts.batch, opts.length))
    tgt = torch.randint(1, opts.vocab, (opts.batch, opts.length))
    args = (src, tgt, T.padding_mask(src, 0), T.target_mask(tgt, 0))

    results = {}
    for mode, grad in (("inference (no_grad)", False), ("training forward", True)):
        model.train(grad)
        times = {True: [], False: []}
        with torch.set_grad_enabled(grad):
            for enabled in (True, False):  # warm-up
                with T.checks(enabled):
                    _time_forward(model, args, 2)
            for _ in range(opts.rounds):
                for enabled in (True, False):
                    with T.checks(enabled):
                        times[enabled].append(_time_forward(model, args, opts.repeats))
        on, off = statistics.median(times[True]), statistics.median(times[False])
        results[mode] = {"checks_on_ms": on * 1e3, "checks_off_ms": off * 1e3, "overhead_percent": (on / off - 1) * 100}

    calls = _checked_calls_per_forward(model, args)
    off_ns = _off_wrapper_cost_ns()
    inference_off_ms = results["inference (no_grad)"]["checks_off_ms"]
    results["checks off, cost of the switch"] = {
        "checked_calls_per_forward": calls,
        "ns_per_call": off_ns,
        "percent_of_forward": calls * off_ns * 1e-6 / inference_off_ms * 100,
    }

    print(f"make_model({opts.vocab}, {opts.vocab}, N=2, d_model=128), batch {opts.batch} x length {opts.length}, "
          f"{torch.get_num_threads()} threads")
    print(f"{'mode':<22}{'checks on (ms)':>16}{'checks off (ms)':>17}{'overhead':>10}")
    for mode, r in list(results.items())[:2]:
        print(f"{mode:<22}{r['checks_on_ms']:>16.2f}{r['checks_off_ms']:>17.2f}{r['overhead_percent']:>9.1f}%")

    off = results["checks off, cost of the switch"]
    print(f"checks off: {off['checked_calls_per_forward']} checked calls per forward x {off['ns_per_call']:.0f} ns "
          f"= {off['percent_of_forward']:.4f}% of an unchecked forward")

    record = {
        "benchmark": "contracts_overhead",
        "date": datetime.date.today().isoformat(),
        "device": f"CPU: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "settings": vars(opts) | {"out": str(opts.out)},
        "results": results,
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
