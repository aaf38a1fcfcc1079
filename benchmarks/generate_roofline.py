"""Generation against the weight-streaming roofline and transformers, eager and compiled (issue 45).

    python benchmarks/generate_roofline.py                       # 30M and 120M, batch 1 and 8, 256 new tokens
    python benchmarks/generate_roofline.py --new-tokens 64 --threads 1   # short runs, one thread
    python benchmarks/generate_roofline.py --quick               # a dry run at a tiny size (seconds)

For each size a Llama-shaped model with random weights is built by transformers (``LlamaConfig``: grouped-query
attention, vocabulary 32000, RoPE, RMSNorm, SwiGLU, untied head), saved, and loaded by both libraries, float32 on
the CPU (benchmarks/generate_vs_transformers.py's ``write_llama`` and ``load_pair``). A 128-token prompt is continued
by N new tokens, greedy, with the contracts checked as by default (``checks="first"``), by:

* **ours, eager**: ``generate(model, prompt, N)`` (the default: ``compile=False``, ``weight_layout="auto"``: the
  float32 weights whose products it speeds up stored transposed for the request, :mod:`transformer.lm.decode_layout`);
* **ours, eager, as loaded**: ``generate(..., weight_layout="as_loaded")``: the weights as loaded (the default before
  the relayout; its two copies, counted in the other variants' decode time, are left out);
* **ours, compiled**: ``generate(..., compile=True)``: the static cache and the compiled decode step;
* **transformers**: ``model.generate`` with its defaults (``DynamicCache``, sdpa);
* **transformers, static + compile**: ``cache_implementation="static"`` and ``CompileConfig(mode="default",
  _compile_all_devices=True)`` (transformers compiles the forward itself on CUDA only unless asked).

The compile time (first call minus a warm call) is recorded apart from the speed. Tokens/s counts the decode steps
only: ``batch * (N - 1) / (t(N) - t(1))``, ``t(1)`` being the prefill and one step. **The roofline**: one decode step
reads every weight but the token embeddings once, so its best speed is the bandwidth over those bytes; the bandwidth
is what a matrix product of a float32 matrix of the same bytes with ``batch`` vectors reaches here, measured in the
same run with the same threads (the best of a few runs): ``roofline tok/s = batch * bandwidth / bytes``. The goals:
>= 85% of the roofline, >= 1.3x transformers' default, >= 1.0x transformers' static cache + compile, compile < 60 s.
Writes ``benchmarks/results/generate_roofline.json`` (command, device, versions, date, threads, load average before
and after: figures under load are provisional).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from transformer.lm.generation import generate

ROOT = Path(__file__).resolve().parents[1]
#: Llama-shaped sizes: (hidden, layers, heads, key/value heads, intermediate, vocabulary).
SIZES = {
    "30M": dict(hidden=384, layers=6, heads=6, kv_heads=2, ffn=1024, vocab=32000),
    "120M": dict(hidden=768, layers=12, heads=12, kv_heads=4, ffn=2048, vocab=32000),
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=1000),
}
GOALS = {"roofline_fraction": 0.85, "vs_transformers": 1.3, "vs_transformers_static_compiled": 1.0, "compile_s": 60}
VARIANTS = ("ours, eager", "ours, eager, as loaded", "ours, compiled", "transformers", "transformers, static + compile")


def _sibling(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def streamed_bytes(model) -> int:
    """The bytes one decode step reads: every parameter but the token embeddings (one row of them is read)."""
    table = model.embed[0].lut.weight
    total = sum(p.numel() * p.element_size() for p in model.parameters() if p is not table)
    return total + table.size(1) * table.element_size()


def matvec_bandwidth(nbytes: int, batch: int, repeats: int = 7) -> float:
    """Bytes per second a product of a float32 matrix of ``nbytes`` with ``batch`` vectors reaches (best run)."""
    width = 1024
    weight = torch.randn(max(1, nbytes // (4 * width)), width)
    x = torch.randn(batch, width)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.nn.functional.linear(x, weight)
        best = min(best, time.perf_counter() - start)
    return weight.numel() * 4 / best


def _variant(name: str, ours, theirs, prompt, new: int):
    """A function running one generation of ``new`` tokens with variant ``name``."""
    import transformers

    if name == "ours, eager":
        return lambda n=new: generate(ours, prompt, n)
    if name == "ours, eager, as loaded":
        return lambda n=new: generate(ours, prompt, n, weight_layout="as_loaded")
    if name == "ours, compiled":
        return lambda n=new: generate(ours, prompt, n, compile=True)
    mask = torch.ones_like(prompt)
    options = dict(do_sample=False, eos_token_id=None, pad_token_id=0, attention_mask=mask)
    if name == "transformers, static + compile":
        config = transformers.CompileConfig(mode="default", fullgraph=False)
        config._compile_all_devices = True  # a private switch: transformers compiles on CUDA only otherwise
        options |= dict(cache_implementation="static", compile_config=config)
    return lambda n=new: theirs.generate(prompt, max_new_tokens=n, min_new_tokens=n, **options)


def _timed(fn, *args) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def run_size(name: str, args, workdir: Path) -> list[dict]:
    """Every variant at every batch size of one model size, with its roofline."""
    gvt = _sibling("generate_vs_transformers")
    size = SIZES[name]
    folder = workdir / name
    gvt.write_llama(folder, size, args.prompt + args.new_tokens + 8)
    ours, theirs = gvt.load_pair(folder)
    nbytes = streamed_bytes(ours)
    rows = []
    g = torch.Generator().manual_seed(1)
    for batch in args.batches:
        prompt = torch.randint(0, size["vocab"], (batch, args.prompt), generator=g)
        bandwidth = matvec_bandwidth(nbytes, batch)
        roofline = batch * bandwidth / nbytes
        fns = {v: _variant(v, ours, theirs, prompt, args.new_tokens) for v in VARIANTS}
        first, outputs = {}, {}
        with torch.no_grad():
            for v, fn in fns.items():  # the first call: compiles (the compiled variants); the tokens compared
                first[v], outputs[v] = _timed(fn)
            times = {v: [] for v in VARIANTS}
            short = {v: [] for v in VARIANTS}
            for r in range(args.rounds):
                for v in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                    times[v].append(_timed(fns[v])[0])
                    short[v].append(_timed(fns[v], 1)[0])
        reference = outputs["ours, eager"]
        for v in VARIANTS:
            full, one = statistics.median(times[v]), statistics.median(short[v])
            rate = batch * (args.new_tokens - 1) / max(full - one, 1e-9)
            rows.append(
                {
                    "size": name,
                    "batch": batch,
                    "variant": v,
                    "generate_ms": round(1e3 * full, 1),
                    "prefill_and_one_step_ms": round(1e3 * one, 1),
                    "decode_tokens_per_s": round(rate, 1),
                    "roofline_tokens_per_s": round(roofline, 1),
                    "roofline_fraction": round(rate / roofline, 3),
                    "compile_s": round(max(first[v] - full, 0.0), 1) if "compile" in v else None,
                    "tokens_equal_ours_eager": bool(torch.equal(outputs[v], reference)),
                    "times_ms": [round(1e3 * t, 1) for t in times[v]],
                }
            )
        by = {r["variant"]: r for r in rows[-len(VARIANTS) :]}
        for r in rows[-len(VARIANTS) :]:
            r["vs_transformers"] = round(r["decode_tokens_per_s"] / by["transformers"]["decode_tokens_per_s"], 3)
            r["vs_transformers_static_compiled"] = round(
                r["decode_tokens_per_s"] / by["transformers, static + compile"]["decode_tokens_per_s"], 3
            )
            r["streamed_bytes"], r["matvec_gb_per_s"] = nbytes, round(bandwidth / 1e9, 2)
    return rows


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a dry run: the tiny size, 8 new tokens, one round")
    p.add_argument("--sizes", default="30M,120M", help="comma-separated, of " + ", ".join(SIZES))
    p.add_argument("--batches", default="1,8", help="batch sizes, comma-separated")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "generate_roofline.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.rounds, args.prompt, args.new_tokens = "tiny", 1, 16, 8
    args.sizes = args.sizes.split(",")
    args.batches = [int(b) for b in args.batches.split(",")]
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    gvt = _sibling("generate_vs_transformers")
    load_before = os.getloadavg()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.sizes:
            rows += run_size(name, args, Path(tmp))
    load_after = os.getloadavg()
    print(
        f"generation, {args.new_tokens} new tokens after {args.prompt}, greedy, float32 CPU, {torch.get_num_threads()} "
        f"threads, torch {torch.__version__}, transformers {transformers.__version__}, load average "
        f"{load_before[0]:.2f} -> {load_after[0]:.2f}"
    )
    print(f"{'size':5s} | {'b':>2s} | {'variant':30s} | {'tok/s':>7s} | roofline | vs tf | vs tf static | compile")
    for r in rows:
        compile_s = "" if r["compile_s"] is None else f"{r['compile_s']:.1f} s"
        print(
            f"{r['size']:5s} | {r['batch']:2d} | {r['variant']:30s} | {r['decode_tokens_per_s']:7.1f} | "
            f"{100 * r['roofline_fraction']:6.1f}% | {r['vs_transformers']:5.2f} | "
            f"{r['vs_transformers_static_compiled']:12.2f} | {compile_s}"
            + ("" if r["tokens_equal_ours_eager"] else "  (tokens differ from ours, eager)")
        )
    result = {
        "benchmark": "generation against the weight-streaming roofline and transformers, eager and compiled",
        "command": "python benchmarks/generate_roofline.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "setup": {k: v for k, v in vars(args).items() if k != "json"}
        | {"sizes_detail": {n: SIZES[n] for n in args.sizes}},
        "goals": GOALS,
        "rows": rows,
        **gvt.run_record(load_before, load_after),
    }
    return gvt.write_result(args.json, result)


if __name__ == "__main__":
    main()
