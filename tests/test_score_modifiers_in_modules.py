"""The score modifiers (softcap, ALiBi) in the modules and the drop-in, and documents/windows through the drop-in
(issue 29). Expected values from the formula of tests/attention_formula.py (index arithmetic, float64)."""

from __future__ import annotations

import pytest
import torch
from attention_formula import formula

import transformer as T
from transformer.backends import alibi_slopes
from transformer.masks import AttentionMask


def _formula(q, k, v, scale, *, causal=False, documents=None, left=None, right=None, softcap=None, slopes=None):
    return formula(
        q,
        k,
        v,
        scale=scale,
        causal=causal,
        key_lengths=None,
        documents=documents,
        left=left,
        right=right,
        softcap=softcap,
        slopes=slopes,
    )


# ---------------------------------------------------------------------------- the modules
def _heads_by_hand(mha, x, softcap, slopes, causal):
    """MultiHeadedAttention's forward written out: projections, the formula per head, W^O."""
    b, s, _ = x.shape
    q = mha.q_proj(x).view(b, s, mha.h, mha.d_k).transpose(1, 2)
    k = mha.k_proj(x).view(b, s, mha.kv_heads, mha.d_k).transpose(1, 2)
    v = mha.v_proj(x).view(b, s, mha.kv_heads, mha.d_k).transpose(1, 2)
    heads = _formula(q, k, v, mha.d_k**-0.5, causal=causal, softcap=softcap, slopes=slopes)
    return mha.out_proj(heads.transpose(1, 2).reshape(b, s, -1))


@pytest.mark.parametrize("backend", ["eager", "torch"])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_multi_headed_attention_applies_its_softcap_and_slopes(backend, kv_heads):
    torch.manual_seed(0)
    slopes = alibi_slopes(4)
    mha = T.MultiHeadedAttention(4, 32, dropout=0.0, kv_heads=kv_heads, softcap=1.5, alibi_slopes=slopes)
    mha = mha.double().eval()
    x = torch.randn(2, 7, 32, dtype=torch.float64) * 3
    want = _heads_by_hand(mha, x, 1.5, slopes, causal=True)
    with T.use_backend(backend):
        got = mha(x, x, x, AttentionMask(causal=True))
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    mha.record_attention = True  # the reference path keeps the probabilities: the same modifiers
    torch.testing.assert_close(mha(x, x, x, AttentionMask(causal=True)), want, rtol=1e-10, atol=1e-10)
    plain = T.MultiHeadedAttention(4, 32, dropout=0.0, kv_heads=kv_heads).double().eval()
    plain.load_state_dict(mha.state_dict())
    assert (plain(x, x, x, AttentionMask(causal=True)) - want).abs().max() > 1e-3  # the modifiers matter here


def test_slopes_are_a_buffer_that_follows_the_module_but_not_its_state_dict():
    slopes = alibi_slopes(4)
    mha = T.MultiHeadedAttention(4, 32, alibi_slopes=slopes)
    plain = T.MultiHeadedAttention(4, 32)
    assert mha.state_dict().keys() == plain.state_dict().keys()
    plain.load_state_dict(mha.state_dict())  # strict: no missing or unexpected key
    assert mha.double().alibi_slopes.dtype == torch.float64
    assert torch.equal(mha.alibi_slopes.float(), slopes)
    assert T.MultiHeadedAttention(4, 32).alibi_slopes is None


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"softcap": 0.0}, "'softcap' must be a finite number > 0.*got 0.0"),
        ({"softcap": float("inf")}, "'softcap'.*got inf"),
        (
            {"alibi_slopes": torch.ones(3)},
            r"'alibi_slopes' must hold one slope per query head, shape \(4,\).*got \(3,\)",
        ),
        ({"alibi_slopes": torch.ones(4, dtype=torch.long)}, "'alibi_slopes' must be a float tensor"),
    ],
)
def test_bad_modifiers_are_refused_when_the_module_is_built(kwargs, words):
    with pytest.raises(ValueError, match=f"MultiHeadedAttention: argument {words}"):
        T.MultiHeadedAttention(4, 32, **kwargs)


# ---------------------------------------------------------------------------- the drop-in
@pytest.mark.parametrize("backend", ["eager", "torch"])
def test_drop_in_softcap_and_slopes_on_3d_and_4d_inputs(backend):
    """(heads, L, E) inputs with (heads,) slopes; (batch, heads, L, E) with (batch, heads) slopes; q_len != k_len:
    ALiBi's distance is from p(i) = k_len - q_len + i, while is_causal stays top-left as torch's."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(3, n, 5, generator=g, dtype=torch.float64) for n in (4, 6, 6))
    slopes = torch.tensor([0.3, 0.9, 2.0], dtype=torch.float64)
    got = T.scaled_dot_product_attention(q, k, v, is_causal=True, backend=backend, softcap=0.8, alibi_slopes=slopes)
    want = _formula(q[None], k[None], v[None], 5**-0.5, causal=True, softcap=0.8, slopes=slopes)[0]
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    q4, k4, v4 = (torch.randn(2, 3, n, 5, generator=g, dtype=torch.float64) for n in (6, 6, 6))
    per_row = torch.rand(2, 3, generator=g, dtype=torch.float64)
    got = T.scaled_dot_product_attention(q4, k4, v4, backend=backend, alibi_slopes=per_row)
    torch.testing.assert_close(got, _formula(q4, k4, v4, 5**-0.5, slopes=per_row), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("backend", ["eager", "torch"])
def test_drop_in_adds_a_float_mask_after_the_bias(backend):
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 5, 4, generator=g) for _ in range(3))
    bias = torch.randn(1, 1, 5, 5, generator=g)
    slopes = torch.tensor([0.5, 1.0])
    got = T.scaled_dot_product_attention(q, k, v, attn_mask=bias, backend=backend, alibi_slopes=slopes, softcap=3.0)
    distance = (torch.arange(5)[:, None] - torch.arange(5)).abs()
    s = 3.0 * torch.tanh(q @ k.transpose(-1, -2) / 2 / 3.0) - slopes[:, None, None] * distance + bias
    torch.testing.assert_close(got, s.softmax(-1) @ v, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["eager", "torch"])
def test_drop_in_takes_documents_and_a_window(backend):
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 2, n, 4, generator=g, dtype=torch.float64) for n in (3, 7, 7))
    documents = torch.tensor([[0, 0, 1, 1, 1, 2, 2], [0, 0, 0, 0, 0, 0, 1]])
    mask = AttentionMask(documents=documents, window_left=2, window_right=0)
    got = T.scaled_dot_product_attention(q, k, v, attn_mask=mask, backend=backend)
    want = _formula(q, k, v, 0.5, documents=documents, left=2, right=0)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    ("shape", "slopes", "kwargs", "words"),
    [
        ((4, 5), torch.ones(1), {}, "'alibi_slopes' needs inputs with a heads dim"),
        ((3, 4, 5), torch.ones(1, 3), {}, r"'alibi_slopes' of shape \(batch, heads\) needs 4-D inputs"),
        (
            (2, 3, 4, 5),
            torch.ones(2),
            {},
            r"'alibi_slopes' must hold one slope per query head, shape \(3,\) or \(2, 3\).*got \(2,\)",
        ),
        ((2, 3, 4, 5), None, {"softcap": -1.0}, "'softcap' must be a finite number > 0.*got -1.0"),
    ],
)
def test_drop_in_refuses_bad_extras_naming_them(shape, slopes, kwargs, words):
    q = torch.randn(*shape)
    with pytest.raises(ValueError, match=f"scaled_dot_product_attention: argument {words}"):
        T.scaled_dot_product_attention(q, q, q, alibi_slopes=slopes, **kwargs)


def test_drop_in_with_gqa_gives_the_slopes_to_the_query_heads():
    g = torch.Generator().manual_seed(6)
    q = torch.randn(1, 4, 5, 8, generator=g, dtype=torch.float64)
    k, v = (torch.randn(1, 2, 5, 8, generator=g, dtype=torch.float64) for _ in range(2))
    slopes = torch.tensor([0.1, 0.5, 1.0, 4.0], dtype=torch.float64)
    for backend in ("eager", "torch"):
        got = T.scaled_dot_product_attention(q, k, v, enable_gqa=True, backend=backend, alibi_slopes=slopes)
        torch.testing.assert_close(got, _formula(q, k, v, 8**-0.5, slopes=slopes), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("backend", ["eager", "torch"])
def test_the_modifiers_and_documents_compile_without_a_graph_break(backend):
    """torch.compile(fullgraph=True) (Dynamo with the eager backend: no code generation) gives eager mode's answer."""
    slopes = alibi_slopes(4)
    mha = T.MultiHeadedAttention(4, 32, dropout=0.0, softcap=2.0, alibi_slopes=slopes).eval()
    x = torch.randn(2, 6, 32) * 3
    mask = AttentionMask(causal=True, documents=torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]]), window_left=2)
    with T.use_backend(backend):
        want = mha(x, x, x, mask)
        got = torch.compile(mha, backend="eager", fullgraph=True)(x, x, x, mask)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("backend", ["eager", "torch"])
def test_drop_in_alibi_alone_with_is_causal_keeps_torchs_top_left_diagonal(backend):
    """ALiBi without a cap (the torch backend's float-bias path) and is_causal with q_len < k_len: causality stays
    top-left (j <= i, as torch's is_causal) while the distance is from p(i) = k_len - q_len + i."""
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 2, n, 4, generator=g, dtype=torch.float64) for n in (3, 6, 6))
    slopes = torch.tensor([0.4, 1.1], dtype=torch.float64)
    got = T.scaled_dot_product_attention(q, k, v, is_causal=True, backend=backend, alibi_slopes=slopes)
    torch.testing.assert_close(got, _formula(q, k, v, 0.5, causal=True, slopes=slopes), rtol=1e-10, atol=1e-10)
