"""Generation with the language model: the cache changes no token, a seed reproduces a sample, an end token or a
stop sequence ends a row (padding after it), the maximum length is enforced with a clear error, and the searches of
transformer.decoding run on the language model's step function."""

import math

import pytest
import torch
from torch import nn

import transformer as T
from transformer.decoding import beam_search_steps, search
from transformer.lm import build_lm
from transformer.lm.config import LMConfig
from transformer.lm.generation import beam_generate, generate

SIZES = dict(n_layers=2, d_model=32, d_ff=48, n_heads=2, max_len=40)


def _model(form="paper", seed=0, **changes):
    torch.manual_seed(seed)
    if form == "functional":
        config = LMConfig.functional(19, **SIZES, **changes)
    else:
        config = LMConfig(vocab=19, dropout=0.0, attention_dropout=0.0, **SIZES, **changes)
    model = build_lm(config).eval()
    with torch.no_grad():  # zero-initialised positions would hide position bugs
        model.embed[1].pe.normal_() if config.positional_encoding == "learned" else None
    return model


def _prompt(batch=3, steps=4, seed=0):
    return torch.randint(3, 19, (batch, steps), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("form", ["paper", "functional"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_generation_equals_full_recompute_token_for_token(form, seed):
    model = _model(form, seed)
    prompt = _prompt(seed=seed)
    cached = generate(model, prompt, 30)
    assert cached.shape == (3, 34) and torch.equal(cached[:, :4], prompt)
    assert torch.equal(cached, generate(model, prompt, 30, use_cache=False))
    sampled = generate(model, prompt, 30, sample=True, temperature=1.3, top_p=0.95, seed=seed)
    assert torch.equal(
        sampled, generate(model, prompt, 30, sample=True, temperature=1.3, top_p=0.95, seed=seed, use_cache=False)
    )


def test_the_step_log_probabilities_with_and_without_the_cache_agree_at_every_step():
    model = _model("functional")
    ys = _prompt(batch=2, steps=3)
    steps, recompute = model.next_tokens(), model.next_tokens(use_cache=False)
    for _ in range(12):
        a, b = steps(ys), recompute(ys)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        ys = torch.cat([ys, a.argmax(-1, keepdim=True)], 1)
    expected = model.generator(model(ys[:, :-1]))[:, -1]
    torch.testing.assert_close(a, expected, rtol=1e-5, atol=1e-5)


def test_greedy_picks_the_most_probable_next_token_of_the_full_model():
    model = _model()
    prompt = _prompt(batch=2)
    out = generate(model, prompt, 6)
    for t in range(4, 10):
        assert torch.equal(out[:, t], model.generator(model(out[:, :t]))[:, -1].argmax(-1))


def test_a_seed_reproduces_a_sample_and_another_seed_does_not():
    model = _model()
    prompt = _prompt(batch=8)
    a = generate(model, prompt, 20, sample=True, seed=7)
    assert torch.equal(a, generate(model, prompt, 20, sample=True, seed=7))
    assert torch.equal(a, generate(model, prompt, 20, sample=True, seed=torch.Generator().manual_seed(7)))
    assert not torch.equal(a, generate(model, prompt, 20, sample=True, seed=8))
    assert torch.equal(generate(model, prompt, 20, sample=True, top_k=1, seed=3), generate(model, prompt, 20))


class _Fixed(nn.Module):
    """A stand-in language model whose next token is always ``(last + 1) % vocab`` (with certainty)."""

    def __init__(self, vocab=10, max_len=50):
        super().__init__()
        self.config = LMConfig(vocab=vocab, d_model=8, n_heads=2, d_ff=8, n_layers=1, max_len=max_len, pad_id=0)

    def next_tokens(self, *, use_cache=True):
        vocab = self.config.vocab

        class Steps:
            def __call__(self, ys):
                return torch.log(nn.functional.one_hot((ys[:, -1] + 1) % vocab, vocab).float() + 1e-9)

            def reorder(self, index):
                pass

        return Steps()


def test_an_end_token_ends_a_row_and_the_rest_is_padding():
    prompt = torch.tensor([[1], [5]])
    out = generate(_Fixed(), prompt, 8, end_symbol=4, pad_symbol=9)
    assert out.tolist() == [[1, 2, 3, 4, 9, 9, 9, 9, 9], [5, 6, 7, 8, 9, 0, 1, 2, 3]]


def test_every_end_token_ends_a_row_which_keeps_it_and_pads_after_it():
    prompt = torch.tensor([[1], [5], [8]])
    out = generate(_Fixed(), prompt, 8, end_symbol=4, end_symbols=[7, 2], pad_symbol=9)
    assert out.tolist() == [
        [1, 2, 9, 9, 9, 9, 9, 9, 9],  # ends at 2, a token of end_symbols
        [5, 6, 7, 9, 9, 9, 9, 9, 9],  # ends at 7
        [8, 9, 0, 1, 2, 9, 9, 9, 9],  # ends at 2 (the one that comes first)
    ]
    assert generate(_Fixed(), prompt, 8, end_symbol=4, end_symbols=[], pad_symbol=9).tolist()[1][:5] == [5, 6, 7, 8, 9]
    with pytest.raises(ValueError, match=r"end_symbols=\[7\] need an end_symbol"):
        generate(_Fixed(), prompt, 3, end_symbols=[7])
    with pytest.raises(ValueError, match=r"end_symbols\[1\]=10 must be a token id in \[0, 10\)"):
        generate(_Fixed(), prompt, 3, end_symbol=4, end_symbols=[7, 10])
    with pytest.raises(TypeError, match="argument 'end_symbols' is 7"):  # the signature's contract
        generate(_Fixed(), prompt, 3, end_symbol=4, end_symbols=7)
    with T.checks(False), pytest.raises(ValueError, match="end_symbols must be a sequence of token ids, got 7"):
        generate(_Fixed(), prompt, 3, end_symbol=4, end_symbols=7)


def test_a_stop_sequence_ends_a_row_after_it_with_the_end_token():
    prompt = torch.tensor([[1], [6]])
    out = generate(_Fixed(), prompt, 9, end_symbol=0, pad_symbol=9, stop_sequences=[[3, 4]])
    assert out.tolist() == [[1, 2, 3, 4, 0, 9, 9, 9, 9, 9], [6, 7, 8, 9, 0, 9, 9, 9, 9, 9]]
    out = generate(_Fixed(), torch.tensor([[2, 3]]), 5, end_symbol=0, pad_symbol=9, stop_sequences=[[2, 3, 4]])
    assert out.tolist() == [[2, 3, 4, 0, 9, 9, 9]]  # the stop sequence may start in the prompt, must end after it
    out = generate(_Fixed(), torch.tensor([[3, 4]]), 3, end_symbol=0, pad_symbol=9, stop_sequences=[[3, 4]])
    assert out.tolist() == [[3, 4, 5, 6, 7]]  # a prompt that ends with it is not stopped


@pytest.mark.parametrize("checks_on", [True, False])
def test_the_maximum_length_is_enforced_with_a_clear_error(checks_on):
    model = _model()
    with T.checks(checks_on):
        assert generate(model, _prompt(steps=4), 36).shape == (3, 40)  # exactly max_len
        with pytest.raises(
            ValueError,
            match=r"the prompt \(4 tokens\) plus max_new_tokens=37 is 41 positions, more "
            r"than the model's max_len=40; ask for at most 36 new tokens",
        ):
            generate(model, _prompt(steps=4), 37)
        with pytest.raises(ValueError, match="max_new_tokens must be a positive int, got 0"):
            generate(model, _prompt(), 0)
        with pytest.raises(ValueError, match=r"generate: argument 'prompt' is an empty sequence"):
            generate(model, torch.ones(2, 0, dtype=torch.long), 3)
        with pytest.raises(ValueError, match=r"token id 19 at position \(0, 1\) is outside the vocabulary"):
            generate(model, torch.tensor([[3, 19]]), 3)
        with pytest.raises(ValueError, match=r"end_symbol=19 must be a token id in \[0, 19\)"):
            generate(model, _prompt(), 3, end_symbol=19)
        with pytest.raises(ValueError, match="stop_sequences need an end_symbol"):
            generate(model, _prompt(), 3, stop_sequences=[[4]])
        with pytest.raises(ValueError, match=r"stop_sequences\[0\] is empty"):
            generate(model, _prompt(), 3, end_symbol=2, stop_sequences=[[]])
        with pytest.raises(ValueError, match="generate: temperature must be a positive finite number, got 0.0"):
            generate(model, _prompt(), 3, sample=True, temperature=0.0)


def test_the_decoding_searches_run_on_the_language_model_step_function():
    model = _model("functional")
    prompt = _prompt(batch=1, steps=3)
    with torch.no_grad():
        greedy = search(model.next_tokens(), prompt, 15, None, 0, lambda lp: lp.argmax(-1))
        tokens, _ = beam_search_steps(model.next_tokens(), prompt, 15, None, 1, 0.0)
    assert torch.equal(greedy, generate(model, prompt, 12)) and tokens == greedy[0].tolist()
    beam, score = beam_generate(model, prompt, 12, beam_size=1)
    assert torch.equal(beam, greedy)
    wide, wide_score = beam_generate(model, prompt, 12, beam_size=4)
    uncached, uncached_score = beam_generate(model, prompt, 12, beam_size=4, use_cache=False)
    assert torch.equal(wide, uncached) and abs(wide_score - uncached_score) < 1e-4
    assert wide_score >= score - 1e-6  # a wider beam finds a sequence at least as probable


class _Constant(nn.Module):
    """A stand-in language model whose next-token distribution is always Q, whatever the prefix (vocabulary 5)."""

    Q = torch.tensor([0.125, 0.5, 0.0625, 0.25, 0.0625])

    def __init__(self):
        super().__init__()
        self.config = LMConfig(vocab=5, d_model=8, n_heads=2, d_ff=8, n_layers=1, max_len=50, pad_id=0)

    def next_tokens(self, *, use_cache=True):
        q = self.Q

        class Steps:
            def __call__(self, ys):
                return q.log().expand(ys.size(0), -1)

            def reorder(self, index):
                pass

        return Steps()


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_beam_generate_scores_the_generated_tokens_only_and_pads_after_the_end_token(alpha):
    """The GNMT penalty counts the generated tokens (end included), not the prompt: 5 new tokens after a prompt of 3,
    each log 0.5 (token 1). With end token 3, [3] finishes at step 1 and [1, 3] at step 2: two finished hypotheses
    stop a beam of 2 early, and [3] (log 0.25, |Y| = 1, so a penalty of 1 whatever alpha) wins; padding follows."""
    prompt = torch.tensor([[2, 4, 2]])
    out, score = beam_generate(_Constant(), prompt, 5, beam_size=2, length_penalty=alpha)
    assert out.tolist() == [[2, 4, 2, 1, 1, 1, 1, 1]]
    assert score == pytest.approx(5 * math.log(0.5) / ((5 + 5) / 6) ** alpha, rel=1e-6)
    out, score = beam_generate(_Constant(), prompt, 5, beam_size=2, length_penalty=alpha, end_symbol=3, pad_symbol=0)
    assert out.tolist() == [[2, 4, 2, 3, 0, 0, 0, 0]]
    assert score == pytest.approx(math.log(0.25), rel=1e-6)
