"""Mutants of the blocks of today's checkpoints (docs/lm_blocks.md): RoPE and its scaling rules, RMSNorm, the gated
feed-forward network, QK-norm, head_dim, the sliding window, positions of padded rows and the cache.

Each runs the three test files that state these laws (``tests=``).
"""

from .base import Mutant

BLOCK_TESTS = ("tests/test_lm_blocks.py", "tests/test_lm_rotary.py", "tests/test_lm_positions.py")


def B(id: str, file: str, old: str, new: str, what: str) -> Mutant:
    return Mutant(id, file, ((old, new),), what, BLOCK_TESTS)


_ROT, _RMS, _GLU, _POS = (
    "transformer/lm/rotary.py",
    "transformer/lm/rms_norm.py",
    "transformer/lm/gated_feed_forward.py",
    "transformer/lm/positions.py",
)

MUTANTS = [
    B(
        "blocks-rms-centres",
        _RMS,
        "wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)",
        "wide * torch.rsqrt(wide.var(-1, unbiased=False, keepdim=True) + self.eps)",
        "RMSNorm divides by the standard deviation (LayerNorm's re-centred statistic) instead of the root mean square",
    ),
    B(
        "blocks-rms-in-input-dtype",
        _RMS,
        "        wide = x.to(self.compute_dtype)\n",
        "        wide = x\n",
        "RMSNorm's statistics in the input's dtype (float16 overflows, bfloat16 differs from Hugging Face's)",
    ),
    B(
        "blocks-rotate-half-backwards",
        _ROT,
        "    return torch.cat((-x2, x1), dim=-1)\n",
        "    return torch.cat((x2, -x1), dim=-1)\n",
        "RoPE turns each pair the other way round (the transpose of Hugging Face's rotation)",
    ),
    B(
        "blocks-partial-rotation-swapped",
        _ROT,
        "return torch.cat(((turned * self.cos + rotate_half(turned) * self.sin).to(x.dtype), passed), dim=-1)",
        "return torch.cat((passed, (turned * self.cos + rotate_half(turned) * self.sin).to(x.dtype)), dim=-1)",
        "with rope_fraction < 1 the rotated dimensions are put after the passed ones",
    ),
    B(
        "blocks-llama3-ramp-inverted",
        _ROT,
        "    smooth = (original / wavelen - low) / (high - low)\n",
        "    smooth = (wavelen / original - low) / (high - low)\n",
        "llama3's smoothing ramp reads the wavelength over the context instead of the context over the wavelength",
    ),
    B(
        "blocks-yarn-no-attention-factor",
        _ROT,
        "cos, sin = angles.cos() * self.attention_factor, angles.sin() * self.attention_factor",
        "cos, sin = angles.cos(), angles.sin() * self.attention_factor",
        "yarn's attention factor multiplies sin but not cos",
    ),
    B(
        "blocks-window-off-by-one",
        _POS,
        "    return (slots - torch.arange(k_len, device=device)[None, :] < window).unsqueeze(0)\n",
        "    return (slots - torch.arange(k_len, device=device)[None, :] <= window).unsqueeze(0)\n",
        "the sliding window lets query i see key i - window too (one key more than Mistral's)",
    ),
    B(
        "blocks-cache-forgets-pads",
        _POS,
        'parts["key_mask"] = torch.cat([real, real.new_ones(real.size(0), new)], dim=1)',
        'parts["key_mask"] = real.new_ones(real.size(0), real.size(1) + new)',
        "one-token steps after a left-padded prompt attend to its pads",
    ),
    B(
        "blocks-padding-positions-are-slots",
        _POS,
        "    return torch.where(real, real.long().cumsum(-1) - 1, slots)\n",
        "    return slots.expand_as(real)\n",
        "left-padded rows count their positions from the first slot instead of their first real token",
    ),
    B(
        "blocks-cache-next-position-is-the-slot",
        "transformer/lm/model.py",
        "positions, following = positions_from_padding(real), real.long().sum(-1)",
        "positions, following = positions_from_padding(real), None",
        "after a left-padded prompt the cache continues each row at the next slot, not at its next position",
    ),
    B(
        "blocks-qk-norm-after-rope",
        "transformer/lm/attention.py",
        "        elif self.qk_norm:\n            q, k = self.q_norm(q), None if k is None else self.k_norm(k)\n        if rotation is not None:\n            q, k = rotation(q), None if k is None else rotation(k)\n",
        '        if rotation is not None:\n            q, k = rotation(q), None if k is None else rotation(k)\n        if self.qk_norm and self.qk_norm_scope == "head":\n            q, k = self.q_norm(q), None if k is None else self.k_norm(k)\n',
        "QK-norm after RoPE instead of before (Qwen3 normalises first)",
    ),
    B(
        "blocks-glu-gates-the-up-projection",
        _GLU,
        "ACTIVATIONS[self.activation](self.w_1(x)) * self.w_3(x)",
        "self.w_1(x) * ACTIVATIONS[self.activation](self.w_3(x))",
        "the gated FFN activates w_3 (the up projection) instead of w_1 (the gate)",
    ),
    B(
        "blocks-learned-rows-at-unscaled",
        "transformer/lm/layers.py",
        "        return self.scale * self.pe[0][positions]\n",
        "        return self.pe[0][positions]\n",
        "learned positions read at given positions (left padding, the cache) lose lambda_pe",
    ),
    B(
        "blocks-llama3-without-original-len",
        "transformer/lm/config_checks.py",
        'if config.rope_scaling in ("llama3", "yarn") and config.rope_original_max_len is None:',
        'if config.rope_scaling == "yarn" and config.rope_original_max_len is None:',
        "llama3 scaling is accepted without rope_original_max_len (a KeyError or None arithmetic at build time)",
    ),
]
