"""Mathematical laws from the CONCEPT specifications, as property tests in float64.

* softmax is invariant to adding one constant to every logit of a row (attention and generator);
* attention is linear in V (a scaling of V scales the output; sums of V add up);
* every output row of the generator is a probability distribution;
* self-attention is the case Q = K = V, cross-attention the case K = V != Q;
* label smoothing is a KL divergence to a probability distribution (zero exactly at that distribution).

One specification also claims that attention is invariant to scaling K. **That claim is false**:
scaling K by ``a`` scales every logit ``q.k / sqrt(d_k)`` by ``a``, which is a temperature change
(``softmax(a * s)``), not a shift. ``test_attention_is_not_invariant_to_scaling_k`` keeps a
counterexample; docs/guarantees.md explains it.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import transformer as T
from transformer.training import LabelSmoothing

SETTINGS = settings(max_examples=25, deadline=None)
F64 = torch.float64
BACKENDS = ("eager", "torch")


def _randn(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=F64, generator=torch.Generator().manual_seed(seed))


@st.composite
def qkv(draw):
    """(q, k, v, mask) in float64 with distinct sizes; every query row keeps at least one key."""
    batch, heads = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    q_len, k_len, d_k = draw(st.lists(st.sampled_from((2, 3, 5, 7, 11)), min_size=3, max_size=3, unique=True))
    seed = draw(st.integers(0, 2**31 - 1))
    q = _randn(seed, batch, heads, q_len, d_k)
    k = _randn(seed + 1, batch, heads, k_len, d_k)
    v = _randn(seed + 2, batch, heads, k_len, d_k)
    mask = torch.rand(batch, 1, q_len, k_len, generator=torch.Generator().manual_seed(seed)) > 0.4
    mask[..., 0] = True
    return q, k, v, mask


# --------------------------------------------------------------------------- softmax shift invariance


@SETTINGS
@given(qkv(), st.floats(-1e3, 1e3), st.sampled_from(BACKENDS))
def test_attention_is_invariant_to_a_constant_added_to_every_logit(data, c, backend):
    """Adding one vector u to every key adds q_i . u / sqrt(d_k) to every logit of row i: the same
    constant across the row (it may differ between rows), so no output may move."""
    q, k, v, mask = data
    d_k = q.size(-1)
    u = _randn(7, *k.shape[:-2], 1, d_k) * (abs(c) ** 0.5)  # the same offset for every key of a row
    shifted_k = k + u  # logit(i, j) += q_i . u / sqrt(d_k): constant across j for each row i
    out = T.scaled_dot_product_attention(q, k, v, mask, backend=backend)
    torch.testing.assert_close(
        T.scaled_dot_product_attention(q, shifted_k, v, mask, backend=backend), out, rtol=1e-9, atol=1e-9
    )


@SETTINGS
@given(qkv(), st.floats(-1e4, 1e4))
def test_reference_probabilities_are_invariant_to_a_constant_added_to_every_logit(data, c):
    """The same law on the probabilities: with q . u = c * sqrt(d_k) for each row, every logit moves by c."""
    q, k, v, mask = data
    d_k = q.size(-1)
    # u_i chosen per query row would differ per row; use a single query row per call instead
    for i in range(q.size(-2)):
        qi = q[..., i : i + 1, :]
        u = qi * (c * math.sqrt(d_k) / qi.pow(2).sum(-1, keepdim=True))  # qi . u = c * sqrt(d_k)
        p = T.attention(qi, k, v, mask[..., i : i + 1, :])[1]
        p_shifted = T.attention(qi, k + u, v, mask[..., i : i + 1, :])[1]
        torch.testing.assert_close(p_shifted, p, rtol=1e-7, atol=1e-9)


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.floats(-1e3, 1e3))
def test_generator_is_invariant_to_a_constant_added_to_every_logit(seed, c):
    gen = T.Generator(6, 11).double()
    x = _randn(seed, 2, 3, 6)
    out = gen(x)
    with torch.no_grad():
        gen.proj.bias += c
    torch.testing.assert_close(gen(x), out, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------- linearity in V


@SETTINGS
@given(qkv(), st.floats(-100, 100), st.sampled_from(BACKENDS))
def test_attention_is_linear_in_v(data, a, backend):
    q, k, v, mask = data
    w = _randn(3, *v.shape)
    sdpa = lambda v: T.scaled_dot_product_attention(q, k, v, mask, backend=backend)  # noqa: E731
    torch.testing.assert_close(sdpa(a * v), a * sdpa(v), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(sdpa(v + w), sdpa(v) + sdpa(w), rtol=1e-9, atol=1e-9)


@SETTINGS
@given(qkv())
def test_attention_output_is_a_convex_combination_of_value_rows(data):
    q, k, v, mask = data
    out, p = T.attention(q, k, v, mask)
    assert (p >= 0).all()
    torch.testing.assert_close(p.sum(-1), torch.ones_like(p.sum(-1)), rtol=0, atol=1e-12)
    assert (p[~mask.expand_as(p)] == 0).all()  # masked keys get exactly zero weight
    lo, hi = v.min(-2, keepdim=True).values, v.max(-2, keepdim=True).values
    assert ((out >= lo - 1e-12) & (out <= hi + 1e-12)).all()


# --------------------------------------------------------------------------- the generator


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.sampled_from((1.0, 10.0, 1e3)), st.lists(st.integers(1, 4), max_size=3))
def test_every_generator_row_is_a_probability_distribution(seed, scale, lead):
    gen = T.Generator(6, 13).double()
    log_p = gen(_randn(seed, *lead, 6) * scale)
    p = log_p.exp()
    assert log_p.shape == (*lead, 13)
    assert torch.isfinite(log_p).all() and (p >= 0).all()
    torch.testing.assert_close(p.sum(-1), torch.ones(lead, dtype=F64), rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- self- and cross-attention


def _record(module: torch.nn.Module, calls: list) -> None:
    module.register_forward_pre_hook(lambda mod, args: calls.append(args))


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_self_attention_is_q_equals_k_equals_v_and_cross_attention_k_equals_v(placement):
    model = T.make_model(7, 7, N=2, d_model=8, d_ff=16, h=2, dropout=0.0, norm_placement=placement).eval()
    calls = {"enc": [], "self": [], "src": []}
    for layer in model.encoder.layers:
        _record(layer.self_attn, calls["enc"])
    for layer in model.decoder.layers:
        _record(layer.self_attn, calls["self"])
        _record(layer.src_attn, calls["src"])
    memories = []
    model.encoder.register_forward_hook(lambda mod, args, out: memories.append(out))
    src, tgt = torch.randint(1, 7, (2, 5)), torch.randint(1, 7, (2, 3))
    model(src, tgt, T.padding_mask(src, 0), T.target_mask(tgt, 0))
    assert len(calls["enc"]) == len(calls["self"]) == len(calls["src"]) == 2
    for q, k, v, _ in calls["enc"] + calls["self"]:
        assert q is k is v  # self-attention: one tensor is query, key and value
    (memory,) = memories
    for q, k, v, _ in calls["src"]:
        assert k is v is memory  # cross-attention: keys and values are the encoder's output
        assert q is not memory and q.shape == (2, 3, 8)


def _reference_mha(mha: T.MultiHeadedAttention, q_in, k_in, v_in, mask=None):
    """Concat_i softmax((x W_i^Q)(y W_i^K)^T / sqrt(d_k)) (y W_i^V) W^O, head by head, written out plainly."""
    h, d_k = mha.h, mha.d_k
    heads = []
    for i in range(h):
        cols = slice(i * d_k, (i + 1) * d_k)
        qi = q_in @ mha.q_proj.weight[cols].T + mha.q_proj.bias[cols]
        ki = k_in @ mha.k_proj.weight[cols].T + mha.k_proj.bias[cols]
        vi = v_in @ mha.v_proj.weight[cols].T + mha.v_proj.bias[cols]
        logits = qi @ ki.transpose(-1, -2) / math.sqrt(d_k)
        if mask is not None:
            logits = logits.masked_fill(~mask, -math.inf)
        weights = torch.exp(logits - logits.max(-1, keepdim=True).values)
        heads.append((weights / weights.sum(-1, keepdim=True)) @ vi)
    return torch.cat(heads, -1) @ mha.out_proj.weight.T + mha.out_proj.bias


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.sampled_from([(2, 3), (3, 2), (5, 2), (2, 5)]), st.sampled_from(BACKENDS))
def test_multi_head_attention_is_the_per_head_formula(seed, h_dk, backend):
    """Section 3.2.2 head by head: catches a wrong head split or merge, which no shape check can see."""
    h, d_k = h_dk
    torch.manual_seed(seed)
    mha = T.MultiHeadedAttention(h, h * d_k, 0.0, backend=backend).double().eval()
    x, m = _randn(seed, 2, 3, h * d_k), _randn(seed + 1, 2, 4, h * d_k)
    mask = torch.tensor([[[True, False, True, True]], [[True, True, True, False]]])
    causal = T.subsequent_mask(3)
    with torch.no_grad():
        torch.testing.assert_close(mha(x, x, x, causal), _reference_mha(mha, x, x, x, causal), rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(mha(x, m, m, mask), _reference_mha(mha, x, m, m, mask), rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------- the false claim: invariance to scaling K


def test_attention_is_not_invariant_to_scaling_k():
    """Counterexample. q = (1, 0), keys (1, 0) and (0, 0), values 1 and 0, d_k = 2.

    logits = (1/sqrt 2, 0): the first key gets sigmoid(1/sqrt 2) = 0.670...; with K doubled the
    logits are (sqrt 2, 0) and it gets sigmoid(sqrt 2) = 0.804... The output is that weight.
    """
    q = torch.tensor([[[1.0, 0.0]]], dtype=F64)
    k = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]], dtype=F64)
    v = torch.tensor([[[1.0], [0.0]]], dtype=F64)
    out, _ = T.attention(q, k, v)
    out_2k, _ = T.attention(q, 2 * k, v)
    sigmoid = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    assert out.item() == pytest.approx(sigmoid(1 / math.sqrt(2)), abs=1e-12)  # 0.6698
    assert out_2k.item() == pytest.approx(sigmoid(math.sqrt(2)), abs=1e-12)  # 0.8044
    assert abs(out_2k.item() - out.item()) > 0.1


@SETTINGS
@given(qkv(), st.floats(0.05, 20).filter(lambda a: abs(a - 1) > 0.05))
def test_scaling_k_is_a_temperature_change_not_an_invariance(data, a):
    """attention(q, a K, v) = attention(a q, K, v) = softmax(a * logits) v, and generically != attention(q, K, v)."""
    q, k, v, mask = data
    d_k = q.size(-1)
    out_ak, p_ak = T.attention(q, a * k, v, mask)
    torch.testing.assert_close(out_ak, T.attention(a * q, k, v, mask)[0], rtol=1e-9, atol=1e-9)
    logits = (q @ k.transpose(-1, -2) / math.sqrt(d_k)).masked_fill(~mask, -math.inf)
    torch.testing.assert_close(p_ak, torch.softmax(a * logits, -1), rtol=1e-9, atol=1e-12)
    # the claimed invariance fails on every row that attends to two or more keys with different logits
    rows = mask.expand_as(logits).sum(-1) >= 2
    assume(rows.any())  # a mask may leave every row a single key, where scaling changes nothing
    p = T.attention(q, k, v, mask)[1]
    assert not torch.allclose(p_ak[rows], p[rows], rtol=1e-6, atol=1e-9)


def test_scaling_k_limits_are_uniform_and_hard_attention():
    """a -> 0: the uniform average of the values; a large: the value of the key with the largest logit."""
    q, k, v = _randn(0, 1, 4, 3), _randn(1, 1, 5, 3), _randn(2, 1, 5, 2)
    torch.testing.assert_close(T.attention(q, 0 * k, v)[0], v.mean(-2, keepdim=True).expand(1, 4, 2))
    hard = v[0, (q @ k.transpose(-1, -2)).argmax(-1)[0]].unsqueeze(0)
    torch.testing.assert_close(T.attention(q, 1e6 * k, v)[0], hard)


def test_scaling_k_leaves_attention_unchanged_only_in_degenerate_cases():
    """Where the claim happens to hold: a = 1, a query orthogonal to every key, or equal value rows."""
    q, k, v = _randn(0, 1, 3, 4), _randn(1, 1, 5, 4), _randn(2, 1, 5, 2)
    same = lambda q, k, v: torch.allclose(T.attention(q, 3 * k, v)[0], T.attention(q, k, v)[0])  # noqa: E731
    assert not same(q, k, v)
    assert same(torch.zeros_like(q), k, v)  # every logit 0, before and after
    assert same(q, k, v[:, :1].expand_as(v))  # any weights average equal rows to the same row


# --------------------------------------------------------------------------- label smoothing


def _smoothed(size: int, target: torch.Tensor, s: float, padding_idx: int, style: str) -> torch.Tensor:
    """The smoothed target distribution q of each row, written from the definition."""
    if style == "torch":
        q = torch.full((target.numel(), size), s / size, dtype=F64)
        q[torch.arange(target.numel()), target] += 1 - s
    else:
        q = torch.full((target.numel(), size), s / (size - 2), dtype=F64)
        q[:, padding_idx] = 0
        q[torch.arange(target.numel()), target] = 1 - s
    return q


@SETTINGS
@given(
    st.integers(0, 2**31 - 1),
    st.sampled_from((0.0, 0.1, 0.4)),
    st.sampled_from(("torch", "annotated")),
    st.integers(3, 9),
)
def test_label_smoothing_is_a_kl_divergence_to_a_probability_distribution(seed, s, style, size):
    padding_idx = 0
    target = torch.randint(1, size, (6,), generator=torch.Generator().manual_seed(seed))
    q = _smoothed(size, target, s, padding_idx, style)
    torch.testing.assert_close(q.sum(-1), torch.ones(6, dtype=F64), rtol=0, atol=1e-12)  # the mass is 1
    crit = LabelSmoothing(size, padding_idx, s, style=style)
    # zero exactly at q (log 0 entries are never weighted) ...
    log_q = torch.where(q > 0, q.log(), torch.full_like(q, -1e9))
    assert abs(crit(log_q, target).item()) < 1e-5
    # ... and sum_rows KL(q || p) for any p: positive, and equal to the definition
    log_p = torch.log_softmax(_randn(seed, 6, size) * 3, -1)
    kl = torch.where(q > 0, q * (q.log() - log_p), torch.zeros_like(q)).sum()
    assert crit(log_p, target).item() == pytest.approx(kl.item(), rel=1e-5, abs=1e-5)
    assert crit(log_p, target).item() > 0
    # padding rows contribute nothing
    padded = target.clone()
    padded[::2] = padding_idx
    kl_kept = torch.where(q > 0, q * (q.log() - log_p), torch.zeros_like(q)).sum(-1)[1::2].sum()
    assert crit(log_p, padded).item() == pytest.approx(kl_kept.item(), rel=1e-5, abs=1e-5)
