"""The properties (theorems) of the Rocq specification, as hypothesis tests on our modules.

Rocq's ``Properties.v`` proves them by typing: a function of type
``Tensor3D batch seq d_model -> Tensor3D batch seq d_model`` preserves shape. Here every size is
drawn by hypothesis, and the sizes of one example are *distinct primes* where they can be (as the
functional-transformer reference does): batch, source length, target length, heads, d_k, d_ff
and vocabularies then never coincide, so a mix-up of two axes (batch for sequence, source
length for target length, d_model for d_ff) changes a shape and cannot pass by accident.
Each property also runs through our contracts, which are on during these tests.

Rocq property -> test:
 1 self-attention preserves shape ................ test_self_attention_preserves_shape
 2 cross-attention follows the query length ...... test_cross_attention_follows_the_query_length
 3 FFN preserves shape ........................... test_feed_forward_preserves_shape
 4 sublayer connection preserves shape ........... test_sublayer_connection_preserves_shape
 5 encoder layer and stack preserve shape ........ test_encoder_layer_and_stack_preserve_shape
 6 decoder layer and stack preserve shape ........ test_decoder_layer_and_stack_preserve_shape
 7 encode yields source-length memory ............ test_model_data_flow
 8 decode yields target-length output ............ test_model_data_flow
 9 forward pass: tokens -> logits ................ test_model_data_flow
10 greedy decoding yields exactly gen_len ........ test_decoding_properties.py
11 linear transforms the last dimension only ..... test_linear_layers_change_only_the_last_dimension
12 linear layers compose when dimensions align ... test_linear_layers_compose_when_dimensions_align
13 embeddings have d_model features .............. test_embeddings_have_d_model_features
14 positional encoding needs seq <= max_len ...... test_positional_encoding_keeps_shape_up_to_max_len
                                                   (+ the refusal in test_rocq_invariants.py)
15 each decoding step extends by exactly one ..... test_decoding_properties.py

The shapes alone are what the contracts already enforce, so every test here also asserts the *values*
behind its law, in float64 against the paper's formula written out in the test (per-head attention,
the FFN, the residual sub-layer with LayerNorm, N identical layers then a norm, the embedding scale,
the sinusoids): a shape-preserving bug cannot pass.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import transformer as T
from transformer import TypeCheckError

SETTINGS = settings(max_examples=20, deadline=None)
F64 = torch.float64
EPS = 1e-6  # LayerNorm's default eps
SMALL_PRIMES = (2, 3, 5, 7)
PRIMES = (2, 3, 5, 7, 11, 13)


def distinct(n: int, pool=PRIMES):
    """n distinct primes, in a random order."""
    return st.lists(st.sampled_from(pool), min_size=n, max_size=n, unique=True)


@st.composite
def widths(draw):
    """(h, d_k, d_model = h * d_k): h and d_k distinct primes, so d_model is never either of them."""
    h, d_k = draw(distinct(2, SMALL_PRIMES))
    return h, d_k, h * d_k


def _mha(h: int, d_model: int) -> T.MultiHeadedAttention:
    return T.MultiHeadedAttention(h, d_model, 0.0).double().eval()


def _ffn(d_model: int, d_ff: int) -> T.PositionwiseFeedForward:
    return T.PositionwiseFeedForward(d_model, d_ff, 0.0).double().eval()


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=F64)


# --------------------------------------------------------------------------- the formulas, written out


def _linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return x @ layer.weight.T + layer.bias


def _mha_by_hand(mha: T.MultiHeadedAttention, q_in, k_in, v_in, mask=None) -> torch.Tensor:
    """Section 3.2.2 head by head: Concat_i softmax((x W_i^Q)(y W_i^K)^T / sqrt(d_k)) (y W_i^V) W^O;
    a query row whose every key is masked gets zero weights."""
    heads = []
    for i in range(mha.h):
        cols = slice(i * mha.d_k, (i + 1) * mha.d_k)
        qi = q_in @ mha.q_proj.weight[cols].T + mha.q_proj.bias[cols]
        ki = k_in @ mha.k_proj.weight[cols].T + mha.k_proj.bias[cols]
        vi = v_in @ mha.v_proj.weight[cols].T + mha.v_proj.bias[cols]
        logits = qi @ ki.transpose(-1, -2) / math.sqrt(mha.d_k)
        if mask is not None:
            logits = logits.masked_fill(~mask, -math.inf)
        heads.append(torch.nan_to_num(torch.softmax(logits, -1), nan=0.0) @ vi)
    return _linear(mha.out_proj, torch.cat(heads, -1))


def _ffn_by_hand(ff: T.PositionwiseFeedForward, x: torch.Tensor) -> torch.Tensor:
    """Section 3.3: max(0, x W_1 + b_1) W_2 + b_2."""
    return _linear(ff.w_2, torch.clamp(_linear(ff.w_1, x), min=0))


def _ln_by_hand(norm, x: torch.Tensor) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return norm.weight * (x - mean) / torch.sqrt(var + EPS) + norm.bias


def _sublayer_by_hand(sub, placement: str, x: torch.Tensor, f) -> torch.Tensor:
    """Section 3.1: post LayerNorm(x + Sublayer(x)) (the paper), pre x + Sublayer(LayerNorm(x))."""
    return x + f(_ln_by_hand(sub.norm, x)) if placement == "pre" else _ln_by_hand(sub.norm, x + f(x))


def _encoder_layer_by_hand(layer, placement, x, mask):
    attn, ff = layer.self_attn, layer.feed_forward
    x = _sublayer_by_hand(layer.sublayer[0], placement, x, lambda z: _mha_by_hand(attn, z, z, z, mask))
    return _sublayer_by_hand(layer.sublayer[1], placement, x, lambda z: _ffn_by_hand(ff, z))


def _decoder_layer_by_hand(layer, placement, x, memory, src_mask, tgt_mask):
    x = _sublayer_by_hand(layer.sublayer[0], placement, x, lambda z: _mha_by_hand(layer.self_attn, z, z, z, tgt_mask))
    x = _sublayer_by_hand(
        layer.sublayer[1], placement, x, lambda z: _mha_by_hand(layer.src_attn, z, memory, memory, src_mask)
    )
    return _sublayer_by_hand(layer.sublayer[2], placement, x, lambda z: _ffn_by_hand(layer.feed_forward, z))


def _close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual, expected, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------- 1-2 attention


@SETTINGS
@given(widths(), distinct(2))
def test_self_attention_preserves_shape(w, sizes):
    h, _, d_model = w
    batch, seq = sizes
    x = _randn(batch, seq, d_model)
    causal = T.subsequent_mask(seq)
    mha = _mha(h, d_model)
    out = mha(x, x, x, causal)
    assert out.shape == (batch, seq, d_model)
    _close(out, _mha_by_hand(mha, x, x, x, causal))  # the values: h heads over the same sequence, merged


@SETTINGS
@given(widths(), distinct(3))
def test_cross_attention_follows_the_query_length(w, sizes):
    h, _, d_model = w
    batch, q_len, k_len = sizes
    q, m = _randn(batch, q_len, d_model), _randn(batch, k_len, d_model)
    mask = torch.rand(batch, 1, k_len) > 0.3
    mha = _mha(h, d_model)
    out = mha(q, m, m, mask)
    assert out.shape == (batch, q_len, d_model)
    _close(out, _mha_by_hand(mha, q, m, m, mask))
    # output row i is query row i's attention over the memory: a prefix of the queries gives that prefix
    _close(mha(q[:, :1], m, m, mask), out[:, :1])


# --------------------------------------------------------------------------- 3-4 FFN and sublayer


@SETTINGS
@given(w=widths(), d_ff=st.sampled_from((11, 13, 17)), lead=st.lists(st.sampled_from(PRIMES), max_size=3))
def test_feed_forward_preserves_shape(w, d_ff, lead):
    d_model = w[2]
    x = _randn(*lead, d_model)  # any leading dimensions, even none
    ff = _ffn(d_model, d_ff)
    assert ff(x).shape == x.shape
    assert ff.w_1(x).shape == (*lead, d_ff)  # the inner expansion is d_ff wide
    _close(ff(x), _ffn_by_hand(ff, x))
    # position-wise: every position on its own gives the same values
    _close(ff(x.reshape(-1, d_model)), ff(x).reshape(-1, d_model))


@SETTINGS
@given(w=widths(), sizes=distinct(2), placement=st.sampled_from(["pre", "post"]))
def test_sublayer_connection_preserves_shape(w, sizes, placement):
    h, _, d_model = w
    batch, seq = sizes
    x = _randn(batch, seq, d_model)
    sub = T.SublayerConnection(d_model, 0.0, placement).double()
    with torch.no_grad():  # a LayerNorm that is not the identity affine map
        sub.norm.weight.uniform_(0.5, 1.5)
        sub.norm.bias.uniform_(-0.5, 0.5)
    ff = _ffn(d_model, 11)
    out = sub(x, ff)
    assert out.shape == x.shape
    _close(out, _sublayer_by_hand(sub, placement, x, lambda z: _ffn_by_hand(ff, z)))
    mha = _mha(h, d_model)
    out = sub(x, lambda y: mha(y, y, y))
    assert out.shape == x.shape
    _close(out, _sublayer_by_hand(sub, placement, x, lambda z: _mha_by_hand(mha, z, z, z)))


# --------------------------------------------------------------------------- 5-6 layers and stacks


@SETTINGS
@given(w=widths(), sizes=distinct(2), n=st.integers(1, 3), placement=st.sampled_from(["pre", "post"]))
def test_encoder_layer_and_stack_preserve_shape(w, sizes, n, placement):
    h, _, d_model = w
    batch, src_len = sizes
    layer = T.EncoderLayer(d_model, _mha(h, d_model), _ffn(d_model, 11), 0.0, placement).double().eval()
    x = _randn(batch, src_len, d_model)
    mask = torch.ones(batch, 1, src_len, dtype=torch.bool)
    mask[0, 0, -1] = False  # one padded key
    out = layer(x, mask)
    assert out.shape == x.shape
    _close(out, _encoder_layer_by_hand(layer, placement, x, mask))
    # the stack: N identical copies of the layer, composed, then a final LayerNorm
    stack = T.Encoder(layer, n).eval()
    expected = x
    for _ in range(n):
        expected = layer(expected, mask)
    out = stack(x, mask)
    assert out.shape == x.shape
    _close(out, _ln_by_hand(stack.norm, expected))


@SETTINGS
@given(w=widths(), sizes=distinct(3), n=st.integers(1, 3), placement=st.sampled_from(["pre", "post"]))
def test_decoder_layer_and_stack_preserve_shape(w, sizes, n, placement):
    h, _, d_model = w
    batch, tgt_len, src_len = sizes
    layer = (
        T.DecoderLayer(d_model, _mha(h, d_model), _mha(h, d_model), _ffn(d_model, 11), 0.0, placement).double().eval()
    )
    x, memory = _randn(batch, tgt_len, d_model), _randn(batch, src_len, d_model)
    src_mask = torch.ones(batch, 1, src_len, dtype=torch.bool)
    src_mask[0, 0, -1] = False  # one padded memory position
    tgt_mask = T.subsequent_mask(tgt_len)
    out = layer(x, memory, src_mask, tgt_mask)
    assert out.shape == x.shape
    _close(out, _decoder_layer_by_hand(layer, placement, x, memory, src_mask, tgt_mask))
    stack = T.Decoder(layer, n).eval()
    expected = x
    for _ in range(n):
        expected = layer(expected, memory, src_mask, tgt_mask)
    out = stack(x, memory, src_mask, tgt_mask)
    assert out.shape == x.shape
    _close(out, _ln_by_hand(stack.norm, expected))


# --------------------------------------------------------------------------- 7-9 the data flow of the model


@settings(max_examples=15, deadline=None)
@given(w=widths(), sizes=distinct(5), placement=st.sampled_from(["pre", "post"]))
def test_model_data_flow(w, sizes, placement):
    """encode: (batch, src_len) -> (batch, src_len, d_model); decode: -> (batch, tgt_len, d_model);
    forward then the generator: tokens -> (batch, tgt_len, tgt_vocab) log-probabilities."""
    h, _, d_model = w
    batch, src_len, tgt_len, src_vocab, tgt_vocab = sizes
    positional = "sinusoidal" if d_model % 2 == 0 else "learned"  # odd widths need learned positions
    model = (
        T.make_model(
            src_vocab,
            tgt_vocab,
            N=1,
            d_model=d_model,
            d_ff=17,
            h=h,
            dropout=0.0,
            positional_encoding=positional,
            max_len=16,
            norm_placement=placement,
        )
        .double()
        .eval()
    )
    src = torch.randint(1, src_vocab, (batch, src_len))
    tgt = torch.randint(1, tgt_vocab, (batch, tgt_len))
    src_mask, tgt_mask = T.padding_mask(src, 0), T.target_mask(tgt, 0)
    memory = model.encode(src, src_mask)
    assert memory.shape == (batch, src_len, d_model)
    _close(memory, model.encoder(model.src_embed(src), src_mask))  # encode = encoder over the embedded source
    hidden = model.decode(memory, src_mask, tgt, tgt_mask)
    assert hidden.shape == (batch, tgt_len, d_model)
    _close(hidden, model.decoder(model.tgt_embed(tgt), memory, src_mask, tgt_mask))  # decode = decoder over it
    out = model(src, tgt, src_mask, tgt_mask)
    assert out.shape == (batch, tgt_len, d_model)
    _close(out, hidden)  # forward = decode(encode(src))
    log_p = model.generator(out)
    assert log_p.shape == (batch, tgt_len, tgt_vocab)
    _close(log_p, torch.log_softmax(_linear(model.generator.proj, out), -1))  # tokens -> log-probabilities
    _close(log_p.logsumexp(-1), torch.zeros(batch, tgt_len, dtype=F64))


def test_model_data_flow_refuses_swapped_source_and_target():
    """Distinct sizes make an argument mix-up visible: memory of the target's length is refused."""
    model = T.make_model(5, 7, N=1, d_model=6, d_ff=11, h=2, dropout=0.0).eval()
    src, tgt = torch.randint(1, 5, (2, 3)), torch.randint(1, 7, (2, 4))
    memory = model.encode(src, T.padding_mask(src, 0))
    with pytest.raises(TypeCheckError, match="argument 'src_mask' is bool\\[2,1,4\\]"):
        model.decode(memory, T.padding_mask(tgt, 0), tgt, T.target_mask(tgt, 0))


# --------------------------------------------------------------------------- 11-12 linear layers


@SETTINGS
@given(
    d_model=st.sampled_from(PRIMES),
    vocab=st.sampled_from((17, 19, 23)),
    lead=st.lists(st.sampled_from(PRIMES), max_size=3),
)
def test_linear_layers_change_only_the_last_dimension(d_model, vocab, lead):
    """Shapes, and values: each applies its formula to the last dimension, every leading position on its own."""
    x = _randn(*lead, d_model)
    gen, linear, norm = (
        T.Generator(d_model, vocab).double(),
        nn.Linear(d_model, vocab).double(),
        T.LayerNorm(d_model).double(),
    )
    assert gen(x).shape == (*lead, vocab) and linear(x).shape == (*lead, vocab) and norm(x).shape == x.shape
    _close(linear(x), x @ linear.weight.T + linear.bias)
    _close(gen(x), torch.log_softmax(_linear(gen.proj, x), -1))
    _close(norm(x), _ln_by_hand(norm, x))
    rows = x.reshape(-1, d_model)
    for f in (gen, linear, norm):
        _close(f(rows), f(x).reshape(rows.size(0), -1))


@SETTINGS
@given(d_model=st.sampled_from((4, 6, 10)), d_ff=st.sampled_from((11, 13)), lead=distinct(2))
def test_linear_layers_compose_when_dimensions_align(d_model, d_ff, lead):
    """FFN = W_2 . act . W_1: d_model -> d_ff -> d_model composes; a W_2 that does not return to
    d_model breaks the FFN's contract (and one whose input is not d_ff cannot be applied at all)."""
    ff = _ffn(d_model, d_ff)
    x = _randn(*lead, d_model)
    torch.testing.assert_close(ff(x), ff.w_2(torch.relu(ff.w_1(x))))
    ff.w_2 = nn.Linear(d_ff, d_model + 1).double()
    with pytest.raises(TypeCheckError, match="PositionwiseFeedForward.forward: the return value"):
        ff(x)
    ff.w_2 = nn.Linear(d_ff + 1, d_model).double()
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        ff(x)


# --------------------------------------------------------------------------- 13-14 embeddings


@SETTINGS
@given(d_model=st.sampled_from((2, 6, 10, 14)), vocab=st.sampled_from((5, 7, 11)), sizes=distinct(2))
def test_embeddings_have_d_model_features(d_model, vocab, sizes):
    batch, seq = sizes
    tokens = torch.randint(0, vocab, (batch, seq))
    emb = T.Embeddings(d_model, vocab)
    out = emb(tokens)
    assert out.shape == (batch, seq, d_model)
    _close(out, emb.lut.weight[tokens] * math.sqrt(d_model))  # section 3.4: the row of each token, times sqrt(d_model)
    with pytest.raises(TypeCheckError, match="argument 'x' is f32"):  # ids, not features
        T.Embeddings(d_model, vocab)(tokens.float())


@SETTINGS
@given(d_model=st.sampled_from((2, 6, 10)), max_len=st.sampled_from(PRIMES), data=st.data())
def test_positional_encoding_keeps_shape_up_to_max_len(d_model, max_len, data):
    seq = data.draw(st.integers(1, max_len))
    batch = data.draw(st.sampled_from(PRIMES))
    x = _randn(batch, seq, d_model)
    # section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i / d_model)), PE(pos, 2i + 1) = cos(pos / 10000^(2i / d_model))
    pos = torch.arange(seq, dtype=F64)[:, None]
    angle = pos / 10000.0 ** (torch.arange(0, d_model, 2, dtype=F64) / d_model)
    pe = torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).reshape(seq, d_model)
    out = T.PositionalEncoding(d_model, 0.0, max_len=max_len)(x)
    assert out.shape == x.shape
    torch.testing.assert_close(out, x + pe, rtol=0, atol=1e-5)  # the table is stored in float32
    learned = T.LearnedPositionalEncoding(d_model, 0.0, max_len=max_len).double()
    out = learned(x)
    assert out.shape == x.shape
    _close(out, x + learned.pe[:, :seq])
