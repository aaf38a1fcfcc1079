"""The fused kernel's one-go GPU checks (run by scripts/gpu_check.sh; see docs/kernels.md).

    python scripts/gpu_check/checks.py correctness --out results.jsonl           # on a GPU
    python scripts/gpu_check/checks.py speed --out results.jsonl
    TRITON_INTERPRET=1 python scripts/gpu_check/checks.py correctness --dry-run --out r.jsonl   # CPU, short

Every result is appended to ``--out`` as one JSON line the moment it is measured (a stage cut short by its
timeout keeps what it had), with ``"ok": true/false`` where the row is a check. ``--dry-run`` runs the same code on
the CPU under the Triton interpreter with short lengths, float16/float32 (the interpreter has no bfloat16) and
SDPA's math backend as the only yardstick; what needs CUDA (graph capture, cuDNN, FlashAttention-2, timings that
mean anything) is recorded as skipped.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

try:
    from transformer import kernels
    from transformer.kernels import _backward, _forward, _tuning
except ImportError:  # the repository root on the path instead of an installed package
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    import kernels
    from kernels import _backward, _forward, _tuning

OUT = None
DRY = False
DEVICE = "cuda"


def record(check: str, **fields) -> dict:
    row = {"check": check, "time": time.strftime("%H:%M:%S"), **fields}
    line = json.dumps(row, default=str)
    print(line, flush=True)
    with open(OUT, "a") as handle:
        handle.write(line + "\n")
    return row


def failed(check: str, error: BaseException, **fields) -> dict:
    return record(check, ok=False, error=f"{type(error).__name__}: {str(error)[:400]}", **fields)


def reference(q, k, v, allowed, scale=None):
    """Attention in float64 (True = may attend); a row with no allowed key gives 0."""
    q, k, v = (t.double() for t in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-1, -2) * scale).masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores.masked_fill(~allowed.any(-1, keepdim=True), 0.0), -1) * allowed
    return probs @ v


def causal_allowed(q_len, k_len, causal):
    allowed = torch.ones(q_len, k_len, dtype=torch.bool, device=DEVICE)
    return allowed.tril() if causal else allowed


def outputs_and_grads(fn, q, k, v, grad):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves)
    out.backward(grad.to(out.dtype))
    return [out.detach()] + [t.grad for t in leaves]


def floor(dtype, ref) -> float:
    """The rule's absolute floor: two units in the last place of ``dtype`` at the reference's magnitude."""
    return 2 * torch.finfo(dtype).eps * max(1.0, ref.abs().max().item())


def err(a, b) -> float:
    return (a.double() - b.double()).abs().max().item()


def sdpa_backends():
    """(name, context manager factory) of the SDPA backends to use as yardsticks here."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if DRY:
        return [("sdpa-math", lambda: sdpa_kernel([SDPBackend.MATH]))]
    return [
        ("cudnn", lambda: sdpa_kernel([SDPBackend.CUDNN_ATTENTION])),
        ("fa2", lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION])),
    ]


def check_accuracy(dtype, batch, heads, q_len, k_len, head_dim, causal):
    """Ours, cuDNN's and FlashAttention-2's error against float64 (out, dq, dk, dv): ours must be within twice the
    worst yardstick's error plus a small absolute floor (the FlashAttention error rule)."""
    torch.manual_seed(0)
    q = torch.randn(batch, heads, q_len, head_dim, device=DEVICE, dtype=dtype)
    k, v = (torch.randn(batch, heads, k_len, head_dim, device=DEVICE, dtype=dtype) for _ in range(2))
    grad = torch.randn_like(q)
    allowed = causal_allowed(q_len, k_len, causal)
    ref = outputs_and_grads(lambda *x: reference(*x, allowed), q, k, v, grad.double())
    errors = {}
    for name, context in sdpa_backends():
        try:
            with context():
                got = outputs_and_grads(lambda *x: F.scaled_dot_product_attention(*x, is_causal=causal), q, k, v, grad)
            errors[name] = [err(g, r) for g, r in zip(got, ref, strict=True)]
        except Exception as error:  # a backend that does not take this case: no yardstick from it
            errors[name] = f"{type(error).__name__}: {str(error)[:120]}"
    mine = [
        err(g, r)
        for g, r in zip(
            outputs_and_grads(lambda *x: kernels.flash_attention(*x, causal=causal), q, k, v, grad), ref, strict=True
        )
    ]
    yardsticks = [e for e in errors.values() if isinstance(e, list)]
    worst = [max(e[i] for e in yardsticks) for i in range(4)] if yardsticks else [0.0] * 4
    ok = all(m <= 2 * w + floor(dtype, r) for m, w, r in zip(mine, worst, ref, strict=True))
    return record(
        "accuracy",
        ok=ok,
        dtype=str(dtype),
        shape=[batch, heads, q_len, k_len, head_dim],
        causal=causal,
        ours=mine,
        yardsticks=errors,
        order="out, dq, dk, dv",
    )


def check_fully_masked_rows(dtype):
    q, k, v = (torch.randn(2, 2, 48, 64, device=DEVICE, dtype=dtype, requires_grad=True) for _ in range(3))
    key_mask = torch.ones(2, 48, dtype=torch.bool, device=DEVICE)
    key_mask[1] = False  # batch row 1: no key at all
    out = kernels.flash_attention(q, k, v, key_mask=key_mask)
    out.float().sum().backward()
    finite = all(torch.isfinite(t).all().item() for t in (out, q.grad, k.grad, v.grad))
    zero = out[1].abs().max().item() == 0.0 and q.grad[1].abs().max().item() == 0.0
    return record("fully_masked_rows", ok=finite and zero, dtype=str(dtype))


def check_split_kv(dtype, k_len):
    torch.manual_seed(1)
    q = torch.randn(1, 4, 1, 64, device=DEVICE, dtype=dtype)
    k, v = (torch.randn(1, 4, k_len, 64, device=DEVICE, dtype=dtype) for _ in range(2))
    splits, _ = _tuning.kv_splits(4, 1, k_len, q.device)
    out = kernels.flash_attention(q, k, v)
    ref = reference(q, k, v, causal_allowed(1, k_len, False))
    with sdpa_backends()[0][1]():
        yard = err(F.scaled_dot_product_attention(q, k, v), ref)
    mine = err(out, ref)
    return record(
        "split_kv",
        ok=splits > 1 and mine <= 2 * yard + 1e-3,
        splits=splits,
        ours=mine,
        yardstick=yard,
        k_len=k_len,
        dtype=str(dtype),
    )


def check_dropout(dtype, repeats):
    """Keep rate (one-hot values read the keep mask out of the output), the same mask for the same seed, another
    for another seed, and the backward bitwise identical over ``repeats`` runs."""
    n = 64
    q = torch.zeros(2, 4, n, n, device=DEVICE, dtype=dtype)
    v = torch.eye(n, device=DEVICE, dtype=dtype).expand(2, 4, n, n).contiguous()
    p = 0.25
    first = kernels.flash_attention(q, q, v, dropout_p=p, seed=11)
    kept = (first.float() * n * (1 - p)).round()
    rate = kept.mean().item()
    same = torch.equal(first, kernels.flash_attention(q, q, v, dropout_p=p, seed=11))
    other = not torch.equal(first, kernels.flash_attention(q, q, v, dropout_p=p, seed=12))
    binary = bool(((kept == 0) | (kept == 1)).all())
    slices = kept.flatten(0, 1)  # (batch * heads, n, n): every (batch, head) must draw its own mask
    distinct = all(not torch.equal(slices[a], slices[b]) for a in range(len(slices)) for b in range(a))

    def corr(x, y):
        x, y = x.flatten().double() - x.double().mean(), y.flatten().double() - y.double().mean()
        return (x @ y / (x.norm() * y.norm())).item()

    correlations = {  # about 1/sqrt(2*4*64*64) = 0.006 apart from 0 by chance; 0.04 is over six of those
        "next_key": corr(kept[..., :-1], kept[..., 1:]),
        "next_query": corr(kept[..., :-1, :], kept[..., 1:, :]),
        "next_head": corr(kept[:, :-1], kept[:, 1:]),
        "next_batch": corr(kept[:-1], kept[1:]),
    }
    independent = distinct and all(abs(c) < 0.04 for c in correlations.values())
    record(
        "dropout_mask",
        ok=same and other and binary and abs(rate - (1 - p)) < 0.02 and independent,
        keep_rate=rate,
        expected=1 - p,
        same_seed_same_mask=same,
        other_seed_other_mask=other,
        distinct_per_batch_and_head=distinct,
        correlations=correlations,
    )
    x = [torch.randn(2, 4, 48 if DRY else 1024, 64, device=DEVICE, dtype=dtype, requires_grad=True) for _ in range(3)]
    grad = torch.randn_like(x[0])
    results = []
    for _ in range(repeats):
        results.append(torch.autograd.grad(kernels.flash_attention(*x, causal=True, dropout_p=0.1, seed=3), x, grad))
    identical = all(torch.equal(a, b) for r in results[1:] for a, b in zip(results[0], r, strict=True))
    return record("backward_deterministic", ok=identical, repeats=repeats)


def check_capture():
    if DRY:
        return record("cuda_graph_capture", skipped="needs CUDA")
    q, k, v = (torch.randn(2, 4, 256, 64, device=DEVICE, dtype=torch.float16) for _ in range(3))
    rows = []
    for seed in (None, 7):
        kernels.tune(q, k, v, dropout_p=0.3, backward=False)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                out = kernels.flash_attention(q, k, v, dropout_p=0.3, seed=seed)
        except Exception as error:
            rows.append(failed("cuda_graph_capture", error, seed=seed))
            continue
        graph.replay()
        first = out.clone()
        graph.replay()
        changes = not torch.equal(first, out)
        if seed is None:
            ok = changes
        else:
            ok = not changes and torch.equal(out, kernels.flash_attention(q, k, v, dropout_p=0.3, seed=seed))
        rows.append(record("cuda_graph_capture", ok=ok, seed=seed, new_mask_per_replay=changes))
    torch.cuda.synchronize()
    return rows


def check_untuned_capture():
    """With autotuning on (the speed stage), a key never tuned in this process, called during capture, must raise
    the RuntimeError that names kernels.tune (not fail inside Triton's benchmark). Run last: a failed capture can
    leave the device unusable for later checks."""
    if DRY or not _tuning._tuned:
        return record("capture_untuned_key", skipped="needs CUDA and autotuned (not pinned) configs")
    untuned = torch.randn(3, 4, 333, 64, device=DEVICE, dtype=torch.float16)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            kernels.flash_attention(untuned, untuned, untuned, causal=True)
    except RuntimeError as error:
        return record("capture_untuned_key", ok="kernels.tune" in str(error), error=str(error)[:200])
    return record("capture_untuned_key", ok=False, note="no error raised")


def check_gqa(dtype, q_len):
    torch.manual_seed(2)
    q = torch.randn(2, 8, q_len, 64, device=DEVICE, dtype=dtype)
    k, v = (torch.randn(2, 2, q_len, 64, device=DEVICE, dtype=dtype) for _ in range(2))
    grad = torch.randn_like(q)
    allowed = causal_allowed(q_len, q_len, True)
    ref = outputs_and_grads(lambda *x: reference(*x, allowed), q, k, v, grad.double())
    mine = [
        err(g, r)
        for g, r in zip(
            outputs_and_grads(lambda *x: kernels.flash_attention(*x, causal=True), q, k, v, grad), ref, strict=True
        )
    ]
    with sdpa_backends()[0][1]() if DRY else torch.nn.attention.sdpa_kernel(list(torch.nn.attention.SDPBackend)):
        yard = [
            err(g, r)
            for g, r in zip(
                outputs_and_grads(
                    lambda *x: F.scaled_dot_product_attention(*x, is_causal=True, enable_gqa=True), q, k, v, grad
                ),
                ref,
                strict=True,
            )
        ]
    ok = all(m <= 2 * y + floor(dtype, r) for m, y, r in zip(mine, yard, ref, strict=True))
    return record("gqa", ok=ok, ours=mine, sdpa=yard, heads=8, kv_heads=2, q_len=q_len)


def check_grid_limits(dtype):
    """Past CUDA's 65535 on grid axes 1 and 2: 2048 x 32 = 65536 (batch, head) pairs (large-batch decoding, q_len 1,
    and a 16-row forward and backward) must run and match SDPA (every kernel runs on a 1-D grid, kernels/_grid.py)."""
    batch, heads = (4, 2) if DRY else (2048, 32)
    rows = {}
    for q_len in (1, 16):
        q = torch.randn(batch, heads, q_len, 64, device=DEVICE, dtype=dtype, requires_grad=True)
        k, v = (torch.randn(batch, heads, 64, 64, device=DEVICE, dtype=dtype, requires_grad=True) for _ in range(2))
        out = kernels.flash_attention(q, k, v)
        grads = torch.autograd.grad(out.float().sum(), (q, k, v))
        ref = F.scaled_dot_product_attention(q, k, v)
        ref_grads = torch.autograd.grad(ref.float().sum(), (q, k, v))
        rows[q_len] = [err(out, ref)] + [err(a, b) for a, b in zip(grads, ref_grads, strict=True)]
    ok = all(e < 5e-2 for errors in rows.values() for e in errors)
    return record("grid_limits", ok=ok, pairs=batch * heads, max_abs_vs_sdpa=rows, order="out, dq, dk, dv")


def check_other_device():
    if DRY or torch.cuda.device_count() < 2:
        return record("second_device", skipped="needs two GPUs")
    q = torch.randn(1, 2, 128, 64, device="cuda:1", dtype=torch.float16)
    with torch.cuda.device(0):
        out = kernels.flash_attention(q, q, q)
    return record(
        "second_device", ok=err(out, reference(q, q, q, torch.ones(128, 128, dtype=torch.bool, device="cuda:1"))) < 1e-2
    )


def correctness(args):
    dtypes = (torch.float16, torch.float32) if DRY else (torch.bfloat16, torch.float16)
    lengths = [(40, 53)] if DRY else [(1024, 1024), (1000, 1037)]
    head_dims = (64,) if DRY else (64, 128, 80, 256)
    steps = [
        lambda: check_fully_masked_rows(dtypes[0]),
        lambda: check_split_kv(dtypes[0], 300 if DRY else 8192),
        lambda: check_dropout(dtypes[0], 2 if DRY else 50),
        check_capture,
        lambda: check_gqa(dtypes[0], 40 if DRY else 1024),
        check_other_device,
        lambda: check_grid_limits(dtypes[0]),
        lambda: __import__("descriptors").check_descriptors(sys.modules[__name__], dtypes[0]),
    ]
    for dtype in dtypes:  # bf16 everywhere; fp16 (the second dtype) at the first length and two head_dims
        for q_len, k_len in lengths if dtype == dtypes[0] else lengths[:1]:
            for head_dim in head_dims if dtype == dtypes[0] else head_dims[:2]:
                for causal in (False, True):
                    steps.append(lambda a=(dtype, 2, 4, q_len, k_len, head_dim, causal): check_accuracy(*a))
    for step in steps:
        try:
            step()
        except Exception as error:  # record and go on: one broken case must not hide the others
            failed(getattr(step, "__name__", "step"), error)


def bench(fn, dry_repeats=1) -> float:
    """Milliseconds per call (median, triton.testing.do_bench on a GPU; one timed call in a dry run)."""
    if DRY:
        start = time.perf_counter()
        for _ in range(dry_repeats):
            fn()
        return (time.perf_counter() - start) / dry_repeats * 1e3
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def tflops(batch, heads, q_len, k_len, head_dim, causal, ms, backward=False) -> float:
    flops = 4 * batch * heads * q_len * k_len * head_dim * (0.5 if causal else 1.0) * (2.5 if backward else 1.0)
    return flops / ms / 1e9


def config_timings(kernel) -> dict | None:
    timings = getattr(kernel, "configs_timings", None)  # a dict after timing; a list when read from Triton's cache
    if not timings:
        return None
    return {str(c): t for c, t in (timings.items() if isinstance(timings, dict) else timings)}


def speed_case(dtype, batch, heads, length, head_dim, causal):
    shape = [batch, heads, length, head_dim]
    q, k, v = (torch.randn(*shape, device=DEVICE, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn_like(q)
    row = {}
    candidates = [("ours", lambda: kernels.flash_attention(q, k, v, causal=causal))]
    for name, context in sdpa_backends():

        def run(context=context):
            with context():
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        candidates.append((name, run))
    for name, fn in candidates:
        try:
            fn()  # compile and autotune outside the timing (the backward too)
            torch.autograd.grad(fn(), (q, k, v), grad)
            fwd = bench(fn)
            out = fn()
            bwd_total = (
                bench(lambda fn=fn: torch.autograd.grad(fn(), (q, k, v), grad))
                if not DRY
                else bench(lambda out=out: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True))
            )
            row[name] = {
                "fwd_ms": fwd,
                "fwd_tflops": tflops(*shape[:2], length, length, head_dim, causal, fwd),
                "fwd_bwd_ms": bwd_total,
                "bwd_tflops": tflops(
                    *shape[:2], length, length, head_dim, causal, max(bwd_total - fwd, 1e-9), backward=True
                ),
            }
        except Exception as error:
            row[name] = f"{type(error).__name__}: {str(error)[:160]}"
    kernels_ = {"forward": _forward.fwd_kernel, "dkdv": _backward.dkdv_kernel, "dq": _backward.dq_kernel}
    tuned = {name: config_timings(kernel) for name, kernel in kernels_.items()}  # of the last key each timed
    best = {name: str(getattr(kernel, "best_config", None)) for name, kernel in kernels_.items()}
    return record(
        "speed", dtype=str(dtype), shape=shape, causal=causal, results=row, config_timings_ms=tuned, best_config=best
    )


def host_time():
    """CPU time per call (time.thread_time: what the host spends, kernels launched asynchronously), small shapes
    where the host decides the speed: forward, and forward + backward."""
    shape = (1, 2, 32, 16) if DRY else (2, 8, 128, 64)
    q, k, v = (
        torch.randn(*shape, device=DEVICE, dtype=torch.float32 if DRY else torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    grad = torch.randn_like(q)
    kernels.tune(q, k, v, causal=True)
    rows = {}
    for name, fn in (
        ("forward", lambda: kernels.flash_attention(q.detach(), k.detach(), v.detach())),
        (
            "forward+backward",
            lambda: torch.autograd.grad(kernels.flash_attention(q, k, v, causal=True), (q, k, v), grad),
        ),
    ):
        number = 1 if DRY else 200
        fn()
        best = []
        for _ in range(1 if DRY else 5):
            start = time.thread_time()
            for _ in range(number):
                fn()
            best.append((time.thread_time() - start) / number * 1e6)
            if not DRY:
                torch.cuda.synchronize()
        rows[name] = min(best)
    return record("host_time_us", shape=list(shape), **rows, goal={"forward": 20, "forward+backward": 60})


def speed(args):
    dtype = torch.float32 if DRY else torch.bfloat16
    # most important first (the stage's timeout keeps what finished); 16k causal reuses 4k causal's compiled configs
    cases = (
        [(dtype, 1, 2, 64, 64, False)]
        if DRY
        else [
            (dtype, 4, 16, 4096, 128, False),
            (dtype, 4, 16, 4096, 128, True),
            (dtype, 4, 8, 16384, 128, True),
            (dtype, 4, 32, 4096, 64, True),
            (dtype, 4, 8, 4096, 256, False),
            (dtype, 4, 32, 1024, 64, False),
        ]
    )
    steps = [host_time] + [lambda c=c: speed_case(*c) for c in cases] + [check_untuned_capture]
    for step in steps:
        try:
            step()
        except Exception as error:
            failed("speed", error)


def main(argv=None) -> int:
    global OUT, DRY, DEVICE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=("correctness", "speed"))
    parser.add_argument("--out", required=True, help="append one JSON line per result here")
    parser.add_argument("--dry-run", action="store_true", help="CPU, interpreter, short lengths")
    args = parser.parse_args(argv)
    OUT, DRY = args.out, args.dry_run
    if DRY:
        if os.environ.get("TRITON_INTERPRET") != "1":
            parser.error("--dry-run needs TRITON_INTERPRET=1 in the environment (set before Python starts)")
        DEVICE = "cpu"
    elif not torch.cuda.is_available():
        parser.error("no CUDA device: pass --dry-run (with TRITON_INTERPRET=1) to run on the CPU")
    record(
        "stage_start",
        stage=args.stage,
        dry_run=DRY,
        device=torch.cuda.get_device_name() if not DRY else "cpu",
        torch=torch.__version__,
        triton=__import__("triton").__version__,
    )
    {"correctness": correctness, "speed": speed}[args.stage](args)
    record("stage_end", stage=args.stage)
    return 0


if __name__ == "__main__":
    sys.exit(main())
