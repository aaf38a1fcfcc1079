"""Mutants of the head-dim split (issue 27: head_dim 80 = 64 + 16, 96 = 64 + 32; kernels/_pieces.py and the pieces'
columns and dots in kernels/_common.py); they run tests/kernels/test_split_head_dim.py. Each was planted by hand and
caught on 2026-11-27 before it was written down here."""

from .base import Mutant

SPLIT_TESTS = ("tests/kernels/test_split_head_dim.py",)


def KS(id: str, file: str, old: str, new: str, what: str) -> Mutant:
    return Mutant(id, file, ((old, new),), what, SPLIT_TESTS)


MUTANTS = [
    KS(
        "kernel-split-score-one-piece",
        "kernels/_common.py",
        "    if len(a) == 2:\n        s = tl.dot(a[1]",
        "    if len(a) == 3:\n        s = tl.dot(a[1]",
        "q k^T (and dO v^T) over the first head-dim piece only",
    ),
    KS(
        "kernel-split-products-skip-second-piece",
        "kernels/_pieces.py",
        "out = (first, acc[1] + tl.dot(x, b[1], input_precision=PRECISION))",
        "out = (first, acc[1])",
        "P V, dS K, P^T dO, dS^T Q never add into the second piece",
    ),
    KS(
        "kernel-split-pointer-load-wrong-columns",
        "kernels/_pieces.py",
        "tile = (first, load_rows(src, offs, cols[1][0], s_row, s_d, n_rows, cols[1][1]))",
        "tile = (first, load_rows(src, offs, cols[0][0], s_row, s_d, n_rows, cols[0][1]))",
        "pointer loads: the second piece reads the first piece's columns",
    ),
    KS(
        "kernel-split-descriptor-load-at-column-0",
        "kernels/_pieces.py",
        "tile = (first, src[1].load([start, cols[0][0].shape[0]]))",
        "tile = (first, src[1].load([start, 0]))",
        "tensor-descriptor loads: the second piece read from column 0",
    ),
    KS(
        "kernel-split-store-first-piece-only",
        "kernels/_pieces.py",
        "    for i in tl.static_range(len(cols)):",
        "    for i in tl.static_range(1):",
        "out, dq, dk, dv: the second piece is never written",
    ),
    KS(
        "kernel-split-scale-first-piece-only",
        "kernels/_pieces.py",
        "        out = (tile[0] * factor, tile[1] * factor)",
        "        out = (tile[0] * factor, tile[1])",
        "the softmax scale (dq, dk) and dropout's 1 / (1 - p) miss the second piece",
    ),
    KS(
        "kernel-split-normalise-first-piece-only",
        "kernels/_pieces.py",
        "        out = (tile[0] / divisor, tile[1] / divisor)",
        "        out = (tile[0] / divisor, tile[1])",
        "the forward's division by the softmax sum misses the second piece",
    ),
    KS(
        "kernel-split-second-piece-columns",
        "kernels/_common.py",
        "        offs_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)",
        "        offs_d2 = BLOCK_D2 + tl.arange(0, BLOCK_D2)",
        "the second piece's columns start at BLOCK_D2 instead of BLOCK_D",
    ),
]
