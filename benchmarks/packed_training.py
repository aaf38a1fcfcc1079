"""Training tokens per second, packed rows against padded rows, on documents whose lengths vary as web text's do.

    python benchmarks/packed_training.py            # 30 steps each: a few minutes on an idle 2-core machine
    python benchmarks/packed_training.py --quick    # a seconds-long dry run (tiny sizes, 3 steps)

The corpus is generated here, seeded: document lengths are lognormal with sigma 1.0 (the shape of web text, whose
document lengths spread over orders of magnitude with a long right tail) and a median of 1/8 of the row (a
2048-token context sees documents of a few hundred tokens), at least 2 tokens, cut to the row's length; tokens follow
a seeded random bigram chain (each token has 8 likely successors), so the loss has something to learn.

Both runs see the same documents in the same steps: each step takes the next documents that fill ``--rows`` rows of
``--row-len`` positions when packed (next-fit; a row's unused tail is a document of its own whose labels are
ignored). Packed: those rows, ``AttentionMask(documents=...)``, positions restarting at each document. Padded: one
document per row, padded to the step's longest document, causal with key lengths. Same model (the same initial
weights), same AdamW, the same loss (summed cross-entropy over the same labels, divided by their count), dropout 0:
the two loss curves are the same function of the same data, so they agree to rounding. Steps alternate between the
two runs so that both see the same machine load; contracts are checked on the first step only (as ``train lm``'s
Trainer does), which is left out of the timing. Tokens per second counts the labels trained (the same in both).

Goal (issue 29): packed at least 1.5x padded. Writes ``benchmarks/results/packed_training.json`` (command, device,
versions, date, load average before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import transformer as T
from transformer.lm import LMConfig, build_lm

ROOT = Path(__file__).resolve().parents[1]
IGNORE = -100
SUCCESSORS = 8


def make_corpus(count: int, row_len: int, vocab: int, seed: int) -> list[np.ndarray]:
    """``count`` documents: lognormal lengths (sigma 1.0, median row_len / 8, in [2, row_len]); bigram-chain tokens
    in [1, vocab) (0 is the padding id)."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.round(rng.lognormal(np.log(row_len / 8), 1.0, count)), 2, row_len).astype(int)
    successors = rng.integers(1, vocab, (vocab, SUCCESSORS))
    documents = []
    for n in lengths:
        doc = np.empty(n, dtype=np.int64)
        doc[0] = rng.integers(1, vocab)
        picks = rng.integers(0, SUCCESSORS, n)
        for t in range(1, n):
            doc[t] = successors[doc[t - 1], picks[t]]
        documents.append(doc)
    return documents


def step_groups(documents: list[np.ndarray], rows: int, row_len: int, steps: int) -> list[list[list[np.ndarray]]]:
    """For each step, its packed rows (lists of documents): next-fit into ``rows`` rows of ``row_len`` positions."""
    groups, it = [], iter(documents)
    pending = next(it)
    for _ in range(steps):
        packed: list[list[np.ndarray]] = [[]]
        while True:
            used = sum(len(d) for d in packed[-1])
            if used + len(pending) > row_len:
                if len(packed) == rows:
                    break
                packed.append([])
            packed[-1].append(pending)
            pending = next(it)
        groups.append(packed)
    return groups


def packed_batch(rows: list[list[np.ndarray]], row_len: int) -> tuple[torch.Tensor, T.AttentionMask, torch.Tensor]:
    """Tokens (rows, row_len), the documents' mask, labels (the next token within a document, else ignored)."""
    tokens = np.zeros((len(rows), row_len), dtype=np.int64)
    labels = np.full((len(rows), row_len), IGNORE, dtype=np.int64)
    documents = np.zeros((len(rows), row_len), dtype=np.int64)
    for r, docs in enumerate(rows):
        start = 0
        for d, doc in enumerate(docs):
            n = len(doc)
            tokens[r, start : start + n] = doc
            labels[r, start : start + n - 1] = doc[1:]
            documents[r, start : start + n] = d
            start += n
        documents[r, start:] = len(docs)  # the unused tail: a document of its own, no labels
    mask = T.AttentionMask(documents=torch.from_numpy(documents))
    return torch.from_numpy(tokens), mask, torch.from_numpy(labels)


def padded_batch(rows: list[list[np.ndarray]]) -> tuple[torch.Tensor, T.AttentionMask, torch.Tensor]:
    """One document per row, padded (id 0) to the longest: causal with key and query lengths."""
    docs = [doc for row in rows for doc in row]
    width = max(len(doc) for doc in docs)
    tokens = np.zeros((len(docs), width), dtype=np.int64)
    labels = np.full((len(docs), width), IGNORE, dtype=np.int64)
    for r, doc in enumerate(docs):
        tokens[r, : len(doc)] = doc
        labels[r, : len(doc) - 1] = doc[1:]
    lengths = torch.tensor([len(doc) for doc in docs])
    mask = T.AttentionMask(key_lengths=lengths, query_lengths=lengths)
    return torch.from_numpy(tokens), mask, torch.from_numpy(labels)


def make_run(config: LMConfig, lr: float):
    torch.manual_seed(0)
    model = build_lm(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)

    def step(tokens: torch.Tensor, mask: T.AttentionMask, labels: torch.Tensor) -> float:
        logits = model.logits(tokens, mask)
        count = int((labels != IGNORE).sum())
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE, reduction="sum") / count
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return step


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rows", type=int, default=16, help="packed rows per step (default: %(default)s)")
    p.add_argument("--row-len", type=int, default=256, help="positions per row (default: %(default)s)")
    p.add_argument("--quick", action="store_true", help="tiny sizes, 3 steps: a dry run")
    p.add_argument("--seed", type=int, default=0, help="the corpus's seed (default: %(default)s)")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "packed_training.json"))
    args = p.parse_args(argv)
    steps, rows, row_len = (3, 2, 32) if args.quick else (args.steps, args.rows, args.row_len)
    sizes = dict(vocab=64, d_model=16, n_layers=1, n_heads=2, d_ff=32) if args.quick else dict(
        vocab=512, d_model=128, n_layers=2, n_heads=4, d_ff=512
    )  # fmt: skip
    config = LMConfig(**sizes, max_len=row_len, dropout=0.0, attention_dropout=0.0, pad_id=0,
                      positional_encoding="learned")  # fmt: skip
    documents = make_corpus(steps * rows * 40, row_len, sizes["vocab"], args.seed)
    groups = step_groups(documents, rows, row_len, steps)
    runs = {"packed": make_run(config, 1e-3), "padded": make_run(config, 1e-3)}
    batches = {"packed": [packed_batch(g, row_len) for g in groups], "padded": [padded_batch(g) for g in groups]}
    losses: dict[str, list[float]] = {name: [] for name in runs}
    times: dict[str, list[float]] = {name: [] for name in runs}
    load_before = os.getloadavg()
    for i in range(steps):
        for name in ("packed", "padded") if i % 2 == 0 else ("padded", "packed"):
            start = time.perf_counter()
            with T.checks(i == 0):  # contracts checked on the first step only, as train lm's Trainer does
                losses[name].append(runs[name](*batches[name][i]))
            times[name].append(time.perf_counter() - start)
    load_after = os.getloadavg()
    labels = [int((b[2] != IGNORE).sum()) for b in batches["packed"]]
    assert labels == [int((b[2] != IGNORE).sum()) for b in batches["padded"]]
    timed = slice(1, None) if steps > 1 else slice(None)  # the first step of each warms up
    tokens_per_s = {name: sum(labels[timed]) / sum(times[name][timed]) for name in runs}
    speedup = tokens_per_s["packed"] / tokens_per_s["padded"]
    max_diff = max(abs(a - b) for a, b in zip(losses["packed"], losses["padded"], strict=True))
    positions = {
        "packed": sum(b[0].numel() for b in batches["packed"]),
        "padded": sum(b[0].numel() for b in batches["padded"]),
    }
    lengths = np.array([len(d) for g in groups for row in g for d in row])
    print(
        f"packed vs padded training, {steps} steps of {rows} packed rows x {row_len}, d_model {sizes['d_model']}, "
        f"{sizes['n_layers']} layers, {len(lengths)} documents (lengths median {np.median(lengths):.0f}, mean "
        f"{lengths.mean():.1f}, max {lengths.max()}), {torch.get_num_threads()} threads, torch {torch.__version__}, "
        f"load average {load_before[0]:.2f} -> {load_after[0]:.2f}"
    )
    print(f"{'run':7s} | {'positions run':>13s} | {'tokens/s':>9s} | {'final loss':>10s}")
    for name in runs:
        print(f"{name:7s} | {positions[name]:13,d} | {tokens_per_s[name]:9,.0f} | {losses[name][-1]:10.4f}")
    print(f"speed-up packed/padded: {speedup:.2f}x (goal >= 1.5x); loss curves' max difference {max_diff:.2e}")
    result = {
        "benchmark": "packed vs padded language-model training",
        "command": " ".join(["python", "benchmarks/packed_training.py", *(sys.argv[1:] if argv is None else argv)]),
        "device": "cpu",
        "corpus": {
            "documents": int(len(lengths)),
            "lengths": "lognormal, sigma 1.0, median row_len / 8, clipped to [2, row_len]; seeded bigram tokens",
            "seed": args.seed,
            "median": float(np.median(lengths)),
            "mean": round(float(lengths.mean()), 2),
            "max": int(lengths.max()),
        },
        "setup": sizes | {"steps": steps, "rows": rows, "row_len": row_len, "optimizer": "AdamW lr 1e-3"},
        "labels_per_step": labels,
        "positions_run": positions,
        "tokens_per_second": {k: round(v, 1) for k, v in tokens_per_s.items()},
        "median_step_ms": {k: round(1e3 * statistics.median(v), 1) for k, v in times.items()},
        "speedup_packed_over_padded": round(speedup, 3),
        "losses": {k: [round(x, 6) for x in v] for k, v in losses.items()},
        "loss_max_abs_difference": max_diff,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "date": time.strftime("%Y-%m-%d"),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
