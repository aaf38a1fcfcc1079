"""Incremental decoding is a capability of the modules: MultiHeadedAttention, DecoderLayer, Decoder and the
embeddings take a key/value cache and a position offset; cached and recomputed outputs are equal."""

import pytest
import torch

import transformer as T
from transformer.cache import DecoderCache, KVCache


def _model(seed=0, **changes):
    torch.manual_seed(seed)
    base = dict(N=2, d_model=32, d_ff=64, h=4, dropout=0.0, max_len=40)
    base.update(changes)
    return T.make_model(11, 13, **base).eval()


@pytest.mark.parametrize("backend", ["eager", "torch", "triton"])
def test_attention_with_a_cache_equals_causal_attention_over_the_whole_sequence(backend):
    torch.manual_seed(1)
    mha = T.MultiHeadedAttention(2, 32, dropout=0.0).eval()
    x = torch.randn(3, 6, 32)
    with T.use_backend(backend):
        full = mha(x, x, x, T.subsequent_mask(6))
        cache = KVCache()
        steps = [mha(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache) for t in range(6)]
    assert cache.length == 6 and cache.keys.shape == (3, 2, 6, 16)
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-6)


def test_a_static_cache_projects_the_memory_once_and_reuses_it():
    mha = T.MultiHeadedAttention(2, 32, dropout=0.0).eval()
    x, memory = torch.randn(2, 1, 32), torch.randn(2, 5, 32)
    cache = KVCache(static=True)
    first = mha(x, memory, memory, cache=cache)
    calls = []
    mha.k_proj.register_forward_hook(lambda *a: calls.append(1))
    second = mha(x, memory, memory, cache=cache)
    assert calls == [] and cache.length == 5 and torch.equal(first, second)
    assert torch.equal(first, mha(x, memory, memory))


@pytest.mark.parametrize("changes", [{}, {"norm_placement": "post"}, {"positional_encoding": "learned"}])
def test_decoder_with_a_cache_equals_the_full_decoder_position_by_position(changes):
    model = _model(**changes)
    src = torch.randint(1, 11, (3, 7))
    src_mask = T.AttentionMask.padding(src, 0)
    memory = model.encode(src, src_mask)
    tgt = torch.randint(1, 13, (3, 8))
    full = model.decode(memory, src_mask, tgt, T.subsequent_mask(8))
    cache = model.new_cache()
    for t in range(8):
        out = model.decode(memory, src_mask, tgt[:, t : t + 1], None, cache=cache)
        assert cache.length == t + 1
        torch.testing.assert_close(out[:, 0], full[:, t], rtol=1e-5, atol=1e-5)


def test_a_prompt_fills_an_empty_cache_in_one_call_then_one_position_at_a_time():
    model = _model()
    src = torch.randint(1, 11, (2, 5))
    memory = model.encode(src, None)
    tgt = torch.randint(1, 13, (2, 6))
    full = model.decode(memory, None, tgt, T.subsequent_mask(6))
    cache = model.new_cache()
    prompt = model.decode(memory, None, tgt[:, :4], None, cache=cache)  # causal among the 4 new positions
    torch.testing.assert_close(prompt, full[:, :4], rtol=1e-5, atol=1e-5)
    for t in (4, 5):
        torch.testing.assert_close(
            model.decode(memory, None, tgt[:, t : t + 1], None, cache=cache)[:, 0], full[:, t], rtol=1e-5, atol=1e-5
        )
    with pytest.raises(ValueError, match="2 new positions after 6 cached ones"):
        model.decode(memory, None, tgt[:, :2], None, cache=cache)
    with pytest.raises(ValueError, match="with a cache, pass tgt_mask=None"):
        model.decode(memory, None, tgt[:, :1], T.subsequent_mask(1), cache=model.new_cache())


def test_the_embeddings_take_the_position_offset():
    model = _model()
    tgt = torch.randint(1, 13, (2, 6))
    whole = model.tgt_embed(tgt)
    torch.testing.assert_close(model.tgt_embed(tgt[:, 4:], offset=4), whole[:, 4:])
    assert not torch.allclose(model.tgt_embed(tgt[:, 4:]), whole[:, 4:])  # position 0 is not position 4
    with pytest.raises(ValueError, match="sequence length 41 exceeds max_len=40"):
        model.tgt_embed(tgt, offset=35)
    with pytest.raises(ValueError, match="offset must be >= 0"):
        model.tgt_embed(tgt, offset=-1)


def test_a_tutorial_style_sequential_embedding_decodes_incrementally_too():
    """nn.Sequential(Embeddings, PositionalEncoding), as the Annotated Transformer builds it, gains the offset."""
    model = _model()
    rebuilt = T.EncoderDecoder(
        model.encoder,
        model.decoder,
        torch.nn.Sequential(*model.src_embed),
        torch.nn.Sequential(*model.tgt_embed),
        model.generator,
    ).eval()
    assert isinstance(rebuilt.tgt_embed, T.EmbeddingStack) and rebuilt.tgt_embed[0] is model.tgt_embed[0]
    assert list(rebuilt.state_dict()) == list(model.state_dict())
    src = torch.randint(1, 11, (2, 5))
    assert torch.equal(
        T.greedy_decode(rebuilt, src, None, 10, 1), T.greedy_decode(rebuilt, src, None, 10, 1, use_cache=False)
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cached_and_recomputed_decoding_agree_token_for_token(seed):
    model = _model(seed, N=3, h=2)
    src = torch.randint(1, 11, (4, 9), generator=torch.Generator().manual_seed(seed))
    src[0, 6:] = 0
    for mask in (T.padding_mask(src, 0), T.AttentionMask.padding(src, 0)):
        cached = T.greedy_decode(model, src, mask, 25, 1)
        assert torch.equal(cached, T.greedy_decode(model, src, mask, 25, 1, use_cache=False))
        beam = T.beam_search(model, src, mask, 15, 1, end_symbol=int(cached[1, 3]), beam_size=3, length_penalty=0.6)
        again = T.beam_search(
            model, src, mask, 15, 1, end_symbol=int(cached[1, 3]), beam_size=3, length_penalty=0.6, use_cache=False
        )
        assert torch.equal(beam.tokens, again.tokens)
        torch.testing.assert_close(beam.scores, again.scores, rtol=1e-5, atol=1e-5)


def test_cache_contracts_and_reordering():
    cache = KVCache()
    k = torch.randn(2, 4, 3, 8)
    cache.extend(k, k + 1)
    with pytest.raises(T.TypeCheckError, match="argument 'v'"):
        cache.extend(torch.randn(2, 4, 1, 8), torch.randn(2, 4, 1, 6))
    with pytest.raises(ValueError, match=r"do not continue the cached \(2, 4, 3, 8\)"):
        cache.extend(torch.randn(2, 2, 1, 8), torch.randn(2, 2, 1, 8))
    cache.reorder(torch.tensor([1, 1, 0]))
    assert torch.equal(cache.keys, k[[1, 1, 0]]) and torch.equal(cache.values, k[[1, 1, 0]] + 1)
    decoder_cache = DecoderCache(2)
    with pytest.raises(ValueError, match="n_layers must be a positive int"):
        DecoderCache(0)
    model = _model(N=3)
    memory = model.encode(torch.randint(1, 11, (1, 4)), None)
    with pytest.raises(ValueError, match="the cache has 2 layers, the decoder 3"):
        model.decode(memory, None, torch.ones(1, 1, dtype=torch.long), None, cache=decoder_cache)


@pytest.mark.parametrize("structured", [False, True], ids=["dense-mask", "structured-mask"])
def test_after_a_reorder_every_cache_the_memory_and_the_mask_follow_the_rows(structured):
    """Three sources of different padding, three cached steps, then rows [2, 0, 0] (a repeat, a drop, a move): every
    later step equals the full recompute of the reordered prefixes over the reordered sources, in every layer's
    self- and cross-attention cache (a cross-attention cache left behind would attend another row's memory)."""
    model = _model(N=2)
    src = torch.randint(1, 11, (3, 7), generator=torch.Generator().manual_seed(5))
    src[0, 3:] = 0
    src[2, 5:] = 0
    mask = T.AttentionMask.padding(src, 0) if structured else T.padding_mask(src, 0)
    tgt = torch.randint(1, 13, (3, 6), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        steps = model.next_tokens(model.encode(src, mask), mask)
        for t in range(1, 4):
            steps(tgt[:, :t])
        index = torch.tensor([2, 0, 0])
        steps.reorder(index)
        assert steps.cache.length == 3
        for layer in steps.cache.layers:
            assert layer.self_attn.keys.size(0) == 3 and layer.src_attn.keys.size(0) == 3
        torch.testing.assert_close(steps.cache.layers[1].src_attn.keys[1], steps.cache.layers[1].src_attn.keys[2])
        src_r, tgt_r = src[index], tgt[index]
        mask_r = T.AttentionMask.padding(src_r, 0) if structured else T.padding_mask(src_r, 0)
        memory_r = model.encode(src_r, mask_r)
        for t in (4, 5):
            expected = model.next_token_log_probs(memory_r, mask_r, tgt_r[:, :t])
            torch.testing.assert_close(steps(tgt_r[:, :t]), expected, rtol=1e-5, atol=1e-5)


def test_after_a_reorder_the_language_models_cache_follows_the_rows():
    from transformer.lm import build_lm
    from transformer.lm.config import LMConfig

    torch.manual_seed(0)
    for config in (
        LMConfig(vocab=13, n_layers=2, d_model=16, d_ff=16, n_heads=2, dropout=0.0, attention_dropout=0.0),
        LMConfig.functional(13, n_layers=2, d_model=16, d_ff=16, n_heads=2),
    ):
        lm = build_lm(config).eval()
        ys = torch.randint(0, 13, (3, 6), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            steps = lm.next_tokens()
            steps(ys[:, :3])  # a prompt fills the empty cache
            steps(ys[:, :4])
            index = torch.tensor([1, 1, 2])
            steps.reorder(index)
            for t in (5, 6):
                torch.testing.assert_close(
                    steps(ys[index, :t]), lm.next_token_log_probs(ys[index, :t]), rtol=1e-5, atol=1e-5
                )


def test_a_cache_refuses_what_it_cannot_continue():
    model = _model(N=1)
    memory = model.encode(torch.randint(1, 11, (2, 4)), None)
    cache = model.new_cache()
    model.next_token_log_probs(memory, None, torch.ones(2, 1, dtype=torch.long), cache)
    with pytest.raises(ValueError, match=r"DecoderCache holds 1 positions but ys has 3; expected 2"):
        model.next_token_log_probs(memory, None, torch.ones(2, 3, dtype=torch.long), cache)
    static = KVCache(static=True)
    static.extend(torch.randn(2, 2, 4, 8), torch.randn(2, 2, 4, 8))
    assert static.filled and static.length == 4
    with pytest.raises(ValueError, match="a static \\(cross-attention\\) cache is filled once"):
        static.extend(torch.randn(2, 2, 4, 8), torch.randn(2, 2, 4, 8))


@pytest.mark.parametrize("reserve_after", [0, 1, 3])  # before any key, after the prompt, after two more steps
def test_a_reservation_keeps_every_held_key_and_value_and_more_positions_still_fit(reserve_after):
    """``KVCache.reserve`` changes where positions are kept, never what: each extend returns what a cache without
    a reservation returns, whether the room is taken before the prompt or after some steps, and past its end."""
    torch.manual_seed(0)
    chunks = [(torch.randn(2, 3, 4 if i == 0 else 1, 5), torch.randn(2, 3, 4 if i == 0 else 1, 5)) for i in range(8)]
    plain, reserved = KVCache(), KVCache()
    for i, (k, v) in enumerate(chunks):
        if i == reserve_after:
            reserved.reserve(7)  # 4 + 7 = 11 positions in all: the last four go past the reservation
        want_k, want_v = plain.extend(k, v)
        got_k, got_v = reserved.extend(k, v)
        assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v), i
    assert reserved.length == plain.length == 11


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, None])
def test_a_reservation_of_no_positions_is_refused_naming_the_argument(bad):
    with pytest.raises(ValueError, match=r"KVCache.reserve: positions must be a positive int, got "):
        KVCache().reserve(bad)
