"""``generate(compile=True)``: the decode step over a static cache, compiled (transformer/lm/static_decode.py).

Its promises, each against the eager ``generate`` as the oracle: the same tokens, greedy and sampled with the same
generator, with grouped-query heads and rotary positions, at batch 1 and 3, on a left-padded batch, and with a
sliding window shorter than the generated length (the eager cache drops the old keys, the static one masks them);
one graph per batch size and room, never one per token (Dynamo's counters); a weight changed after a compiled run is
seen by the next; and what the static step cannot take (training mode, a mixture of experts, no cache, beam search)
decodes eagerly, compiling nothing. Each graph is compiled by inductor once per process: the models share shapes.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from transformer.contracts import checks
from transformer.lm import LMConfig, build_lm, generate
from transformer.lm.static_decode import room_for, static_decode_refusal

VOCAB = 37


@pytest.fixture(autouse=True, scope="module")
def _fresh_dynamo():
    """Graphs compiled by other test files (the CLI's, a benchmark's) count toward Dynamo's recompile limit of
    ``decode_step``: start this file without them, so that every test here compiles rather than falling back."""
    torch._dynamo.reset()


def _model(seed: int = 0, **overrides):
    torch.manual_seed(seed)
    fields = dict(
        vocab=VOCAB, n_layers=2, d_model=24, d_ff=32, n_heads=3, n_kv_heads=1, max_len=64, dropout=0.0,
        attention_dropout=0.0, positional_encoding="rotary", norm="rms",
    )  # fmt: skip
    return build_lm(LMConfig(**{**fields, **overrides})).eval()


def _prompt(rows: int = 3, steps: int = 5, seed: int = 1):
    return torch.randint(3, VOCAB, (rows, steps), generator=torch.Generator().manual_seed(seed))


def _graphs() -> int:
    return counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("rows", [1, 3])
def test_greedy_tokens_equal_the_eager_generate_with_grouped_heads_and_rotary_positions(rows):
    model, prompt = _model(), _prompt(rows)
    assert model.config.kv_heads == 1 and model.rotary is not None  # GQA (3 query heads, 1 key/value head) + RoPE
    eager = generate(model, prompt, 20)
    assert torch.equal(generate(model, prompt, 20, compile=True), eager)
    assert len(set(eager[:, 5:].flatten().tolist())) > 3  # the model does not repeat one token: the test can fail


def test_a_left_padded_batch_gives_the_eager_tokens():
    model, prompt = _model(), _prompt()
    mask = torch.ones_like(prompt, dtype=torch.bool)
    mask[1, :2] = mask[2, :4] = False
    eager = generate(model, prompt, 20, prompt_mask=mask)
    assert not torch.equal(eager, generate(model, prompt, 20))  # the pads matter on this data
    assert torch.equal(generate(model, prompt, 20, prompt_mask=mask, compile=True), eager)
    assert torch.equal(generate(model, prompt, 20, attention_mask=mask.long(), compile=True), eager)


def test_a_sliding_window_shorter_than_the_generated_length_gives_the_eager_tokens():
    windowed, prompt = _model(sliding_window=4), _prompt()
    eager = generate(windowed, prompt, 20)
    unwindowed = _model()
    unwindowed.load_state_dict(windowed.state_dict())
    assert not torch.equal(eager, generate(unwindowed, prompt, 20))  # the window matters on this data
    assert torch.equal(generate(windowed, prompt, 20, compile=True), eager)


def test_sampling_with_the_same_generator_gives_the_eager_tokens():
    model, prompt = _model(), _prompt()
    eager = generate(model, prompt, 20, sample=True, top_k=10, seed=torch.Generator().manual_seed(5))
    compiled = generate(model, prompt, 20, sample=True, top_k=10, seed=torch.Generator().manual_seed(5), compile=True)
    assert torch.equal(compiled, eager)
    assert not torch.equal(eager, generate(model, prompt, 20))  # sampled, not greedy


def test_the_compiled_step_is_traced_once_per_shape_never_once_per_token():
    model, prompt = _model(), _prompt()
    generate(model, prompt, 4, compile=True)  # this batch size and room compiled (perhaps by an earlier test)
    before = _graphs()
    assert room_for(5 + 4, model.max_len) == room_for(5 + 40, model.max_len)  # one room for both requests
    assert torch.equal(generate(model, prompt, 40, compile=True), generate(model, prompt, 40))
    assert torch.equal(generate(_model(seed=3), prompt, 40, compile=True), generate(_model(seed=3), prompt, 40))
    assert _graphs() == before  # 39 compiled steps and another model of the same shapes: no new graph
    generate(model, prompt[:2], 4, compile=True)
    assert _graphs() <= before + 1  # another batch size: at most one graph


def test_a_weight_changed_after_a_compiled_run_is_seen_by_the_next():
    model, prompt = _model(), _prompt()
    first = generate(model, prompt, 12, compile=True)
    with torch.no_grad():
        model.generator.proj.weight[7] += 50.0 * model.norm.weight.sign()  # token 7 wins once its logit is large
    eager = generate(model, prompt, 12)
    assert not torch.equal(eager, first)
    assert torch.equal(generate(model, prompt, 12, compile=True), eager)


def test_what_the_static_step_cannot_take_decodes_eagerly_without_compiling():
    prompt = _prompt()
    training = _model().train()
    experts = _model(n_experts=4, experts_per_token=2, ffn_gated=True)
    cases = {
        "training mode": (training, {}),
        "a mixture of experts": (experts, {}),
        "use_cache=False": (_model(), {"use_cache": False}),
    }
    for words, (model, options) in cases.items():
        assert words in static_decode_refusal(model, options.get("use_cache", True))
        before = _graphs()
        torch.manual_seed(0)  # dropout in training mode: the same draws for both
        eager = generate(model, prompt, 8, **options)
        torch.manual_seed(0)
        assert torch.equal(generate(model, prompt, 8, compile=True, **options), eager)
        assert _graphs() == before
    assert static_decode_refusal(_model()) is None
    model, before = _model(), _graphs()
    beams = generate(model, prompt[:1], 8, num_beams=2, compile=True)
    assert torch.equal(beams, generate(model, prompt[:1], 8, num_beams=2)) and _graphs() == before


def test_compile_must_be_a_bool_checks_on_or_off():
    with pytest.raises(TypeError, match="generate: argument 'compile' is 'yes', expected bool"):
        generate(_model(), _prompt(), 4, compile="yes")
    with checks(False), pytest.raises(TypeError, match="generate: compile must be a bool, got 'yes'"):
        generate(_model(), _prompt(), 4, compile="yes")


def test_past_the_recompile_limit_a_request_decodes_the_static_step_uncompiled_after_a_warning(monkeypatch):
    model, prompt = _model(), _prompt()
    torch._dynamo.reset()
    name = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    monkeypatch.setattr(torch._dynamo.config, name, 1)
    assert torch.equal(generate(model, prompt, 12, compile=True), generate(model, prompt, 12))  # the one graph
    with pytest.warns(UserWarning, match="recompile limit is reached"):
        compiled = generate(model, prompt[:2], 12, compile=True)  # another batch size: a second graph refused
    assert torch.equal(compiled, generate(model, prompt[:2], 12))
    torch._dynamo.reset()
