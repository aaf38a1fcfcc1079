"""The differential fuzzer of ``differential_models`` against transformers, on its short fixed-seed budget: one
random config per supported architecture (GPT-2, Llama, Qwen2, Qwen3, Mistral, StarCoder2, Phi-3, Gemma 2 and 3,
GPT-NeoX, OLMo 2, OLMoE, SmolLM3, Granite), each in float32,
bfloat16 and float16, with left padding, with and without the caches; logits, greedy tokens and the sampling
distributions must agree (ties counted, not failed: see the module's docstring for what "the same" means in half
precision). ``TT_FUZZ_BUDGET=N`` runs N seeds per architecture instead (the long budget; ``python
tests/differential_models.py --cases N`` writes the counts to ``benchmarks/results/differential/models.json``).

Also here: a seeded statistical test of the sampled tokens themselves (not only the distribution they are drawn
from) against transformers' warpers, and the head counts that are not a power of two, asserted to be drawn.
"""

from __future__ import annotations

import math
import os
import random

import pytest
import torch
from differential_models import (
    ARCHITECTURES,
    disagreements,
    hf_sampling_probabilities,
    random_config,
    run_cases,
)
from pretrained_helpers import hf_model, left_padded_batch

from transformer.lm import TransformerLM, generate

transformers = pytest.importorskip("transformers")

BUDGET = int(os.environ.get("TT_FUZZ_BUDGET", "1"))
FIRST_SEED = 0  # the short budget's seeds: 0 .. BUDGET - 1 (the long run by hand starts at 100)


@pytest.mark.parametrize("kind", ARCHITECTURES)
def test_every_architecture_computes_generates_and_samples_what_transformers_does(kind):
    report = run_cases(transformers, range(FIRST_SEED, FIRST_SEED + BUDGET), kinds=(kind,))
    total = report["total"]
    assert not disagreements(report), (disagreements(report), report["disagreeing_cases"])
    for dtype in ("float32", "bfloat16", "float16"):  # every comparison ran, on every row
        assert total[f"{dtype}_logits_agreed"] == BUDGET
        rows = total[f"{dtype}_sampling_same_logits_agreed"] + total.get(f"{dtype}_sampling_same_logits_tie", 0)
        for mode in ("cache", "nocache"):
            greedy = total.get(f"{dtype}_greedy_{mode}_rows_agreed", 0) + total.get(f"{dtype}_greedy_{mode}_tie", 0)
            assert greedy == rows
        assert total.get(f"{dtype}_sampling_agreed", 0) + total.get(f"{dtype}_sampling_tie", 0) == rows


def test_the_configs_drawn_include_head_counts_that_are_not_powers_of_two():
    """The generator draws 3 and 6 heads with 1 or 3 key/value heads (and d_model apart from heads x head_dim where
    the architecture has a head_dim field); the short budget's seeds alone meet some of them."""
    drawn = set()
    for seed in range(40):
        rng = random.Random(seed)
        kind = rng.choice(ARCHITECTURES)
        config, _ = random_config(transformers, kind, rng)
        heads = getattr(config, "num_attention_heads", None) or config.n_head
        kv = getattr(config, "num_key_value_heads", None) or heads
        drawn.add((heads, kv))
    assert {(3, 1), (3, 3), (6, 3), (6, 1)} & drawn and any(h in (3, 6) for h, _ in drawn)


@pytest.mark.parametrize("heads, kv_heads", [(3, 1), (6, 3), (3, 3)])
def test_head_counts_that_are_not_powers_of_two_give_transformers_logits_and_tokens(tmp_path, heads, kv_heads):
    theirs = hf_model(
        transformers, "qwen3", seed=heads + kv_heads, num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=6, hidden_size=heads * 8,
    )  # fmt: skip
    theirs.save_pretrained(tmp_path)
    ours = TransformerLM.from_pretrained(tmp_path)
    assert (ours.config.n_heads, ours.config.n_kv_heads or heads) == (heads, kv_heads)  # None: as many as heads
    tokens, mask = left_padded_batch(steps=7, pads=(0, 2, 5))
    expected = theirs.generate(
        input_ids=tokens, attention_mask=mask.long(), do_sample=False, max_new_tokens=6, min_new_tokens=6,
        pad_token_id=0, eos_token_id=None,
    )  # fmt: skip
    assert torch.equal(generate(ours, tokens, 6, prompt_mask=mask, pad_symbol=0), expected)


def _g_test_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """The p-value of the G-test of ``counts`` against ``probs`` (tokens of probability 0 must have count 0)."""
    n = counts.sum().item()
    seen = counts > 0
    g = 2 * (counts[seen] * (counts[seen] / (n * probs[seen])).log()).sum().item()
    dof = int((probs > 0).sum()) - 1
    # Wilson-Hilferty: the chi-square(dof) upper tail from the normal one
    z = ((g / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sampled_tokens_follow_transformers_warped_distribution(tmp_path, dtype):
    """4000 rows of one prompt, one sampled token each (seed 0): their counts fit transformers' distribution
    (temperature 0.8, top-k 12, top-p 0.9 on its own logits of the same folder), a G-test p-value above 1e-3; no
    token outside its support is drawn. The same draws against a distribution whose temperature is 1.3 instead
    fail the test, so it can fail."""
    theirs = hf_model(transformers, "llama", seed=5)
    with torch.no_grad():
        theirs.lm_head.weight.mul_(40.0)  # logits of a few units: the temperature and the cuts matter
    theirs = theirs.to(dtype)
    theirs.save_pretrained(tmp_path)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="sdpa").eval()
    ours = TransformerLM.from_pretrained(tmp_path)
    prompt = torch.tensor([[5, 17, 33, 8]])
    with torch.no_grad():
        logits = theirs(input_ids=prompt).logits[:, -1]
    probs = hf_sampling_probabilities(transformers, logits, 0.8, 12, 0.9)[0]
    rows = 4000
    out = generate(ours, prompt.expand(rows, -1), 1, sample=True, temperature=0.8, top_k=12, top_p=0.9, seed=0)
    counts = torch.bincount(out[:, -1], minlength=probs.numel()).double()
    assert counts[probs == 0].sum() == 0
    assert int((probs > 0).sum()) >= 3  # a distribution worth testing
    assert _g_test_p_value(counts, probs) > 1e-3
    hotter = hf_sampling_probabilities(transformers, logits, 1.3, 12, 0.9)[0]
    assert _g_test_p_value(counts, hotter) < 1e-6
