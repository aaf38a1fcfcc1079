"""What the contracts cost in a compiled model: forward time with checks on and off under torch.compile.

Model: make_model(V, V, N=2, d_model=128, d_ff=512, h=8), eval mode, no_grad, CPU, batch 32 x length 64,
torch.compile(fullgraph=True) with the default backend (inductor), static and dynamic shapes, 1 and 2 threads.
Target: checks on cost at most 2% more than checks off. Prints a table, writes JSON.

One compiled model serves both settings: the switch is part of the graph's guards, so checks on and checks off are
two cache entries of the same compiled function, and the rounds alternate between them. Also measured: Dynamo's
trace time with checks on and off (backend "eager", from a reset each time: the checker runs while Dynamo traces,
and inductor then compiles the same graph either way), the whole first compile with inductor (checks on), and in eager
mode the cost of a checked call with checks off (the switch alone).

    python benchmarks/contracts_compile.py --out benchmarks/results/contracts_compile.json
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
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


def _first_call(model, args) -> float:
    start = time.perf_counter()
    model(*args)
    return time.perf_counter() - start


def _switch_cost_ns(repeats: int = 200_000) -> dict[str, float]:
    """Eager, checks off: extra time of a checked call over the bare function (ns), for the ContextVar switch and
    for the module-global boolean it replaced (rebuilt here for comparison)."""
    from transformer.contracts import Float, Tensor, checked

    def bare(x: Float[Tensor, "batch d_model"]) -> Float[Tensor, "batch d_model"]:
        return x

    enabled = False

    def global_flag(*args, **kwargs):  # the former switch: `if _enabled and not is_compiling(): ...`
        if enabled and not torch.compiler.is_compiling():
            raise AssertionError("unreachable")
        return bare(*args, **kwargs)

    wrapped = checked(bare)
    x = torch.zeros(1, 1)
    best = {}
    with T.checks(False):
        for name, fn in (("bare", bare), ("contextvar switch", wrapped), ("global boolean", global_flag)):
            times = []
            for _ in range(7):
                start = time.perf_counter()
                for _ in range(repeats):
                    fn(x)
                times.append(time.perf_counter() - start)
            best[name] = min(times) / repeats
    return {name: (best[name] - best["bare"]) * 1e9 for name in ("contextvar switch", "global boolean")}


def _checked_calls_per_forward(model, args) -> int:
    """How many checked calls one eager forward makes: each reads the switch once (counted here, checks off)."""
    from transformer.contracts.switch import CHECKS

    count = 0
    reader = type(CHECKS.reader)  # the checks switch's own reader class (the backend choice has another)
    real = reader.value

    def counting(switch):
        nonlocal count
        count += 1
        return real.__get__(switch)

    reader.value = property(counting)
    try:
        with T.checks(False), torch.no_grad():
            model(*args)
    finally:
        reader.value = real
    return count


def measure(opts, threads: int, dynamic: bool) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = T.make_model(opts.vocab, opts.vocab, N=2, d_model=128, d_ff=512, h=8).eval()
    src = torch.randint(1, opts.vocab, (opts.batch, opts.length))
    tgt = torch.randint(1, opts.vocab, (opts.batch, opts.length))
    args = (src, tgt, T.padding_mask(src, 0), T.target_mask(tgt, 0))
    trace_s = {}
    with torch.no_grad():
        for enabled in (False, True, False, True):  # Dynamo's trace time alone, twice each, the lower kept
            torch._dynamo.reset()
            with T.checks(enabled):
                took = _first_call(torch.compile(model, fullgraph=True, dynamic=dynamic, backend="eager"), args)
            trace_s[enabled] = min(trace_s.get(enabled, took), took)
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, dynamic=dynamic)
    with torch.no_grad():
        with T.checks(True):
            compile_s = _first_call(compiled, args)
        with T.checks(False):
            compiled(*args)  # the second cache entry
        with T.checks(True):
            torch.testing.assert_close(compiled(*args), model(*args), rtol=1e-4, atol=1e-4)
        for enabled in (True, False):  # warm-up
            with T.checks(enabled):
                _time_forward(compiled, args, 2)
        times = {True: [], False: []}
        for round_ in range(opts.rounds):  # on/off pairs, the order swapped every round
            for enabled in (True, False) if round_ % 2 == 0 else (False, True):
                with T.checks(enabled):
                    times[enabled].append(_time_forward(compiled, args, opts.repeats))
        with T.checks(True):
            eager_ms = statistics.median(_time_forward(model, args, 1) for _ in range(3)) * 1e3
    on, off = statistics.median(times[True]), statistics.median(times[False])
    paired = statistics.median(a / b for a, b in zip(times[True], times[False], strict=True))
    return {
        "threads": threads,
        "shapes": "dynamic" if dynamic else "static",
        "checks_on_ms": on * 1e3,
        "checks_off_ms": off * 1e3,
        "overhead_percent": (on / off - 1) * 100,
        "paired_overhead_percent": (paired - 1) * 100,
        "checks_on_min_ms": min(times[True]) * 1e3,
        "checks_off_min_ms": min(times[False]) * 1e3,
        "min_overhead_percent": (min(times[True]) / min(times[False]) - 1) * 100,
        "trace_checks_on_s": trace_s[True],
        "trace_checks_off_s": trace_s[False],
        "first_compile_inductor_checks_on_s": compile_s,
        "eager_checks_on_ms": eager_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=30, help="alternating on/off rounds")
    parser.add_argument("--repeats", type=int, default=2, help="forwards per round and setting")
    parser.add_argument("--threads", default="1,2", help="torch thread counts, comma-separated")
    parser.add_argument("--shapes", default="static,dynamic", help="static and/or dynamic, comma-separated")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/contracts_compile.json"))
    parser.add_argument(
        "--update",
        action="store_true",
        help="keep the rows of --out that this run does not measure (e.g. re-measure 2 threads only, "
        "when other jobs disturbed them); each row records its own date and load",
    )
    opts = parser.parse_args()

    load_before = os.getloadavg()
    rows = []
    for threads in (int(t) for t in opts.threads.split(",")):
        for shapes in opts.shapes.split(","):
            row_load = os.getloadavg()[0]
            rows.append(measure(opts, threads, shapes == "dynamic"))
            r = rows[-1]
            r["load_average_1min"] = {"before": row_load, "after": os.getloadavg()[0]}
            r["date"] = datetime.date.today().isoformat()
            print(
                f"  measured {threads} thread(s), {shapes}: {r['overhead_percent']:+.2f}% "
                f"(paired {r['paired_overhead_percent']:+.2f}%)",
                flush=True,
            )
    switch = _switch_cost_ns()
    model = T.make_model(opts.vocab, opts.vocab, N=2, d_model=128, d_ff=512, h=8).eval()
    src = torch.randint(1, opts.vocab, (opts.batch, opts.length))
    args = (src, src, T.padding_mask(src, 0), T.target_mask(src, 0))
    calls = _checked_calls_per_forward(model, args)
    eager_off_ms = min(r["eager_checks_on_ms"] for r in rows)  # an upper bound of the unchecked eager forward
    switch_share = calls * switch["contextvar switch"] * 1e-6 / eager_off_ms * 100
    load_after = os.getloadavg()

    print(
        f"make_model({opts.vocab}, {opts.vocab}, N=2, d_model=128, d_ff=512, h=8), batch {opts.batch} x length "
        f"{opts.length}, torch.compile(fullgraph=True), inductor, no_grad; load average {load_before[0]:.2f} "
        f"before, {load_after[0]:.2f} after"
    )
    print("overhead: of the medians / median of the paired on/off ratios / of the fastest runs")
    print(
        f"{'threads':>7} {'shapes':>8} {'checks on (ms)':>15} {'checks off (ms)':>16} {'overhead':>24} "
        f"{'trace on (s)':>13} {'trace off (s)':>14} {'compile (s)':>12} {'eager, on (ms)':>15}"
    )
    for r in rows:
        overheads = (
            f"{r['overhead_percent']:+.2f}/{r['paired_overhead_percent']:+.2f}/{r['min_overhead_percent']:+.2f}%"
        )
        print(
            f"{r['threads']:>7} {r['shapes']:>8} {r['checks_on_ms']:>15.2f} {r['checks_off_ms']:>16.2f} "
            f"{overheads:>24} {r['trace_checks_on_s']:>13.1f} {r['trace_checks_off_s']:>14.1f} "
            f"{r['first_compile_inductor_checks_on_s']:>12.1f} {r['eager_checks_on_ms']:>15.2f}"
        )
    print(
        f"eager, checks off: {switch['contextvar switch']:.0f} ns per checked call (ContextVar switch), "
        f"{switch['global boolean']:.0f} ns with the former global boolean; {calls} checked calls per forward: "
        f"{switch_share:.4f}% of an eager forward"
    )

    record = {
        "benchmark": "contracts_compile",
        "date": datetime.date.today().isoformat(),
        "device": f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "load_average": {"before": load_before, "after": load_after},
        "python": platform.python_version(),
        "torch": torch.__version__,
        "jaxtyping": importlib.metadata.version("jaxtyping"),
        "beartype": importlib.metadata.version("beartype"),
        "settings": vars(opts) | {"out": str(opts.out), "backend": "inductor", "fullgraph": True, "no_grad": True},
        "results": rows,
        "eager_checks_off_ns_per_call": switch,
        "checked_calls_per_forward": calls,
        "switch_percent_of_eager_forward": switch_share,
    }
    if opts.update and opts.out.exists():
        measured = {(r["threads"], r["shapes"]) for r in rows}
        kept = [r for r in json.loads(opts.out.read_text())["results"] if (r["threads"], r["shapes"]) not in measured]
        record["results"] = sorted(kept + rows, key=lambda r: (r["threads"], r["shapes"]))
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
