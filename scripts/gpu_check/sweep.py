"""Randomized comparison of the fused kernel against float64 (issue 32): at least 1,000 cases, forward and backward.

    python scripts/gpu_check/sweep.py --out sweep.jsonl --seconds 140 --workers 6          # on a GPU
    TRITON_INTERPRET=1 python scripts/gpu_check/sweep.py --dry-run --out s.jsonl --cases 12   # CPU, short

Each case draws batch, heads (with GQA groups), q_len and k_len (1..8192, log-uniform, unequal), head_dim (16..256,
with 40, 80 and 96), dtype (bf16, fp16, fp32), a mask kind (none, causal, key_mask, key_lengths, a dense bool mask
of shape (q, k), (batch, 1, q, k) or (batch, heads, q, k)), q/k/v as contiguous (batch, heads, seq, head_dim) or as
transposed views of (batch, seq, heads, head_dim), and, on one case in three, documents, a sliding window, a
softcap and/or ALiBi slopes. The FlashAttention error rule: for out, dq, dk and dv, our max error against the
float64 reference must be at most twice that of the same reference computed in the input dtype (PyTorch ops, as
FlashAttention's tests' ``attention_ref(upcast=False)``) plus a floor at the reference's magnitude (two units in
the last place for 16-bit dtypes, 1e-5 for float32). Where SDPA's cuDNN and FlashAttention-2 backends take the
case (no structure, causal or none), their errors against float64 are recorded beside ours. Dropout is checked by
checks.py (keep rate, seeds, independence).

The references are the test suite's (tests/kernels/attention_reference.py and structure_reference.py, written from
docs/kernels.md's formulas). Kernel configs are pinned (``TYPED_TRANSFORMER_KERNEL_CONFIGS=first`` by the caller)
and ``--per-flags`` shapes are drawn for each draw of the flags, so that cases reuse compiled kernels.
``--workers N`` runs N processes (seeds 0..N-1, compiling in parallel), each appending one JSON line per case to
``--out`` until ``--seconds``; the last line of each worker is its summary.
"""

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "kernels"))
from structure_reference import reference  # noqa: E402  (the tests' float64 reference)

try:
    from transformer import kernels
except ImportError:  # the repository root on the path instead of an installed package
    sys.path.insert(0, ROOT)
    import kernels

HEAD_DIMS = (16, 32, 40, 64, 80, 96, 128, 256)
MASKS = ("none", "causal", "key_mask", "key_lengths", "dense_qk", "dense_b1qk", "dense_bhqk")
MAX_SCORES = 1 << 25  # batch * heads * q_len * k_len: the float64 reference and its backward stay in a few GiB


def draw_flags(rng: random.Random, dry: bool) -> dict:
    """What decides the compiled kernels: head_dim, dtype, mask kind, layout, documents, windows, modifiers."""
    flags = {
        "head_dim": rng.choice(HEAD_DIMS[:4] if dry else HEAD_DIMS),
        "dtype": rng.choice(("float32", "float16") if dry else ("bfloat16", "float16", "float32")),
        "mask": rng.choice(MASKS),
        "layout": rng.choice(("contiguous", "bshd_view")),
        "documents": False,
        "window_left": None,
        "window_right": None,
        "softcap": None,
        "alibi": False,
    }
    if rng.random() < 1 / 3:
        flags["documents"] = rng.random() < 0.5
        if rng.random() < 0.5:
            flags["window_left"] = rng.choice((0, 1, 7, 64, 255))
            flags["window_right"] = rng.choice((None, 0, 16))
        flags["softcap"] = rng.choice((None, None, 20.0, 50.0))
        flags["alibi"] = rng.random() < 0.4
    return flags


def draw_shape(rng: random.Random, dry: bool, documents: bool) -> dict:
    """batch, heads (GQA groups), q_len and k_len (log-uniform in 1..8192, unequal in 7 cases of 10)."""
    top = 96 if dry else 8192
    length = lambda: max(1, min(top, int(math.exp(rng.uniform(0, math.log(top))))))  # noqa: E731
    q_len = length()
    k_len = q_len if rng.random() < 0.3 else length()
    if documents and q_len > k_len:  # documents need q_len <= k_len
        q_len, k_len = k_len, q_len
    kv_heads = rng.choice((1, 2, 4))
    heads = kv_heads * rng.choice((1, 1, 2, 4))
    batch = rng.choice((1, 2, 3))
    while batch * heads * q_len * k_len > MAX_SCORES and (batch > 1 or heads > 1):
        if batch > 1:
            batch -= 1
        elif heads > kv_heads:
            heads //= 2
        else:
            kv_heads = heads = kv_heads // 2
    if batch * heads * q_len * k_len > MAX_SCORES:
        k_len = max(1, MAX_SCORES // (batch * heads * q_len))
        q_len = min(q_len, k_len) if documents else q_len
    return {"batch": batch, "heads": heads, "kv_heads": kv_heads, "q_len": q_len, "k_len": k_len}


def tensors(case: dict, gen: torch.Generator, device: str):
    dtype = getattr(torch, case["dtype"])
    b, h, kvh, q_len, k_len, d = (case[x] for x in ("batch", "heads", "kv_heads", "q_len", "k_len", "head_dim"))

    def make(heads, seq):
        if case["layout"] == "bshd_view":  # a transposed view, as a model's projections give
            return torch.randn(b, seq, heads, d, generator=gen, device=device, dtype=dtype).transpose(1, 2)
        return torch.randn(b, heads, seq, d, generator=gen, device=device, dtype=dtype)

    q, k, v = make(h, q_len), make(kvh, k_len), make(kvh, k_len)
    kw = {"causal": case["mask"] == "causal"}
    if case["mask"] == "key_mask":
        kw["key_mask"] = torch.rand(b, k_len, generator=gen, device=device) < 0.8
    elif case["mask"] == "key_lengths":
        kw["key_lengths"] = torch.randint(0, k_len + 1, (b,), generator=gen, device=device)
    elif case["mask"].startswith("dense"):
        shape = {"dense_qk": (q_len, k_len), "dense_b1qk": (b, 1, q_len, k_len), "dense_bhqk": (b, h, q_len, k_len)}
        kw["mask"] = torch.rand(*shape[case["mask"]], generator=gen, device=device) < 0.7
    if case["documents"]:
        cuts = torch.rand(b, k_len, generator=gen, device=device) < 4 / max(k_len, 1)
        kw["documents"] = torch.cumsum(cuts.long(), dim=1)
    for name in ("window_left", "window_right", "softcap"):
        if case[name] is not None:
            kw[name] = case[name]
    if case["alibi"]:
        kw["alibi_slopes"] = 2.0 ** -torch.arange(1, h + 1, device=device, dtype=torch.float32)
    return q, k, v, kw


def run_reference(q, k, v, kw):
    fields = ("documents", "window_left", "window_right", "softcap", "alibi_slopes", "key_lengths", "mask", "key_mask")
    args = {name: kw.get(name) for name in fields}
    out, _ = reference(q, k, v, causal=kw["causal"], keep=None, **args)
    return out


def outputs_and_grads(fn, q, k, v, grad, dtype=None):
    leaves = [(t.detach().to(dtype) if dtype else t.detach().clone()).requires_grad_() for t in (q, k, v)]
    out = fn(*leaves)
    out.backward(grad.to(out.dtype))
    return [out.detach()] + [t.grad for t in leaves]


def floor(dtype, ref) -> float:
    """The rule's absolute floor at the reference's magnitude: two units in the last place for float16/bfloat16;
    1e-5 for float32, whose same-dtype reference is often exact to the last bit on small cases (a twice-zero
    yardstick), where a kernel's exp2 and summation order still move the last few bits."""
    scale = max(1.0, ref.abs().max().item() if ref.numel() else 0.0)
    return (1e-5 if dtype == torch.float32 else 2 * torch.finfo(dtype).eps) * scale


def err(a, b) -> float:
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def sdpa_errors(q, k, v, grad, kw, ref, dry):
    """cuDNN's and FlashAttention-2's errors against float64 where they take the case (no structure, no masks)."""
    if dry or any(kw.get(x) is not None for x in kw if x != "causal") or q.shape[1] != k.shape[1]:
        return None
    from torch.nn.attention import SDPBackend, sdpa_kernel

    errors = {}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel([backend]):
                got = outputs_and_grads(
                    lambda *x: F.scaled_dot_product_attention(*x, is_causal=kw["causal"]), q, k, v, grad
                )
            errors[name] = [err(g, r) for g, r in zip(got, ref, strict=True)]
        except Exception as error:
            errors[name] = f"{type(error).__name__}: {str(error)[:80]}"
    return errors


def check_case(case: dict, seed: int, device: str, dry: bool) -> dict:
    gen = torch.Generator(device=device).manual_seed(seed)
    q, k, v, kw = tensors(case, gen, device)
    grad = torch.randn(q.shape, generator=gen, device=device, dtype=q.dtype)
    dtype = q.dtype
    ref = outputs_and_grads(lambda *x: run_reference(*x, kw), q, k, v, grad, torch.float64)
    low = outputs_and_grads(lambda *x: run_reference(*x, kw), q, k, v, grad)
    mine = outputs_and_grads(lambda *x: kernels.flash_attention(*x, **kw), q, k, v, grad)
    ours = [err(m, r) for m, r in zip(mine, ref, strict=True)]
    yard = [err(lo, r) for lo, r in zip(low, ref, strict=True)]
    floors = [floor(dtype, r) for r in ref]
    finite = all(torch.isfinite(m).all().item() for m in mine)
    ok = finite and all(o <= 2 * y + f for o, y, f in zip(ours, yard, floors, strict=True))
    row = {"check": "sweep_case", "ok": ok, "seed": seed, **case, "ours": ours, "same_dtype_ref": yard, "floor": floors}
    row["sdpa"] = sdpa_errors(q, k, v, grad, kw, ref, dry)
    return row


def worker(args) -> int:
    dry = args.dry_run
    device = "cpu" if dry else "cuda"
    if not dry:
        torch.backends.cuda.matmul.allow_tf32 = False  # the float32 yardstick in full precision, as the kernel
        torch.backends.cudnn.allow_tf32 = False
    rng = random.Random(1000 + args.worker)
    start, done, failed, errors = time.time(), 0, 0, 0
    with open(args.out, "a") as handle:

        def write(row):
            handle.write(json.dumps(row, default=str) + "\n")
            handle.flush()

        while done < args.cases and time.time() - start < args.seconds:
            if done % args.per_flags == 0:  # a few shapes per set of flags: they share compiled kernels
                flags = draw_flags(rng, dry)
            case = {**draw_shape(rng, dry, flags["documents"]), **flags}
            seed = rng.randrange(1 << 30)
            try:
                row = check_case(case, seed, device, dry)
            except Exception as error:  # record and go on: one broken case must not hide the others
                row = {"check": "sweep_case", "ok": False, "seed": seed, **case, "error": f"{type(error).__name__}: "
                       f"{str(error)[:300]}"}  # fmt: skip
                errors += 1
                if not dry and "out of memory" in str(error):
                    torch.cuda.empty_cache()
            done += 1
            failed += not row["ok"]
            write({"worker": args.worker, "time": time.strftime("%H:%M:%S"), **row})
        write({"check": "sweep_summary", "worker": args.worker, "cases": done, "failed": failed, "errors": errors,
               "seconds": round(time.time() - start, 1), "ok": failed == 0})  # fmt: skip
    print(f"worker {args.worker}: {done} cases, {failed} failed ({errors} raised)", flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="append one JSON line per case here")
    parser.add_argument("--seconds", type=float, default=140.0, help="stop drawing cases after this long")
    parser.add_argument("--cases", type=int, default=100000, help="at most this many cases per worker")
    parser.add_argument("--per-flags", type=int, default=6, help="cases drawn for each set of kernel flags")
    parser.add_argument("--workers", type=int, default=1, help="processes, each with its own seed")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--dry-run", action="store_true", help="CPU, interpreter, short lengths")
    args = parser.parse_args(argv)
    if args.dry_run and os.environ.get("TRITON_INTERPRET") != "1":
        parser.error("--dry-run needs TRITON_INTERPRET=1 in the environment (set before Python starts)")
    if not args.dry_run and not torch.cuda.is_available():
        parser.error("no CUDA device: pass --dry-run (with TRITON_INTERPRET=1) to run on the CPU")
    if args.worker is not None:
        return worker(args)
    base = [sys.executable, os.path.abspath(__file__), "--out", args.out, "--seconds", str(args.seconds)]
    base += ["--cases", str(args.cases), "--per-flags", str(args.per_flags)] + (["--dry-run"] if args.dry_run else [])
    procs = [subprocess.Popen(base + ["--worker", str(i)]) for i in range(args.workers)]
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    sys.exit(main())
