"""Positions of the language model (transformer/lm/positions.py): left padding counted from each row's first real
token, the cache continuing each row's count and hiding its pads, explicit positions, Mistral's sliding window at its
edge with and without the cache, every backend on a model with every new block, generation from left-padded
prompts, and checkpoints written before the new fields."""

from __future__ import annotations

import os

import pytest
import torch

import transformer as T
from transformer.checkpoint import load_checkpoint
from transformer.lm import LMConfig, beam_generate, build_lm, generate

MODERN = dict(
    vocab=29, n_layers=2, d_model=32, d_ff=40, n_heads=4, head_dim=16, positional_encoding="rotary", norm="rms",
    activation="silu", ffn_gated=True, qkv_bias=False, out_bias=False, ffn_bias=False, qk_norm=True,
    lm_head_bias=False, embedding_scale=1.0, dropout=0.0, attention_dropout=0.0, max_len=48, pad_id=0,
)  # fmt: skip


def _model(seed: int = 0, **fields) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = build_lm(LMConfig(**{**MODERN, **fields})).double().eval()
    with torch.no_grad():  # gains away from 1, so that a skipped norm weight shows
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    return model


def _left_padded(seed: int = 1, lengths=(9, 6, 3), width: int = 9) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    tokens = torch.randint(1, 29, (len(lengths), width))
    real = torch.zeros(len(lengths), width, dtype=torch.bool)
    for row, n in enumerate(lengths):
        real[row, width - n :] = True
    return tokens.masked_fill(~real, 0), real


# ---------------------------------------------------------------- left padding and the cache
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
@pytest.mark.parametrize("window", [None, 4])
def test_left_padded_rows_equal_their_rows_alone_with_and_without_the_cache(kv_heads, window):
    model = _model(n_kv_heads=kv_heads, sliding_window=window)
    tokens, real = _left_padded()
    full = model.logits(tokens, T.AttentionMask(key_mask=real))
    for row in range(tokens.size(0)):
        alone = model.logits(tokens[row : row + 1, real[row]])  # the row unpadded: positions 0, 1, ...
        torch.testing.assert_close(full[row, real[row]], alone[0], rtol=1e-10, atol=1e-10)
    cache = model.new_cache()
    # the prompt holds every pad (the third row nothing else: its next position is 0); one real token per step
    steps = [model.logits(tokens[:, :6], T.AttentionMask(key_mask=real[:, :6]), cache=cache)]
    steps += [model.logits(tokens[:, t : t + 1], cache=cache) for t in range(6, 9)]
    assert cache.length == 9
    torch.testing.assert_close(torch.cat(steps, 1)[real], full[real], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(cache.next_positions, real.sum(1))


@pytest.mark.parametrize("kind, scale", [("learned", 1.0), ("learned", 2.5), ("sinusoidal", 1.0), ("sinusoidal", 0.5)])
def test_position_tables_read_the_positions_of_left_padded_rows(kind, scale):
    model = _model(positional_encoding=kind, positional_scale=scale)
    tokens, real = _left_padded(lengths=(9, 4))
    full = model(tokens, real[:, None, :])  # a bool (batch, 1, seq) key mask
    cache = model.new_cache()
    steps = [model(tokens[:, :6], real[:, None, :6], cache=cache)]
    steps += [model(tokens[:, t : t + 1], cache=cache) for t in (6, 7, 8)]
    torch.testing.assert_close(torch.cat(steps, 1)[real], full[real], rtol=1e-10, atol=1e-10)
    alone = model(tokens[1:, 5:])
    torch.testing.assert_close(full[1, 5:], alone[0], rtol=1e-10, atol=1e-10)
    shifted = model(tokens[1:, 5:], positions=torch.arange(5, 9)[None])  # the slots: what padding must not give
    assert (shifted - alone).abs().max() > 1e-3


def test_a_dense_mask_and_right_padding_give_the_positions_of_the_slots():
    model = _model(positional_encoding="learned")
    tokens, _ = _left_padded(lengths=(9, 9))
    right = torch.ones(2, 9, dtype=torch.bool)
    right[1, 6:] = False  # right padding: the real tokens keep positions 0..5
    masked = model(tokens, T.AttentionMask(key_lengths=right.sum(1)))
    torch.testing.assert_close(masked[1, :6], model(tokens[1:, :6])[0], rtol=1e-10, atol=1e-10)
    dense = right[:, None, :] & torch.ones(9, 9, dtype=torch.bool).tril()
    torch.testing.assert_close(model(tokens, dense)[1, :6], masked[1, :6], rtol=1e-10, atol=1e-10)


def test_explicit_positions_shift_a_rotary_model_by_nothing_and_a_learned_one_by_its_table():
    tokens, _ = _left_padded(lengths=(7,), width=7)
    rotary = _model()
    torch.testing.assert_close(
        rotary(tokens, positions=torch.arange(10, 17)[None]), rotary(tokens), rtol=1e-5, atol=1e-5
    )  # RoPE's scores depend on distances only (float32 tables: 1e-5)
    learned = _model(positional_encoding="learned")
    assert (learned(tokens, positions=torch.arange(10, 17)[None]) - learned(tokens)).abs().max() > 1e-3
    with pytest.raises(
        ValueError, match=r"argument 'positions' must lie in \[0, max_len=48\), got values from 45 to 51"
    ):
        rotary(tokens, positions=torch.arange(45, 52)[None])
    with pytest.raises(T.TypeCheckError, match="positions"):
        rotary(tokens, positions=torch.arange(6)[None])


def test_the_cache_refuses_masks_it_cannot_continue():
    model = _model()
    tokens, real = _left_padded()
    with pytest.raises(ValueError, match=r"with a cache, pass mask=None .* got AttentionMask\(causal=True"):
        model(tokens, T.AttentionMask(causal=True, key_mask=real), cache=model.new_cache())
    with pytest.raises(ValueError, match="with a cache, pass mask=None"):
        model(tokens, torch.ones(3, 9, 9, dtype=torch.bool), cache=model.new_cache())
    cache = model.new_cache()
    model(tokens[:, :4], T.AttentionMask(key_mask=real[:, :4]), cache=cache)
    with pytest.raises(ValueError, match="with a cache, pass mask=None"):
        model(tokens[:, 4:5], T.AttentionMask(key_mask=real[:, 4:5]), cache=cache)


# ---------------------------------------------------------------- the sliding window
def _changed_at(model, tokens, j, **kwargs):
    other = tokens.clone()
    other[0, j] = (other[0, j] % 28) + 1
    return (model(other, **kwargs) - model(tokens, **kwargs)).abs().amax(-1)[0]  # (seq,): where the change reached


@pytest.mark.parametrize("n_layers", [1])  # one layer: a change reaches exactly the queries that see it
def test_the_window_is_exactly_i_minus_window_below_j(n_layers):
    window = 4
    model = _model(sliding_window=window, n_layers=n_layers)
    tokens, _ = _left_padded(lengths=(10,), width=10)
    reached = _changed_at(model, tokens, 2)  # key 2 is seen by queries 2, 3, 4, 5 (i - 4 < 2 <= i), not 6
    assert (reached[2:6] > 1e-8).all() and (reached[6:] == 0).all() and (reached[:2] == 0).all()
    no_window = _model(n_layers=n_layers)
    assert (_changed_at(no_window, tokens, 2)[6:] > 1e-8).all()
    cache = model.new_cache()
    steps = [model(tokens[:, :3], cache=cache)] + [model(tokens[:, t : t + 1], cache=cache) for t in range(3, 10)]
    torch.testing.assert_close(torch.cat(steps, 1), model(tokens), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("window", [8, 9, 10])
def test_a_window_at_or_past_the_length_is_no_window(window):
    tokens, _ = _left_padded(lengths=(9,), width=9)
    got = _model(sliding_window=window)(tokens)
    expected = _model()(tokens)
    if window >= 9:
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    else:  # window 8 over 9 positions: only the last query loses key 0
        torch.testing.assert_close(got[:, :8], expected[:, :8], rtol=0, atol=0)
        assert (got[:, 8] - expected[:, 8]).abs().max() > 1e-8


# ---------------------------------------------------------------- every backend
def _kernel_takes_windows() -> bool:
    """Whether the kernel takes issue 29's window (its own part of the issue, landing separately)."""
    import inspect

    from transformer import kernels

    return "window_left" in inspect.signature(kernels.unsupported_reason).parameters


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_every_backend_computes_the_eager_function_on_the_modern_model(backend):
    if backend == "triton" and not _kernel_takes_windows():
        pytest.skip("the sliding window is window_left now; the kernel takes it with issue 29's kernel part")
    model = _model(n_kv_heads=2, sliding_window=5, rope_fraction=0.5).float()
    tokens, real = _left_padded()
    mask = T.AttentionMask(key_mask=real)
    with T.use_backend("eager"):
        expected = model.logits(tokens, mask)
    with T.use_backend(backend):
        got = model.logits(tokens, mask)
        cache = model.new_cache()
        steps = [model.logits(tokens[:, :6], mask.replace(key_mask=real[:, :6]), cache=cache)]
        steps += [model.logits(tokens[:, t : t + 1], cache=cache) for t in (6, 7, 8)]
    torch.testing.assert_close(got[real], expected[real], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.cat(steps, 1)[real], expected[real], rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- generation from left-padded prompts
@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_from_left_padded_prompts_equals_each_prompt_alone(use_cache):
    model = _model(n_kv_heads=2, sliding_window=6)
    tokens, real = _left_padded()
    out = generate(model, tokens, 6, prompt_mask=real, use_cache=use_cache)
    for row in range(3):
        alone = generate(model, tokens[row : row + 1, real[row]], 6)
        assert out[row, 9:].tolist() == alone[0, int(real[row].sum()) :].tolist()
    with pytest.raises(ValueError, match="prompt_mask has no real token in row 1"):
        generate(model, tokens, 2, prompt_mask=real & torch.tensor([[True], [False], [True]]))


def test_beam_generate_from_a_left_padded_prompt_equals_the_prompt_alone():
    model = _model(seed=3)
    tokens, real = _left_padded(lengths=(5,), width=8)
    padded, score = beam_generate(model, tokens, 5, beam_size=3, prompt_mask=real)
    alone, alone_score = beam_generate(model, tokens[:, real[0]], 5, beam_size=3)
    assert padded[0, 8:].tolist() == alone[0, 5:].tolist()
    assert score == pytest.approx(alone_score, abs=1e-9)


# ---------------------------------------------------------------- checkpoints from before the new fields
def test_a_checkpoint_written_before_the_blocks_loads_with_every_new_field_at_its_default():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "checkpoints", "lm")
    loaded = load_checkpoint(here)
    config = loaded.model.config
    assert config.positional_encoding in ("sinusoidal", "learned") and config.norm in ("layer", "std")
    assert not config.ffn_gated and not config.qk_norm and config.rope_scaling == "none"
    assert config.sliding_window is None and config.head_dim is None and config.lm_head_bias
    assert loaded.model.rotary is None
    old = {k: v for k, v in config.to_dict().items() if not k.startswith("rope_")}
    for name in (
        "head_dim",
        "ffn_gated",
        "qkv_bias",
        "out_bias",
        "ffn_bias",
        "qk_norm",
        "lm_head_bias",
        "sliding_window",
    ):
        old.pop(name)
    assert LMConfig.from_dict(old) == config  # a dict without the new fields: the same config


def test_a_modern_model_round_trips_through_our_checkpoints(tmp_path):
    from transformer.checkpoint import save_checkpoint

    model = _model(n_kv_heads=1, sliding_window=5, rope_scaling="yarn", rope_factor=2.0, rope_original_max_len=16,
                   tie_weights=True).float()  # fmt: skip
    save_checkpoint(tmp_path / "modern", model)
    loaded = load_checkpoint(tmp_path / "modern").model.eval()
    assert loaded.config == model.config
    assert loaded.generator.proj.weight is loaded.embed[0].lut.weight and loaded.generator.proj.bias is None
    tokens, real = _left_padded()
    mask = T.AttentionMask(key_mask=real)
    torch.testing.assert_close(loaded.logits(tokens, mask), model.logits(tokens, mask), rtol=0, atol=0)


def test_the_modern_model_traces_whole_under_torch_compile_with_its_contracts_on():
    """fullgraph=True: RoPE's tables, the padding positions and the window band add no graph break, and the checked
    forwards of the new blocks raise no false contract error while Dynamo traces (Dynamo's own "eager" backend:
    tracing without code generation)."""
    torch._dynamo.reset()
    model = _model(n_kv_heads=2, sliding_window=4, rope_fraction=0.5).float()
    tokens, real = _left_padded()
    mask = T.AttentionMask(key_mask=real)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.no_grad(), T.use_backend("torch"):
        torch.testing.assert_close(compiled(tokens, mask), model(tokens, mask), rtol=1e-6, atol=1e-6)
