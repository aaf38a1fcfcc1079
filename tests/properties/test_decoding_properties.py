"""Rocq's decoding guarantees: greedy decoding yields exactly the requested length, and each step
extends the sequence by exactly one token (``Tensor2D batch n -> Tensor2D batch (S n)``).

Our contracts: ``greedy_step`` is annotated ``Int[Tensor, "batch t"] -> Int[Tensor, "batch t+1"]``
and also checks the length with an explicit ValueError (so the invariant holds with checks off);
``greedy_decode`` returns ``Int[Tensor, "batch {max_len}"]`` and refuses a ``max_len`` above the
model's positional ``max_len`` (invariant 6 applied to generation).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer as T
from transformer import decoding
from transformer.decoding import greedy as greedy_module  # where append_token looks torch up

SETTINGS = settings(max_examples=15, deadline=None)
MODEL_MAX_LEN = 9


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return T.make_model(7, 11, N=1, d_model=8, d_ff=16, h=2, dropout=0.0, max_len=MODEL_MAX_LEN).eval()


@SETTINGS
@given(
    batch=st.integers(1, 3),
    src_len=st.integers(1, 5),
    max_len=st.integers(1, MODEL_MAX_LEN),
    use_cache=st.booleans(),
    end_step=st.one_of(st.none(), st.integers(1, MODEL_MAX_LEN - 1)),
)
def test_greedy_decode_yields_exactly_the_requested_length(model, batch, src_len, max_len, use_cache, end_step):
    """Exactly max_len tokens, and the right ones: the first max_len tokens of the longest decode (the start
    symbol counts as the first); with an end symbol, that decode up to its first end symbol, then padding.
    The end symbol is the token row 0 emits at ``end_step`` of the longest decode, so when end_step < max_len
    row 0 certainly ends (asserted)."""
    src = torch.randint(1, 7, (batch, src_len))
    mask = T.padding_mask(src, 0)
    longest = decoding.greedy_decode(model, src, mask, MODEL_MAX_LEN, 1, use_cache=False).tolist()
    end = None if end_step is None else longest[0][end_step]
    ys = decoding.greedy_decode(model, src, mask, max_len, 1, end, use_cache=use_cache)
    assert ys.shape == (batch, max_len) and ys.dtype == src.dtype
    for row, full in zip(ys.tolist(), longest, strict=True):
        first = full.index(end, 1) if end is not None and end in full[1:max_len] else max_len - 1
        assert row == full[: first + 1] + [0] * (max_len - 1 - first)  # pad id 0 (the config's) after the end
    if end_step is not None and end_step < max_len:
        assert end in ys[0, 1:].tolist()


@SETTINGS
@given(batch=st.integers(1, 3), steps=st.integers(1, MODEL_MAX_LEN - 1), use_cache=st.booleans())
def test_each_decoding_step_extends_by_exactly_one(model, batch, steps, use_cache):
    """Each greedy_step keeps the prefix and appends one token: the most probable next token, recomputed here
    with model.decode and model.generator; the steps are greedy_decode's (with or without its cache)."""
    src = torch.randint(1, 7, (batch, 4))
    src_mask = T.padding_mask(src, 0)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        ys = torch.ones(batch, 1, dtype=torch.long)
        for t in range(1, steps + 1):
            longer = decoding.greedy_step(model, memory, src_mask, ys)
            assert longer.shape == (batch, t + 1)
            assert torch.equal(longer[:, :t], ys)  # the prefix is kept
            log_p = model.generator(model.decode(memory, src_mask, ys, T.subsequent_mask(t))[:, -1])
            assert torch.equal(longer[:, t], log_p.argmax(-1))  # ... and the one token added is the argmax
            ys = longer
    # the steps are greedy_decode's steps
    assert torch.equal(ys, decoding.greedy_decode(model, src, src_mask, steps + 1, 1, use_cache=use_cache))


def test_greedy_decode_refuses_lengths_beyond_the_positional_encoding(model):
    src = torch.randint(1, 7, (1, 3))
    with pytest.raises(ValueError, match=f"max_len={MODEL_MAX_LEN + 1} exceeds the model's max_len={MODEL_MAX_LEN}"):
        decoding.greedy_decode(model, src, None, MODEL_MAX_LEN + 1, 1)
    with pytest.raises(ValueError, match="max_len must be positive"):
        decoding.greedy_decode(model, src, None, 0, 1)


class _TorchAppendingTwice:
    """``torch`` as seen by transformer.decoding.greedy, except that concatenating token ids along the
    sequence axis appends the last token twice: a step that extends by two."""

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def cat(tensors, dim=0):
        out = torch.cat(tensors, dim=dim)
        if dim == 1 and not out.is_floating_point():
            out = torch.cat([out, out[:, -1:]], dim=1)
        return out


@pytest.mark.parametrize("checks_on", [True, False])
def test_a_step_that_adds_two_tokens_is_refused(model, monkeypatch, checks_on):
    src = torch.randint(1, 7, (2, 4))
    src_mask = T.padding_mask(src, 0)
    memory = model.encode(src, src_mask)
    ys = torch.ones(2, 3, dtype=torch.long)
    monkeypatch.setattr(greedy_module, "torch", _TorchAppendingTwice())
    with T.checks(checks_on), pytest.raises(ValueError, match="greedy_step must add exactly one token: 3 -> 5"):
        decoding.greedy_step(model, memory, src_mask, ys)


@pytest.mark.parametrize("checks_on", [True, False])
def test_greedy_decode_that_overshoots_is_refused(model, monkeypatch, checks_on):
    src = torch.randint(1, 7, (2, 4))
    monkeypatch.setattr(greedy_module, "torch", _TorchAppendingTwice())
    with T.checks(checks_on), pytest.raises(ValueError, match="greedy_step must add exactly one token"):
        decoding.greedy_decode(model, src, T.padding_mask(src, 0), 4, 1, use_cache=False)


@settings(max_examples=8, deadline=None)
@given(batch=st.integers(1, 3), max_len=st.integers(2, MODEL_MAX_LEN), use_cache=st.booleans())
def test_each_greedy_token_is_the_most_probable_next_token(model, batch, max_len, use_cache):
    """Recomputed from scratch with the full model: token t is argmax p(. | src, ys[:, :t])."""
    src = torch.randint(1, 7, (batch, 5))
    src[0, 3:] = 0
    src_mask = T.padding_mask(src, 0)
    ys = decoding.greedy_decode(model, src, src_mask, max_len, 1, use_cache=use_cache)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        for t in range(1, max_len):
            prefix = ys[:, :t]
            log_p = model.generator(model.decode(memory, src_mask, prefix, T.subsequent_mask(t))[:, -1])
            assert torch.equal(ys[:, t], log_p.argmax(-1))
