"""Attention sinks on every backend (docs/attention.md, "Attention sinks"): the torch paths (torch's function with the
sink as one more key column; torch's math definition in plain PyTorch when a softcap is given), the fused kernel and
the reference, through the modules' dispatch (``run_heads``) and the drop-in, against the reference backend in float64
(itself transformers' gpt-oss eager attention, tests/test_attention_sinks.py): values and the gradients of the
queries, keys, values and the sinks. Seeded random cases combine the sinks with causal, key lengths, documents,
windows, softcap, ALiBi, grouped-query attention and queries shorter than the keys. A kernel that does not take
sinks is refused by name, never run without them.
"""

from __future__ import annotations

import random

import pytest
import torch

import transformer as T
from transformer.backends import (
    dense_heads_mask,
    repeat_kv_heads,
    resolve_backend,
    run_heads,
    triton_unsupported_reason,
)
from transformer.backends import reference as reference_backend
from transformer.masks import AttentionMask


def random_case(rng: random.Random):
    """Sizes, the mask's parts (each present or not), a softcap or none, ALiBi slopes or none, and sinks."""
    batch, kv_heads = rng.choice([1, 2]), rng.choice([1, 2])
    heads = kv_heads * rng.choice([1, 2])
    k_len = rng.randint(1, 13)
    q_len = rng.randint(1, k_len)
    parts = {"causal": rng.random() < 0.5}
    if rng.random() < 0.4:
        ids = sorted(rng.randint(0, 3) for _ in range(batch * k_len))
        parts["documents"] = torch.tensor(ids).view(batch, k_len).sort(-1).values
    if rng.random() < 0.4:
        parts["window_left"] = rng.randint(0, 4)
    if rng.random() < 0.4:
        parts["key_lengths"] = torch.tensor([rng.randint(0, k_len) for _ in range(batch)])
    softcap = rng.choice([None, None, 0.7, 4.0])
    slopes = rng.choice([None, None, torch.rand(heads)])
    sinks = torch.tensor([rng.choice([-3.0, 0.0, 2.0, 5.0]) + rng.uniform(-1, 1) for _ in range(heads)])
    return (batch, heads, kv_heads, q_len, k_len, 16), parts, softcap, slopes, sinks


def _inputs(sizes, sinks, dtype, generator):
    batch, heads, kv_heads, q_len, k_len, d = sizes
    q = torch.randn(batch, q_len, heads, d, generator=generator, dtype=dtype).transpose(1, 2)  # not contiguous
    k = torch.randn(batch, kv_heads, k_len, d, generator=generator, dtype=dtype)
    v = torch.randn(batch, kv_heads, k_len, d, generator=generator, dtype=dtype)
    return [t.requires_grad_(True) for t in (q, k, v, sinks.to(dtype))]


def _oracle(q, k, v, mask, scale, softcap, slopes, sinks):
    """The reference backend in float64: keys and values repeated per query head, the mask dense."""
    q, k, v, sinks = (t.double() for t in (q, k, v, sinks))
    k, v = repeat_kv_heads(k, v, q.size(1))
    dense = dense_heads_mask(mask, q.size(2), k.size(2))
    slopes = None if slopes is None else slopes.double()
    return reference_backend.attention(q, k, v, dense, None, scale, softcap=softcap, alibi_slopes=slopes, sinks=sinks)[
        0
    ]


def _assert_equal_with_gradients(out, want, leaves, tol, generator, case):
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol, msg=lambda m: f"{case} {m}")
    g = torch.randn(want.shape, generator=generator, dtype=torch.float64)
    got = torch.autograd.grad(out, leaves, g.to(out.dtype))
    expected = torch.autograd.grad(want, leaves, g)
    for name, a, b in zip(("dq", "dk", "dv", "d_sinks"), got, expected, strict=True):
        torch.testing.assert_close(a.double(), b.double(), rtol=tol, atol=tol, msg=lambda m, n=name: f"{n} {case} {m}")


@pytest.mark.parametrize("backend", ["eager", "torch", "triton"])
@pytest.mark.parametrize("seed", range(4))
def test_every_backend_is_the_reference_with_sinks_values_and_gradients(backend, seed):
    """``run_heads`` (what the modules call) on each backend: float64 within 1e-10 (the kernel, float32 only, within
    2e-5), the sinks' gradient included, and a sink takes part of every row's mass (the output differs from the
    attention without sinks)."""
    rng, generator = random.Random(seed), torch.Generator().manual_seed(seed)
    for _ in range(4):
        sizes, parts, softcap, slopes, sinks = random_case(rng)
        dtype = torch.float32 if backend == "triton" else torch.float64
        leaves = _inputs(sizes, sinks, dtype, generator)
        q, k, v, z = leaves
        mask = AttentionMask(**parts)
        out = run_heads(backend, q, k, v, mask, 0.0, 0.5, softcap=softcap, alibi_slopes=slopes, sinks=z)
        want = _oracle(q, k, v, mask, 0.5, softcap, slopes, z)
        without = _oracle(q, k, v, mask, 0.5, softcap, slopes, torch.full_like(z, -1e4))
        case = f"{backend} {parts} softcap={softcap} slopes={slopes} sinks={sinks}"
        if without.abs().max() > 0:  # some row attends a key: the sinks change it
            assert (want - without).abs().max() > 1e-3, case
        tol = 2e-5 if dtype == torch.float32 else 1e-10
        _assert_equal_with_gradients(out, want, leaves, tol, generator, case)


@pytest.mark.parametrize("backend", ["eager", "torch", "triton"])
def test_the_drop_in_takes_sinks_on_every_backend(backend):
    """``scaled_dot_product_attention(..., sinks=)`` with a boolean mask, a float mask, ``is_causal`` (top-left, queries
    shorter than keys), ``enable_gqa`` and 3-D inputs: the reference's values and gradients."""
    generator = torch.Generator().manual_seed(7)
    dtype = torch.float32 if backend == "triton" else torch.float64
    tol = 2e-5 if dtype == torch.float32 else 1e-10
    bool_mask = torch.rand(2, 1, 5, 9, generator=generator) > 0.4
    float_mask = torch.randn(5, 9, generator=generator, dtype=dtype)
    cases = [
        dict(attn_mask=bool_mask),
        dict(is_causal=True),
        dict(attn_mask=bool_mask, enable_gqa=True),
        dict(softcap=2.0, is_causal=True),
        dict(alibi_slopes=torch.rand(4, generator=generator, dtype=dtype)),
    ]
    if backend != "triton":  # the kernel takes boolean masks only (auto runs torch for a float one)
        cases.append(dict(attn_mask=float_mask))
    for options in cases:
        kv_heads = 2 if options.get("enable_gqa") else 4
        q = torch.randn(2, 4, 5, 16, generator=generator, dtype=dtype).requires_grad_()
        k, v = (torch.randn(2, kv_heads, 9, 16, generator=generator, dtype=dtype).requires_grad_() for _ in "kv")
        z = (torch.randn(4, generator=generator, dtype=dtype) * 2).requires_grad_()
        out = T.scaled_dot_product_attention(q, k, v, sinks=z, backend=backend, **options)
        mask = options.get("attn_mask")
        if options.get("is_causal"):
            mask = torch.ones(5, 9, dtype=torch.bool).tril()
        if mask is not None and mask.dtype == torch.bool:
            mask = mask.expand(2, 4, 5, 9)
        kk, vv = repeat_kv_heads(k, v, 4)
        if mask is not None and not mask.dtype == torch.bool:  # a float mask: the oracle adds it to the scores
            want = _float_mask_oracle(q, kk, vv, mask, z)
        else:
            modifiers = {n: options[n] for n in ("softcap", "alibi_slopes") if n in options}
            want = reference_backend.attention(
                q.double(), kk.double(), vv.double(), mask, sinks=z.double(), **modifiers
            )[0]
        _assert_equal_with_gradients(out, want, (q, k, v, z), tol, generator, f"{backend} {list(options)}")
    q3 = torch.randn(4, 5, 16, dtype=dtype)  # 3-D: (heads, L, E)
    z = torch.randn(4, dtype=dtype)
    out3 = T.scaled_dot_product_attention(q3, q3, q3, sinks=z, backend="eager" if backend == "triton" else backend)
    torch.testing.assert_close(out3, reference_backend.attention(q3, q3, q3, sinks=z)[0], rtol=tol, atol=tol)


def _float_mask_oracle(q, k, v, mask, z):
    scores = (q.double() @ k.double().transpose(-1, -2)) / 4.0 + mask.double()
    column = z.double()[:, None, None].expand(*scores.shape[:-1], 1)
    probs = torch.cat([scores, column], -1).softmax(-1)[..., :-1]
    return probs @ v.double()


def test_a_row_with_no_key_keeps_the_sink_and_outputs_zero_on_torch():
    """Every key masked for a row: torch's function sees the sink's column alone (never an all -inf row) and gives
    0, as the reference; the sink's gradient from that row is zero (its value is zero)."""
    q, k, v = (torch.randn(2, 2, 4, 8, requires_grad=True) for _ in range(3))
    z = torch.tensor([0.5, -1.0], requires_grad=True)
    mask = AttentionMask(key_lengths=torch.tensor([0, 3]))
    for softcap in (None, 2.0):
        out = run_heads("torch", q, k, v, mask, 0.0, softcap=softcap, sinks=z)
        assert torch.isfinite(out).all() and (out[0] == 0).all() and out[1].abs().sum() > 0
        g_full = torch.autograd.grad(out.sum(), z)[0]
        g_second = torch.autograd.grad(run_heads("torch", q[1:], k[1:], v[1:], mask_row(mask), 0.0,
                                                 softcap=softcap, sinks=z).sum(), z)[0]  # fmt: skip
        torch.testing.assert_close(g_full, g_second)


def mask_row(mask: AttentionMask) -> AttentionMask:
    return AttentionMask(key_lengths=mask.key_lengths[1:])


def test_a_kernel_without_sinks_is_refused_by_name_never_run_without_them(monkeypatch):
    """A transformers.kernels built before the sinks (its functions lack the argument): backend 'triton' asked for
    by name refuses naming 'sinks'; auto picks torch, which takes them."""
    from transformer.backends import choice

    real = choice.kernel_takes
    monkeypatch.setattr(choice, "kernel_takes", lambda name: name != "sinks" and real(name))
    q = k = v = torch.randn(1, 2, 4, 16)
    z = torch.zeros(2)
    assert "does not take sinks" in triton_unsupported_reason(q, k, v, None, 0.0, sinks=z)
    with pytest.raises(ValueError, match="attention backend 'triton' cannot run these inputs: .*sinks"):
        resolve_backend("triton", q, k, v, None, 0.0, sinks=z)
    with pytest.raises(ValueError, match="sinks"):
        T.scaled_dot_product_attention(q, k, v, sinks=z, backend="triton")
    assert resolve_backend("auto", q, k, v, None, 0.0, sinks=z) == "torch"
    assert triton_unsupported_reason(q, k, v, None, 0.0) is None  # without sinks the kernel is asked as before


def test_bad_sinks_are_refused_by_name_in_the_drop_in():
    q = torch.randn(1, 2, 4, 16)
    with pytest.raises(ValueError, match=r"argument 'sinks' must be a float tensor of one logit per query head, "
                       r"shape \(2,\), got \(3,\)"):  # fmt: skip
        T.scaled_dot_product_attention(q, q, q, sinks=torch.zeros(3))
    with pytest.raises(ValueError, match=r"argument 'sinks' must be a float tensor.*torch.int64"):
        T.scaled_dot_product_attention(q, q, q, sinks=torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="argument 'sinks' needs inputs with a heads dim"):
        T.scaled_dot_product_attention(q[0, 0], q[0, 0], q[0, 0], sinks=torch.zeros(1))
