"""Blind review of the modern LM blocks (rotary positions and their scaling rules, RMSNorm, gated feed-forward, activations, bias switches, QK normalisation, head_dim, the output head's bias, the sliding window, positions with left padding and the cache) (2026-11-27), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-blocks-rotate-half-sign",
        "transformer/lm/rotary.py",
        (("    return torch.cat((-x2, x1), dim=-1)", "    return torch.cat((x2, -x1), dim=-1)"),),
        "RoPE turns each pair the other way (x2, -x1): scores still depend on m - n only, but the model no longer "
        "computes Hugging Face's rotary attention, so Llama/Qwen/Mistral weights give wrong logits.",
    ),
    Mutant(
        "blind-blocks-llama3-smooth-swapped",
        "transformer/lm/rotary.py",
        (
            (
                "    smoothed = (1 - smooth) * scaled / factor + smooth * scaled",
                "    smoothed = (1 - smooth) * scaled + smooth * scaled / factor",
            ),
        ),
        "rope_scaling='llama3' ramps the medium wavelengths the wrong way round (near the long end kept, near the "
        "short end divided by rope_factor): its inverse frequencies differ from Hugging Face's llama3 rule.",
    ),
    Mutant(
        "blind-blocks-rmsnorm-eps-outside",
        "transformer/lm/rms_norm.py",
        (
            (
                "        normalised = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)",
                "        normalised = wide / (wide.pow(2).mean(-1, keepdim=True).sqrt() + self.eps)",
            ),
        ),
        "RMSNorm adds eps to the root mean square instead of inside the square root: x / (rms + eps) is not "
        "Zhang and Sennrich's (and Hugging Face's) x / sqrt(mean(x^2) + eps); small activations come out wrong.",
    ),
    Mutant(
        "blind-blocks-gated-ffn-gate-up-swapped",
        "transformer/lm/gated_feed_forward.py",
        (
            (
                "ACTIVATIONS[self.activation](self.w_1(x)) * self.w_3(x)",
                "ACTIVATIONS[self.activation](self.w_3(x)) * self.w_1(x)",
            ),
        ),
        "The gated feed-forward network activates the up projection w_3 and gates with w_1: with Llama's "
        "gate_proj in w_1 and up_proj in w_3 (as documented) SwiGLU computes the wrong function.",
    ),
    Mutant(
        "blind-blocks-gelu-tanh-exact",
        "transformer/layers.py",
        (('    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),', '    "gelu_tanh": lambda x: F.gelu(x),'),),
        "activation='gelu_tanh' computes the erf GELU instead of GPT-2's tanh approximation (gelu_new): GPT-2 "
        "with its default config no longer matches to 1e-10.",
    ),
    Mutant(
        "blind-blocks-v-bias-follows-out-bias",
        "transformer/attention.py",
        (
            (
                "self.v_proj = nn.Linear(self.d_model, self.kv_heads * self.d_k, bias=self.qkv_bias)",
                "self.v_proj = nn.Linear(self.d_model, self.kv_heads * self.d_k, bias=self.out_bias)",
            ),
        ),
        "The value projection's bias follows out_bias instead of qkv_bias: a Qwen2-shaped model (qkv_bias=True, "
        "out_bias=False) has no v_proj.bias in its state dict (and Llama-like switches leave it on the wrong way).",
    ),
    Mutant(
        "blind-blocks-qk-norm-after-rope",
        "transformer/lm/attention.py",
        (
            (
                "        elif self.qk_norm:\n            q, k = self.q_norm(q), None if k is None else self.k_norm(k)\n        if rotation is not None:\n            q, k = rotation(q), None if k is None else rotation(k)\n",
                '        if rotation is not None:\n            q, k = rotation(q), None if k is None else rotation(k)\n        if self.qk_norm and self.qk_norm_scope == "head":\n            q, k = self.q_norm(q), None if k is None else self.k_norm(k)\n',
            ),
        ),
        "QK-norm is applied after RoPE instead of before (Qwen3's order): with trained (non-uniform) q_norm/k_norm "
        "gains the attention differs from Qwen3's.",
    ),
    Mutant(
        "blind-blocks-tau-ignores-head-dim",
        "transformer/lm/config.py",
        (
            (
                "return 1.0 / math.sqrt(self.d_k) if self.attention_scale is None",
                "return 1.0 / math.sqrt(self.d_model // self.n_heads) if self.attention_scale is None",
            ),
        ),
        "With head_dim set apart from d_model / n_heads the scores are scaled by 1/sqrt(d_model / n_heads) instead "
        "of 1/sqrt(head_dim) (Qwen3-shaped models attend with the wrong temperature).",
    ),
    Mutant(
        "blind-blocks-sliding-window-off-by-one",
        "transformer/lm/model.py",
        (
            (
                "            left = window - 1\n",
                "            left = window\n",
            ),
        ),
        "The sliding window lets each query see sliding_window + 1 keys (i - j <= window): with sliding_window=4 "
        "key 2 reaches queries 2..6 instead of 2..5, unlike Mistral/Hugging Face.",
    ),
    Mutant(
        "blind-blocks-padded-prompt-next-position",
        "transformer/lm/model.py",
        (
            (
                "positions, following = positions_from_padding(real), real.long().sum(-1)",
                "positions, following = positions_from_padding(real), real.long().sum(-1) - 1",
            ),
        ),
        "After a padded prompt goes into the cache each row's next position is one too small (the last prompt "
        "token's position repeats): generate(..., prompt_mask=...) no longer matches each prompt alone.",
    ),
]

# Run against the test files of the code reviewed (the before rate: on commit d9405e7, before the tests the
# review prompted).
_TESTS = (
    "tests/test_lm_blocks.py",
    "tests/test_lm_rotary.py",
    "tests/test_lm_positions.py",
    "tests/test_lm.py",
    "tests/test_lm_gpt2.py",
    "tests/test_lm_generate.py",
    "tests/test_pretrained_parity.py",
    "tests/test_pretrained_generation.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
