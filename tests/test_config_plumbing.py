"""Config plumbing: every field of a TransformerConfig reaches the modules that use it, and acts there.

* ``layer_norm_eps``: every LayerNorm (each sub-layer's and both stacks' final norms) is built with it, and the
  stacks compute with it (compared with the LayerNorm formula written out here, so an eps hard-coded in a
  ``forward`` is caught as well as one left at its default in a constructor);
* ``pad_id`` reaches decoding: the filler after an end symbol is ``pad_symbol``, else the config's pad id,
  else (``pad_id=None``) the end symbol;
* the structural fields (layer counts, heads, d_ff, activation) reach the stacks;
* the mask constructors' corner cases (size 1, all padding, a pad id that does not occur, ``pad_id=None``)
  against tensors written out by hand.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer as T

EPS = 0.37  # far from the default 1e-6: with unit-variance inputs, sqrt(var + eps) differs by ~17%
F64 = torch.float64


def _model(placement="pre", eps=EPS, **more):
    torch.manual_seed(0)
    config = T.TransformerConfig(
        src_vocab=11,
        tgt_vocab=13,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_model=16,
        d_ff=32,
        n_heads=4,
        dropout=0.0,
        attention_dropout=0.0,
        norm_placement=placement,
        layer_norm_eps=eps,
        **more,
    )
    return T.make_model(config).double().eval()


def _layer_norms(model):
    return [(name, m) for name, m in model.named_modules() if isinstance(m, (T.LayerNorm, nn.LayerNorm))]


# ---------------------------------------------------------------- layer_norm_eps: construction


@pytest.mark.parametrize("placement", ["pre", "post"])
@pytest.mark.parametrize("build", ["config", "make_model-kwargs"])
def test_every_layer_norm_is_built_with_the_configured_eps(placement, build):
    if build == "config":
        model = _model(placement)
    else:
        model = T.make_model(
            11, 13, N=2, d_model=16, d_ff=32, h=4, dropout=0.0, norm_placement=placement, layer_norm_eps=EPS
        )
    norms = _layer_norms(model)
    # 2 per encoder layer, 3 per decoder layer, and each stack's final norm
    assert len(norms) == 2 * 2 + 3 * 2 + 2, [name for name, _ in norms]
    assert {name: m.eps for name, m in norms} == {name: EPS for name, _ in norms}
    assert model.encoder.norm.eps == EPS and model.decoder.norm.eps == EPS
    for layer in [*model.encoder.layers, *model.decoder.layers]:
        assert [s.norm.eps for s in layer.sublayer] == [EPS] * len(layer.sublayer)


def test_the_default_eps_is_the_configs_default():
    model = T.make_model(11, 13, N=1, d_model=16, d_ff=32, h=4)
    default = T.TransformerConfig(src_vocab=11, tgt_vocab=13).layer_norm_eps
    assert default == 1e-6
    assert {m.eps for _, m in _layer_norms(model)} == {default}


# ---------------------------------------------------------------- layer_norm_eps: behaviour


def _ln(norm, x, eps=EPS):
    """LayerNorm written out: weight * (x - mean) / sqrt(biased var + eps) + bias, with the module's weight and bias."""
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return norm.weight * (x - mean) / torch.sqrt(var + eps) + norm.bias


def _randomise_norms(model):
    """Random LayerNorm weights and biases, so the formula's affine part is not the identity."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _, m in _layer_norms(model):
            m.weight.copy_(1 + 0.5 * torch.randn(m.weight.shape, generator=g, dtype=F64))
            m.bias.copy_(0.5 * torch.randn(m.bias.shape, generator=g, dtype=F64))


def _sublayer(norm, placement, x, f):
    """Section 3.1 with the LayerNorm written out: pre x + f(LN(x)), post LN(x + f(x))."""
    return x + f(_ln(norm, x)) if placement == "pre" else _ln(norm, x + f(x))


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_the_stacks_compute_with_the_configured_eps(placement):
    """Encoder and decoder outputs equal the stacks written out with LayerNorm(eps=0.37) by hand (attention
    and FFN modules used as they are: they hold no LayerNorm). Inputs have a small variance, where eps matters."""
    model = _model(placement)
    _randomise_norms(model)
    x = 0.5 * torch.randn(2, 5, 16, dtype=F64, generator=torch.Generator().manual_seed(2))
    y = 0.5 * torch.randn(2, 4, 16, dtype=F64, generator=torch.Generator().manual_seed(3))
    src_mask = torch.tensor([[[True, True, True, True, False]], [[True, True, True, True, True]]])
    tgt_mask = T.subsequent_mask(4)
    with torch.no_grad():
        h = x
        for layer in model.encoder.layers:
            h = _sublayer(layer.sublayer[0].norm, placement, h, lambda z, a=layer.self_attn: a(z, z, z, src_mask))
            h = _sublayer(layer.sublayer[1].norm, placement, h, layer.feed_forward)
        expected_memory = _ln(model.encoder.norm, h)
        torch.testing.assert_close(model.encoder(x, src_mask), expected_memory, rtol=1e-10, atol=1e-10)
        g = y
        for layer in model.decoder.layers:
            g = _sublayer(layer.sublayer[0].norm, placement, g, lambda z, a=layer.self_attn: a(z, z, z, tgt_mask))
            g = _sublayer(layer.sublayer[1].norm, placement, g, lambda z, a=layer.src_attn: a(z, x, x, src_mask))
            g = _sublayer(layer.sublayer[2].norm, placement, g, layer.feed_forward)
        torch.testing.assert_close(
            model.decoder(y, x, src_mask, tgt_mask), _ln(model.decoder.norm, g), rtol=1e-10, atol=1e-10
        )
        # the check can see the eps: the same stack with the default eps differs
        assert not torch.allclose(expected_memory, _ln(model.encoder.norm, h, eps=1e-6), atol=1e-3)


def test_layer_norm_uses_its_eps_on_a_constant_row_and_a_two_valued_row():
    """Rows written out: a constant row gives the bias; the row (a, -a) gives weight * (+-a) / sqrt(a^2 + eps)
    + bias."""
    norm = T.LayerNorm(2, eps=EPS).double()
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([2.0, 3.0], dtype=F64))
        norm.bias.copy_(torch.tensor([0.5, -0.5], dtype=F64))
    a = 0.4
    out = norm(torch.tensor([[7.0, 7.0], [a, -a]], dtype=F64))
    expected = torch.tensor(
        [[0.5, -0.5], [2 * a / math.sqrt(a * a + EPS) + 0.5, -3 * a / math.sqrt(a * a + EPS) - 0.5]], dtype=F64
    )
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- the structural fields


def test_layer_counts_heads_d_ff_and_activation_reach_the_modules():
    torch.manual_seed(0)
    config = T.TransformerConfig(
        src_vocab=7,
        tgt_vocab=9,
        n_encoder_layers=1,
        n_decoder_layers=3,
        d_model=12,
        d_ff=20,
        n_heads=3,
        dropout=0.0,
        attention_dropout=0.0,
        activation="gelu",
        positional_encoding="learned",
        max_len=17,
    )
    model = T.make_model(config).double().eval()
    assert len(model.encoder.layers) == 1 and len(model.decoder.layers) == 3
    attentions = [m for m in model.modules() if isinstance(m, T.MultiHeadedAttention)]
    assert len(attentions) == 1 + 2 * 3 and {(m.h, m.d_k) for m in attentions} == {(3, 4)}
    ffns = [m for m in model.modules() if isinstance(m, T.PositionwiseFeedForward)]
    assert len(ffns) == 4 and {(m.w_1.in_features, m.w_1.out_features) for m in ffns} == {(12, 20)}
    x = torch.randn(2, 3, 12, dtype=F64)
    ff = model.decoder.layers[2].feed_forward
    torch.testing.assert_close(ff(x), ff.w_2(F.gelu(ff.w_1(x))))  # gelu, not relu
    assert not torch.allclose(ff(x), ff.w_2(F.relu(ff.w_1(x))))
    assert model.tgt_embed[1].pe.shape == (1, 17, 12)  # learned positions, max_len of the config


# ---------------------------------------------------------------- pad_id reaches decoding


@pytest.mark.parametrize("pad_id, expected_filler", [(3, 3), (None, "end")])
def test_decoding_pads_with_the_configs_pad_id_else_the_end_symbol(pad_id, expected_filler):
    """greedy_decode and beam_search without pad_symbol: after the end symbol comes config.pad_id, or the end
    symbol itself when the config has no pad id. The end symbol is a token greedy emits at step 2 (certain)."""
    model = _model(pad_id=pad_id)
    src = torch.randint(1, 11, (2, 5), generator=torch.Generator().manual_seed(4))
    free = T.greedy_decode(model, src, None, 10, 1)
    end = int(free[0, 2])
    filler = end if expected_filler == "end" else expected_filler
    out = T.greedy_decode(model, src, None, 10, 1, end_symbol=end)
    first = free[0].tolist().index(end, 1)
    assert out[0].tolist() == free[0, : first + 1].tolist() + [filler] * (9 - first)
    beam = T.beam_search(model, src[:1], None, 10, 1, end, beam_size=1).tokens
    assert torch.equal(beam, out[:1])


# ---------------------------------------------------------------- masks: corner cases, written out


def test_subsequent_mask_corner_cases():
    assert T.subsequent_mask(1).tolist() == [[[True]]]
    assert T.subsequent_mask(3).tolist() == [[[True, False, False], [True, True, False], [True, True, True]]]
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="size must be a positive int"):
            T.subsequent_mask(bad)


def test_padding_mask_corner_cases():
    assert T.padding_mask(torch.tensor([[5]]), 0).tolist() == [[[True]]]  # one real token
    assert T.padding_mask(torch.tensor([[0]]), 0).tolist() == [[[False]]]  # one padding token
    assert T.padding_mask(torch.zeros(2, 3, dtype=torch.long), 0).tolist() == [[[False] * 3]] * 2  # all padding
    assert T.padding_mask(torch.tensor([[1, 2, 3]]), 0).tolist() == [[[True, True, True]]]  # pad id absent
    assert T.padding_mask(torch.tensor([[0, 2, 4, 2]]), 2).tolist() == [
        [[True, False, True, False]]
    ]  # pad id 2, 0 is real
    assert T.padding_mask(torch.tensor([[4, 0, 5]]), 0).tolist() == [[[True, False, True]]]  # padding in the middle


def test_target_mask_without_a_pad_id_is_causal_for_every_row():
    """target_mask(tgt, None): no token is padding (token 0 included): each row is the causal mask."""
    tgt = torch.tensor([[0, 0, 3], [4, 0, 0]])
    causal = [[True, False, False], [True, True, False], [True, True, True]]
    mask = T.target_mask(tgt, None)
    assert mask.shape == (2, 3, 3) and mask.tolist() == [causal, causal]
    assert T.target_mask(torch.tensor([[0]]), None).tolist() == [[[True]]]


def test_target_mask_corner_cases():
    assert T.target_mask(torch.tensor([[7]]), 0).tolist() == [[[True]]]  # size 1, real
    assert T.target_mask(torch.tensor([[0]]), 0).tolist() == [[[False]]]  # size 1, padding: its row attends nothing
    assert T.target_mask(torch.zeros(2, 2, dtype=torch.long), 0).tolist() == [[[False, False]] * 2] * 2  # all padding
    causal = [[True, False, False], [True, True, False], [True, True, True]]
    assert T.target_mask(torch.tensor([[1, 2, 3]]), 0).tolist() == [causal]  # pad id absent: causal
    # padding in the middle: its key is hidden from later rows and its own row attends nothing
    assert T.target_mask(torch.tensor([[4, 0, 5]]), 0).tolist() == [
        [[True, False, False], [False, False, False], [True, False, True]]
    ]
    # a pad id other than 0 (0 is then a real token)
    assert T.target_mask(torch.tensor([[0, 2]]), 2).tolist() == [[[True, False], [False, False]]]
