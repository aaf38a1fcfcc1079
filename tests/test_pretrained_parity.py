"""A checkpoint folder written by transformers' own save_pretrained, loaded by us, computes transformers' logits.

Tiny random models of every supported architecture (tests/pretrained_helpers.py), on a batch with left padding
(positions counted from each row's first real token, as transformers is given them): equal within 1e-5 x max|logit|
in float32 and 1e-10 in float64; grouped-query ratios 1, 2 and all-to-one; every RoPE rule; the sliding window;
every attention backend (the Triton kernel under the interpreter); the gradients of a loss.
"""

from __future__ import annotations

import os

import pytest
import torch
from pretrained_helpers import (
    MODEL_CLASSES,
    assert_gradients_equal,
    assert_logits_close,
    hf_logits,
    hf_model,
    left_padded_batch,
    our_logits,
    reweighted,
)

from transformer import use_backend
from transformer.lm import TransformerLM

transformers = pytest.importorskip("transformers")

# head_dim 8, theta 1000: wavelengths 6.3 (kept: < 32 / 4), 35 (smoothed), 199 and 1117 (divided: > 32 / 0.5)
LLAMA3 = dict(rope_type="llama3", rope_theta=1000.0, factor=4.0, low_freq_factor=0.5, high_freq_factor=4.0)
LLAMA3["original_max_position_embeddings"] = 32
YARN = {"rope_type": "yarn", "rope_theta": 1000.0, "factor": 3.0, "original_max_position_embeddings": 16}
LINEAR = {"rope_type": "linear", "rope_theta": 1000.0, "factor": 2.0}

CASES = {
    "gpt2": ("gpt2", {}),
    "gpt2-erf-untied-unscaled": ("gpt2", {"activation_function": "gelu", "tie_word_embeddings": False,
                                          "scale_attn_weights": False, "n_inner": 40}),
    "llama-gqa2": ("llama", {}),
    "llama-gqa1-biases-tied": ("llama", {"num_key_value_heads": 4, "attention_bias": True, "mlp_bias": True,
                                         "tie_word_embeddings": True}),
    "llama-mqa-llama3": ("llama", {"num_key_value_heads": 1, "rope_parameters": LLAMA3}),
    "llama-linear": ("llama", {"rope_parameters": LINEAR, "hidden_act": "gelu_pytorch_tanh"}),
    "llama-yarn": ("llama", {"rope_parameters": YARN}),
    "qwen2": ("qwen2", {}),
    "qwen2-window": ("qwen2", {"use_sliding_window": True, "sliding_window": 3, "max_window_layers": 0}),
    "qwen3-head_dim-bias": ("qwen3", {"attention_bias": True, "num_key_value_heads": 1}),
    "mistral-window": ("mistral", {}),
    "starcoder2-window": ("starcoder2", {}),
    "phi3-partial-rotary-window": ("phi3", {}),
    "phi3-mqa-tied-full-rotary": ("phi3", {"num_key_value_heads": 1, "tie_word_embeddings": True,
                                           "sliding_window": None,
                                           "rope_parameters": {"rope_type": "default", "rope_theta": 500.0}}),
    "starcoder2-mqa-untied-no-bias": ("starcoder2", {"num_key_value_heads": 1, "use_bias": False,
                                                     "tie_word_embeddings": False, "sliding_window": None,
                                                     "hidden_act": "gelu"}),
}  # fmt: skip


def _pair(tmp_path, kind, overrides, dtype=torch.float32):
    theirs = hf_model(transformers, kind, **overrides).to(dtype)
    theirs.save_pretrained(tmp_path / kind)
    return theirs, TransformerLM.from_pretrained(tmp_path / kind, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", list(CASES))
def test_logits_equal_transformers(tmp_path, case, dtype):
    kind, overrides = CASES[case]
    theirs, ours = _pair(tmp_path, kind, overrides, dtype)
    assert ours.pretrained_origin.architecture == theirs.config.architectures[0]
    assert ours.embed[0].lut.weight.dtype == dtype
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in theirs.parameters())
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask, dtype)


def test_the_window_and_the_padding_matter_in_these_cases(tmp_path):
    """The comparisons above can fail: without the window, or with positions from 0 in padded rows, they differ."""
    theirs, ours = _pair(tmp_path, "mistral", {})
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        expected = hf_logits(theirs, tokens, mask)
        theirs.config.sliding_window = None
        unwindowed = hf_logits(theirs, tokens, mask)
        from_zero = ours.logits(tokens, None, positions=torch.arange(tokens.size(1)).expand_as(tokens))
    assert (unwindowed - expected)[mask].abs().max() > 1e-3
    assert (from_zero - expected)[mask].abs().max() > 1e-3


WIDE_HEADS = {"gpt2": {"n_embd": 64}, "llama": {"hidden_size": 64}, "qwen3": {"head_dim": 16}}  # the kernel's d_k >= 16


@pytest.mark.parametrize("backend", ["eager", "torch", "triton"])
@pytest.mark.parametrize("case", ["llama-gqa2", "gpt2", "qwen3-head_dim-bias"])
def test_every_backend_computes_transformers_logits(tmp_path, case, backend):
    if backend == "triton" and not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs CUDA or TRITON_INTERPRET=1")
    kind, overrides = CASES[case]
    theirs, ours = _pair(tmp_path, kind, {**overrides, **WIDE_HEADS[kind]})
    assert ours.config.d_k == 16
    tokens, mask = left_padded_batch()
    with torch.no_grad(), use_backend(backend):
        got = our_logits(ours, tokens, mask)
    assert_logits_close(got, hf_logits(theirs, tokens, mask).detach(), mask)


@pytest.mark.parametrize(
    "case",
    [
        "gpt2",
        "llama-gqa1-biases-tied",
        "qwen3-head_dim-bias",
        "mistral-window",
        "starcoder2-window",
        "phi3-partial-rotary-window",
    ],
)
def test_gradients_of_a_loss_equal_transformers(tmp_path, case):
    kind, overrides = CASES[case]
    theirs, ours = _pair(tmp_path, kind, overrides, torch.float64)
    assert_gradients_equal(theirs, ours, type(theirs).__name__)


ROUND_TRIPS = ["gpt2", "llama-mqa-llama3", "llama-yarn", "qwen2-window", "qwen3-head_dim-bias", "mistral-window"]
ROUND_TRIPS += ["starcoder2-window", "phi3-partial-rotary-window"]


@pytest.mark.parametrize("case", ROUND_TRIPS)
def test_theirs_to_ours_to_theirs_keeps_the_logits(tmp_path, case):
    kind, overrides = CASES[case]
    theirs, ours = _pair(tmp_path, kind, overrides, torch.float64)
    ours.save_pretrained(tmp_path / "ours")
    again = getattr(transformers, type(theirs).__name__).from_pretrained(tmp_path / "ours", attn_implementation="sdpa")
    assert again.dtype == torch.float64
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(hf_logits(again.eval(), tokens, mask), hf_logits(theirs, tokens, mask), mask, torch.float64)
    assert again.generation_config.eos_token_id == theirs.generation_config.eos_token_id


@pytest.mark.parametrize(
    "case",
    ["gpt2", "llama-gqa1-biases-tied", "qwen2", "mistral-window", "starcoder2-window", "phi3-partial-rotary-window"],
)
def test_ours_saved_is_loaded_by_transformers_with_the_same_logits(tmp_path, case):
    """A model of ours (its own random weights, never a transformers model) written by save_pretrained."""
    kind, overrides = CASES[case]
    _, template = _pair(tmp_path, kind, overrides)
    ours = TransformerLM.from_pretrained(tmp_path / kind)
    reweighted(ours)
    folder = ours.save_pretrained(tmp_path / "ours")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()
    assert type(theirs).__name__ == template.pretrained_origin.architecture
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask)


def test_a_misshaped_adapter_on_a_loaded_model_fails_with_the_contract_naming_the_dimension(tmp_path):
    """Checks stay on in a loaded model: a LoRA-style adapter whose up-projection is transposed (d_model rows where
    the query width n_heads * head_dim = 48 belongs) gives queries of the wrong head width, and the contract of the
    next checked module says which dimension (QK-norm's d_k = 12)."""
    import transformer as T

    _, ours = _pair(tmp_path, *CASES["qwen3-head_dim-bias"])
    base = ours.layers[0].self_attn.q_proj

    class LoRA(torch.nn.Module):
        def __init__(self, base: torch.nn.Linear, rank: int = 4) -> None:
            super().__init__()
            self.base = base
            self.down = torch.nn.Parameter(torch.randn(rank, base.in_features))
            self.up = torch.nn.Parameter(torch.zeros(base.in_features, rank))  # the bug: (out_features, rank)

        def forward(self, x):
            return self.base(x)[..., : self.up.size(0)] + x @ self.down.T @ self.up.T

    tokens, mask = left_padded_batch()
    assert base.out_features == 48 and ours.config.d_k == 12
    ours.layers[0].self_attn.q_proj = LoRA(base)
    with pytest.raises(T.TypeCheckError, match=r"RMSNorm.forward: argument 'x'.*self.features=12"):
        our_logits(ours, tokens, mask)


@pytest.mark.parametrize("case", ["llama-mqa-llama3", "starcoder2-window"])
def test_a_bfloat16_checkpoint_loads_in_bfloat16_with_the_rotary_frequencies_in_float32(tmp_path, case):
    """As transformers' from_pretrained: weights in the checkpoint's dtype, RoPE's frequencies kept in float32 (a
    bfloat16 copy shifts the angles: 2e-3 on logits of about 0.4; measured as loaded: 0)."""
    kind, overrides = CASES[case]
    hf_model(transformers, kind, **overrides).to(torch.bfloat16).save_pretrained(tmp_path)
    theirs = getattr(transformers, MODEL_CLASSES[kind]).from_pretrained(tmp_path, attn_implementation="sdpa").eval()
    ours = TransformerLM.from_pretrained(tmp_path)
    assert {p.dtype for p in ours.parameters()} == {theirs.dtype} == {torch.bfloat16}
    assert torch.equal(ours.rotary.inv_freq, theirs.model.rotary_emb.inv_freq)
    assert ours.rotary.inv_freq.dtype == torch.float32
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        expected = hf_logits(theirs, tokens, mask)
        error = (our_logits(ours, tokens, mask) - expected)[mask].abs().max()
    assert error <= 2**-10 * expected[mask].abs().max()
