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
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import transformer as T
from transformer import TypeCheckError

SETTINGS = settings(max_examples=20, deadline=None)
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
    return T.MultiHeadedAttention(h, d_model, 0.0).eval()


def _ffn(d_model: int, d_ff: int) -> T.PositionwiseFeedForward:
    return T.PositionwiseFeedForward(d_model, d_ff, 0.0).eval()


# --------------------------------------------------------------------------- 1-2 attention


@SETTINGS
@given(widths(), distinct(2))
def test_self_attention_preserves_shape(w, sizes):
    h, _, d_model = w
    batch, seq = sizes
    x = torch.randn(batch, seq, d_model)
    causal = T.subsequent_mask(seq)
    assert _mha(h, d_model)(x, x, x, causal).shape == (batch, seq, d_model)


@SETTINGS
@given(widths(), distinct(3))
def test_cross_attention_follows_the_query_length(w, sizes):
    h, _, d_model = w
    batch, q_len, k_len = sizes
    q, m = torch.randn(batch, q_len, d_model), torch.randn(batch, k_len, d_model)
    mask = torch.rand(batch, 1, k_len) > 0.3
    assert _mha(h, d_model)(q, m, m, mask).shape == (batch, q_len, d_model)


# --------------------------------------------------------------------------- 3-4 FFN and sublayer


@SETTINGS
@given(w=widths(), d_ff=st.sampled_from((11, 13, 17)), lead=st.lists(st.sampled_from(PRIMES), max_size=3))
def test_feed_forward_preserves_shape(w, d_ff, lead):
    d_model = w[2]
    x = torch.randn(*lead, d_model)  # any leading dimensions, even none
    ff = _ffn(d_model, d_ff)
    assert ff(x).shape == x.shape
    assert ff.w_1(x).shape == (*lead, d_ff)  # the inner expansion is d_ff wide


@SETTINGS
@given(w=widths(), sizes=distinct(2), placement=st.sampled_from(["pre", "post"]))
def test_sublayer_connection_preserves_shape(w, sizes, placement):
    h, _, d_model = w
    batch, seq = sizes
    x = torch.randn(batch, seq, d_model)
    sub = T.SublayerConnection(d_model, 0.0, placement)
    assert sub(x, _ffn(d_model, 11)).shape == x.shape
    mha = _mha(h, d_model)
    assert sub(x, lambda y: mha(y, y, y)).shape == x.shape


# --------------------------------------------------------------------------- 5-6 layers and stacks


@SETTINGS
@given(w=widths(), sizes=distinct(2), n=st.integers(1, 3), placement=st.sampled_from(["pre", "post"]))
def test_encoder_layer_and_stack_preserve_shape(w, sizes, n, placement):
    h, _, d_model = w
    batch, src_len = sizes
    layer = T.EncoderLayer(d_model, _mha(h, d_model), _ffn(d_model, 11), 0.0, placement).eval()
    x = torch.randn(batch, src_len, d_model)
    mask = torch.ones(batch, 1, src_len, dtype=torch.bool)
    assert layer(x, mask).shape == x.shape
    assert T.Encoder(layer, n).eval()(x, mask).shape == x.shape


@SETTINGS
@given(w=widths(), sizes=distinct(3), n=st.integers(1, 3), placement=st.sampled_from(["pre", "post"]))
def test_decoder_layer_and_stack_preserve_shape(w, sizes, n, placement):
    h, _, d_model = w
    batch, tgt_len, src_len = sizes
    layer = T.DecoderLayer(d_model, _mha(h, d_model), _mha(h, d_model), _ffn(d_model, 11), 0.0, placement).eval()
    x, memory = torch.randn(batch, tgt_len, d_model), torch.randn(batch, src_len, d_model)
    src_mask = torch.ones(batch, 1, src_len, dtype=torch.bool)
    tgt_mask = T.subsequent_mask(tgt_len)
    assert layer(x, memory, src_mask, tgt_mask).shape == x.shape
    assert T.Decoder(layer, n).eval()(x, memory, src_mask, tgt_mask).shape == x.shape


# --------------------------------------------------------------------------- 7-9 the data flow of the model


@settings(max_examples=15, deadline=None)
@given(w=widths(), sizes=distinct(5), placement=st.sampled_from(["pre", "post"]))
def test_model_data_flow(w, sizes, placement):
    """encode: (batch, src_len) -> (batch, src_len, d_model); decode: -> (batch, tgt_len, d_model);
    forward then the generator: tokens -> (batch, tgt_len, tgt_vocab) log-probabilities."""
    h, _, d_model = w
    batch, src_len, tgt_len, src_vocab, tgt_vocab = sizes
    positional = "sinusoidal" if d_model % 2 == 0 else "learned"  # odd widths need learned positions
    model = T.make_model(src_vocab, tgt_vocab, N=1, d_model=d_model, d_ff=17, h=h, dropout=0.0,
                         positional_encoding=positional, max_len=16, norm_placement=placement).eval()
    src = torch.randint(1, src_vocab, (batch, src_len))
    tgt = torch.randint(1, tgt_vocab, (batch, tgt_len))
    src_mask, tgt_mask = T.padding_mask(src, 0), T.target_mask(tgt, 0)
    memory = model.encode(src, src_mask)
    assert memory.shape == (batch, src_len, d_model)
    hidden = model.decode(memory, src_mask, tgt, tgt_mask)
    assert hidden.shape == (batch, tgt_len, d_model)
    out = model(src, tgt, src_mask, tgt_mask)
    assert out.shape == (batch, tgt_len, d_model)
    assert model.generator(out).shape == (batch, tgt_len, tgt_vocab)


def test_model_data_flow_refuses_swapped_source_and_target():
    """Distinct sizes make an argument mix-up visible: memory of the target's length is refused."""
    model = T.make_model(5, 7, N=1, d_model=6, d_ff=11, h=2, dropout=0.0).eval()
    src, tgt = torch.randint(1, 5, (2, 3)), torch.randint(1, 7, (2, 4))
    memory = model.encode(src, T.padding_mask(src, 0))
    with pytest.raises(TypeCheckError, match="argument 'src_mask' is bool\\[2,1,4\\]"):
        model.decode(memory, T.padding_mask(tgt, 0), tgt, T.target_mask(tgt, 0))


# --------------------------------------------------------------------------- 11-12 linear layers


@SETTINGS
@given(d_model=st.sampled_from(PRIMES), vocab=st.sampled_from((17, 19, 23)), lead=st.lists(st.sampled_from(PRIMES), max_size=3))
def test_linear_layers_change_only_the_last_dimension(d_model, vocab, lead):
    x = torch.randn(*lead, d_model)
    assert T.Generator(d_model, vocab)(x).shape == (*lead, vocab)
    assert nn.Linear(d_model, vocab)(x).shape == (*lead, vocab)
    assert T.LayerNorm(d_model)(x).shape == x.shape


@SETTINGS
@given(d_model=st.sampled_from((4, 6, 10)), d_ff=st.sampled_from((11, 13)), lead=distinct(2))
def test_linear_layers_compose_when_dimensions_align(d_model, d_ff, lead):
    """FFN = W_2 . act . W_1: d_model -> d_ff -> d_model composes; a W_2 that does not return to
    d_model breaks the FFN's contract (and one whose input is not d_ff cannot be applied at all)."""
    ff = _ffn(d_model, d_ff)
    x = torch.randn(*lead, d_model)
    torch.testing.assert_close(ff(x), ff.w_2(torch.relu(ff.w_1(x))))
    ff.w_2 = nn.Linear(d_ff, d_model + 1)
    with pytest.raises(TypeCheckError, match="PositionwiseFeedForward.forward: the return value"):
        ff(x)
    ff.w_2 = nn.Linear(d_ff + 1, d_model)
    with pytest.raises(RuntimeError):
        ff(x)


# --------------------------------------------------------------------------- 13-14 embeddings


@SETTINGS
@given(d_model=st.sampled_from((2, 6, 10, 14)), vocab=st.sampled_from((5, 7, 11)), sizes=distinct(2))
def test_embeddings_have_d_model_features(d_model, vocab, sizes):
    batch, seq = sizes
    tokens = torch.randint(0, vocab, (batch, seq))
    assert T.Embeddings(d_model, vocab)(tokens).shape == (batch, seq, d_model)
    with pytest.raises(TypeCheckError, match="argument 'x' is f32"):  # ids, not features
        T.Embeddings(d_model, vocab)(tokens.float())


@SETTINGS
@given(d_model=st.sampled_from((2, 6, 10)), max_len=st.sampled_from(PRIMES), data=st.data())
def test_positional_encoding_keeps_shape_up_to_max_len(d_model, max_len, data):
    seq = data.draw(st.integers(1, max_len))
    batch = data.draw(st.sampled_from(PRIMES))
    x = torch.randn(batch, seq, d_model)
    for kind in (T.PositionalEncoding, T.LearnedPositionalEncoding):
        assert kind(d_model, 0.0, max_len=max_len)(x).shape == x.shape
