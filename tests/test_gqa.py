"""Grouped-query attention in the modules: MultiHeadedAttention(kv_heads=...), LMConfig(n_kv_heads=...), the cache.

A GQA module computes what a full multi-head module computes when that module's key/value projections repeat each
shared head for its group of query heads (query head i reads key/value head i // (h / kv_heads)); the cache holds
kv_heads heads; the config validates the count, round-trips through JSON and checkpoints.
"""

import pytest
import torch
from einops import rearrange

import transformer as T
from transformer.checkpoint import load_checkpoint, save_checkpoint


def _expanded_copy(gqa: T.MultiHeadedAttention) -> T.MultiHeadedAttention:
    """A full multi-head module whose key/value heads repeat the GQA module's: head i gets shared head i // group."""
    full = T.MultiHeadedAttention(gqa.h, gqa.d_model, gqa.dropout_p).eval()
    group = gqa.h // gqa.kv_heads
    with torch.no_grad():
        full.q_proj.load_state_dict(gqa.q_proj.state_dict())
        full.out_proj.load_state_dict(gqa.out_proj.state_dict())
        for mine, theirs in ((full.k_proj, gqa.k_proj), (full.v_proj, gqa.v_proj)):
            w = rearrange(theirs.weight, "(g d) m -> g d m", g=gqa.kv_heads).repeat_interleave(group, dim=0)
            mine.weight.copy_(rearrange(w, "h d m -> (h d) m"))
            b = rearrange(theirs.bias, "(g d) -> g d", g=gqa.kv_heads).repeat_interleave(group, dim=0)
            mine.bias.copy_(b.flatten())
    return full


@pytest.mark.parametrize("backend", ["eager", "torch"])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_gqa_equals_full_attention_with_repeated_key_value_heads(backend, kv_heads):
    gqa = T.MultiHeadedAttention(8, 64, dropout=0.0, kv_heads=kv_heads).eval()
    assert gqa.k_proj.out_features == gqa.v_proj.out_features == kv_heads * 8
    full = _expanded_copy(gqa)
    x, memory = torch.randn(2, 5, 64), torch.randn(2, 7, 64)
    mask = T.AttentionMask(key_lengths=torch.tensor([4, 7]))
    with T.use_backend(backend):
        torch.testing.assert_close(gqa(x, memory, memory, mask), full(x, memory, memory, mask), atol=1e-5, rtol=1e-5)
        dense = torch.rand(2, 5, 7) > 0.3
        torch.testing.assert_close(gqa(x, memory, memory, dense), full(x, memory, memory, dense), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["eager", "torch"])
def test_gqa_keeps_the_modules_score_scale_on_every_backend(backend):
    """CausalSelfAttention(scale=tau, kv_heads < h): the scores are scaled by tau whatever the backend and whether the
    key/value heads are shared or full (the torch backend takes the grouped heads in place, eager repeats them)."""
    from transformer.lm.attention import CausalSelfAttention

    torch.manual_seed(0)
    gqa = CausalSelfAttention(4, 64, 0.0, scale=0.7, kv_heads=2).eval()
    x = torch.randn(2, 5, 64)
    mask = T.AttentionMask(causal=True)
    with T.use_backend("eager"):
        expected = gqa(x, mask)
    with T.use_backend(backend):
        got = gqa(x, mask)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    with T.use_backend(backend):
        default_scale = CausalSelfAttention(4, 64, 0.0, kv_heads=2).eval()
        default_scale.load_state_dict(gqa.state_dict())
        assert not torch.allclose(default_scale(x, mask), got, atol=1e-3)  # tau = 0.7 is not 1/sqrt(16): it matters


def test_gqa_gradients_reach_the_shared_projections_in_float64():
    gqa = T.MultiHeadedAttention(4, 16, dropout=0.0, kv_heads=2).double().eval()
    x = torch.randn(1, 3, 16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: gqa(t, t, t, T.subsequent_mask(3)), (x,))
    gqa(x, x, x).sum().backward()
    assert gqa.k_proj.weight.grad.shape == (8, 16) and gqa.k_proj.weight.grad.abs().sum() > 0


def test_record_attention_gives_one_probability_map_per_query_head():
    gqa = T.MultiHeadedAttention(4, 16, dropout=0.0, kv_heads=1).eval()
    full = _expanded_copy(gqa)
    x = torch.randn(2, 5, 16)
    gqa.record_attention = full.record_attention = True
    torch.testing.assert_close(gqa(x, x, x, T.subsequent_mask(5)), full(x, x, x, T.subsequent_mask(5)))
    assert gqa.attn.shape == (2, 4, 5, 5)
    torch.testing.assert_close(gqa.attn, full.attn)


def test_kv_heads_must_divide_the_heads_and_the_message_names_both():
    with pytest.raises(ValueError, match=r"kv_heads=3 does not divide h=8 .* values that would: \[1, 2, 4, 8\]"):
        T.MultiHeadedAttention(8, 64, kv_heads=3)
    with pytest.raises(ValueError, match="kv_heads must be a positive int or None, got kv_heads=0"):
        T.MultiHeadedAttention(8, 64, kv_heads=0)
    with pytest.raises(ValueError, match=r"LMConfig: n_kv_heads=3 does not divide n_heads=4"):
        T.LMConfig(vocab=10, d_model=16, n_heads=4, n_kv_heads=3)
    with pytest.raises(ValueError, match="LMConfig: n_kv_heads must be a positive int or None, got n_kv_heads=True"):
        T.LMConfig(vocab=10, d_model=16, n_heads=4, n_kv_heads=True)
    with pytest.raises(ValueError, match="n_kv_heads=2 .* needs value_projection='output'"):
        T.LMConfig(vocab=10, d_model=16, n_heads=4, n_kv_heads=2, value_projection="per_head")
    assert T.LMConfig(vocab=10, d_model=16, n_heads=4).kv_heads == 4
    assert T.LMConfig(vocab=10, d_model=16, n_heads=4, n_kv_heads=1).kv_heads == 1


def _lm(n_kv_heads=2, **fields):
    config = T.LMConfig(
        vocab=23,
        n_layers=2,
        d_model=32,
        d_ff=48,
        n_heads=4,
        n_kv_heads=n_kv_heads,
        dropout=0.0,
        attention_dropout=0.0,
        max_len=16,
        **fields,
    )
    torch.manual_seed(0)
    return T.build_lm(config).eval()


def test_the_lm_cache_holds_kv_heads_and_gives_the_full_recompute():
    model = _lm(n_kv_heads=2)
    tokens = torch.randint(1, 23, (3, 7))
    full = model(tokens)
    cache = model.new_cache()
    steps = [model(tokens[:, :4], cache=cache)] + [model(tokens[:, t : t + 1], cache=cache) for t in range(4, 7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    for layer in cache.layers:
        assert layer.keys.shape == layer.values.shape == (3, 2, 7, 8)  # kv_heads, not the 4 query heads
    assert model.layers[0].self_attn.k_proj.out_features == 16


def test_generate_with_the_cache_equals_generate_without_on_a_gqa_lm():
    model = _lm(n_kv_heads=1)
    prompt = torch.randint(1, 23, (2, 3))
    with_cache = T.generate(model, prompt, max_new_tokens=6, use_cache=True)
    without = T.generate(model, prompt, max_new_tokens=6, use_cache=False)
    assert torch.equal(with_cache, without)


def test_n_kv_heads_round_trips_through_json_and_checkpoints(tmp_path):
    model = _lm(n_kv_heads=2)
    config = model.config
    assert T.LMConfig.from_json(config.to_json()) == config
    assert T.LMConfig.from_dict({k: v for k, v in config.to_dict().items() if k != "n_kv_heads"}).n_kv_heads is None
    save_checkpoint(tmp_path / "gqa", model)
    loaded = load_checkpoint(tmp_path / "gqa")  # a new model built from the stored config
    assert loaded.config.n_kv_heads == 2 and loaded.model.layers[0].self_attn.kv_heads == 2
    tokens = torch.randint(1, 23, (2, 5))
    torch.testing.assert_close(loaded.model.eval()(tokens), model(tokens))
    with pytest.raises(T.ConfigMismatchError, match=r"n_kv_heads \(model 1, checkpoint 2\)"):
        load_checkpoint(tmp_path / "gqa", _lm(n_kv_heads=1))
