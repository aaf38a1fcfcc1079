"""Block skipping on a realistic packed batch: the fraction of (query block, key block) tiles the fused kernel's loops
visit, with documents and sliding windows against causal alone.

The batch: ``--rows`` rows of ``--row-len`` tokens, each packing ``--docs`` documents whose lengths are drawn from a
lognormal distribution (sigma ``--sigma``) and scaled to fill the row (each at least one token). The visited tiles
are those of the kernels' own loop ranges (``key_blocks`` for the forward and dQ kernels, ``query_blocks`` for dK/dV,
run for every block by ``transformer.kernels._visits.visited``, under the Triton interpreter: only the range
arithmetic runs, no attention); "needed" counts the tiles that hold at least one allowed score (from the dense mask).
Counting, not timing: the figures do not depend on the machine.

    python benchmarks/kernel_block_skipping.py --json benchmarks/results/kernel_block_skipping.json
"""

import argparse
import datetime
import json
import os
import platform

os.environ.setdefault("TRITON_INTERPRET", "1")  # the range helpers run on the CPU

import torch  # noqa: E402
import triton  # noqa: E402

from transformer.kernels._visits import visited  # noqa: E402


def packed_documents(rows: int, row_len: int, docs: int, sigma: float, seed: int) -> torch.Tensor:
    """(rows, row_len) int64 document ids: ``docs`` documents per row, lognormal lengths scaled to the row."""
    gen = torch.Generator().manual_seed(seed)
    ids = []
    for _ in range(rows):
        weights = torch.exp(sigma * torch.randn(docs, generator=gen, dtype=torch.float64))
        lengths = (weights / weights.sum() * (row_len - docs)).floor().long() + 1
        lengths[-1] += row_len - int(lengths.sum())
        ids.append(torch.repeat_interleave(torch.arange(docs), lengths))
    return torch.stack(ids)


def needed_tiles(rows, length, block_m, block_n, documents=None, window_left=None, causal=False) -> torch.Tensor:
    """Bool (rows, query blocks, key blocks): tiles with at least one allowed score (q_len == k_len)."""
    i = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    allowed = torch.ones(rows, length, length, dtype=torch.bool)
    if documents is not None:
        allowed &= documents[:, :, None] == documents[:, None, :]
    if window_left is not None:
        allowed &= j >= i - window_left
    if causal:
        allowed &= j <= i
    tiles = allowed.view(rows, length // block_m, block_m, length // block_n, block_n)
    return tiles.any(4).any(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--row-len", type=int, default=2048)
    parser.add_argument("--docs", type=int, default=8)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--window", type=int, default=512, help="Mistral-style causal window W (window_left = W - 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    documents = packed_documents(args.rows, args.row_len, args.docs, args.sigma, args.seed)
    n, window_left = args.row_len, args.window - 1
    settings = {
        "causal": dict(causal=True),
        "causal + documents": dict(causal=True, documents=documents),
        "documents (bidirectional)": dict(documents=documents),
        f"causal + window {args.window}": dict(causal=True, window_left=window_left),
        f"causal + documents + window {args.window}": dict(causal=True, documents=documents, window_left=window_left),
    }
    results = []
    print(f"{'setting':<42} {'blocks':>8} {'fwd/dQ':>8} {'dK/dV':>8} {'needed':>8}")
    for block_m, block_n in ((64, 64), (128, 64), (128, 128)):
        total = args.rows * triton.cdiv(n, block_m) * triton.cdiv(n, block_n)
        for name, structure in settings.items():
            forward, key_major = (
                visited(args.rows, n, n, block_m, block_n, key_major=major, **structure) for major in (False, True)
            )
            needed = needed_tiles(args.rows, n, block_m, block_n, **structure)
            row = dict(setting=name, block_m=block_m, block_n=block_n, tiles=total)
            row.update(forward_dq=int(forward.sum()) / total, dkdv=int(key_major.sum()) / total)
            row.update(needed=int(needed.sum()) / total)
            results.append(row)
            print(
                f"{name:<42} {block_m:>4}x{block_n:<3} {row['forward_dq']:>8.3f} {row['dkdv']:>8.3f} "
                f"{row['needed']:>8.3f}"
            )
    lengths = [torch.unique_consecutive(r, return_counts=True)[1].tolist() for r in documents]
    record = dict(
        command="python benchmarks/kernel_block_skipping.py " + " ".join(f"--{k.replace('_', '-')} {v}"
                                                                        for k, v in vars(args).items() if k != "json"),
        date=datetime.date.today().isoformat(),
        machine=platform.machine(),
        torch=torch.__version__,
        triton=triton.__version__,
        note="fractions of all (query block, key block) tiles; counted by the kernels' range helpers (interpreter)",
        document_lengths=lengths,
        results=results,
    )  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
