"""SmolLM3 (``SmolLM3ForCausalLM``) checkpoint folders against transformers (issue 44): tiny random models from its
own config class (no download). The layers ``no_rope_layers`` leaves without rotary positions (every fourth by
default) and windows on the layers ``layer_types`` marks: logits equal on a left-padded batch (float32 within
1e-5 x max|logit|, float64 within 1e-10), the NoPE layers and the windows matter there, greedy generation with our
cache equal token for token, gradients equal, our save_pretrained read back by transformers to the same logits.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from pretrained_helpers import (
    VOCAB,
    assert_gradients_equal,
    assert_logits_close,
    hf_logits,
    left_padded_batch,
    our_greedy,
    our_logits,
    reweighted,
    their_greedy,
)

from transformer.lm import LMConfig, TransformerLM

transformers = pytest.importorskip("transformers")

BASE = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=56, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=48, rms_norm_eps=0.02, bos_token_id=1, eos_token_id=2,
    pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
)  # fmt: skip
CASES = {
    "defaults": {},  # layer 3 without RoPE, no window
    "windows-on-nope-biases-untied": {"use_sliding_window": True, "sliding_window": 3, "attention_bias": True,
                                      "mlp_bias": True, "tie_word_embeddings": False},
    "explicit-layers": {"no_rope_layers": [0, 1, 0, 1], "use_sliding_window": True, "sliding_window": 4,
                        "layer_types": ["sliding_attention", "full_attention", "full_attention", "sliding_attention"]},
}  # fmt: skip


def hf_smollm3(overrides: dict, dtype=torch.float32, seed: int = 0):
    config = transformers.SmolLM3Config(**{**BASE, **overrides})
    torch.manual_seed(seed)
    model = transformers.SmolLM3ForCausalLM._from_config(copy.deepcopy(config), attn_implementation="sdpa")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if "norm" in name else 0.0, 0.3 if p.dim() == 1 else 0.2)
    return model.to(dtype).eval()


def _pair(tmp_path, case, dtype=torch.float32):
    theirs = hf_smollm3(CASES[case], dtype)
    theirs.save_pretrained(tmp_path / case)
    return theirs, TransformerLM.from_pretrained(tmp_path / case, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", list(CASES))
def test_logits_equal_transformers(tmp_path, case, dtype):
    theirs, ours = _pair(tmp_path, case, dtype)
    assert ours.pretrained_origin.architecture == "SmolLM3ForCausalLM"
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask, dtype)


def test_the_layers_read_are_transformers_and_they_matter(tmp_path):
    _, ours = _pair(tmp_path, "explicit-layers")
    assert ours.config.rope_layers == (False, True, False, True)
    assert ours.layer_windows == [4, None, None, 4]
    theirs, _ = _pair(tmp_path, "windows-on-nope-biases-untied")
    tokens, mask = left_padded_batch()
    overrides = CASES["windows-on-nope-biases-untied"]
    with torch.no_grad():
        expected = hf_logits(theirs, tokens, mask)
        for change in ({"no_rope_layers": [1, 1, 1, 1]}, {"use_sliding_window": False}):
            other = hf_logits(hf_smollm3({**overrides, **change}), tokens, mask)
            assert (other - expected)[mask].abs().max() > 1e-3


@pytest.mark.parametrize("case", ["defaults", "explicit-layers"])
def test_greedy_generation_with_our_cache_gives_transformers_tokens(tmp_path, case):
    theirs, ours = _pair(tmp_path, case)
    tokens, mask = left_padded_batch(steps=7, pads=(0, 2, 4))
    expected = their_greedy(theirs, tokens, mask, 8)
    assert torch.equal(our_greedy(ours, tokens, mask, 8), expected)


def test_gradients_of_a_loss_equal_transformers(tmp_path):
    theirs, ours = _pair(tmp_path, "explicit-layers", torch.float64)
    assert_gradients_equal(theirs, ours, "SmolLM3ForCausalLM")


@pytest.mark.parametrize("case", list(CASES))
def test_ours_saved_is_loaded_by_transformers_with_the_same_logits(tmp_path, case):
    _, ours = _pair(tmp_path, case, torch.float64)
    reweighted(ours)
    folder = ours.save_pretrained(tmp_path / "ours", architecture="SmolLM3ForCausalLM")
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["SmolLM3ForCausalLM"]
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask, torch.float64)


def test_lmconfig_refuses_rope_layers_that_describe_no_model():
    with pytest.raises(ValueError, match=r"rope_layers must be None or 2 bools .* got \(True,\)"):
        LMConfig(
            vocab=20, n_layers=2, d_model=16, d_ff=16, n_heads=2, positional_encoding="rotary", rope_layers=(True,)
        )
    with pytest.raises(ValueError, match=r"rope_layers=\(True, False\) .* set positional_encoding='rotary'"):
        LMConfig(vocab=20, n_layers=2, d_model=16, d_ff=16, n_heads=2, rope_layers=(True, False))
