"""Dropout in training and never in evaluation: every module, and every code path of the model (forward, the
structured masks, encode, decode, greedy decoding with and without the cache); the references are
tests/test_dropout_placement.py's formulas."""

from __future__ import annotations

import pytest
import torch
from test_dropout_placement import (
    DTYPE,
    PATHS_OF_ATTENTION,
    SEEDS,
    VARIANTS,
    Replay,
    attention_inputs,
    attention_module,
    build,
    model_inputs,
    ref_attention,
    ref_embed,
    ref_ffn,
    ref_sublayer,
    seeded,
    structured,
    sublayer_connection,
)
from torch import nn

import transformer as T

# --------------------------------------------------------------------------------------------------
# 5. Training drops, evaluation never does: every backend, every code path


def module_cases() -> dict[str, tuple]:
    """Every module with a dropout, in each of its variants: (module, run(module), its formula with no dropout)."""
    d, p = 32, 0.4
    x = torch.randn(2, 5, d, dtype=DTYPE)
    tokens = torch.randint(0, 11, (2, 5))
    query, memory, mask = attention_inputs()
    cases: dict[str, tuple] = {}
    sub = nn.Linear(d, d).to(DTYPE)
    for placement in ("pre", "post"):
        sc = sublayer_connection(placement, p, d)
        cases[f"sublayer-{placement}"] = (sc, lambda m: m(x, sub), lambda m: ref_sublayer(m, x, sub, 0.0, Replay(0)))
    for activation in ("relu", "gelu"):
        ff = T.PositionwiseFeedForward(d, 48, p, activation).to(DTYPE)
        cases[f"ffn-{activation}"] = (ff, lambda m: m(x), lambda m: ref_ffn(m, x, 0.0, Replay(0)))
    for kind, pe in (("sinusoidal", T.PositionalEncoding), ("learned", T.LearnedPositionalEncoding)):
        embed = nn.Sequential(T.Embeddings(d, 11), pe(d, p, max_len=20)).to(DTYPE)
        cases[f"embeddings-{kind}"] = (
            embed,
            lambda m: m[1](m[0](tokens), offset=2),
            lambda m: ref_embed(m, tokens, 0.0, Replay(0), offset=2),
        )
    for path in PATHS_OF_ATTENTION:
        mha = attention_module(path, p)
        cases[f"attention-{path}"] = (
            mha,
            lambda m: m(query, memory, memory, mask),
            lambda m: ref_attention(m, query, memory, memory, mask, 0.0, Replay(0))[0],
        )
    return cases


@pytest.mark.parametrize("case", list(module_cases()))
def test_every_module_in_evaluation_is_its_formula_without_dropout(case):
    """module.eval(): whatever the seed, the output is the formula with nothing dropped; module.train() drops."""
    module, run, formula = module_cases()[case]
    module.eval()
    evaluated = [seeded(seed, run, module) for seed in SEEDS]
    assert torch.equal(evaluated[0], evaluated[1])
    torch.testing.assert_close(evaluated[0], formula(module), rtol=0, atol=1e-6)
    module.train()
    assert not torch.allclose(seeded(SEEDS[0], run, module), evaluated[0])


def run_path(model: T.EncoderDecoder, name: str, inputs) -> torch.Tensor:
    """One public way through the model, on fixed inputs: (src, tgt, src_mask, tgt_mask, memory)."""
    src, tgt, src_mask, tgt_mask, memory = inputs
    if name == "forward":
        return model(src, tgt, src_mask, tgt_mask)
    if name == "forward-structured":
        return model(src, tgt, *structured(src, tgt))
    if name == "encode":
        return model.encode(src, src_mask)
    if name == "decode":
        return model.decode(memory, src_mask, tgt, tgt_mask)
    # greedy decoding, with its key/value cache or re-decoding the prefix each step: the log-probabilities the
    # generator gives at every step (the tokens alone could hide a difference)
    steps: list[torch.Tensor] = []
    hook = model.generator.register_forward_hook(lambda module, args, out: steps.append(out))
    try:
        T.greedy_decode(model, src, src_mask, 4, 1, use_cache=name == "greedy-cached")
    finally:
        hook.remove()
    assert len(steps) == 3
    return torch.cat(steps, -1)


CODE_PATHS = ["forward", "forward-structured", "encode", "decode", "greedy-cached", "greedy-recompute"]


@pytest.mark.parametrize("code_path", CODE_PATHS)
@pytest.mark.parametrize("path", PATHS_OF_ATTENTION)
def test_training_drops_and_evaluation_never_does(path, code_path):
    """model.train(): two seeds give two outputs, both unlike evaluation's. model.eval(): every seed gives the
    output of the same weights with every dropout p set to 0 (in training mode, where p = 0 drops nothing)."""
    variants = dict(n_encoder_layers=1, n_decoder_layers=1, **VARIANTS["others"])  # the defaults run elsewhere
    model = build(path, **variants)
    no_dropout = build(path, **variants, dropout=0.0, attention_dropout=0.0)
    no_dropout.load_state_dict(model.state_dict())
    inputs = (*model_inputs(), torch.randn(2, 7, 32, dtype=DTYPE))
    reference = run_path(no_dropout.train(), code_path, inputs)

    model.eval()
    for seed in SEEDS:
        torch.testing.assert_close(seeded(seed, run_path, model, code_path, inputs), reference, rtol=0, atol=0)

    model.train()
    trained = [seeded(seed, run_path, model, code_path, inputs) for seed in SEEDS]
    assert not torch.allclose(trained[0], trained[1])
    for out in trained:
        assert not torch.allclose(out, reference)
