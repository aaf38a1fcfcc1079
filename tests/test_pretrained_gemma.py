"""Gemma 2 and Gemma 3 (text) checkpoint folders, against transformers (issue 44): tiny random models from its own
config classes (no download), saved with its save_pretrained, loaded by us.

Logits equal on a left-padded batch (float32 within 1e-5 x max|logit|, float64 within 1e-10), greedy generation
with our cache equal token for token past the window, gradients of a loss equal, our save_pretrained read back by
transformers to the same logits; each Gemma block matters on this data (removing it from their model changes the
logits). Transformers runs Gemma with its eager attention (Gemma 2 has no sdpa path); in float64 that attention
takes the softmax in float32 (``softmax(..., dtype=torch.float32)``), so the float64 comparisons register
``eager_softmax_in_dtype``: their eager attention with the softmax in the scores' own dtype, everything else theirs.
"""

from __future__ import annotations

import copy
import json

import hf_float64_attention
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

from transformer.lm import LMConfig, TransformerLM, build_lm
from transformer.lm.pretrained import PretrainedFormatError
from transformer.lm.rms_norm import RMSNorm
from transformer.lm.softcap import SoftCappedLinear

transformers = pytest.importorskip("transformers")

F64_ATTENTION = hf_float64_attention.register(transformers)

BASE = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=56, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, head_dim=12, max_position_embeddings=48, rms_norm_eps=0.02, bos_token_id=1,
    eos_token_id=2, pad_token_id=0, sliding_window=4, query_pre_attn_scalar=20, final_logit_softcapping=1.5,
)  # fmt: skip
LOCAL_GLOBAL = ["sliding_attention", "full_attention", "sliding_attention"]
GEMMA3_ROPE = {
    "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5000.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 300.0},
}
CASES = {
    # Gemma 2: layer_types absent (every other layer slides, from the first), both caps
    "gemma2": ("gemma2", {"attn_logit_softcapping": 1.0, "rope_parameters": {"rope_type": "default",
                                                                              "rope_theta": 1e3}}),
    "gemma2-mqa-bias-untied-nocaps": ("gemma2", {"num_key_value_heads": 1, "attention_bias": True,
                                                 "tie_word_embeddings": False, "final_logit_softcapping": None,
                                                 "attn_logit_softcapping": None, "layer_types": LOCAL_GLOBAL[::-1],
                                                 "hidden_activation": "gelu"}),
    "gemma3": ("gemma3", {"layer_types": LOCAL_GLOBAL, "rope_parameters": GEMMA3_ROPE}),
    # Gemma 3's defaults: five of six layers slide (here all three), the logits not capped
    "gemma3-defaults": ("gemma3", {"final_logit_softcapping": None, "num_key_value_heads": 4}),
}  # fmt: skip


def hf_gemma(kind: str, overrides: dict, dtype=torch.float32, seed: int = 0):
    """Their random tiny model in ``dtype`` (built in it, as ``from_pretrained(dtype=...)`` builds it: the embedding
    scale buffer is then in that dtype), every 1-D parameter (the norms' weights, biases) spread around 0 and the
    matrices drawn wide (std 0.25, not 0.02), so that scores and logits reach the soft caps."""
    classes = {"gemma2": (transformers.Gemma2Config, "Gemma2ForCausalLM"),
               "gemma3": (transformers.Gemma3TextConfig, "Gemma3ForCausalLM")}  # fmt: skip
    config_class, model_class = classes[kind]
    config = config_class(**{**BASE, **overrides})
    attention = F64_ATTENTION if dtype == torch.float64 else "eager"
    torch.manual_seed(seed)
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        model = getattr(transformers, model_class)._from_config(copy.deepcopy(config), attn_implementation=attention)
    finally:
        torch.set_default_dtype(before)
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.normal_(0.0, 0.3 if p.dim() == 1 else 0.25)
    return model.eval()


def _pair(tmp_path, case, dtype=torch.float32):
    kind, overrides = CASES[case]
    theirs = hf_gemma(kind, overrides, dtype)
    theirs.save_pretrained(tmp_path / case)
    return theirs, TransformerLM.from_pretrained(tmp_path / case, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", list(CASES))
def test_logits_equal_transformers(tmp_path, case, dtype):
    theirs, ours = _pair(tmp_path, case, dtype)
    assert ours.pretrained_origin.architecture == theirs.config.architectures[0]
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask, dtype)


@pytest.mark.parametrize(
    "case, change",
    [
        ("gemma2", {"attn_logit_softcapping": None}),
        ("gemma2", {"final_logit_softcapping": None}),
        ("gemma2", {"layer_types": ["full_attention"] * 3}),
        ("gemma2", {"query_pre_attn_scalar": 12}),
        ("gemma3", {"rope_parameters": {**GEMMA3_ROPE, "sliding_attention": GEMMA3_ROPE["full_attention"]}}),
        ("gemma3", {"rope_parameters": {**GEMMA3_ROPE, "full_attention": GEMMA3_ROPE["sliding_attention"]}}),
    ],
)
def test_each_block_changes_these_logits(tmp_path, case, change):
    """The comparisons above can fail: their model without one of its blocks (same weights) computes other logits."""
    theirs, _ = _pair(tmp_path, case)
    kind, overrides = CASES[case]
    other = hf_gemma(kind, {**overrides, **change})
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        expected = hf_logits(theirs, tokens, mask)
        changed = hf_logits(other, tokens, mask)
    assert (changed - expected)[mask].abs().max() > 1e-3


def test_the_norms_and_the_embedding_scale_are_gemmas():
    """(1 + weight) RMSNorm in float32 and the embedding scale rounded to the weights' dtype: bfloat16 outputs
    identical to transformers' modules (the Llama-style product or an unrounded scale differ there)."""
    from transformers.models.gemma2.modeling_gemma2 import Gemma2RMSNorm, Gemma2TextScaledWordEmbedding

    torch.manual_seed(0)
    x = torch.randn(4, 7, 32).to(torch.bfloat16)
    theirs, ours = Gemma2RMSNorm(32, eps=1e-6), RMSNorm(32, 1e-6, unit_offset=True)
    assert torch.equal(ours.weight, torch.zeros(32))  # starts as the identity gain
    with torch.no_grad():
        theirs.weight.normal_(0.0, 0.5)
        ours.weight.copy_(theirs.weight)
    theirs, ours = theirs.to(torch.bfloat16), ours.to(torch.bfloat16)
    assert torch.equal(ours(x), theirs(x))
    llama_style = ours.weight.float().add(1).to(torch.bfloat16) * RMSNorm(32, 1e-6).to(torch.bfloat16)(x)
    assert not torch.equal(llama_style, theirs(x))

    config = LMConfig(vocab=VOCAB, n_layers=1, d_model=24, d_ff=8, n_heads=2, embedding_scale=24**0.5,
                      embedding_scale_rounded=True, dropout=0.0)  # fmt: skip
    model = build_lm(config).to(torch.bfloat16)
    theirs = Gemma2TextScaledWordEmbedding(VOCAB, 24, 0, embed_scale=24**0.5).to(torch.bfloat16)
    with torch.no_grad():
        theirs.weight.copy_(model.embed[0].lut.weight)
    tokens = torch.arange(VOCAB)[None]
    assert torch.equal(model.embed[0](tokens), theirs(tokens))
    assert not torch.equal(model.embed[0].lut(tokens) * 24**0.5, theirs(tokens))


def test_the_soft_capped_head_is_c_tanh_z_over_c():
    torch.manual_seed(0)
    head = SoftCappedLinear(8, 5, 2.5, bias=False)
    x = torch.randn(3, 8) * 10
    z = x @ head.weight.t()
    assert torch.allclose(head(x), 2.5 * torch.tanh(z / 2.5)) and head(x).abs().max() < 2.5
    with pytest.raises(ValueError, match=r"SoftCappedLinear: argument 'cap' must be a finite number > 0, got -1"):
        SoftCappedLinear(8, 5, -1)


NEW = 8


@pytest.mark.parametrize("case", ["gemma2", "gemma3"])
def test_greedy_generation_with_our_cache_gives_transformers_tokens(tmp_path, case):
    """A left-padded batch, 7 prompt steps and 8 new ones with a window of 4 on the sliding layers: the windowed
    layers' cache holds positions the window hides, the global layers' every position."""
    theirs, ours = _pair(tmp_path, case)
    tokens, mask = left_padded_batch(steps=7, pads=(0, 2, 4))
    expected = their_greedy(theirs, tokens, mask, NEW)
    got = our_greedy(ours, tokens, mask, NEW)
    uncached = our_greedy(ours, tokens, mask, NEW, use_cache=False)
    assert torch.equal(got, expected) and torch.equal(uncached, expected)


@pytest.mark.parametrize("case", ["gemma2", "gemma3"])
def test_gradients_of_a_loss_equal_transformers(tmp_path, case):
    theirs, ours = _pair(tmp_path, case, torch.float64)
    assert_gradients_equal(theirs, ours, type(theirs).__name__, every_tensor=True)


@pytest.mark.parametrize("case", list(CASES))
def test_ours_saved_is_loaded_by_transformers_with_the_same_logits(tmp_path, case):
    """Our model with its own random weights (the norms' too), written by save_pretrained, chosen as the Gemma
    architecture from its config alone; transformers' from_pretrained computes our logits."""
    _, ours = _pair(tmp_path, case, torch.float64)
    reweighted(ours)
    folder = ours.save_pretrained(tmp_path / "ours")
    written = json.loads((folder / "config.json").read_text())
    assert written["architectures"] == [CASES[case][0].capitalize() + "ForCausalLM"]
    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float64, attn_implementation=F64_ATTENTION
    ).eval()
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask, torch.float64)


def _folder(tmp_path, kind="gemma3", **fields):
    theirs = hf_gemma(kind, CASES[kind][1])
    theirs.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(fields)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"use_bidirectional_attention": True}, r"use_bidirectional_attention=True is not supported"),
        ({"sliding_window": None}, r"field sliding_window=None is not supported: layer_types .* sliding_attention"),
        ({"layer_types": ["full_attention"]}, r"field layer_types=\['full_attention'\] is not supported: expected 3"),
        (
            {"rope_parameters": {**GEMMA3_ROPE, "sliding_attention": GEMMA3_ROPE["full_attention"]}},
            r"rope_parameters.rope_type='linear' is not supported: the supported RoPE rules .* \['default'\]",
        ),
        ({"architectures": ["Gemma3ForConditionalGeneration"]}, r"'Gemma3ForConditionalGeneration' is not supported: "
                                                                 r"the multimodal Gemma 3 .* Gemma3ForCausalLM"),
    ],
)  # fmt: skip
def test_what_is_not_implemented_is_refused_by_name(tmp_path, fields, message):
    with pytest.raises(PretrainedFormatError, match=message):
        TransformerLM.from_pretrained(_folder(tmp_path, **fields))


def test_gemma3_reads_the_older_spelling_of_its_two_rope_bases(tmp_path):
    """``rope_theta``/``rope_scaling`` (the global layers) and ``rope_local_base_freq`` (the windowed ones), as
    transformers' Gemma3TextConfig turns them into rope_parameters."""
    theirs = hf_gemma("gemma3", CASES["gemma3"][1])
    folder = _folder(tmp_path, rope_parameters=None)
    config = json.loads((folder / "config.json").read_text())
    del config["rope_parameters"]
    config |= {
        "rope_theta": 5000.0,
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
        "rope_local_base_freq": 300,
    }
    (folder / "config.json").write_text(json.dumps(config))
    ours = TransformerLM.from_pretrained(folder)
    assert (ours.config.rope_theta, ours.config.rope_scaling, ours.config.rope_local_theta) == (5000.0, "linear", 300)
    again = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        expected = hf_logits(theirs, tokens, mask)
        assert_logits_close(hf_logits(again, tokens, mask), expected, mask)
        assert_logits_close(our_logits(ours, tokens, mask), expected, mask)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"window_layers": (True,)}, r"window_layers must be None or 2 bools .* got \(True,\)"),
        ({"window_layers": (True, False)}, r"window_layers=\(True, False\) .* and sliding_window is None"),
        ({"positional_encoding": "rotary", "rope_local_theta": 10.0}, r"rope_local_theta=10.0 .* window_layers"),
        ({"norm_unit_offset": True}, r"norm_unit_offset=True .* norm='layer'; set norm='rms'"),
        ({"attention_softcap": -1.0}, r"attention_softcap must be a positive float or None, got attention_softcap=-1"),
        ({"logit_softcap": 0}, r"logit_softcap must be a positive float or None"),
        ({"post_sublayer_norm": 1}, r"post_sublayer_norm must be a bool"),
        ({"attention_softcap": 5.0, "value_projection": "per_head"}, r"attention_softcap=5.0 needs value_projection"),
    ],
)
def test_lmconfig_refuses_gemma_blocks_that_describe_no_model(fields, message):
    with pytest.raises(ValueError, match=message):
        LMConfig(vocab=20, n_layers=2, d_model=16, d_ff=16, n_heads=2, **fields)


def test_window_layers_come_back_from_json_as_a_tuple():
    config = LMConfig(vocab=20, n_layers=2, d_model=16, d_ff=16, n_heads=2, sliding_window=3,
                      window_layers=(True, False))  # fmt: skip
    assert LMConfig.from_json(config.to_json()) == config
