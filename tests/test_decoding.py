"""Greedy decoding (exact length, validation, one token per step), KV-cache equality, beam search."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer as T
from transformer.decoding import DecoderCache, beam_search, greedy_decode, greedy_step, next_token_log_probs


def _model(seed=0, **changes):
    torch.manual_seed(seed)
    base = dict(N=2, d_model=32, d_ff=64, h=4, dropout=0.0, max_len=64)
    base.update(changes)
    return T.make_model(11, 13, **base).eval()


def _src(batch=4, length=7, seed=0):
    src = torch.randint(1, 11, (batch, length), generator=torch.Generator().manual_seed(seed))
    src[0, length - 2 :] = 0
    return src, T.padding_mask(src, 0)


def tutorial_greedy_decode(model, src, src_mask, max_len, start_symbol):
    """The Annotated Transformer's greedy_decode (batch 1), our masks."""
    memory = model.encode(src, src_mask)
    ys = torch.zeros(1, 1).fill_(start_symbol).type_as(src.data)
    for _ in range(max_len - 1):
        out = model.decode(memory, src_mask, ys, T.subsequent_mask(ys.size(1)).type_as(src.data).bool())
        prob = model.generator(out[:, -1])
        _, next_word = torch.max(prob, dim=1)
        ys = torch.cat([ys, torch.zeros(1, 1).type_as(src.data).fill_(next_word.item())], dim=1)
    return ys


def test_greedy_equals_the_tutorials_loop():
    model = _model()
    src, mask = _src()
    ours = greedy_decode(model, src, mask, 12, 1)
    for i in range(src.size(0)):
        assert torch.equal(ours[i : i + 1], tutorial_greedy_decode(model, src[i : i + 1], mask[i : i + 1], 12, 1))


@settings(max_examples=25, deadline=None)
@given(max_len=st.integers(1, 20), end=st.sampled_from([None, 2, 5]), batch=st.integers(1, 4))
def test_greedy_output_has_exactly_the_promised_length(max_len, end, batch):
    model = _model()
    src, mask = _src(batch)
    out = greedy_decode(model, src, mask, max_len, 1, end_symbol=end)
    assert out.shape == (batch, max_len) and (out[:, 0] == 1).all()
    if end is not None:
        for row in out.tolist():
            if end in row[1:]:
                cut = row.index(end, 1)
                assert all(t == 0 for t in row[cut + 1 :])  # padded after the end symbol, not cut


def test_finished_rows_are_padded_with_pad_symbol():
    model = _model()
    src, mask = _src()
    free = greedy_decode(model, src, mask, 16, 1)
    end = int(free[0, 3])  # a token the first row certainly emits
    out = greedy_decode(model, src, mask, 16, 1, end_symbol=end, pad_symbol=12)
    row = out[0].tolist()
    first = row.index(end, 1)
    assert first <= 3 and row[: first + 1] == free[0, : first + 1].tolist()
    assert row[first + 1 :] == [12] * (16 - first - 1)


@pytest.mark.parametrize("bad", [0, -3, 65, 2.5, True])
@pytest.mark.parametrize("checks_on", [True, False])
def test_greedy_validates_max_len(bad, checks_on):
    model = _model()
    src, mask = _src()
    # with contracts on, beartype may reject a non-int first (its message names max_len too)
    expected = (ValueError, T.TypeCheckError) if checks_on else ValueError
    with T.checks(checks_on), pytest.raises(expected, match="max_len"):
        greedy_decode(model, src, mask, bad, 1)


def test_greedy_and_beam_validate_symbols():
    model = _model()
    src, mask = _src()
    with pytest.raises(ValueError, match="start_symbol=13"):
        greedy_decode(model, src, mask, 5, 13)
    for decode in (greedy_decode, beam_search):
        with pytest.raises(ValueError, match=r"pad_symbol=-1 must be a token id in \[0, "):
            decode(model, src, mask, 5, 1, end_symbol=2, pad_symbol=-1)


def test_each_step_adds_exactly_one_token_contract():
    model = _model()
    src, mask = _src()
    memory = model.encode(src, mask)
    ys = torch.ones(src.size(0), 3, dtype=torch.long)
    assert greedy_step(model, memory, mask, ys).shape == (src.size(0), 4)
    # the contract "batch steps -> batch steps+1" is a checked annotation
    annotation = greedy_step.__wrapped__.__annotations__["return"]
    assert "steps+1" in str(annotation)
    # a cache that is out of step with ys is refused
    cache = DecoderCache(model, memory, mask)
    with pytest.raises(ValueError, match="holds 0 positions"):
        next_token_log_probs(model, memory, mask, ys, cache)


@pytest.mark.parametrize(
    "changes",
    [dict(), dict(norm_placement="post"), dict(positional_encoding="learned", tie_weights="target"), dict(N=3, h=2)],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_incremental_decoding_equals_full_recompute(changes, seed):
    model = _model(seed, **changes)
    src, mask = _src(5, 9, seed)
    cached = greedy_decode(model, src, mask, 30, 1, use_cache=True)
    full = greedy_decode(model, src, mask, 30, 1, use_cache=False)
    assert torch.equal(cached, full)
    with_end = dict(end_symbol=int(full[1, 4]))
    assert torch.equal(greedy_decode(model, src, mask, 30, 1, **with_end), greedy_decode(model, src, mask, 30, 1, use_cache=False, **with_end))
    # and the log-probabilities agree step by step, not just their argmax
    memory = model.encode(src, mask)
    cache = DecoderCache(model, memory, mask)
    with torch.no_grad():
        for t in range(1, 12):
            ys = full[:, :t]
            a = next_token_log_probs(model, memory, mask, ys, cache)
            b = next_token_log_probs(model, memory, mask, ys)
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_beam_size_one_equals_greedy():
    for seed in range(3):
        model = _model(seed)
        src, mask = _src(4, 7, seed)
        greedy = greedy_decode(model, src, mask, 15, 1)
        assert torch.equal(beam_search(model, src, mask, 15, 1, beam_size=1).tokens, greedy)
        end = int(greedy[2, 3])
        greedy_end = greedy_decode(model, src, mask, 15, 1, end_symbol=end)
        beam_end = beam_search(model, src, mask, 15, 1, end_symbol=end, beam_size=1, length_penalty=0.6)
        assert torch.equal(beam_end.tokens, greedy_end)


def _sequence_log_prob(model, src, mask, ys, end):
    memory = model.encode(src, mask)
    total = 0.0
    with torch.no_grad():
        for t in range(1, ys.size(1)):
            total += float(next_token_log_probs(model, memory, mask, ys[:, :t])[0, ys[0, t]])
            if end is not None and int(ys[0, t]) == end:
                break
    return total


def test_wider_beams_find_hypotheses_at_least_as_likely_as_greedy():
    model = _model(3)
    src, mask = _src(3, 6, 3)
    end = 2
    for i in range(3):
        s, m = src[i : i + 1], mask[i : i + 1]
        greedy = greedy_decode(model, s, m, 8, 1, end_symbol=end)
        beam = beam_search(model, s, m, 8, 1, end_symbol=end, beam_size=5)
        assert beam.tokens.shape == (1, 8)
        g, b = _sequence_log_prob(model, s, m, greedy, end), _sequence_log_prob(model, s, m, beam.tokens, end)
        if end in greedy[0, 1:].tolist() and end in beam.tokens[0, 1:].tolist():
            assert b >= g - 1e-4
        assert beam.scores[0].item() == pytest.approx(b, abs=1e-3) or end not in beam.tokens[0, 1:].tolist()


def test_cached_beam_equals_uncached_beam():
    model = _model(4)
    src, mask = _src(3, 6, 4)
    a = beam_search(model, src, mask, 12, 1, end_symbol=2, beam_size=3, length_penalty=1.0)
    b = beam_search(model, src, mask, 12, 1, end_symbol=2, beam_size=3, length_penalty=1.0, use_cache=False)
    assert torch.equal(a.tokens, b.tokens)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, src, mask, 12, 1, beam_size=0)
