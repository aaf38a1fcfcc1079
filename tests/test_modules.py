"""Every module's shapes, its paper arithmetic, and the errors its contracts give on bad input."""

import math

import pytest
import torch
from torch import nn

import transformer as T
from transformer import TypeCheckError


def test_full_model_shapes(tiny_model, batch):
    src, tgt, src_mask, tgt_mask = batch
    memory = tiny_model.encode(src, src_mask)
    assert memory.shape == (3, 7, 16)
    hidden = tiny_model.decode(memory, src_mask, tgt, tgt_mask)
    assert hidden.shape == (3, 5, 16)
    assert torch.equal(tiny_model(src, tgt, src_mask, tgt_mask), hidden)
    logits = tiny_model.generator(hidden)
    assert logits.shape == (3, 5, 13)
    torch.testing.assert_close(logits.exp().sum(-1), torch.ones(3, 5))


def test_layer_shapes():
    x, m = torch.randn(2, 5, 16), torch.randn(2, 9, 16)
    attn = T.MultiHeadedAttention(4, 16, 0.0)
    ff = T.PositionwiseFeedForward(16, 40, 0.0)
    assert attn(x, x, x).shape == (2, 5, 16)
    assert attn(x, m, m).shape == (2, 5, 16)  # cross-attention follows the query length
    assert ff(x).shape == (2, 5, 16)
    enc_layer = T.EncoderLayer(16, attn, ff, 0.0)
    dec_layer = T.DecoderLayer(16, T.MultiHeadedAttention(4, 16, 0.0), T.MultiHeadedAttention(4, 16, 0.0), ff, 0.0)
    assert enc_layer(m, None).shape == (2, 9, 16)
    assert T.Encoder(enc_layer, 3)(m, None).shape == (2, 9, 16)
    assert dec_layer(x, m, None, T.subsequent_mask(5)).shape == (2, 5, 16)
    assert T.Decoder(dec_layer, 2)(x, m, None, T.subsequent_mask(5)).shape == (2, 5, 16)
    assert T.Embeddings(16, 11)(torch.randint(0, 11, (2, 5))).shape == (2, 5, 16)
    assert T.Generator(16, 11)(x).shape == (2, 5, 11)


def test_clones_are_independent():
    layers = T.clones(nn.Linear(3, 3), 2)
    assert layers[0].weight.data_ptr() != layers[1].weight.data_ptr()


def test_layer_norm_matches_torch_and_uses_biased_variance():
    x = torch.randn(4, 6, 10) * 3 + 1
    ours, ref = T.LayerNorm(10, eps=1e-5), nn.LayerNorm(10, eps=1e-5)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(10))
        ours.bias.copy_(torch.randn(10))
        ref.weight.copy_(ours.weight)
        ref.bias.copy_(ours.bias)
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-5)


def test_layer_norm_constant_row_is_finite():
    x = torch.full((2, 8), 3.0, requires_grad=True)
    out = T.LayerNorm(8)(x)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
    torch.testing.assert_close(out, torch.zeros(2, 8))


def test_embeddings_are_scaled_by_sqrt_d_model():
    emb = T.Embeddings(16, 11)
    ids = torch.tensor([[1, 2, 3]])
    torch.testing.assert_close(emb(ids), emb.lut.weight[ids] * 4.0)


def test_sinusoidal_encoding_values():
    pe = T.PositionalEncoding(8, 0.0, max_len=50)
    out = pe(torch.zeros(1, 50, 8))[0]
    pos = torch.arange(50.0)
    for i in range(4):
        freq = 1.0 / 10000 ** (2 * i / 8)
        torch.testing.assert_close(out[:, 2 * i], torch.sin(pos * freq), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out[:, 2 * i + 1], torch.cos(pos * freq), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", [T.PositionalEncoding, T.LearnedPositionalEncoding])
def test_positional_encoding_refuses_long_sequences(kind):
    pe = kind(8, 0.0, max_len=10)
    assert pe(torch.zeros(2, 10, 8)).shape == (2, 10, 8)
    with pytest.raises(ValueError, match="sequence length 11 exceeds max_len=10"):
        pe(torch.zeros(2, 11, 8))


@pytest.mark.parametrize("kind", [T.PositionalEncoding, T.LearnedPositionalEncoding])
def test_positional_encoding_with_an_offset_continues_the_sequence(kind):
    pe = kind(8, 0.0, max_len=10)
    x = torch.randn(2, 10, 8)
    torch.testing.assert_close(pe(x[:, 6:9], offset=6), pe(x)[:, 6:9], rtol=0, atol=0)
    assert pe(x[:, 9:], offset=9).shape == (2, 1, 8)
    with pytest.raises(ValueError, match="sequence length 11 exceeds max_len=10"):
        pe(x[:, 9:], offset=10)


def test_model_refuses_long_inputs():
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=4, max_len=6)
    src = torch.randint(1, 11, (2, 7))
    with pytest.raises(ValueError, match="sequence length 7 exceeds max_len=6"):
        model.encode(src, T.padding_mask(src, 0))


def test_token_ids_outside_the_vocabulary(tiny_model, batch):
    src, tgt, src_mask, tgt_mask = batch
    bad = src.clone()
    bad[1, 3] = 11
    with pytest.raises(
        ValueError, match=r"token id 11 at position \(1, 3\) is outside the vocabulary \[0, 11\) \(vocabulary size 11\)"
    ):
        tiny_model(bad, tgt, src_mask, tgt_mask)
    bad_tgt = tgt.clone()
    bad_tgt[2, 0] = -1
    with pytest.raises(ValueError, match="token id -1 .* size 13"):
        tiny_model(src, bad_tgt, src_mask, tgt_mask)


def test_float_token_ids_are_rejected(tiny_model, batch):
    src, tgt, src_mask, tgt_mask = batch
    with pytest.raises(TypeCheckError, match="argument 'src' is f32"):
        tiny_model(src.float(), tgt, src_mask, tgt_mask)


def test_float_mask_is_rejected(tiny_model, batch):
    src, tgt, src_mask, tgt_mask = batch
    with pytest.raises(TypeCheckError, match=r"argument 'tgt_mask' is f32\[3,5,5\].*Bool"):
        tiny_model(src, tgt, src_mask, tgt_mask.float())


def test_cross_attention_mask_of_target_shape_names_src_len(tiny_model, batch):
    src, tgt, src_mask, tgt_mask = batch
    memory = tiny_model.encode(src, src_mask)
    with pytest.raises(TypeCheckError) as info:
        tiny_model.decode(memory, tgt_mask, tgt, tgt_mask)
    first_line = str(info.value).splitlines()[0]
    assert "argument 'src_mask' is bool[3,5,5]" in first_line
    assert "src_len" in first_line and "src_len=7" in first_line


def test_mask_with_wrong_batch_is_rejected(tiny_model, batch):
    src, tgt, src_mask, tgt_mask = batch
    with pytest.raises(TypeCheckError, match="argument 'src_mask'"):
        tiny_model(src, tgt, src_mask[:2], tgt_mask)


def test_nested_violation_names_the_call_path():
    attn = T.MultiHeadedAttention(4, 16, 0.0)
    layer = T.EncoderLayer(16, attn, T.PositionwiseFeedForward(16, 32, 0.0), 0.0)
    with pytest.raises(TypeCheckError, match="argument 'x' is f32\\[2,5,8\\]"):
        layer(torch.randn(2, 5, 8), None)


def test_attention_inner_dimensions_must_agree():
    with pytest.raises(TypeCheckError, match="argument 'key'"):
        T.attention(torch.randn(2, 5, 8), torch.randn(2, 6, 4), torch.randn(2, 6, 8))


def test_residual_operands_must_have_equal_shapes():
    sub = T.SublayerConnection(16, 0.0)
    with pytest.raises(TypeCheckError, match="residual: argument 'sublayer_out'"):
        sub(torch.randn(2, 5, 16), lambda x: x[:, :4])


def test_pre_and_post_norm_sublayers():
    x = torch.randn(2, 5, 16)
    ff = T.PositionwiseFeedForward(16, 32, 0.0)
    pre, post = T.SublayerConnection(16, 0.0, "pre"), T.SublayerConnection(16, 0.0, "post")
    torch.testing.assert_close(pre(x, ff), x + ff(pre.norm(x)))
    out = post(x, ff)
    torch.testing.assert_close(out, post.norm(x + ff(x)))
    torch.testing.assert_close(out.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)


def test_subsequent_mask():
    m = T.subsequent_mask(4)
    assert m.shape == (1, 4, 4) and m.dtype == torch.bool
    assert torch.equal(m[0], torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool))
    with pytest.raises(ValueError, match="size must be a positive int"):
        T.subsequent_mask(0)


def test_target_mask_masks_padded_keys_and_rows():
    tgt = torch.tensor([[5, 6, 0]])
    expected = torch.tensor([[1, 0, 0], [1, 1, 0], [0, 0, 0]], dtype=torch.bool)
    assert torch.equal(T.target_mask(tgt, 0)[0], expected)
    assert torch.equal(T.padding_mask(tgt, 0), torch.tensor([[[True, True, False]]]))


@pytest.mark.parametrize("tie", ["target", "all"])
def test_weight_tying(tie):
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=4, tie_weights=tie)
    shared = model.tgt_embed[0].lut.weight
    assert model.generator.proj.weight is shared
    assert (model.src_embed[0].lut.weight is shared) == (tie == "all")
    untied = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=4)
    assert untied.generator.proj.weight is not untied.tgt_embed[0].lut.weight


def test_config_options_reach_the_modules():
    model = T.make_model(
        11,
        11,
        N=1,
        d_model=16,
        d_ff=32,
        h=4,
        norm_placement="post",
        activation="gelu",
        positional_encoding="learned",
        layer_norm_eps=1e-3,
        attention_backend="torch",
    )
    layer = model.encoder.layers[0]
    assert layer.sublayer[0].norm_placement == "post" and layer.sublayer[0].norm.eps == 1e-3
    assert layer.feed_forward.activation == "gelu"
    assert isinstance(model.src_embed[1], T.LearnedPositionalEncoding)
    assert layer.self_attn.backend == "torch"
    assert model.config.norm_placement == "post"


def test_fully_masked_rows_are_zero_and_have_finite_gradients(tiny_model, batch):
    src, tgt, src_mask, tgt_mask = batch
    tiny_model.train()  # dropout 0: still deterministic
    attn = tiny_model.decoder.layers[0].self_attn
    x = tiny_model.tgt_embed(tgt).detach().requires_grad_(True)
    out = attn(x, x, x, tgt_mask)
    # row (0, 4) is padding: every key masked, so attention outputs only the output bias
    torch.testing.assert_close(out[0, 4], attn.out_proj.bias)
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    loss = tiny_model.generator(tiny_model(src, tgt, src_mask, tgt_mask)).sum()
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in tiny_model.parameters() if p.grad is not None)


def test_attention_scale_is_one_over_sqrt_dk():
    q, k = torch.randn(1, 3, 8), torch.randn(1, 4, 8)
    v = torch.eye(4).unsqueeze(0)  # output rows are the probabilities
    out, p = T.attention(q, k, v)
    expected = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), -1)
    torch.testing.assert_close(p, expected)
    torch.testing.assert_close(out, expected)


def test_make_model_passes_the_tutorials_defaults_and_its_arguments_to_the_config(monkeypatch):
    """make_model(src_vocab, tgt_vocab, N=6, d_model=512, d_ff=2048, h=8, dropout=0.1, **more): the documented
    defaults, N for both stacks, attention_dropout = dropout unless given (build_model is stubbed: no 6+6 model)."""
    from transformer import model as model_module

    built = []
    monkeypatch.setattr(model_module, "build_model", lambda config: built.append(config) or config)
    c = T.make_model(11, 13)
    assert (
        c.src_vocab,
        c.tgt_vocab,
        c.n_encoder_layers,
        c.n_decoder_layers,
        c.d_model,
        c.d_ff,
        c.n_heads,
        c.dropout,
        c.attention_dropout,
    ) == (11, 13, 6, 6, 512, 2048, 8, 0.1, 0.1)
    c = T.make_model(7, 5, N=2, d_model=24, d_ff=40, h=3, dropout=0.3, attention_dropout=0.05, tie_weights="target")
    assert (
        c.src_vocab,
        c.tgt_vocab,
        c.n_encoder_layers,
        c.n_decoder_layers,
        c.d_model,
        c.d_ff,
        c.n_heads,
        c.dropout,
        c.attention_dropout,
        c.tie_weights,
    ) == (7, 5, 2, 2, 24, 40, 3, 0.3, 0.05, "target")
    assert T.make_model(c) is c  # a config goes to build_model as it is
    with pytest.raises(ValueError, match="make_model: tgt_vocab is required when src_vocab is an int"):
        T.make_model(11)


def test_build_model_initialises_every_matrix_glorot_uniform_and_leaves_the_sinusoids():
    torch.manual_seed(0)
    model = T.make_model(11, 13, N=1, d_model=32, d_ff=96, h=4)
    for name, p in model.named_parameters():
        if p.dim() > 1:
            fan_out, fan_in = p.shape
            bound = (6.0 / (fan_in + fan_out)) ** 0.5
            assert p.abs().max() <= bound, name
            assert abs(float(p.detach().std()) - bound / 3**0.5) < 0.15 * bound / 3**0.5, (
                name
            )  # uniform on [-bound, bound]
    pe = model.src_embed[1].pe[0]
    assert torch.allclose(pe[3, 0::2], torch.sin(3 * torch.exp(torch.arange(0, 32, 2) * -(math.log(10000.0) / 32))))
