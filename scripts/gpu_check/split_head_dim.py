"""gpu_check: head_dim 80 and 96, the padded 128-wide tile against the split into power-of-two pieces (issue 27;
kernels/_head_dim.py): each one's error against float64 (out, dq, dk, dv), then the forward and forward + backward
times of both, on pinned configs (``TYPED_TRANSFORMER_KERNEL_CONFIGS=first``, set by scripts/gpu_check.sh: the first
config that fits, no autotuning), bf16. A stage of its own in scripts/gpu_check.sh; one JSON line per result.

    python scripts/gpu_check/split_head_dim.py --out results.jsonl                                 # on a GPU
    TRITON_INTERPRET=1 python scripts/gpu_check/split_head_dim.py --out r.jsonl --dry-run           # CPU, short
"""

import argparse
import sys

import checks  # scripts/gpu_check/checks.py: record, bench, the float64 reference, the device
import torch

try:
    from transformer.kernels import _head_dim
except ImportError:  # the repository root on the path (checks.py put it there)
    from kernels import _head_dim

HEAD_DIMS = (80, 96)
MODES = ("padded", "split")


def accuracy(dtype, head_dim, causal):
    """out, dq, dk, dv of both tiles against float64 (q_len != k_len); the split passes when its error is at most
    twice the padded tile's plus two units in the last place."""
    q_len, k_len = (37, 45) if checks.DRY else (500, 700)
    gen = torch.Generator(device=checks.DEVICE).manual_seed(head_dim)
    q, grad = (torch.randn(2, 4, q_len, head_dim, device=checks.DEVICE, generator=gen, dtype=dtype) for _ in "qg")
    k, v = (torch.randn(2, 4, k_len, head_dim, device=checks.DEVICE, generator=gen, dtype=dtype) for _ in "kv")
    allowed = checks.causal_allowed(q_len, k_len, causal)
    ref = checks.outputs_and_grads(lambda *x: checks.reference(*x, allowed), *(t.double() for t in (q, k, v)), grad)
    errors = {}
    for mode in MODES:
        with _head_dim.forced(mode):
            mine = checks.outputs_and_grads(lambda *x: checks.kernels.flash_attention(*x, causal=causal), q, k, v, grad)
        errors[mode] = [checks.err(m, r) for m, r in zip(mine, ref, strict=True)]
    ok = all(
        s <= 2 * p + checks.floor(dtype, r) for s, p, r in zip(errors["split"], errors["padded"], ref, strict=True)
    )
    return checks.record(
        "head_dim_split_accuracy", dtype=str(dtype), head_dim=head_dim, causal=causal, q_len=q_len, k_len=k_len,
        pieces=_head_dim.pieces(head_dim), errors_out_dq_dk_dv=errors, ok=ok,
    )  # fmt: skip


def timing(dtype, head_dim, causal):
    """Forward and forward + backward milliseconds (and TFLOP/s at the true head_dim) of both tiles."""
    shape = (1, 2, 64, head_dim) if checks.DRY else (4, 16, 4096, head_dim)
    q, k, v = (torch.randn(*shape, device=checks.DEVICE, dtype=dtype, requires_grad=True) for _ in "qkv")
    grad = torch.randn_like(q)
    results = {}
    for mode in MODES:
        with _head_dim.forced(mode):

            def forward():
                return checks.kernels.flash_attention(q, k, v, causal=causal)

            def forward_backward():
                return torch.autograd.grad(forward(), (q, k, v), grad)

            forward_backward()  # compile outside the timing
            fwd, total = checks.bench(forward), checks.bench(forward_backward)
            tile = dict(_head_dim.tile("forward", head_dim))
        sizes = (*shape[:2], shape[2], shape[2], head_dim, causal)
        results[mode] = {
            "fwd_ms": fwd,
            "fwd_bwd_ms": total,
            "fwd_tflops": checks.tflops(*sizes, fwd),
            "bwd_tflops": checks.tflops(*sizes, max(total - fwd, 1e-9), backward=True),
            "tile": tile,
        }
    speedup = {key: results["padded"][key] / results["split"][key] for key in ("fwd_ms", "fwd_bwd_ms")}
    return checks.record(
        "head_dim_split_speed", dtype=str(dtype), shape=list(shape), causal=causal, results=results,
        padded_over_split=speedup,
    )  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="append one JSON line per result here")
    parser.add_argument("--dry-run", action="store_true", help="CPU, interpreter, short lengths")
    args = parser.parse_args(argv)
    checks.OUT, checks.DRY = args.out, args.dry_run
    if args.dry_run:
        checks.DEVICE = "cpu"
    elif not torch.cuda.is_available():
        parser.error("no CUDA device: pass --dry-run (with TRITON_INTERPRET=1) to run on the CPU")
    dtypes = (torch.float32, torch.float16) if args.dry_run else (torch.bfloat16, torch.float16)
    checks.record("stage_start", stage="head_dim_split", dry_run=args.dry_run, pinned=checks._tuning.pinned_configs())
    steps = [lambda d=d, h=h: accuracy(d, h, True) for d in dtypes for h in HEAD_DIMS]
    steps += [lambda h=h, c=c: timing(dtypes[0], h, c) for h in HEAD_DIMS for c in (False, True)]
    for step in steps:  # most important first: the stage's timeout keeps what finished
        try:
            step()
        except Exception as error:
            checks.failed("head_dim_split", error)
    checks.record("stage_end", stage="head_dim_split")
    return 0


if __name__ == "__main__":
    sys.exit(main())
