"""Laws that no shape contract can see: causality, padding, batch independence, composition.

A shape-preserving bug (a causal mask shifted by one, a mask of the wrong polarity, a layer
skipped in a stack, rows of a batch mixed together) passes every shape check; these properties
catch it. They were added to kill mutants of ``tests/mutation/run_mutants.py``.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer as T

SETTINGS = settings(max_examples=15, deadline=None)


def _model(placement: str = "pre", **more) -> T.EncoderDecoder:
    return (
        T.make_model(11, 13, N=2, d_model=8, d_ff=16, h=2, dropout=0.0, norm_placement=placement, **more)
        .double()
        .eval()
    )


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.integers(1, 5), st.sampled_from(["pre", "post"]))
def test_decoder_is_causal(seed, t, placement):
    """Positions before t do not depend on target tokens at t or later (section 3.2.3)."""
    torch.manual_seed(seed)
    model = _model(placement)
    src, tgt = torch.randint(1, 11, (2, 4)), torch.randint(1, 13, (2, 6))
    changed = tgt.clone()
    changed[:, t:] = torch.randint(1, 13, changed[:, t:].shape)
    changed[:, t] = tgt[:, t] % 12 + 1  # position t surely differs
    src_mask = T.padding_mask(src, 0)
    out = model(src, tgt, src_mask, T.target_mask(tgt, 0))
    out_changed = model(src, changed, src_mask, T.target_mask(changed, 0))
    torch.testing.assert_close(out_changed[:, :t], out[:, :t], rtol=1e-10, atol=1e-10)
    assert not torch.allclose(out_changed[:, t], out[:, t])  # ... while position t does see its own token


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.integers(1, 4), st.sampled_from(["pre", "post"]))
def test_padded_source_positions_are_invisible(seed, n_real, placement):
    """What sits at padded source positions changes neither the real positions' memory nor the decoder."""
    torch.manual_seed(seed)
    model = _model(placement)
    src = torch.randint(1, 11, (1, 5))
    src[:, n_real:] = 0
    src_mask = T.padding_mask(src, 0)
    other = src.clone()
    other[:, n_real:] = torch.randint(1, 11, (1, 5 - n_real))  # same tokens, different "padding"
    tgt = torch.randint(1, 13, (1, 3))
    tgt_mask = T.target_mask(tgt, 0)
    memory, memory_other = model.encode(src, src_mask), model.encode(other, src_mask)
    torch.testing.assert_close(memory_other[:, :n_real], memory[:, :n_real], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(
        model(other, tgt, src_mask, tgt_mask), model(src, tgt, src_mask, tgt_mask), rtol=1e-10, atol=1e-10
    )
    # and the mask does matter: without it, the padding is seen
    assert not torch.allclose(model.encode(other, None)[:, :n_real], model.encode(src, None)[:, :n_real])


def test_padding_mask_marks_real_tokens():
    tokens = torch.tensor([[4, 0, 7, 0]])
    assert T.padding_mask(tokens, 0).tolist() == [[[True, False, True, False]]]


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_batch_rows_are_independent(placement):
    model = _model(placement)
    src, tgt = torch.randint(1, 11, (3, 4)), torch.randint(1, 13, (3, 5))
    src[1, 3:] = 0
    out = model(src, tgt, T.padding_mask(src, 0), T.target_mask(tgt, 0))
    for b in range(3):
        s, t = src[b : b + 1], tgt[b : b + 1]
        torch.testing.assert_close(
            out[b : b + 1], model(s, t, T.padding_mask(s, 0), T.target_mask(t, 0)), rtol=1e-10, atol=1e-10
        )


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_stacks_are_their_layers_composed_then_a_final_norm(placement):
    model = _model(placement)
    x, y = torch.randn(2, 4, 8, dtype=torch.float64), torch.randn(2, 3, 8, dtype=torch.float64)
    src_mask, tgt_mask = torch.tensor([[[True, True, True, False]]]), T.subsequent_mask(3)
    h = x
    for layer in model.encoder.layers:
        h = layer(h, src_mask)
    torch.testing.assert_close(model.encoder(x, src_mask), model.encoder.norm(h))
    g = y
    for layer in model.decoder.layers:
        g = layer(g, x, src_mask, tgt_mask)
    torch.testing.assert_close(model.decoder(y, x, src_mask, tgt_mask), model.decoder.norm(g))


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_encoder_layer_is_the_paper_formula(placement):
    """Pre-norm: h = x + SelfAttn(LN0(x)), out = h + FFN(LN1(h)).
    Post-norm (the paper): h = LN0(x + SelfAttn(x)), out = LN1(h + FFN(h))."""
    model = _model(placement)
    layer = model.encoder.layers[0]
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    attn, ff = layer.self_attn, layer.feed_forward
    n0, n1 = layer.sublayer[0].norm, layer.sublayer[1].norm
    if placement == "pre":
        h = x + attn(n0(x), n0(x), n0(x))
        expected = h + ff(n1(h))
    else:
        h = n0(x + attn(x, x, x))
        expected = n1(h + ff(h))
    torch.testing.assert_close(layer(x, None), expected)


def test_encoder_layer_without_positions_is_permutation_equivariant():
    """Self-attention and the FFN treat positions alike: permuting the input permutes the output."""
    model = _model()
    layer = model.encoder.layers[0]
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    perm = torch.tensor([3, 0, 4, 1, 2])
    torch.testing.assert_close(layer(x[:, perm], None), layer(x, None)[:, perm])


def test_positions_matter_after_the_positional_encoding():
    """... and the positional encoding breaks that symmetry: a reversed source gives another memory."""
    model = _model()
    src = torch.tensor([[1, 2, 3, 4]])
    memory, memory_rev = model.encode(src, None), model.encode(src.flip(1), None)
    assert not torch.allclose(memory_rev.flip(1), memory)


# --------------------------------------------------------------------------- masks, dropout, normalisation, positions


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.integers(1, 6))
def test_target_mask_is_causal_and_hides_padding_in_both_directions(seed, length):
    tgt = torch.randint(0, 4, (3, length), generator=torch.Generator().manual_seed(seed))  # 0 = pad
    mask = T.target_mask(tgt, 0)
    real = tgt != 0
    i, j = torch.meshgrid(torch.arange(length), torch.arange(length), indexing="ij")
    expected = (j <= i) & real[:, :, None] & real[:, None, :]
    assert torch.equal(mask, expected)


def test_a_query_row_with_every_key_masked_outputs_zeros():
    """The defined answer for a fully masked row is zero (not the uniform average of the values)."""
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6) + 3.0
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[1, 2] = False
    out, p = T.attention(q, k, v, mask)
    assert torch.equal(out[1, 2], torch.zeros(6)) and torch.equal(p[1, 2], torch.zeros(5))
    assert (out[0].abs() > 0).all()


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_eval_mode_is_deterministic_and_dropout_free(placement):
    """In eval mode a model built with dropout computes exactly what the same weights without dropout do."""
    torch.manual_seed(3)
    with_dropout = T.make_model(11, 13, N=1, d_model=8, d_ff=16, h=2, dropout=0.5, norm_placement=placement)
    without = T.make_model(11, 13, N=1, d_model=8, d_ff=16, h=2, dropout=0.0, norm_placement=placement)
    without.load_state_dict(with_dropout.state_dict())
    with_dropout.eval(), without.eval()
    src, tgt = torch.randint(1, 11, (2, 4)), torch.randint(1, 13, (2, 3))
    args = (src, tgt, T.padding_mask(src, 0), T.target_mask(tgt, 0))
    torch.testing.assert_close(with_dropout(*args), without(*args), rtol=0, atol=0)
    with_dropout.train()
    assert not torch.allclose(with_dropout(*args), without(*args))  # ... and dropout does act in training


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.sampled_from((2, 5, 8, 13)), st.floats(0.01, 100))
def test_layer_norm_standardises_each_row(seed, features, scale):
    """With its initial weight 1 and bias 0: every row gets mean 0 and biased variance v / (v + eps) ~ 1."""
    x = torch.randn(3, 4, features, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)) * scale + 7
    eps = 1e-6
    out = T.LayerNorm(features, eps=eps).double()(x)
    v = x.var(-1, unbiased=False)
    torch.testing.assert_close(out.mean(-1), torch.zeros(3, 4, dtype=torch.float64), rtol=0, atol=1e-9)
    torch.testing.assert_close(out.var(-1, unbiased=False), v / (v + eps), rtol=1e-9, atol=0)


@SETTINGS
@given(st.sampled_from((2, 4, 8, 16)), st.integers(0, 40), st.integers(0, 20))
def test_positional_encoding_of_pos_plus_k_is_a_rotation_of_pos(d_model, pos, k):
    """Section 3.5: PE(pos + k) is a linear function of PE(pos). Pair i = (sin(pos w_i), cos(pos w_i)) with
    w_i = 10000^(-2i/d_model) turns by the angle k w_i: [s', c'] = [[cos, sin], [-sin, cos]] [s, c]."""
    pe = T.PositionalEncoding(d_model, 0.0, max_len=64).double()
    table = pe(torch.zeros(1, 64, d_model, dtype=torch.float64))[0]
    w = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    s, c = table[pos, 0::2], table[pos, 1::2]
    cos, sin = torch.cos(k * w), torch.sin(k * w)
    torch.testing.assert_close(table[pos + k, 0::2], cos * s + sin * c, rtol=0, atol=1e-5)
    torch.testing.assert_close(table[pos + k, 1::2], -sin * s + cos * c, rtol=0, atol=1e-5)
    assert torch.equal(table[0, 0::2], torch.zeros(d_model // 2))  # sin(0) = 0 on even features


@SETTINGS
@given(st.sampled_from((2, 6, 16)), st.integers(0, 2**31 - 1))
def test_model_input_is_the_scaled_embedding_plus_the_position(d_model, seed):
    """Section 3.4/3.5: the encoder's input is lut(x) * sqrt(d_model) + PE (eval mode)."""
    torch.manual_seed(seed)
    model = T.make_model(11, 13, N=1, d_model=d_model, d_ff=8, h=2, dropout=0.0).eval()
    src = torch.randint(0, 11, (2, 5))
    lut = model.src_embed[0].lut.weight
    expected = lut[src] * d_model**0.5 + model.src_embed[1].pe[:, :5]
    torch.testing.assert_close(model.src_embed(src), expected)
    norms = model.src_embed[0](src).norm(dim=-1)
    torch.testing.assert_close(norms, lut[src].norm(dim=-1) * d_model**0.5)
