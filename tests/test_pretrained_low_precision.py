"""bfloat16 and float16 generation equal to transformers' ``generate`` on every supported architecture (issues 43
and 44): greedy token for token on a left-padded batch whose near-tied logits make the float32 decision matter, and
sampling from the same filtered distribution (temperature, top-k, top-p as transformers' logits processors) at
every step of every row. The comparison is ``low_precision_generation``'s (its docstring says what "the same" is);
this file runs its short fixed-seed budget (seed 0); ``TT_FUZZ_BUDGET=N`` runs N seeds per case, and ``python
tests/low_precision_generation.py --seeds 10`` is the long run by hand whose counts are committed in
``benchmarks/results/differential/low_precision_generation.json``.

What this comparison found, each an operation rounded in another dtype or order than transformers': GPT-2's
``gelu_new`` is transformers' formula written out (each operation rounds in half precision; we ran torch's fused
tanh GELU, which rounds once), fixed: ``activation="gelu_new"``; Qwen2-MoE's and Qwen3-MoE's routers round their
top-k weights to the model's dtype before weighting the experts (we weighted in float32, Mixtral's way), fixed:
``router_weights_rounded``, which their loaders set (transformers 5.4 weights in float32: with it, ``OLDER_ROUTERS``
names them, their steps need only be close and their greedy rows are not compared); Gemma 2's eager attention rounds
the scores, the soft cap and the probabilities to the model's dtype (our torch backend's math form computed them in
float32), fixed: the torch backend's ``half_softcap_attention``; past the window, transformers' sliding cache hands
Gemma 3's sdpa only the window's keys where ours handed every key with the window as a mask (the same function,
another rounding order), fixed: ``window_keys`` (SmolLM3's windowed layers too). With transformers 5.17 and later
none is open: every architecture's logits are theirs bit for bit at every step. Against an older transformers
``KNOWN`` names what still differs (5.4's Qwen MoE routers): those steps must stay within the bound their logits'
difference allows.
"""

from __future__ import annotations

import math
import os
import random
from collections import Counter

import pytest
import torch
from architecture_models import EVERY
from low_precision_generation import DTYPES, run_case
from moe_helpers import their_router_rounds

transformers = pytest.importorskip("transformers")

BUDGET = int(os.environ.get("TT_FUZZ_BUDGET", "1"))
NEW = 12  # tokens per row here (the long run: 24)


#: the Qwen mixtures where this transformers' router weights in float32 (5.4): our loaders round the weights as
#: 4.x and 5.17 on do (``router_weights_rounded``), so there the rounding differs the other way round
OLDER_ROUTERS = {
    kind: f"transformers {transformers.__version__}'s {kind} router weights the experts in float32 (its cast comes "
    "after router_logits was rebound to the float32 softmax); ours rounds the top-k weights to the model's dtype, as "
    "transformers 4.x and >= 5.17 do (router_weights_rounded, docs/moe.md)"
    for kind in ("qwen2_moe", "qwen3_moe")
    if not their_router_rounds(kind)
}
#: the architectures whose half-precision logits are not this transformers' bit for bit, with the operation that
#: differs (none with 5.17 and later): their steps may be ``close`` (the distribution within the bound the logits'
#: difference allows) or ``cut_moved`` (the supports differ only in tokens whose log-probabilities moved), never further
KNOWN = dict(OLDER_ROUTERS)
CASES = [
    pytest.param(kind, dtype, id=f"{kind}-{str(dtype).removeprefix('torch.')}") for kind in EVERY for dtype in DTYPES
]


@pytest.mark.parametrize("kind, dtype", CASES)
def test_half_precision_generation_is_transformers(kind, dtype):
    counts = Counter()
    for seed in range(BUDGET):
        counts.update(run_case(transformers, kind, dtype, seed, new=NEW))
    rows, steps = counts["greedy_rows_agreed"] + counts["greedy_rows_disagreement"], counts["greedy_steps"]
    assert rows == 8 * BUDGET and steps == 8 * NEW * BUDGET  # every row and step compared
    if kind not in OLDER_ROUTERS:  # there, greedy rows may differ (not claimed): a near tie moved by the weighting
        assert counts["greedy_rows_disagreement"] == 0, dict(counts)
    accepted = ("agreed", "tie", "close", "cut_moved") if kind in KNOWN else ("agreed", "tie")
    assert sum(counts[f"sampling_steps_{verdict}"] for verdict in accepted) == steps, dict(counts)
    if kind not in KNOWN:
        assert counts["logits_differ"] == 0, dict(counts)  # bit for bit, every step of every row


def test_gelu_new_is_transformers_bit_for_bit_in_half_precision():
    """``"gelu_new"`` rounds as transformers' ``NewGELUActivation`` in bfloat16 and float16 (every value equal);
    torch's fused tanh GELU (``"gelu_tanh"``, transformers' ``gelu_pytorch_tanh``) differs from it there, so a GPT-2
    folder read with it computes other half-precision logits."""
    from transformers.activations import ACT2FN

    from transformer.layers import ACTIVATIONS

    x = torch.linspace(-6, 6, 4001)
    for dtype in DTYPES:
        half = x.to(dtype)
        assert torch.equal(ACTIVATIONS["gelu_new"](half), ACT2FN["gelu_new"](half))
        assert torch.equal(ACTIVATIONS["gelu_tanh"](half), ACT2FN["gelu_pytorch_tanh"](half))
        assert not torch.equal(ACTIVATIONS["gelu_tanh"](half), ACT2FN["gelu_new"](half))
    torch.testing.assert_close(ACTIVATIONS["gelu_new"](x.double()), ACTIVATIONS["gelu_tanh"](x.double()))


def test_a_gpt2_folder_loads_with_the_written_out_gelu(tmp_path):
    from architecture_models import saved

    from transformer.lm import TransformerLM

    folder = saved(transformers, "gpt2", tmp_path / "gpt2", torch.bfloat16)
    assert TransformerLM.from_pretrained(folder).config.activation == "gelu_new"
    folder = saved(transformers, "gpt2", tmp_path / "tanh", activation_function="gelu_pytorch_tanh")
    assert TransformerLM.from_pretrained(folder).config.activation == "gelu_tanh"


@pytest.mark.parametrize("kind", ["qwen2_moe", "qwen3_moe"])
def test_the_qwen_routers_round_their_weights_as_transformers(tmp_path, kind):
    """A Qwen MoE folder loads with ``router_weights_rounded`` (its routers' cast); in bfloat16 our logits are this
    transformers' bit for bit with the rounding its router does (5.17 and 5.24: rounded; 5.4: float32), and differ
    with the other: the field is what makes them equal. In float32 the two are the same numbers."""
    import dataclasses

    from architecture_models import load_theirs, saved
    from pretrained_helpers import hf_logits, left_padded_batch, our_logits

    from transformer.lm import TransformerLM, build_lm

    tokens, mask = left_padded_batch()
    for dtype in (torch.bfloat16, torch.float32):
        folder = saved(transformers, kind, tmp_path / str(dtype), dtype)
        ours = TransformerLM.from_pretrained(folder)
        assert ours.config.router_weights_rounded
        other = build_lm(dataclasses.replace(ours.config, router_weights_rounded=False)).to(dtype).eval()
        other.load_state_dict(ours.state_dict())
        with torch.no_grad():
            theirs = hf_logits(load_theirs(transformers, folder), tokens, mask)[mask]
            rounded, unrounded = our_logits(ours, tokens, mask)[mask], our_logits(other, tokens, mask)[mask]
        if dtype == torch.float32:
            assert torch.equal(rounded, unrounded)
            continue
        matching, differing = (rounded, unrounded) if their_router_rounds(kind) else (unrounded, rounded)
        assert torch.equal(matching, theirs)
        assert not torch.equal(differing, theirs)


@pytest.mark.parametrize("dtype", DTYPES)
def test_half_precision_softcap_attention_is_transformers_eager_attention(dtype):
    """With a softcap, the torch backend rounds float16 and bfloat16 attention as transformers' eager attention
    (Gemma 2's ``eager_attention_forward``, the oracle) does, bit for bit, on grouped heads with left padding and a
    causal mask; torch's math definition (float32 inside, one rounding) differs from it there; float32 inputs still
    take torch's math definition, unchanged (docs/attention.md, "Soft-capped attention in half precision")."""
    from types import SimpleNamespace

    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

    from transformer.backends.sdpa import reference
    from transformer.backends.torch_backend import torch_sdpa

    generator = torch.Generator().manual_seed(0)
    batch, heads, kv_heads, q_len, k_len, d, scale, cap = 3, 4, 2, 5, 9, 12, 20**-0.5, 1.0
    q = 3 * torch.randn(batch, heads, q_len, d, generator=generator)
    k, v = (3 * torch.randn(batch, kv_heads, k_len, d, generator=generator) for _ in range(2))
    causal = torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
    keys = torch.arange(k_len)[None, :] >= torch.tensor([0, 2, 3])[:, None]  # rows padded by 0, 2, 3 on the left
    mask = (causal & keys[:, None, :]).unsqueeze(1)  # (batch, 1, q_len, k_len); every row keeps a key
    module = SimpleNamespace(num_key_value_groups=heads // kv_heads, training=False)
    for inputs in (dtype, torch.float32):
        qh, kh, vh = q.to(inputs), k.to(inputs), v.to(inputs)
        ours = torch_sdpa(qh, kh, vh, mask, 0.0, scale, enable_gqa=True, softcap=cap)
        math_form = reference(qh, kh, vh, mask, 0.0, False, scale, True, softcap=cap)
        if inputs == torch.float32:
            assert torch.equal(ours, math_form)
            continue
        additive = torch.zeros(mask.shape, dtype=inputs).masked_fill(~mask, torch.finfo(inputs).min)
        theirs, _ = eager_attention_forward(module, qh, kh, vh, additive, scaling=scale, softcap=cap)
        assert torch.equal(ours.transpose(1, 2), theirs)
        assert not torch.equal(math_form.transpose(1, 2), theirs)
        float_mask = torch_sdpa(qh, kh, vh, additive.float(), 0.0, scale, enable_gqa=True, softcap=cap)
        assert torch.equal(float_mask.transpose(1, 2), theirs)  # a float mask: added in the dtype, as theirs


def test_gemma3_differs_without_the_window_cut(monkeypatch):
    """Without ``window_keys`` (every cached key handed to sdpa, the window as a mask) bfloat16 Gemma 3's steps past
    the window are not transformers' bit for bit on this data: the cut is what makes them equal."""
    import transformer.lm.attention as lm_attention

    monkeypatch.setattr(lm_attention, "window_keys", lambda q, k, v, mask: (k, v, mask))
    counts = run_case(transformers, "gemma3", torch.bfloat16, 0, new=NEW)
    assert counts["logits_differ"] > 0 and counts["greedy_rows_disagreement"] == 0, dict(counts)


def test_the_comparison_can_fail():
    """A sampler that rounds its log-probabilities to bfloat16 first (the decision issue 43 found) disagrees with
    transformers on this data, and so does a greedy decision on them: the counts above mean something."""
    import low_precision_generation as module

    original = module.sampling_probabilities

    def rounded(log_probs, temperature, top_k, top_p):
        return original(log_probs.to(torch.bfloat16).float(), temperature, top_k, top_p)

    module.sampling_probabilities = rounded
    try:
        counts = run_case(transformers, "llama", torch.bfloat16, 0, new=NEW)
    finally:
        module.sampling_probabilities = original
    assert counts["sampling_steps_agreed"] + counts["sampling_steps_tie"] < counts["greedy_steps"], dict(counts)
    assert counts["float32_decided"] > 0  # steps where rounding the log-probs first picks another token


def test_the_sampling_draw_is_random_per_seed():
    """Each case draws its own (temperature, top_k, top_p) from its seed: the short budget's seed 0 and the long
    run's seeds meet every setting of each."""
    draws = set()
    for seed in [0, *range(100, 110)]:
        rng = random.Random(seed)
        draws.add((rng.choice([0.7, 1.0, 1.3]), rng.choice([None, 5, 20]), rng.choice([None, 0.8, 0.95])))
    assert {t for t, _, _ in draws} == {0.7, 1.0, 1.3} and {k for _, k, _ in draws} == {None, 5, 20}
    assert {p for _, _, p in draws} == {None, 0.8, 0.95} and not math.isnan(len(draws))
