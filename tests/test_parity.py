"""Numerical parity with torch.nn.Transformer: same weights, same outputs to 1e-5 in float32."""

import pytest
import torch
from torch import nn

import transformer as T

D_MODEL, HEADS, D_FF, N = 32, 4, 64, 2


def _copy_attention(ours: T.MultiHeadedAttention, theirs: nn.MultiheadAttention) -> None:
    q_w, k_w, v_w = theirs.in_proj_weight.chunk(3)
    q_b, k_b, v_b = theirs.in_proj_bias.chunk(3)
    for proj, w, b in ((ours.q_proj, q_w, q_b), (ours.k_proj, k_w, k_b), (ours.v_proj, v_w, v_b)):
        proj.weight.copy_(w)
        proj.bias.copy_(b)
    ours.out_proj.weight.copy_(theirs.out_proj.weight)
    ours.out_proj.bias.copy_(theirs.out_proj.bias)


def _copy_norm(ours: T.LayerNorm, theirs: nn.LayerNorm) -> None:
    ours.weight.copy_(theirs.weight)
    ours.bias.copy_(theirs.bias)


def _copy_ffn(ours: T.PositionwiseFeedForward, theirs) -> None:
    ours.w_1.load_state_dict(theirs.linear1.state_dict())
    ours.w_2.load_state_dict(theirs.linear2.state_dict())


@torch.no_grad()
def _copy_weights(model: T.EncoderDecoder, reference: nn.Transformer) -> None:
    for ours, theirs in zip(model.encoder.layers, reference.encoder.layers, strict=True):
        _copy_attention(ours.self_attn, theirs.self_attn)
        _copy_ffn(ours.feed_forward, theirs)
        _copy_norm(ours.sublayer[0].norm, theirs.norm1)
        _copy_norm(ours.sublayer[1].norm, theirs.norm2)
    for ours, theirs in zip(model.decoder.layers, reference.decoder.layers, strict=True):
        _copy_attention(ours.self_attn, theirs.self_attn)
        _copy_attention(ours.src_attn, theirs.multihead_attn)
        _copy_ffn(ours.feed_forward, theirs)
        for sub, norm in zip(ours.sublayer, (theirs.norm1, theirs.norm2, theirs.norm3), strict=True):
            _copy_norm(sub.norm, norm)
    _copy_norm(model.encoder.norm, reference.encoder.norm)
    _copy_norm(model.decoder.norm, reference.decoder.norm)


def _pair(placement: str, activation: str):
    reference = nn.Transformer(
        d_model=D_MODEL,
        nhead=HEADS,
        num_encoder_layers=N,
        num_decoder_layers=N,
        dim_feedforward=D_FF,
        dropout=0.0,
        activation=activation,
        layer_norm_eps=1e-5,
        batch_first=True,
        norm_first=placement == "pre",
    )
    model = T.make_model(
        11,
        11,
        N=N,
        d_model=D_MODEL,
        d_ff=D_FF,
        h=HEADS,
        dropout=0.0,
        norm_placement=placement,
        activation=activation,
        layer_norm_eps=1e-5,
    )
    # perturb the norms so a mis-copied LayerNorm cannot hide behind ones and zeros
    with torch.no_grad():
        for module in reference.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.normal_(1.0, 0.2)
                module.bias.normal_(0.0, 0.2)
    _copy_weights(model, reference)
    return model.eval(), reference.eval()


def _inputs():
    src, tgt = torch.randn(3, 9, D_MODEL), torch.randn(3, 6, D_MODEL)
    src_keep = torch.ones(3, 9, dtype=torch.bool)
    src_keep[0, 6:] = False
    src_keep[2, 8:] = False
    return src, tgt, src_keep


CASES = [("pre", "relu"), ("post", "relu"), ("pre", "gelu"), ("post", "gelu")]


@pytest.mark.parametrize("placement, activation", CASES)
def test_encoder_parity(placement, activation):
    model, reference = _pair(placement, activation)
    src, _, src_keep = _inputs()
    ours = model.encoder(src, src_keep.unsqueeze(1))
    theirs = reference.encoder(src, src_key_padding_mask=~src_keep)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("placement, activation", CASES)
def test_decoder_parity(placement, activation):
    model, reference = _pair(placement, activation)
    src, tgt, src_keep = _inputs()
    memory = torch.randn(3, 9, D_MODEL)
    causal = T.subsequent_mask(6)
    ours = model.decoder(tgt, memory, src_keep.unsqueeze(1), causal)
    theirs = reference.decoder(tgt, memory, tgt_mask=~causal[0], memory_key_padding_mask=~src_keep)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("placement, activation", CASES)
def test_full_model_parity(placement, activation):
    model, reference = _pair(placement, activation)
    src, tgt, src_keep = _inputs()
    causal = T.subsequent_mask(6)
    memory = model.encoder(src, src_keep.unsqueeze(1))
    ours = model.decoder(tgt, memory, src_keep.unsqueeze(1), causal)
    theirs = reference(src, tgt, tgt_mask=~causal[0], src_key_padding_mask=~src_keep, memory_key_padding_mask=~src_keep)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_parity_fails_when_placement_differs():
    """The comparison can fail: post-norm weights run as pre-norm do not match."""
    model, reference = _pair("post", "relu")
    for layer in model.encoder.layers:
        for sub in layer.sublayer:
            sub.norm_placement = "pre"
    src, _, src_keep = _inputs()
    ours = model.encoder(src, src_keep.unsqueeze(1))
    theirs = reference.encoder(src, src_key_padding_mask=~src_keep)
    assert (ours - theirs).abs().max() > 1e-2
