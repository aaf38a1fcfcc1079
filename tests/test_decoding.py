"""Greedy decoding (exact length, validation, one token per step), KV-cache equality, beam search."""

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import transformer as T
from transformer.decoding import beam_search, greedy_decode, greedy_step, next_token_log_probs


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
@given(max_len=st.integers(1, 20), end_step=st.one_of(st.none(), st.integers(1, 19)), batch=st.integers(1, 4))
def test_greedy_output_has_exactly_the_promised_length(max_len, end_step, batch):
    """(batch, max_len) always; the free decode's first max_len tokens; with an end symbol, padded
    (never cut) after it. The end symbol is a token the first row emits at ``end_step``, so the
    end path is taken on every example that has one (asserted)."""
    model = _model()
    src, mask = _src(batch)
    free = greedy_decode(model, src, mask, 20, 1)  # the longest decode: every shorter one is its prefix
    end = None if end_step is None or end_step >= max_len else int(free[0, end_step])
    out = greedy_decode(model, src, mask, max_len, 1, end_symbol=end)
    assert out.shape == (batch, max_len) and (out[:, 0] == 1).all()
    if end is None:
        assert torch.equal(out, free[:, :max_len])
        return
    assert end in out[0, 1:].tolist()  # the end path is taken on row 0 by construction
    for row, free_row in zip(out.tolist(), free[:, :max_len].tolist(), strict=True):
        cut = free_row.index(end, 1) if end in free_row[1:] else max_len - 1
        assert row[: cut + 1] == free_row[: cut + 1]  # the free decode up to its first end symbol ...
        assert row[cut + 1 :] == [0] * (max_len - cut - 1)  # ... then the config's pad id, never cut


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
    cache = model.new_cache()
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
    assert torch.equal(
        greedy_decode(model, src, mask, 30, 1, **with_end),
        greedy_decode(model, src, mask, 30, 1, use_cache=False, **with_end),
    )
    # and the log-probabilities agree step by step, not just their argmax
    memory = model.encode(src, mask)
    cache = model.new_cache()
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


def test_cached_beam_equals_uncached_beam():
    """Same tokens and scores with and without the cache; the generator favours the end symbol, so every
    returned hypothesis ends (asserted) and the cache is reordered across finished and live hypotheses."""
    model = _favouring(_model(4), END, 1.5)
    src, mask = _src(3, 6, 4)
    a = beam_search(model, src, mask, 12, 1, end_symbol=END, beam_size=3, length_penalty=1.0)
    b = beam_search(model, src, mask, 12, 1, end_symbol=END, beam_size=3, length_penalty=1.0, use_cache=False)
    assert all(END in row[1:] for row in a.tokens.tolist())
    assert torch.equal(a.tokens, b.tokens)
    torch.testing.assert_close(a.scores, b.scores, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, src, mask, 12, 1, beam_size=0)


# ---------------------------------------------------------------- greedy: rows that end
def test_greedy_pads_a_row_that_ended_while_another_row_goes_on():
    """A finished row gets ``pad_symbol`` at every later step while the batch goes on decoding.

    The end symbol is a token that row ``i`` emits within 5 steps and row ``j`` never emits, so row
    ``i`` ends while row ``j`` runs to max_len (the per-row masking path, not the all-rows-ended
    shortcut). Every row is the free decode up to its first end symbol, then padding."""
    model = _model()
    src, mask = _src()
    free = greedy_decode(model, src, mask, 16, 1).tolist()
    choices = [
        (i, j, free[i][t])
        for i in range(4)
        for j in range(4)
        for t in range(1, 6)
        if i != j and free[i][t] not in free[j][1:]
    ]
    assert choices, "the data must offer a token that ends one row and never another"
    i, j, end = choices[0]
    out = greedy_decode(model, src, mask, 16, 1, end_symbol=end, pad_symbol=12).tolist()
    for r in range(4):
        first = free[r].index(end, 1) if end in free[r][1:] else 15
        assert out[r] == free[r][: first + 1] + [12] * (15 - first), r
    assert end in out[i][1:6] and out[j] == free[j]  # row i ended early; row j never ends, to max_len


def test_greedy_pads_the_rest_once_every_row_has_ended():
    """With one row, the end symbol finishes the batch: the rest is ``pad_symbol`` (the shortcut path)."""
    model = _model(1)
    src, mask = _src(1, 7, 1)
    free = greedy_decode(model, src, mask, 16, 1).tolist()[0]
    end = free[2]
    first = free.index(end, 1)
    assert first <= 2
    out = greedy_decode(model, src, mask, 16, 1, end_symbol=end, pad_symbol=12).tolist()[0]
    assert out == free[: first + 1] + [12] * (16 - first - 1)


# ---------------------------------------------------------------- beam search: scores, width, optimum
#
# Everything below is checked against computations written here from model.encode, model.decode
# and model.generator only (full recompute of every prefix), not against decoding.py's helpers.


def _length_penalty(generated: int, alpha: float) -> float:
    """GNMT: lp(Y) = ((5 + |Y|) / 6) ** alpha, |Y| = generated tokens (the end symbol counts, the start does not)."""
    return ((5.0 + generated) / 6.0) ** alpha


def _prefix_log_probs(model, memory, mask, ys):
    """log p(. | src, ys) after every row of ys (n, t), recomputed from scratch: a list of n lists of vocab floats."""
    n = ys.size(0)
    m = None if mask is None else mask.expand(n, -1, -1)
    out = model.decode(memory.expand(n, -1, -1), m, ys, T.subsequent_mask(ys.size(1)))
    return model.generator(out[:, -1]).double().tolist()


def _recomputed_log_prob(model, src, mask, tokens):
    """log P(tokens[1:] | src, tokens[0]): each token's log-probability from a full decode of its prefix."""
    with torch.no_grad():
        memory = model.encode(src, mask)
        return sum(
            _prefix_log_probs(model, memory, mask, torch.tensor([tokens[:t]]))[0][tokens[t]]
            for t in range(1, len(tokens))
        )


def _hypothesis(row, end):
    """The hypothesis in an output row: up to and including its first end symbol, else the whole row."""
    return row[: row.index(end, 1) + 1] if end is not None and end in row[1:] else row


def reference_beam_search(
    model, src, mask, max_len, start, end, beam_size, alpha, stop_early=True, drop_live_at_max_len=False
):
    """beam_search's docstring, written out plainly for one source (1, src_len), by full recompute.

    Each step extends every live hypothesis by every token and walks the candidates from the most
    probable down: one ending in ``end`` is finished (scored log P / lp(|Y|)), any other stays live,
    until ``beam_size`` live hypotheses are kept (the beam stays full). The search stops early when
    ``beam_size`` hypotheses have finished (the live ones are then dropped); when max_len tokens are
    reached, the live hypotheses compete with the same normalisation. Returns (score, tokens).
    Variants, to show that the data tells them apart: ``stop_early=False`` never stops early;
    ``drop_live_at_max_len=True`` also drops the live hypotheses when beam_size finish on the last step.
    """
    with torch.no_grad():
        memory = model.encode(src, mask)
        live = [((start,), 0.0)]
        finished = []
        while len(live[0][0]) < max_len:
            log_p = _prefix_log_probs(model, memory, mask, torch.tensor([tokens for tokens, _ in live]))
            candidates = sorted(
                (
                    (score + row[v], tokens + (v,))
                    for (tokens, score), row in zip(live, log_p, strict=True)
                    for v in range(len(row))
                ),
                key=lambda c: -c[0],
            )
            live = []
            for score, tokens in candidates:
                if end is not None and tokens[-1] == end:
                    finished.append((score / _length_penalty(len(tokens) - 1, alpha), tokens))
                else:
                    live.append((tokens, score))
                if len(live) == beam_size:
                    break
            reached_max_len = bool(live) and len(live[0][0]) == max_len and not drop_live_at_max_len
            if not live or (stop_early and len(finished) >= beam_size and not reached_max_len):
                live = []
                break
        finished += [(score / _length_penalty(len(tokens) - 1, alpha), tokens) for tokens, score in live]
        return max(finished, key=lambda f: f[0])


def _favouring(model, token, bias):
    """The model with ``bias`` added to ``token``'s logit: the token (an end symbol) becomes likely at every step."""
    with torch.no_grad():
        model.generator.proj.bias[token] += bias
    return model


END, PAD = 5, 12


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, 2.0])
@pytest.mark.parametrize("with_end", [False, True], ids=["no-end", "end"])
def test_beam_scores_are_the_gnmt_length_normalised_log_probability(alpha, with_end):
    """score = log P(Y) / ((5 + |Y|) / 6) ** alpha, log P(Y) recomputed token by token from scratch,
    |Y| the generated tokens with the end symbol and without the start symbol (Wu et al. 2016).

    With an end symbol the generator favours it, so every returned hypothesis ends (asserted) at
    various lengths; the tail after it is ``pad_symbol``. Without one, |Y| = max_len - 1."""
    max_len, lengths = 12, set()
    end = END if with_end else None
    for seed in (0, 1, 2):
        model = _model(seed)
        if with_end:
            _favouring(model, END, 1.5)
        src, mask = _src(4, 6, seed)
        with T.checks(False):
            result = beam_search(model, src, mask, max_len, 1, end, beam_size=3, length_penalty=alpha, pad_symbol=PAD)
        assert result.tokens.shape == (4, max_len) and result.scores.shape == (4,)
        for b, row in enumerate(result.tokens.tolist()):
            tokens = _hypothesis(row, end)
            if with_end:
                assert tokens[-1] == END, f"source {b} (seed {seed}): the end path must be taken"
                assert row[len(tokens) :] == [PAD] * (max_len - len(tokens))
            else:
                assert len(tokens) == max_len
            log_p = _recomputed_log_prob(model, src[b : b + 1], mask[b : b + 1], tokens)
            expected = log_p / _length_penalty(len(tokens) - 1, alpha)
            assert result.scores[b].item() == pytest.approx(expected, abs=1e-4), (seed, b, tokens)
            lengths.add(len(tokens))
    if with_end:
        assert len(lengths) >= 3, f"the data should end hypotheses at several lengths, got {sorted(lengths)}"


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_beam_search_equals_a_plain_reference_beam_search(seed):
    """Tokens and scores equal :func:`reference_beam_search`'s for several widths, penalties and
    end symbols: the beam keeps exactly ``beam_size`` live hypotheses, finished ones compete as
    documented. The end symbol is what greedy row 1 emits at step 2, so finished hypotheses occur
    (asserted); the widths disagree somewhere (asserted), so a wrong width is visible; and over the
    seeds, stopping early (beam_size finished) changes some result (asserted in the test after this)."""
    model = _model(seed)
    src, mask = _src(3, 6, seed)
    max_len = 9
    free = greedy_decode(model, src, mask, max_len, 1)
    ended, per_width = 0, {}
    with T.checks(False):
        for end in (None, int(free[1, 2])):
            for alpha in (0.0, 2.0):
                for beam_size in (2, 3, 5):
                    result = beam_search(model, src, mask, max_len, 1, end, beam_size=beam_size, length_penalty=alpha)
                    for b in range(src.size(0)):
                        score, tokens = reference_beam_search(
                            model, src[b : b + 1], mask[b : b + 1], max_len, 1, end, beam_size, alpha
                        )
                        expected = list(tokens) + [0] * (max_len - len(tokens))
                        assert result.tokens[b].tolist() == expected, (end, alpha, beam_size, b)
                        assert result.scores[b].item() == pytest.approx(score, abs=1e-4), (end, alpha, beam_size, b)
                        ended += end is not None and tokens[-1] == end
                        per_width.setdefault((end, alpha, b), set()).add(tokens)
    assert ended > 0, "some hypotheses must finish with the end symbol"
    assert any(len(found) > 1 for found in per_width.values()), "the widths must give different results somewhere"


def test_the_reference_data_can_tell_when_the_search_stops_early():
    """Guard for the test above: on its sources, searching on after ``beam_size`` hypotheses have finished
    would change some result, so a search that never stops early (or stops at the wrong count) is caught."""
    differ = 0
    with T.checks(False):
        for seed in (0, 1, 2, 3):
            model = _model(seed)
            src, mask = _src(3, 6, seed)
            end = int(greedy_decode(model, src, mask, 9, 1)[1, 2])
            for beam_size in (2, 3, 5):
                for b in range(3):
                    args = (model, src[b : b + 1], mask[b : b + 1], 9, 1, end, beam_size, 2.0)
                    differ += reference_beam_search(*args)[1] != reference_beam_search(*args, stop_early=False)[1]
    assert differ > 0


def test_beam_width_one_is_greedy_with_its_score():
    """beam_size = 1 keeps one live hypothesis: greedy's tokens, scored by greedy's own log-probability."""
    model = _model(2)
    src, mask = _src(3, 6, 2)
    free = greedy_decode(model, src, mask, 10, 1)
    end = int(free[0, 3])
    for alpha in (0.0, 0.6):
        greedy = greedy_decode(model, src, mask, 10, 1, end_symbol=end)
        beam = beam_search(model, src, mask, 10, 1, end, beam_size=1, length_penalty=alpha)
        assert torch.equal(beam.tokens, greedy)
        tokens = _hypothesis(greedy[0].tolist(), end)
        assert tokens[-1] == end  # row 0 ends by construction
        expected = _recomputed_log_prob(model, src[:1], mask[:1], tokens) / _length_penalty(len(tokens) - 1, alpha)
        assert beam.scores[0].item() == pytest.approx(expected, abs=1e-4)


def _exhaustive_optimum(model, src, mask, max_len, start, end, alpha, vocab):
    """Every hypothesis of at most max_len tokens, scored like beam search's: (best score, its tokens, all scores)."""
    with torch.no_grad():
        memory = model.encode(src, mask)
        rows = torch.tensor([(start, *rest) for rest in itertools.product(range(vocab), repeat=max_len - 1)])
        step_log_p = torch.stack(
            [
                torch.tensor(_prefix_log_probs(model, memory, mask, rows[:, :t]), dtype=torch.float64)
                .gather(1, rows[:, t : t + 1])
                .squeeze(1)
                for t in range(1, max_len)
            ],
            dim=1,
        )
    prefix = step_log_p.cumsum(1).tolist()
    scores = {}
    for row, cum in zip(rows.tolist(), prefix, strict=True):
        tokens = tuple(_hypothesis(row, end))
        scores[tokens] = cum[len(tokens) - 2] / _length_penalty(len(tokens) - 1, alpha)
    best = max(scores, key=scores.get)
    return scores[best], best, scores


@pytest.mark.parametrize("alpha", [0.0, 1.0])
@pytest.mark.parametrize("end", [None, 3])
def test_a_beam_wide_enough_finds_the_optimum_which_beats_greedy(end, alpha):
    """On a 4-token target vocabulary and max_len 5, a beam of 81 keeps every live hypothesis until
    the last step (at most 4**3 = 64 live, or 3**3 = 27 with an end symbol), never has 81 finished
    (at most 1 + 3 + 9 + 27), and at the last step keeps the best of equally long candidates, so it
    finds the exhaustive optimum of log P / lp(|Y|) (its tokens and score). Greedy's hypothesis is one
    of those scored, so it is never better, and on these sources it is worse somewhere (asserted): the
    comparison can tell a search from greedy."""
    torch.manual_seed(1)
    vocab, max_len = 4, 5
    model = T.make_model(11, vocab, N=1, d_model=16, d_ff=32, h=2, dropout=0.0, max_len=8).eval()
    src, mask = _src(6, 5, 1)
    greedy_worse = 0
    with T.checks(False):
        beam = beam_search(model, src, mask, max_len, 1, end, beam_size=81, length_penalty=alpha)
        greedy = greedy_decode(model, src, mask, max_len, 1, end_symbol=end)
        for b in range(src.size(0)):
            best, tokens, scores = _exhaustive_optimum(
                model, src[b : b + 1], mask[b : b + 1], max_len, 1, end, alpha, vocab
            )
            assert len(scores) == (vocab ** (max_len - 1) if end is None else 1 + 3 + 9 + 27 + 81)
            assert _hypothesis(beam.tokens[b].tolist(), end) == list(tokens)
            assert beam.scores[b].item() == pytest.approx(best, abs=1e-4)
            greedy_score = scores[tuple(_hypothesis(greedy[b].tolist(), end))]
            assert greedy_score <= best + 1e-9
            greedy_worse += greedy_score < best - 1e-3
    assert greedy_worse > 0, "on some source greedy must miss the optimum"


def test_live_hypotheses_that_reach_max_len_compete_even_when_beam_size_finish_on_that_step():
    """max_len 3, beam 2, alpha 0: on the last step two hypotheses finish (with the one of step 1, beam_size is
    reached) while a live hypothesis of full length is more probable than every finished one. It must win."""
    model = _favouring(_model(5), END, 1.0)
    src = torch.randint(1, 11, (3, 6), generator=torch.Generator().manual_seed(5))[1:2]
    mask = T.padding_mask(src, 0)
    with T.checks(False):
        result = beam_search(model, src, mask, 3, 1, END, beam_size=2)
        score, tokens = reference_beam_search(model, src, mask, 3, 1, END, 2, 0.0)
        _, dropped = reference_beam_search(model, src, mask, 3, 1, END, 2, 0.0, drop_live_at_max_len=True)
    # the data reaches the case: the winner is a live full-length hypothesis, more probable than the best
    # finished one, which is what dropping the live hypotheses on the last step would return
    assert len(tokens) == 3 and tokens[-1] != END and dropped[-1] == END
    log_p = lambda hypothesis: _recomputed_log_prob(model, src, mask, list(hypothesis))  # noqa: E731
    assert log_p(tokens) > log_p(dropped) + 1e-3
    got = _hypothesis(result.tokens[0].tolist(), END)
    assert got == list(tokens) and result.scores[0].item() == pytest.approx(score, abs=1e-4)


BAD_BEAM = [
    ({"length_penalty": float("nan")}, "length_penalty must be a finite number >= 0, got nan"),
    ({"length_penalty": float("inf")}, "length_penalty must be a finite number >= 0, got inf"),
    ({"length_penalty": -0.5}, "length_penalty must be a finite number >= 0, got -0.5"),
    ({"length_penalty": True}, "length_penalty must be a finite number >= 0, got True"),
    ({"length_penalty": "0.6"}, "length_penalty must be a finite number >= 0, got '0.6'"),
    ({"beam_size": 0}, "beam_size must be a positive int, got 0"),
    ({"beam_size": 2.0}, "beam_size must be a positive int, got 2.0"),
    ({"beam_size": True}, "beam_size must be a positive int, got True"),
]


@pytest.mark.parametrize("options, message", BAD_BEAM, ids=[str(o) for o, _ in BAD_BEAM])
def test_beam_options_without_a_meaning_are_refused_naming_the_value_in_both_searches(options, message):
    """A NaN length penalty used to give NaN scores without a word; both beam searches refuse it, checks on or off."""
    from transformer.lm import build_lm
    from transformer.lm.config import LMConfig
    from transformer.lm.generation import beam_generate

    model = _model(N=1)
    src, mask = _src(batch=1)
    lm = build_lm(LMConfig(vocab=13, n_layers=1, d_model=16, d_ff=16, n_heads=2, max_len=20)).eval()
    name = list(options)[0]
    with T.checks(False):  # the guard's own message, in full
        with pytest.raises(ValueError, match="beam_search: " + message):
            beam_search(model, src, mask, 5, 1, end_symbol=2, **options)
        with pytest.raises(ValueError, match="beam_generate: " + message):
            beam_generate(lm, torch.tensor([[1, 2]]), 3, end_symbol=2, **options)
    with T.checks(True):  # the signature may name a wrong type first; either way the argument is named
        for call in (
            lambda: beam_search(model, src, mask, 5, 1, end_symbol=2, **options),
            lambda: beam_generate(lm, torch.tensor([[1, 2]]), 3, end_symbol=2, **options),
        ):
            with pytest.raises((ValueError, T.TypeCheckError), match=name):
                call()


def test_max_len_one_is_the_start_symbol_alone_in_every_search():
    model = _model(N=1)
    src, mask = _src(batch=3)
    start = torch.full((3, 1), 4)
    assert torch.equal(greedy_decode(model, src, mask, 1, 4, end_symbol=2), start)
    assert torch.equal(T.sample_decode(model, src, mask, 1, 4, end_symbol=2, seed=0), start)
    result = beam_search(model, src, mask, 1, 4, end_symbol=2, beam_size=3, length_penalty=1.0)
    assert torch.equal(result.tokens, start) and result.scores.tolist() == [0.0, 0.0, 0.0]
