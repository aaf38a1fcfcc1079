"""KVCache.reserve: room for a request's whole length allocated once, each step written in place (no concatenation
of every cached position per step), the same keys and values as the growing cache; generate reserves its request's
length, and its tokens are those of a cache that grows."""

import pytest
import torch

from transformer.cache import KVCache
from transformer.lm import LMConfig, build_lm
from transformer.lm.generation import beam_generate, generate


def _steps(seed=0, batch=2, heads=3, d_k=4, lengths=(5, 1, 1, 1)):
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(batch, heads, n, d_k, generator=g), torch.randn(batch, heads, n, d_k, generator=g))
        for n in lengths
    ]


@pytest.mark.parametrize("room", [8, 9, 6])  # the exact length, more, and less than the steps need (then grows)
def test_a_reserved_cache_holds_what_a_growing_one_holds(room):
    growing, reserved = KVCache(), KVCache()
    reserved.reserve(room)
    for k, v in _steps():
        expected = growing.extend(k, v)
        got = reserved.extend(k, v)
        assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
        assert reserved.length == growing.length
    assert reserved.keys.shape == (2, 3, 8, 4)


def test_steps_within_the_reservation_are_written_in_place():
    cache = KVCache()
    cache.reserve(8)
    steps = _steps()
    cache.extend(*steps[0])
    buffer = cache.keys.data_ptr()
    for k, v in steps[1:]:
        keys, _ = cache.extend(k, v)
        assert keys.data_ptr() == buffer  # the same storage: no copy of the cached positions
        assert torch.equal(keys[:, :, -1:], k)


def test_reserving_after_the_prompt_keeps_it_and_reorder_follows_rows():
    cache, growing = KVCache(), KVCache()
    steps = _steps()
    for c in (cache, growing):
        c.extend(*steps[0])
    cache.reserve(8)
    for k, v in steps[1:]:
        cache.extend(k, v)
        growing.extend(k, v)
    index = torch.tensor([1, 1, 0])
    cache.reorder(index)
    growing.reorder(index)
    assert torch.equal(cache.keys, growing.keys) and torch.equal(cache.values, growing.values)
    k, v = _steps(seed=1, batch=3, lengths=(1,))[0]
    assert torch.equal(cache.extend(k, v)[0], growing.extend(k, v)[0])


def test_reserve_refuses_a_bad_length_and_a_static_cache_stays_filled_once():
    with pytest.raises(ValueError, match=r"KVCache.reserve: positions must be a positive int, got 0"):
        KVCache().reserve(0)
    static = KVCache(static=True)
    static.reserve(10)
    k, v = _steps(lengths=(5,))[0]
    static.extend(k, v)
    assert static.keys.shape[2] == 5 and static.filled


def _model():
    torch.manual_seed(0)
    config = LMConfig(
        vocab=50, n_layers=2, d_model=16, d_ff=32, n_heads=4, n_kv_heads=2, max_len=40, dropout=0.0,
        attention_dropout=0.0, positional_encoding="rotary", norm="rms", ffn_gated=True, activation="silu",
    )  # fmt: skip
    return build_lm(config).eval()


def test_generate_reserves_the_request_length_and_gives_the_growing_caches_tokens(monkeypatch):
    model = _model()
    prompt = torch.randint(1, 50, (3, 7), generator=torch.Generator().manual_seed(2))
    reserved: list[int] = []
    real = KVCache.reserve
    monkeypatch.setattr(KVCache, "reserve", lambda self, n: (reserved.append(n), real(self, n))[1])
    tokens = generate(model, prompt, 12)
    assert set(reserved) == {7 + 12} and len(reserved) == 2  # one per layer
    monkeypatch.setattr(KVCache, "reserve", lambda self, n: None)  # a cache that grows by concatenation
    assert torch.equal(tokens, generate(model, prompt, 12))
    assert torch.equal(tokens, generate(model, prompt, 12, use_cache=False))
    reserved.clear()
    monkeypatch.setattr(KVCache, "reserve", lambda self, n: (reserved.append(n), real(self, n))[1])
    beam_generate(model, prompt[:1], 5, beam_size=2)
    assert reserved == []  # beam search reorders its cache every step: a reservation would be copied whole
