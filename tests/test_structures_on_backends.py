"""Documents, sliding windows, softcap and ALiBi on every backend (issue 29), against the formulas of docs/attention.md.

The expected values come from :func:`formula`: the table of docs/attention.md ("Documents, windows and score
modifiers") written with index arithmetic in float64 (query i at p(i) = k_len - q_len + i), never from
``AttentionMask.to_dense`` or the reference. Seeded random cases combine every part with causal, key lengths, GQA,
odd sizes and non-contiguous inputs; forward and gradients. The kernel's cases wait for its arguments (issue 29's
kernel part): they are skipped while ``kernels.flash_attention`` does not take them.
"""

from __future__ import annotations

import inspect
import random

import pytest
import torch
from attention_formula import formula

import transformer as T
from transformer import kernels
from transformer.backends import alibi_slopes, resolve_backend, run_heads, triton_unsupported_reason
from transformer.masks import AttentionMask


def _kernel_takes(name: str) -> bool:
    return name in inspect.signature(kernels.flash_attention).parameters


NEEDS_KERNEL = pytest.mark.skipif(not _kernel_takes("softcap"), reason="the kernel's issue-29 arguments are not merged")


def random_case(rng: random.Random):
    """One random combination: sizes, the mask's parts and the modifiers (each part present or not)."""
    batch, kv_heads = rng.choice([1, 2]), rng.choice([1, 2, 3])
    heads = kv_heads * rng.choice([1, 2])
    k_len = rng.randint(1, 13)
    q_len = rng.randint(1, k_len)
    d = rng.choice([3, 5, 8])
    parts = {"causal": rng.random() < 0.5}
    if rng.random() < 0.6:
        ids = sorted(rng.randint(0, 3) for _ in range(batch * k_len))
        parts["documents"] = torch.tensor(ids).view(batch, k_len).sort(-1).values
    if rng.random() < 0.5:
        parts["window_left"] = rng.randint(0, 4)
    if rng.random() < 0.4:
        parts["window_right"] = rng.randint(0, 3)
    if rng.random() < 0.4:
        parts["key_lengths"] = torch.tensor([rng.randint(0, k_len) for _ in range(batch)])
    softcap = rng.choice([None, 0.7, 4.0])
    slopes = rng.choice([None, "heads", "batch_heads"])
    if slopes == "heads":
        slopes = alibi_slopes(heads)
    elif slopes == "batch_heads":
        slopes = torch.rand(batch, heads)
    return (batch, heads, kv_heads, q_len, k_len, d), parts, softcap, slopes


def _inputs(sizes, dtype, generator):
    batch, heads, kv_heads, q_len, k_len, d = sizes
    q = torch.randn(batch, q_len, heads, d, generator=generator, dtype=dtype).transpose(1, 2) * 2  # not contiguous
    k = torch.randn(batch, kv_heads, k_len, d, generator=generator, dtype=dtype) * 2
    v = torch.randn(batch, kv_heads, k_len, d, generator=generator, dtype=dtype)
    return [t.requires_grad_(True) for t in (q, k, v)]


def _expected(q, k, v, parts, softcap, slopes, scale, dtype=torch.float64):
    return formula(
        q,
        k,
        v,
        scale=scale,
        causal=parts.get("causal", False),
        key_lengths=parts.get("key_lengths"),
        documents=parts.get("documents"),
        left=parts.get("window_left"),
        right=parts.get("window_right"),
        softcap=softcap,
        slopes=slopes,
        dtype=dtype,
    )


@pytest.mark.parametrize("backend", ["eager", "torch", pytest.param("triton", marks=NEEDS_KERNEL)])
@pytest.mark.parametrize("seed", range(12))
def test_random_structures_match_the_formula_forward_and_gradients(backend, seed):
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    cases = [random_case(rng) for _ in range(4)]
    for sizes, parts, softcap, slopes in cases:
        dtype = torch.float32 if backend == "triton" else torch.float64
        q, k, v = _inputs(sizes, dtype, generator)
        scale = 0.6
        mask = AttentionMask(**parts)
        out = run_heads(backend, q, k, v, mask, 0.0, scale, softcap=softcap, alibi_slopes=slopes)
        want = _expected(q, k, v, parts, softcap, slopes, scale)
        tol = 2e-5 if dtype == torch.float32 else 1e-10
        case = f"{parts} softcap={softcap} slopes={slopes}"
        torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol, msg=lambda m, case=case: f"{case} {m}")
        g = torch.randn(want.shape, generator=generator, dtype=torch.float64)
        got_grads = torch.autograd.grad(out, (q, k, v), g.to(dtype))
        want_grads = torch.autograd.grad(want, (q, k, v), g)
        for name, got, exp in zip("qkv", got_grads, want_grads, strict=True):
            torch.testing.assert_close(
                got.double(), exp.double(), rtol=tol, atol=tol, msg=lambda m, n=name: f"d{n} {m}"
            )


@pytest.mark.parametrize("backend", ["eager", "torch"])
def test_float32_within_twice_the_error_of_the_formula_in_float32(backend):
    """The FlashAttention rule: our float32 error against the float64 formula is at most twice that of the formula
    itself computed in float32 (plus a floor)."""
    rng, generator = random.Random(99), torch.Generator().manual_seed(99)
    for _ in range(6):
        sizes, parts, softcap, slopes = random_case(rng)
        q, k, v = _inputs(sizes, torch.float32, generator)
        out = run_heads(backend, q, k, v, AttentionMask(**parts), 0.0, 0.5, softcap=softcap, alibi_slopes=slopes)
        exact = _expected(q, k, v, parts, softcap, slopes, 0.5)
        own = (_expected(q, k, v, parts, softcap, slopes, 0.5, torch.float32).double() - exact).abs().max().item()
        assert (out.double() - exact).abs().max().item() <= 2 * own + 1e-6, (parts, softcap)


def test_fully_masked_rows_give_zeros_and_zero_gradients_with_alibi_on_torch():
    """ALiBi on the torch backend is a float mask (-inf where masked): a row with no key must still be 0, not NaN
    or the mean of the values, and pass no gradient."""
    q, k, v = (torch.randn(2, 2, 4, 8, requires_grad=True) for _ in range(3))
    mask = AttentionMask(
        key_lengths=torch.tensor([0, 3]), window_left=1, documents=torch.tensor([[0] * 4, [0, 0, 1, 1]])
    )
    for softcap in (None, 2.0):
        out = run_heads("torch", q, k, v, mask, 0.0, softcap=softcap, alibi_slopes=torch.tensor([0.5, 1.0]))
        assert torch.isfinite(out).all() and (out[0] == 0).all()
        dq, dk, dv = torch.autograd.grad(out.sum(), (q, k, v))
        assert (dq[0] == 0).all() and (dk[0] == 0).all() and (dv[0] == 0).all()
        assert dq[1].abs().sum() > 0


@pytest.mark.parametrize("backend", ["eager", "torch"])
@pytest.mark.parametrize("modifier", [{"softcap": 1.0}, {"alibi_slopes": torch.zeros(2)}])
def test_dropout_law_holds_with_the_score_modifiers(backend, modifier):
    """As tests/test_sdpa_dropin.py's law: equal scores (zero queries; a cap keeps them equal, zero slopes add 0) and
    identity values make the output the dropped probabilities: 0 or 1/(S (1-p)), a fraction 1-p kept. The torch
    backend runs ALiBi through torch's fused dropout and a cap through torch's math definition: both must keep it."""
    p, s = 0.3, 16
    q, k = torch.zeros(1, 2, 256, s), torch.randn(1, 2, s, s)
    v = torch.eye(s).expand(1, 2, s, s).clone()
    out = T.scaled_dot_product_attention(q, k, v, dropout_p=p, backend=backend, **modifier)
    kept = out != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.02
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / (s * (1 - p))))


def test_triton_is_refused_naming_the_part_the_kernel_lacks():
    """Before the kernel takes issue 29's arguments, asking for it by name says which one it lacks; auto goes on."""
    if _kernel_takes("softcap") and _kernel_takes("documents"):
        pytest.skip("the kernel takes them")
    q = k = v = torch.randn(1, 2, 4, 16)
    assert "softcap" in triton_unsupported_reason(q, k, v, None, 0.0, softcap=2.0)
    mask = AttentionMask(documents=torch.zeros(1, 4, dtype=torch.long))
    assert "documents" in triton_unsupported_reason(q, k, v, mask, 0.0)
    with pytest.raises(ValueError, match="triton.*alibi_slopes"):
        resolve_backend("triton", q, k, v, None, 0.0, alibi_slopes=torch.ones(2))
    assert resolve_backend("auto", q, k, v, mask, 0.0, softcap=2.0) == "torch"
    assert resolve_backend("auto", q.double(), k.double(), v.double(), mask, 0.0, softcap=2.0) == "eager"


def test_the_new_parts_reach_the_kernels_check_by_name_only_when_given(monkeypatch):
    """Ready for the kernel's part: documents, the window and the modifiers go to kernels.unsupported_reason under
    its argument names, and nothing it does not need; auto on CUDA asks with them (a fake CUDA query)."""
    from transformer.backends import choice

    seen = []
    monkeypatch.setattr(kernels, "unsupported_reason", lambda q, k, v, **kw: seen.append(kw))
    monkeypatch.setattr(choice, "kernel_takes", lambda name: True)
    q = k = v = torch.randn(1, 2, 4, 16)
    documents = torch.tensor([[0, 0, 1, 1]])
    slopes = torch.ones(2)
    mask = AttentionMask(causal=True, documents=documents, window_left=1)
    assert triton_unsupported_reason(q, k, v, mask, 0.0, softcap=3.0, alibi_slopes=slopes) is None
    assert seen[-1]["documents"] is documents and seen[-1]["window_left"] == 1 and seen[-1]["softcap"] == 3.0
    assert seen[-1]["alibi_slopes"] is slopes and "window_right" not in seen[-1] and "causal" not in seen[-1]
    triton_unsupported_reason(q, k, v, None, 0.0)
    assert set(seen[-1]) == {"mask", "dropout_p", "scale"}  # a kernel of before issue 29 is asked as before

    asked = []
    monkeypatch.setattr(choice, "triton_unsupported_reason", lambda *a, **kw: asked.append(kw))
    fake_cuda = type("FakeCuda", (), {"is_cuda": True, "dtype": torch.bfloat16})()
    assert resolve_backend("auto", fake_cuda, k, v, mask, 0.0, softcap=3.0) == "triton"
    assert asked == [{"softcap": 3.0}]


@pytest.mark.parametrize("backend", ["eager", "torch"])
@pytest.mark.parametrize("modifier", [{}, {"softcap": 1.0}, {"alibi_slopes": torch.zeros(4)}])
def test_dropout_law_holds_within_documents(backend, modifier):
    """Two documents of 16 in each row of 32 (GQA 4/2): every query sees its own 16 keys with equal scores, so with
    identity values the output is the dropped probabilities: 1/(16 (1-p)) on a fraction 1-p of its own document's
    keys, and exactly 0 on the other document's."""
    p, n = 0.3, 32
    q, k = torch.zeros(8, 4, n, 8), torch.randn(8, 2, n, 8)
    v = torch.eye(n).expand(8, 2, n, n).clone()
    documents = torch.tensor([[0] * 16 + [1] * 16]).expand(8, n)
    out = run_heads(backend, q, k, v, AttentionMask(documents=documents), p, **modifier)
    same = (documents[0][:, None] == documents[0][None, :]).expand_as(out)
    assert (out[~same] == 0).all()
    kept = (out != 0) & same
    assert abs(kept.float().sum().item() / same.sum().item() - (1 - p)) < 0.02
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / (16 * (1 - p))))
