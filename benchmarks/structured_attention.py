"""Documents, a sliding window, softcap and ALiBi on the CPU: the torch backend's dense forms against the reference
and against torch's ``flex_attention`` (a ``BlockMask`` and a ``score_mod``, run without torch.compile).

The question it answers (issue 29): should the torch backend build a dense mask or call ``flex_attention``? One
packed batch (documents of varied lengths, causal, a window), float32; each variant's median over alternating rounds,
forward only and forward + backward (``flex_attention`` has no backward on the CPU: recorded as such). Every variant
is first checked against the reference. The load average is recorded: a shared machine's load moves every figure.

    python benchmarks/structured_attention.py --out benchmarks/results/structured_attention_cpu.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
import warnings
from pathlib import Path

import torch

from transformer.backends import alibi_slopes, run_heads
from transformer.masks import AttentionMask


def _packed_batch(batch: int, seq: int, generator: torch.Generator) -> torch.Tensor:
    """Document ids (batch, seq): lengths drawn from 1 to seq / 2, as a packed corpus of varied documents."""
    rows = []
    for _ in range(batch):
        lengths, total = [], 0
        while total < seq:
            n = int(torch.randint(1, seq // 2 + 1, (1,), generator=generator))
            lengths.append(min(n, seq - total))
            total += lengths[-1]
        rows.append(torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths)))
    return torch.stack(rows)


def _flex(q, k, v, documents, window_left, softcap, slopes):
    """flex_attention with the same mask (a BlockMask) and modifiers (a score_mod), or None where torch lacks it."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    k_len = k.size(-2)

    def keep(b, h, i, j):
        return (documents[b, i] == documents[b, j]) & (j <= i) & (j >= i - window_left)

    def modify(score, b, h, i, j):
        if softcap is not None:
            score = softcap * torch.tanh(score / softcap)
        if slopes is not None:
            score = score - slopes[h] * (i - j).abs()
        return score

    block = create_block_mask(keep, q.size(0), None, q.size(-2), k_len, device="cpu")
    return lambda: flex_attention(q, k, v, score_mod=modify, block_mask=block)


def _median_ms(fn, rounds: int) -> float:
    fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _timed(name, q, k, v, mask, documents, window, modifiers, want, rounds) -> dict:
    """One variant: checked against the reference ``want``, then timed forward, and forward + backward."""
    grads = [t.clone().requires_grad_(True) for t in (q, k, v)]
    if name == "flex_attention":
        softcap, slopes = modifiers.get("softcap"), modifiers.get("alibi_slopes")
        call = _flex(q, k, v, documents, window - 1, softcap, slopes)
        if call is None:
            return {}
        trained = _flex(*grads, documents, window - 1, softcap, slopes)

        def step():
            trained().sum().backward()

    else:

        def call():
            return run_heads(name, q, k, v, mask, 0.0, **modifiers)

        def step():
            run_heads(name, *grads, mask, 0.0, **modifiers).sum().backward()

    torch.testing.assert_close(call(), want, atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        forward = _median_ms(call, rounds)
    try:
        both = round(_median_ms(step, rounds), 2)
    except NotImplementedError as error:  # flex_attention on the CPU: "does not support backward on CPU"
        both = f"no backward: {error}"
    return {
        "modifiers": ", ".join(modifiers) or "none",
        "variant": name,
        "forward_ms": round(forward, 2),
        "forward_backward_ms": both,
    }


def run(batch: int, heads: int, seq: int, head_dim: int, window: int, rounds: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    documents = _packed_batch(batch, seq, g)
    mask = AttentionMask(causal=True, documents=documents, window_left=window - 1)
    q, k, v = (torch.randn(batch, heads, seq, head_dim, generator=g) for _ in range(3))
    rows = []
    for modifiers in ({}, {"softcap": 30.0}, {"alibi_slopes": alibi_slopes(heads)}):
        want = run_heads("eager", q, k, v, mask, 0.0, **modifiers)
        for name in ("eager", "torch", "flex_attention"):
            row = _timed(name, q, k, v, mask, documents, window, modifiers, want, rounds)
            if row:
                rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/structured_attention_cpu.json"))
    opts = parser.parse_args(argv)
    torch.set_num_threads(opts.threads)
    warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
    load_before = os.getloadavg()
    rows = run(opts.batch, opts.heads, opts.length, opts.head_dim, opts.window, opts.rounds)
    load_after = os.getloadavg()
    print(
        f"median of {opts.rounds} rounds, CPU, {opts.threads} thread(s), torch {torch.__version__}, float32, "
        f"batch {opts.batch}, {opts.heads} heads, {opts.length} positions, head dim {opts.head_dim}, packed "
        f"documents, causal, window {opts.window}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after"
    )
    print(f"{'modifiers':<14}{'variant':<16}{'forward (ms)':>14}{'forward+backward (ms)':>26}")
    for r in rows:
        both = r["forward_backward_ms"]
        print(f"{r['modifiers']:<14}{r['variant']:<16}{r['forward_ms']:>14}  {str(both)[:40]:>24}")
    record = {
        "date": datetime.date.today().isoformat(),
        "command": "python benchmarks/structured_attention.py",
        "machine": {
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": opts.threads,
            "load_average_1_5_15_before": [round(x, 2) for x in load_before],
            "load_average_1_5_15_after": [round(x, 2) for x in load_after],
        },
        "shape": {
            "batch": opts.batch,
            "heads": opts.heads,
            "length": opts.length,
            "head_dim": opts.head_dim,
            "window": opts.window,
            "dtype": "float32",
        },
        "rounds": opts.rounds,
        "rows": rows,
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {opts.out}")
    return record


if __name__ == "__main__":
    main()
