"""Decoding with a sliding window keeps only the window's keys and values (issue 29, section 3): the language model's
cache built with ``sliding_window`` W holds at most W - 1 + new positions whatever the length, its positions stay
absolute (RoPE, learned tables), and it gives the logits and the greedy tokens of the full cache with the window mask
and of recomputing the prefix; left-padded batches and beam search's reorder included."""

from __future__ import annotations

import pytest
import torch

import transformer as T
from transformer.cache import KVCache
from transformer.lm import LMConfig, beam_generate, build_lm, generate
from transformer.lm.positions import LMCache

VOCAB = 31


def _model(window: int | None, positional: str = "rotary", seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = LMConfig(
        vocab=VOCAB, n_layers=2, d_model=16, d_ff=24, n_heads=4, n_kv_heads=2, positional_encoding=positional,
        sliding_window=window, max_len=40, dropout=0.0, attention_dropout=0.0, pad_id=0,
    )  # fmt: skip
    return build_lm(config).double().eval()


def _prompt(seed: int = 1, batch: int = 2, length: int = 5) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randint(1, VOCAB, (batch, length))


@pytest.mark.parametrize("positional", ["rotary", "learned"])
@pytest.mark.parametrize("window", [1, 3, 4])
def test_the_windowed_cache_holds_the_window_and_gives_the_full_caches_logits(window, positional):
    model = _model(window, positional)
    tokens = _prompt(length=14)
    rolling, full = model.new_cache(), LMCache(len(model.layers))  # full: every key kept, the window as a mask
    assert rolling.window == window and full.window is None
    prompt = 5
    got = [model.logits(tokens[:, :prompt], cache=rolling)]
    expected = [model.logits(tokens[:, :prompt], cache=full)]
    assert rolling.held == min(prompt, window - 1) and rolling.length == prompt
    for t in range(prompt, tokens.size(1)):
        got.append(model.logits(tokens[:, t : t + 1], cache=rolling))
        expected.append(model.logits(tokens[:, t : t + 1], cache=full))
        assert rolling.held <= window - 1  # after the call; during it, W - 1 + 1
        assert rolling.layers[0].keys.size(2) == rolling.held and rolling.length == t + 1
    assert full.held == tokens.size(1)
    recomputed = model.logits(tokens)
    torch.testing.assert_close(torch.cat(got, 1), torch.cat(expected, 1), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(torch.cat(got, 1), recomputed, rtol=1e-10, atol=1e-10)


def test_during_a_call_the_cache_holds_at_most_window_minus_one_plus_the_new_positions(monkeypatch):
    model, window = _model(4), 4
    seen: list[int] = []
    extend = KVCache.extend

    def recording(self, k, v):
        keys, values = extend(self, k, v)
        seen.append((keys.size(2), k.size(2)))
        return keys, values

    monkeypatch.setattr(KVCache, "extend", recording)
    tokens, cache = _prompt(length=12), model.new_cache()
    model.logits(tokens[:, :6], cache=cache)
    for t in range(6, 12):
        model.logits(tokens[:, t : t + 1], cache=cache)
    assert seen[0] == (6, 6)  # the prompt: its own positions
    assert all(held <= window - 1 + new for held, new in seen[2:])
    assert max(held for held, _ in seen[2:]) == window  # W - 1 kept + the new one: the bound is reached


def test_the_windowed_cache_forgets_keys_the_full_cache_would_attend_without_the_window():
    """What the rolling cache drops matters: the same steps with no window in the model differ."""
    tokens = _prompt(length=12)
    windowed, unwindowed = _model(3), _model(None)
    cache = windowed.new_cache()
    windowed.logits(tokens[:, :11], cache=cache)
    assert (windowed.logits(tokens[:, 11:], cache=cache) - unwindowed.logits(tokens)[:, 11:]).abs().max() > 1e-3


@pytest.mark.parametrize("window", [2, 4])
def test_greedy_tokens_equal_with_and_without_the_cache_from_left_padded_prompts(window):
    model = _model(window)
    tokens = _prompt(seed=3, batch=3, length=7)
    real = torch.ones_like(tokens, dtype=torch.bool)
    real[1, :3], real[2, :5] = False, False
    tokens = tokens.masked_fill(~real, 0)
    cached = generate(model, tokens, 9, prompt_mask=real, use_cache=True)
    recomputed = generate(model, tokens, 9, prompt_mask=real, use_cache=False)
    assert cached.tolist() == recomputed.tolist()
    alone = generate(model, tokens[:1], 9)  # the unpadded row alone
    assert cached[0].tolist() == alone[0].tolist()


def test_beam_search_reorders_the_windowed_cache():
    model = _model(3)
    prompt = _prompt(seed=5, batch=1, length=6)
    cached, cached_score = beam_generate(model, prompt, 8, beam_size=3, use_cache=True)
    recomputed, recomputed_score = beam_generate(model, prompt, 8, beam_size=3, use_cache=False)
    assert cached.tolist() == recomputed.tolist()
    assert cached_score == pytest.approx(recomputed_score, rel=1e-9)


def test_reorder_keeps_the_held_pads_with_their_keys():
    model = _model(3)
    tokens = _prompt(seed=2, batch=2, length=6)
    real = torch.tensor([[True] * 6, [False, False, True, True, True, True]])
    cache = model.new_cache()
    model.logits(tokens.masked_fill(~real, 0), T.AttentionMask(key_mask=real), cache=cache)
    assert cache.real_keys.shape == (2, 2) and cache.held == 2
    cache.reorder(torch.tensor([1, 1, 0]))
    assert cache.real_keys.shape == (3, 2) and cache.layers[0].keys.size(0) == 3


def test_drop_first_is_checked():
    cache = KVCache()
    cache.extend(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))
    with pytest.raises(ValueError, match=r"n must be an int in \[0, 3\].*got 4"):
        cache.drop_first(4)
    cache.drop_first(2)
    assert cache.length == 1
    with pytest.raises(ValueError, match="static"):
        KVCache(static=True).drop_first(0)
    with pytest.raises(ValueError, match="window must be a positive int or None, got window=0"):
        LMCache(2, window=0)


@pytest.mark.parametrize("new", [1, 2])
def test_a_step_past_the_window_attends_only_the_keys_the_window_shows(new):
    """``window_keys``: a cached step's mask (key padding and ``window_left``) cut to the last ``new + window_left``
    keys gives the same attention (float64, 1e-12) as all the keys with the window as a mask, on data where the
    window matters (without it the output moves); with one new query the window is dropped, with two it stays."""
    from transformer.backends import run_heads
    from transformer.lm.attention import window_keys

    generator = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, new, 8, generator=generator, dtype=torch.float64)
    k, v = (torch.randn(2, 2, 11, 8, generator=generator, dtype=torch.float64) for _ in range(2))
    real = torch.ones(2, 11, dtype=torch.bool)
    real[1, :2] = False  # a left-padded row
    real[0, 9] = False  # a pad inside the window
    mask = T.masks.AttentionMask(key_mask=real, window_left=3)
    cut_k, cut_v, cut = window_keys(q, k, v, mask)
    assert cut_k.shape[2] == cut_v.shape[2] == new + 3 and torch.equal(cut_k, k[:, :, -new - 3 :])
    assert torch.equal(cut.key_mask, real[:, -new - 3 :]) and cut.window_left == (3 if new > 1 else None)
    for backend in ("eager", "torch"):
        full = run_heads(backend, q, k, v, mask, 0.0)
        torch.testing.assert_close(run_heads(backend, q, cut_k, cut_v, cut, 0.0), full, rtol=1e-12, atol=1e-12)
        assert (run_heads(backend, q, k, v, mask.replace(window_left=None), 0.0) - full).abs().max() > 1e-3
    causal = mask.replace(causal=True)  # another mask than a step's: unchanged
    assert all(a is b for a, b in zip(window_keys(q, k, v, causal), (k, v, causal), strict=True))


def test_a_windowed_layer_of_a_full_cache_attends_the_window_only(monkeypatch):
    """With the window on some layers only (``window_layers``: the cache keeps every position), each one-token step
    hands a windowed layer only its window's W keys, the other layers every key, as transformers' sliding cache;
    the logits stay those of the whole prefix recomputed."""
    from transformer.lm.attention import CausalSelfAttention

    torch.manual_seed(0)
    config = LMConfig(
        vocab=VOCAB, n_layers=2, d_model=16, d_ff=24, n_heads=4, n_kv_heads=2, positional_encoding="rotary",
        sliding_window=3, window_layers=(True, False), max_len=40, dropout=0.0, attention_dropout=0.0, pad_id=0,
    )  # fmt: skip
    model = build_lm(config).double().eval()
    seen, original = [], CausalSelfAttention.attend
    monkeypatch.setattr(
        CausalSelfAttention,
        "attend",
        lambda self, q, k, v, mask: seen.append(k.size(2)) or original(self, q, k, v, mask),
    )
    tokens, cache = _prompt(length=9), model.new_cache()
    steps = [model.logits(tokens[:, :5], cache=cache)]
    seen.clear()
    steps += [model.logits(tokens[:, t : t + 1], cache=cache) for t in range(5, 9)]
    assert seen == [3, 6, 3, 7, 3, 8, 3, 9]  # layer 0 (windowed): W keys; layer 1: every key
    torch.testing.assert_close(torch.cat(steps, dim=1), model.logits(tokens), rtol=1e-10, atol=1e-10)
