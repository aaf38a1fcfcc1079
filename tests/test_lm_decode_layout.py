"""``generate(weight_layout=...)``: the weights laid out for decoding (transformer/lm/decode_layout.py).

Its promises: with ``"auto"`` (the default) and at least MIN_NEW_TOKENS new tokens, the float32 CPU linear weights
the rule names for the batch (the head up to batch 8, also the wide maps at batch 1) are stored transposed while the
model decodes, seen by the modules as they run; afterwards every parameter is as before (values, shape, contiguous
strides), also after an error; the tokens equal those of ``"as_loaded"`` (greedy and sampled, beam search, tied
embeddings, compiled); shorter requests, half precision and float64 are never relaid; a weight replaced during the
request is kept; a wrong value is refused by name.
"""

from __future__ import annotations

import pytest
import torch

from transformer.lm import LMConfig, build_lm, generate
from transformer.lm.decode_layout import MIN_NEW_TOKENS, PAYS, decode_layout_weights, laid_out_for_decoding

VOCAB, D_MODEL, D_FF = 400, 24, 64  # head 400/24 = 16.7 (relaid up to batch 8), gate/up 64/24 = 2.7 (batch 1)
NEW = MIN_NEW_TOKENS + 8


def _model(seed: int = 0, **overrides):
    torch.manual_seed(seed)
    fields = dict(
        vocab=VOCAB, n_layers=2, d_model=D_MODEL, d_ff=D_FF, n_heads=3, n_kv_heads=1, max_len=128, dropout=0.0,
        attention_dropout=0.0, positional_encoding="rotary", norm="rms", ffn_gated=True, activation="silu",
    )  # fmt: skip
    return build_lm(LMConfig(**{**fields, **overrides})).eval()


def _prompt(rows: int = 1, steps: int = 5, seed: int = 1):
    return torch.randint(3, VOCAB, (rows, steps), generator=torch.Generator().manual_seed(seed))


def _snapshot(model):
    return {n: (p.detach().clone(), p.stride(), p.data_ptr() != 0) for n, p in model.named_parameters()}


def _assert_as_before(model, before):
    for name, p in model.named_parameters():
        values, stride, _ = before[name]
        assert p.is_contiguous() and p.stride() == stride, name
        assert torch.equal(p.detach(), values), name


class _Strides:
    """Records, at each call of the listed linear modules, whether their weight was stored transposed."""

    def __init__(self, modules: dict):
        self.seen = {name: set() for name in modules}
        for name, module in modules.items():
            module.register_forward_pre_hook(lambda m, args, name=name: self.seen[name].add(_transposed(m.weight)))


def _transposed(weight) -> bool:
    return weight.stride() == (1, weight.size(0)) and not weight.is_contiguous()


def _watched(model):
    ffn = model.layers[0].feed_forward
    return _Strides({"head": model.generator.proj, "gate": ffn.w_1, "up": ffn.w_3, "down": ffn.w_2})


def test_at_batch_1_the_head_and_the_wide_maps_decode_transposed_and_are_laid_back():
    model = _model()
    before, watch = _snapshot(model), _watched(model)
    out = generate(model, _prompt(), NEW)
    assert watch.seen["head"] == {True}  # every step of the request, the prompt's included
    assert watch.seen["gate"] == watch.seen["up"] == {True}
    assert watch.seen["down"] == {False}  # 24/64: narrow, never relaid
    _assert_as_before(model, before)
    assert torch.equal(out, generate(model, _prompt(), NEW, weight_layout="as_loaded"))


@pytest.mark.parametrize("rows", [3, 8])
def test_up_to_batch_8_only_the_head_is_relaid(rows):
    model = _model()
    watch = _watched(model)
    generate(model, _prompt(rows), NEW)
    assert True in watch.seen["head"] and watch.seen["gate"] == {False} and watch.seen["up"] == {False}


def test_past_batch_8_and_for_short_requests_nothing_is_relaid():
    model = _model()
    watch = _watched(model)
    generate(model, _prompt(9), NEW)
    generate(model, _prompt(1), MIN_NEW_TOKENS - 1)
    assert all(seen == {False} for seen in watch.seen.values())
    assert (
        len(decode_layout_weights(model, 9)) == 0 and len(decode_layout_weights(model, 1)) == 5
    )  # head, 2 x (gate, up)


def test_the_rule_is_the_documented_one():
    assert PAYS == ((1, 2.0), (8, 16.0)) and MIN_NEW_TOKENS == 32  # docs/benchmarks.md, "Weights laid out for decoding"


@pytest.mark.parametrize("rows", [1, 3])
def test_tokens_equal_the_weights_as_loaded_greedy_and_sampled(rows):
    model, prompt = _model(), _prompt(rows)
    greedy = generate(model, prompt, NEW)
    assert torch.equal(greedy, generate(model, prompt, NEW, weight_layout="as_loaded"))
    assert len(set(greedy[:, 5:].flatten().tolist())) > 5  # not one repeated token: the comparison can fail
    sampled = generate(model, prompt, NEW, sample=True, seed=7, top_k=50)
    assert torch.equal(sampled, generate(model, prompt, NEW, sample=True, seed=7, top_k=50, weight_layout="as_loaded"))


def test_the_decode_steps_logits_are_a_forward_calls_up_to_float32_rounding():
    model, prompt = _model(), _prompt()
    with torch.no_grad():
        loaded = model.logits(prompt)
        with laid_out_for_decoding(model, 1, NEW) as relaid:
            assert len(relaid) == 5
            transposed = model.logits(prompt)
    torch.testing.assert_close(transposed, loaded, rtol=1e-5, atol=1e-5 * loaded.abs().max().item())


def test_beam_search_decodes_with_the_head_relaid_and_the_same_hypotheses():
    model = _model()
    watch = _watched(model)
    beams = generate(model, _prompt(2), NEW, num_beams=3)
    assert True in watch.seen["head"] and watch.seen["gate"] == {False}  # 3 beams: a batch of 3
    assert torch.equal(beams, generate(model, _prompt(2), NEW, num_beams=3, weight_layout="as_loaded"))


def test_tied_embeddings_are_relaid_once_and_laid_back():
    model = _model(tie_weights=True)
    assert model.generator.proj.weight is model.embed[0].lut.weight
    before = _snapshot(model)
    with torch.no_grad(), laid_out_for_decoding(model, 1, NEW) as relaid:
        assert sum(w is model.generator.proj.weight for w in relaid) == 1
        assert _transposed(model.embed[0].lut.weight)  # the same parameter: the lookup reads it transposed
    _assert_as_before(model, before)
    assert torch.equal(generate(model, _prompt(), NEW), generate(model, _prompt(), NEW, weight_layout="as_loaded"))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_half_precision_and_float64_are_never_relaid(dtype):
    model = _model().to(dtype)
    watch = _watched(model)
    generate(model, _prompt(), NEW)
    assert all(seen == {False} for seen in watch.seen.values())


class _Failing:
    """A streamer that raises after a few tokens."""

    def __init__(self):
        self.calls = 0

    def put(self, ids):
        self.calls += 1
        if self.calls > 4:
            raise RuntimeError("the consumer went away")

    def end(self):
        pass


def test_an_error_during_decoding_lays_the_weights_back():
    model = _model()
    before, watch = _snapshot(model), _watched(model)
    with pytest.raises(RuntimeError, match="went away"):
        generate(model, _prompt(), NEW, streamer=_Failing())
    assert True in watch.seen["head"]
    _assert_as_before(model, before)


def test_under_inference_mode_the_weights_are_laid_back_trainable():
    model, prompt = _model(), _prompt()
    loaded = generate(model, prompt, NEW, weight_layout="as_loaded")
    with torch.inference_mode():
        assert torch.equal(generate(model, prompt, NEW), loaded)
    assert not any(p.is_inference() for p in model.parameters())
    model.train()
    model.logits(prompt).sum().backward()  # an inference tensor would refuse to be saved for backward
    assert model.generator.proj.weight.grad is not None


def test_a_weight_replaced_during_the_request_is_kept():
    model = _model()
    new = torch.randn(VOCAB, D_MODEL)
    with torch.no_grad(), laid_out_for_decoding(model, 1, NEW):
        model.generator.proj.weight.data = new
    assert model.generator.proj.weight.data_ptr() == new.data_ptr()
    assert model.layers[0].feed_forward.w_1.weight.is_contiguous()  # the others laid back


def test_compiled_generation_decodes_relaid_with_the_same_tokens():
    model, prompt = _model(), _prompt()
    before = _snapshot(model)
    compiled = generate(model, prompt, NEW, compile=True)
    assert torch.equal(compiled, generate(model, prompt, NEW, weight_layout="as_loaded"))
    _assert_as_before(model, before)


@pytest.mark.parametrize("value", ["transposed", "AUTO", ""])
def test_a_wrong_weight_layout_is_refused_by_name(value):
    model = _model()
    for kwargs in ({}, {"num_beams": 2}):
        with pytest.raises(ValueError, match=r"generate: weight_layout must be one of 'auto', 'as_loaded', got"):
            generate(model, _prompt(), NEW, weight_layout=value, **kwargs)


def test_a_weight_layout_of_another_type_is_refused_by_its_contract():
    with pytest.raises(TypeError, match="weight_layout"):
        generate(_model(), _prompt(), NEW, weight_layout=None)
