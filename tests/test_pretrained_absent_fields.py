"""Folders whose config.json leaves out the per-layer fields transformers' config classes fill in by default
(``layer_types``; docs/pretrained.md: "absent: every other layer from the first" for Gemma 2, "five sliding of every
six" for Gemma 3, "the layers without RoPE" for SmolLM3's windows): read as transformers reads them, with
transformers' own model, loaded from the same edited folder, as the oracle. ``save_pretrained`` always writes
these fields, so only a folder written otherwise (by hand, by an older tool) shows the defaults."""

from __future__ import annotations

import json

import pytest
import torch
from pretrained_helpers import assert_logits_close, hf_logits, left_padded_batch, our_logits

from transformer.lm import LMConfig, TransformerLM

transformers = pytest.importorskip("transformers")


def _without(folder, *fields):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    for field in fields:
        config.pop(field, None)
    path.write_text(json.dumps(config))


def _theirs_from(folder, attention):
    return transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation=attention).eval()


@pytest.mark.parametrize("kind", ["gemma2", "gemma3"])
def test_gemma_without_layer_types_slides_the_layers_transformers_slides(tmp_path, kind):
    from test_pretrained_gemma import hf_gemma

    overrides = {"num_hidden_layers": 7, "final_logit_softcapping": None}
    if kind == "gemma3":
        overrides["sliding_window_pattern"] = 3  # two sliding of every three: the global one is the third
    hf_gemma(kind, overrides).save_pretrained(tmp_path / kind)
    _without(tmp_path / kind, "layer_types")
    theirs, ours = _theirs_from(tmp_path / kind, "eager"), TransformerLM.from_pretrained(tmp_path / kind)
    expected = tuple(t == "sliding_attention" for t in theirs.config.layer_types)
    assert ours.config.window_layers == expected and len(set(expected)) == 2  # both kinds of layer, as theirs
    tokens, mask = left_padded_batch()  # 11 positions, a window of 4: which layers slide changes the logits
    assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask)


def test_smollm3_without_layer_types_puts_the_window_on_the_layers_without_rope(tmp_path):
    from test_pretrained_smollm3 import hf_smollm3

    hf_smollm3({"use_sliding_window": True, "sliding_window": 3}).save_pretrained(tmp_path / "smollm3")
    _without(tmp_path / "smollm3", "layer_types")
    theirs, ours = _theirs_from(tmp_path / "smollm3", "sdpa"), TransformerLM.from_pretrained(tmp_path / "smollm3")
    expected = tuple(t == "sliding_attention" for t in theirs.config.layer_types)
    assert ours.config.window_layers == expected and any(expected) and not all(expected)
    tokens, mask = left_padded_batch()
    assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask)


@pytest.mark.parametrize("field", ["window_layers", "rope_layers"])
@pytest.mark.parametrize("length", [1, 3])
def test_a_per_layer_field_of_another_length_than_n_layers_is_refused_naming_it(field, length):
    with pytest.raises(ValueError, match=rf"{field} must be None or 2 bools"):
        LMConfig(
            vocab=20, n_layers=2, d_model=16, d_ff=16, n_heads=2, positional_encoding="rotary", sliding_window=3,
            **{field: (True,) * length},
        )  # fmt: skip


def test_every_expert_for_every_token_is_a_valid_mixture():
    """docs/moe.md: experts_per_token in [1, n_experts]; k = n_experts routes every token to every expert, the
    weights a softmax over all of them."""
    config = LMConfig(
        vocab=20, n_layers=1, d_model=16, d_ff=16, n_heads=2, ffn_gated=True, activation="silu",
        positional_encoding="rotary", norm="rms", n_experts=3, experts_per_token=3, dropout=0.0,
    )  # fmt: skip
    from transformer.lm import build_lm

    model = build_lm(config).eval()
    with torch.no_grad():
        assert torch.isfinite(model(torch.randint(0, 20, (2, 5)))).all()
