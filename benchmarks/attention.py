"""Attention benchmark: our Triton kernel vs F.scaled_dot_product_attention backends vs eager, on CUDA.

Forward and backward TFLOP/s and peak memory, bf16, batch 4, head_dim 64 (32 heads) and 128 (16 heads),
lengths 1k/4k/16k, causal and not. FLOPs: 4*B*H*N^2*D, x0.5 causal, x2.5 for the backward.
Prints a table, writes JSON (device, versions, date), a Markdown table for docs/ (.md) with the issue's
targets checked, and a PNG plot when matplotlib is importable.

    python benchmarks/attention.py [--out benchmarks/results/attention] [--lengths 1024 4096 16384] [--quick]
"""

import argparse
import datetime
import json
import math
import pathlib
import platform
import sys

import torch
import torch.nn.functional as F


def flops(batch, heads, n, head_dim, causal, mode):
    f = 4 * batch * heads * n * n * head_dim * (0.5 if causal else 1.0)
    return f * 2.5 if mode == "bwd" else f


def eager(q, k, v, causal):
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[2]
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    return scores.softmax(-1) @ v


def providers():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from transformer.kernels import flash_attention

    def sdpa(backend):
        def run(q, k, v, causal):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return run

    return {
        "triton (ours)": lambda q, k, v, causal: flash_attention(q, k, v, causal=causal),
        "sdpa flash": sdpa(SDPBackend.FLASH_ATTENTION),
        "sdpa cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
        "sdpa efficient": sdpa(SDPBackend.EFFICIENT_ATTENTION),
        "eager": eager,
    }


def eager_fits(batch, heads, n, dtype_bytes=2):
    """Eager keeps a few N x N score tensors alive (scores, probs, their grads): skip it when they would not fit."""
    need = 4 * batch * heads * n * n * dtype_bytes
    return need < 0.6 * torch.cuda.get_device_properties(0).total_memory


def measure(fn, batch, heads, n, head_dim, causal, mode):
    from triton.testing import do_bench

    q, k, v = (
        torch.randn(batch, heads, n, head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    if mode == "fwd":
        with torch.no_grad():
            ms = do_bench(lambda: fn(q, k, v, causal))
    else:
        out = fn(q, k, v, causal)
        grad = torch.randn_like(out)
        ms = do_bench(lambda: out.backward(grad, retain_graph=True), grad_to_none=[q, k, v])
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    return {"ms": ms, "tflops": flops(batch, heads, n, head_dim, causal, mode) / ms * 1e-9, "peak_mib": peak}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/attention", help="path prefix for .json and .png")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--quick", action="store_true", help="only the first length and head_dim 64")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("benchmarks/attention.py needs a CUDA GPU (torch.cuda.is_available() is False); nothing was measured.")
    import triton

    batch = 4
    shapes = [(64, 32), (128, 16)] if not args.quick else [(64, 32)]
    lengths = args.lengths if not args.quick else args.lengths[:1]
    rows = []
    for head_dim, heads in shapes:
        for n in lengths:
            for causal in (False, True):
                for name, fn in providers().items():
                    if name == "eager" and not eager_fits(batch, heads, n):
                        continue
                    for mode in ("fwd", "bwd"):
                        try:
                            result = measure(fn, batch, heads, n, head_dim, causal, mode)
                        except (RuntimeError, torch.cuda.OutOfMemoryError) as error:  # a backend may refuse
                            result = {"error": str(error).splitlines()[0][:120]}
                        row = {
                            "provider": name,
                            "head_dim": head_dim,
                            "heads": heads,
                            "n": n,
                            "causal": causal,
                            "mode": mode,
                            **result,
                        }
                        rows.append(row)
                        cells = (
                            f"{row['tflops']:8.1f} TFLOP/s {row['ms']:9.3f} ms {row['peak_mib']:9.1f} MiB"
                            if "tflops" in row
                            else f"skipped: {row['error']}"
                        )
                        print(f"{name:15s} D={head_dim:3d} N={n:6d} causal={causal!s:5s} {mode}  {cells}", flush=True)
    meta = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "batch": batch,
        "dtype": "bfloat16",
        "flops": "4*B*H*N^2*D, x0.5 causal, x2.5 backward",
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    print(f"wrote {out.with_suffix('.json')}")
    report = markdown_table(rows, meta) + "\n" + "\n".join(target_lines(rows)) + "\n"
    out.with_suffix(".md").write_text(report)
    print(report)
    print(f"wrote {out.with_suffix('.md')}")
    plot(rows, out.with_suffix(".png"), meta)


def _tflops(rows, provider, head_dim, n, causal, mode):
    for r in rows:
        if (r["provider"], r["head_dim"], r["n"], r["causal"], r["mode"]) == (provider, head_dim, n, causal, mode):
            return r.get("tflops")
    return None


def markdown_table(rows, meta):
    """One row per (head_dim, length, causal, direction); TFLOP/s per provider, peak MiB of ours."""
    providers_seen = list(dict.fromkeys(r["provider"] for r in rows))
    header = "| D | N | causal | pass | " + " | ".join(providers_seen) + " | ours: peak MiB |"
    lines = [
        f"{meta['device']}, torch {meta['torch']}, triton {meta['triton']}, {meta['dtype']}, "
        f"batch {meta['batch']}, {meta['date']}; TFLOP/s ({meta['flops']})",
        "",
        header,
        "|" + "---|" * (len(providers_seen) + 5),
    ]
    for head_dim, n, causal, mode in dict.fromkeys((r["head_dim"], r["n"], r["causal"], r["mode"]) for r in rows):
        cells = []
        for name in providers_seen:
            value = _tflops(rows, name, head_dim, n, causal, mode)
            cells.append("-" if value is None else f"{value:.1f}")
        ours = next(
            (
                r
                for r in rows
                if (r["provider"], r["head_dim"], r["n"], r["causal"], r["mode"])
                == ("triton (ours)", head_dim, n, causal, mode)
            ),
            {},
        )
        peak = f"{ours['peak_mib']:.0f}" if "peak_mib" in ours else "-"
        lines.append(f"| {head_dim} | {n} | {causal} | {mode} | " + " | ".join(cells) + f" | {peak} |")
    return "\n".join(lines) + "\n"


def target_lines(rows):
    """The issue's targets: forward >= SDPA cuDNN for N >= 4k; backward >= SDPA flash everywhere."""
    lines = []
    for head_dim, n, causal, mode in dict.fromkeys((r["head_dim"], r["n"], r["causal"], r["mode"]) for r in rows):
        if mode == "fwd" and n < 4096:
            continue
        rival = "sdpa cudnn" if mode == "fwd" else "sdpa flash"
        ours = _tflops(rows, "triton (ours)", head_dim, n, causal, mode)
        theirs = _tflops(rows, rival, head_dim, n, causal, mode)
        if ours is None or theirs is None:
            verdict = "not measured"
        else:
            verdict = f"{'met' if ours >= theirs else 'MISSED'} ({ours / theirs:.2f}x)"
        lines.append(f"- target D={head_dim} N={n} causal={causal} {mode}: ours >= {rival}: {verdict}")
    return lines


def plot(rows, path, meta):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not importable: no plot")
        return
    combos = sorted({(r["head_dim"], r["causal"], r["mode"]) for r in rows})
    fig, axes = plt.subplots(1, len(combos), figsize=(4 * len(combos), 3.5), squeeze=False)
    for ax, (head_dim, causal, mode) in zip(axes[0], combos, strict=True):
        for name in dict.fromkeys(r["provider"] for r in rows):
            pts = [
                (r["n"], r["tflops"])
                for r in rows
                if "tflops" in r
                and r["provider"] == name
                and (r["head_dim"], r["causal"], r["mode"]) == (head_dim, causal, mode)
            ]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", label=name)
        ax.set(
            xscale="log",
            xlabel="sequence length",
            ylabel="TFLOP/s",
            title=f"D={head_dim} {'causal' if causal else 'full'} {mode}",
        )
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{meta['device']}, torch {meta['torch']}, triton {meta['triton']}, bf16, batch {meta['batch']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
