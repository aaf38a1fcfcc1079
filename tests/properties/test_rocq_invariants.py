"""The six invariants of the Rocq specification (jwiegley/rocq-transformer), as run-time contracts.

Rocq enforces them with dependent types at compile time; we enforce each one with a contract
(jaxtyping + beartype through ``transformer.contracts.checked``, or a ValueError where the
invariant is not a shape). Every test here crafts a wrong input and checks that *our* clear
error is raised, naming the argument or the value; the positive side is drawn by hypothesis.

| Rocq invariant                                  | our contract                                            |
|-------------------------------------------------|---------------------------------------------------------|
| Q.K^T requires matching inner dimensions        | ``attention`` / ``scaled_dot_product_attention``: d_k   |
| multi-head splits d_model evenly (h | d_model)  | ``TransformerConfig``, ``MultiHeadedAttention.__init__`` |
| residual connections match shapes               | ``layers.residual`` (``*batch d_model`` twice)           |
| self-attention preserves [batch, seq, d_model]  | ``MultiHeadedAttention.forward`` return annotation       |
| each decode step adds exactly one token         | ``decoding.greedy_step`` (``batch t -> batch t+1``)     |
| sequence length <= max positional encoding      | ``validate_length`` in the positional encodings          |

The decoding-step invariant is tested in ``test_decoding_properties.py``.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import transformer as T
from transformer import TypeCheckError
from transformer.layers import residual

SETTINGS = settings(max_examples=20, deadline=None)
PRIMES = (2, 3, 5, 7, 11, 13)


# --------------------------------------------------------------------------- 1. Q.K^T inner dimensions


def test_qk_inner_dimensions_must_agree_in_the_reference():
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 3), torch.randn(2, 7, 8)
    with pytest.raises(TypeCheckError) as info:
        T.attention(q, k, v)
    first = str(info.value).splitlines()[0]
    assert "attention: argument 'key' is f32[2,7,3]" in first
    assert "d_k=8" in first  # the size bound by the query


def test_qk_inner_dimensions_must_agree_on_every_backend():
    q, k, v = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 7, 4), torch.randn(1, 2, 7, 8)
    for backend in ("eager", "torch"):  # the drop-in for F.scaled_dot_product_attention raises torch's error type
        with pytest.raises(RuntimeError, match=r"key's last dim \(E=4\) must equal query's \(E=8\)"):
            T.scaled_dot_product_attention(q, k, v, backend=backend)


def test_keys_and_values_must_have_the_same_length():
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 6, 8)
    with pytest.raises(TypeCheckError, match="argument 'value' is f32\\[2,6,8\\]"):
        T.attention(q, k, v)


def test_multi_head_attention_rejects_a_key_of_another_width():
    mha = T.MultiHeadedAttention(2, 8, 0.0)
    x = torch.randn(2, 5, 8)
    with pytest.raises(TypeCheckError, match="argument 'key' is f32\\[2,5,6\\]"):
        mha(x, torch.randn(2, 5, 6), x)


@SETTINGS
@given(st.lists(st.sampled_from(PRIMES), min_size=5, max_size=5, unique=True))
def test_attention_accepts_every_consistent_shape(sizes):
    batch, q_len, k_len, d_k, d_v = sizes
    q, k, v = (torch.randn(batch, n, d, dtype=torch.float64) for n, d in ((q_len, d_k), (k_len, d_k), (k_len, d_v)))
    out, p = T.attention(q, k, v)
    assert out.shape == (batch, q_len, d_v) and p.shape == (batch, q_len, k_len)
    # accepted, and computed: softmax(Q K^T / sqrt(d_k)) V
    torch.testing.assert_close(p, torch.softmax(q @ k.transpose(-1, -2) / d_k**0.5, -1), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out, p @ v, rtol=1e-12, atol=1e-12)
    with pytest.raises(TypeCheckError):  # and any other key width is refused
        T.attention(torch.randn(batch, q_len, d_k), torch.randn(batch, k_len, d_k + 1), torch.randn(batch, k_len, d_v))


# --------------------------------------------------------------------------- 2. heads divide d_model


@SETTINGS
@given(d_model=st.integers(1, 64), h=st.integers(1, 16))
def test_heads_must_divide_d_model(d_model, h):
    if d_model % h == 0:
        mha = T.MultiHeadedAttention(h, d_model, 0.0)
        assert mha.d_k * h == d_model
        config = T.TransformerConfig(
            src_vocab=5, tgt_vocab=5, d_model=d_model, n_heads=h, positional_encoding="learned"
        )
        assert config.d_k * h == d_model
    else:
        with pytest.raises(ValueError, match=f"h={h} does not divide d_model={d_model}"):
            T.MultiHeadedAttention(h, d_model, 0.0)
        with pytest.raises(ValueError, match=f"n_heads={h} does not divide d_model={d_model}"):
            T.TransformerConfig(src_vocab=5, tgt_vocab=5, d_model=d_model, n_heads=h, positional_encoding="learned")


def test_make_model_refuses_heads_that_do_not_divide():
    with pytest.raises(ValueError, match=r"n_heads=3 does not divide d_model=16 .* \[1, 2, 4, 8, 16\]"):
        T.make_model(5, 5, N=1, d_model=16, d_ff=8, h=3)


# --------------------------------------------------------------------------- 3. residual operands


def test_residual_operands_must_have_equal_shapes():
    with pytest.raises(TypeCheckError, match="residual: argument 'sublayer_out' is f32\\[2,5,7\\]"):
        residual(torch.randn(2, 5, 8), torch.randn(2, 5, 7))
    with pytest.raises(TypeCheckError, match="argument 'sublayer_out' is f32\\[2,4,8\\]"):
        residual(torch.randn(2, 5, 8), torch.randn(2, 4, 8))  # would broadcast? no: (5 vs 4) is refused too
    with pytest.raises(TypeCheckError, match="argument 'sublayer_out' is f32\\[1,5,8\\]"):
        residual(torch.randn(2, 5, 8), torch.randn(1, 5, 8))  # silent broadcasting over batch is refused


@pytest.mark.parametrize("placement", ["pre", "post"])
@pytest.mark.parametrize(
    "bad_sublayer",
    [lambda x: x[..., :-1], lambda x: x[:, :-1], lambda x: x[:1]],
    ids=["narrower", "shorter", "batch-1"],
)
def test_a_sublayer_that_changes_the_shape_is_refused(placement, bad_sublayer):
    sub = T.SublayerConnection(8, 0.0, placement)
    with pytest.raises(TypeCheckError, match="residual: argument 'sublayer_out'"):
        sub(torch.randn(2, 5, 8), bad_sublayer)


# ------------------------------------------------------------------------ 4. self-attention keeps (batch, seq, d_model)


def test_self_attention_refuses_an_input_of_the_wrong_width():
    mha = T.MultiHeadedAttention(2, 8, 0.0)
    x = torch.randn(2, 5, 6)
    with pytest.raises(TypeCheckError, match="argument 'query' is f32\\[2,5,6\\]"):
        mha(x, x, x)


def test_self_attention_whose_output_changes_shape_breaks_its_contract():
    """A wrong W^O (d_model -> d_model + 1) is caught by the return annotation, not downstream."""
    mha = T.MultiHeadedAttention(2, 8, 0.0)
    mha.out_proj = nn.Linear(8, 9)
    x = torch.randn(2, 5, 8)
    with pytest.raises(TypeCheckError) as info:
        mha(x, x, x)
    first = str(info.value).splitlines()[0]
    assert first.startswith(
        "MultiHeadedAttention.forward > MultiHeadedAttention.attend: the return value is f32[2,5,9]"
    )


def test_encoder_layer_refuses_a_mask_that_does_not_cover_the_sequence():
    layer = T.EncoderLayer(8, T.MultiHeadedAttention(2, 8, 0.0), T.PositionwiseFeedForward(8, 16, 0.0), 0.0)
    with pytest.raises(TypeCheckError, match="argument 'mask' is bool\\[2,1,4\\]"):
        layer(torch.randn(2, 5, 8), torch.ones(2, 1, 4, dtype=torch.bool))


# --------------------------------------------------------------------------- 6. sequence length <= max_len


@SETTINGS
@given(max_len=st.integers(1, 12), extra=st.integers(1, 5), learned=st.booleans())
def test_positional_encoding_refuses_sequences_longer_than_max_len(max_len, extra, learned):
    kind = T.LearnedPositionalEncoding if learned else T.PositionalEncoding
    pe = kind(6, 0.0, max_len=max_len)
    assert pe(torch.zeros(2, max_len, 6)).shape == (2, max_len, 6)  # the boundary is allowed
    too_long = max_len + extra
    with pytest.raises(ValueError, match=f"sequence length {too_long} exceeds max_len={max_len}"):
        pe(torch.zeros(2, too_long, 6))


def test_model_refuses_too_long_source_and_target():
    model = T.make_model(7, 7, N=1, d_model=8, d_ff=16, h=2, max_len=4).eval()
    ok_src, long_src = torch.randint(1, 7, (1, 4)), torch.randint(1, 7, (1, 5))
    ok_tgt, long_tgt = torch.randint(1, 7, (1, 4)), torch.randint(1, 7, (1, 5))
    assert model(ok_src, ok_tgt, None, T.subsequent_mask(4)).shape == (1, 4, 8)
    with pytest.raises(ValueError, match="sequence length 5 exceeds max_len=4"):
        model(long_src, ok_tgt, None, T.subsequent_mask(4))
    with pytest.raises(ValueError, match="sequence length 5 exceeds max_len=4"):
        model(ok_src, long_tgt, None, T.subsequent_mask(5))
