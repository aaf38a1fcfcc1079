"""Blind review of the new Hugging Face architectures and their blocks (Gemma 2 / Gemma 3 text, GPT-NeoX / Pythia,
SmolLM3) and the LMConfig fields behind them (2026-12-02), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-d44-unit-offset-norm-cast-first",
        "transformer/lm/rms_norm.py",
        (
            (
                "            return (normalised * (1.0 + self.weight.to(self.compute_dtype))).to(x.dtype)\n",
                "            return normalised.to(x.dtype) * (1.0 + self.weight)\n",
            ),
        ),
        "Gemma's (1 + weight) RMSNorm casts the normalised input back to the input's dtype before multiplying by "
        "the gain, as Llama's does: docs/lm_blocks.md and the RMSNorm docstring promise the product is computed in "
        "float32 and only then cast back (as Gemma2RMSNorm). In bfloat16 the result is no longer transformers' "
        "module bit for bit (two roundings instead of one); float32 is unchanged.",
    ),
    Mutant(
        "blind-d44-embedding-scale-rounded-to-token-dtype",
        "transformer/lm/layers.py",
        (
            (
                "torch.tensor(self.scale, dtype=self.lut.weight.dtype, device=x.device)",
                "torch.tensor(self.scale, dtype=x.dtype, device=x.device)",
            ),
        ),
        "embedding_scale_rounded rounds lambda_e to the dtype of x, the int64 token ids, instead of the "
        "embedding table's dtype: sqrt(d_model) is truncated to an integer (sqrt(3072) = 55.43 becomes 55, not "
        "bfloat16's 55.5; sqrt(32) becomes 5), so every Gemma model's embeddings, in any dtype, are scaled wrongly "
        "and its logits differ from transformers'.",
    ),
    Mutant(
        "blind-d44-gemma-default-pattern-starts-global",
        "transformer/lm/pretrained/gemma.py",
        (
            (
                '["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n_layers)]',
                '["full_attention" if i % pattern == 0 else "sliding_attention" for i in range(n_layers)]',
            ),
        ),
        "Without layer_types, Gemma's default pattern is off by one layer: layer 0 (and every pattern-th from it) "
        "is global instead of the last of each group. docs/pretrained.md promises 'absent: every other layer from "
        "the first' slides (Gemma 2) and five sliding of every six (Gemma 3, sliding_window_pattern); a config.json "
        "without layer_types gets window_layers (False, True, ...) instead of (True, False, ...).",
    ),
    Mutant(
        "blind-d44-smollm3-default-windows-on-rope-layers",
        "transformer/lm/pretrained/smollm3.py",
        (
            (
                '"sliding_attention" if slides and not r else "full_attention" for r in rope',
                '"sliding_attention" if slides and r else "full_attention" for r in rope',
            ),
        ),
        "SmolLM3 with use_sliding_window and no layer_types puts the window on the layers that rotate instead of "
        "the NoPE layers: docs/pretrained.md promises 'absent: the layers without RoPE' get the window; the "
        "loaded window_layers is the complement of the one promised, so the logits differ from transformers' once "
        "the sequence is longer than the window.",
    ),
    Mutant(
        "blind-d44-qk-norm-not-unit-offset",
        "transformer/lm/blocks.py",
        (("        qk_norm_unit_offset=config.norm_unit_offset,\n", ""),),
        "norm_unit_offset no longer reaches the attention's QK-norm: Gemma 3's q_norm and k_norm are plain RMSNorms "
        "(gain w, starting at 1) while the other norms are (1 + w). LMConfig's docstring and docs/lm_blocks.md "
        "promise it 'applies to every RMSNorm of the model, QK-norm's too'; a loaded Gemma 3 folder multiplies its "
        "queries and keys by w (near 0) instead of 1 + w, and its logits differ from transformers'.",
    ),
    Mutant(
        "blind-d44-mixed-windows-cache-trimmed",
        "transformer/lm/model.py",
        (
            (
                "        return LMCache(len(self.layers), window=windows.pop() if len(windows) == 1 else None)\n",
                "        return LMCache(len(self.layers), window=self.sliding_window)\n",
            ),
        ),
        "new_cache trims to the last sliding_window - 1 positions whenever sliding_window is set, even with the "
        "window on some layers only: docs/pretrained.md, docs/lm_blocks.md and the new_cache docstring promise the "
        "cache then keeps every position (only the windowed layers' masks hide the older ones). The global layers "
        "of Gemma (or a windowed SmolLM3) lose the positions before the window: greedy generation with the cache "
        "past the window no longer gives transformers' tokens (nor the uncached model's logits).",
    ),
    Mutant(
        "blind-d44-local-rope-on-global-layers",
        "transformer/lm/model.py",
        (
            (
                "            turn = local if local is not None and window is not None else rotation\n",
                "            turn = local if local is not None and window is None else rotation\n",
            ),
        ),
        "The two RoPE bases are swapped between layer types: the global layers rotate with rope_local_theta and "
        "the windowed ones with rope_theta / rope_scaling. LMConfig's docstring and docs/lm_blocks.md promise the "
        "windowed layers rotate at rope_local_theta and the others keep rope_theta; Gemma 3's logits (local base "
        "10k, global 1M) differ from transformers'.",
    ),
    Mutant(
        "blind-d44-per-layer-tuple-too-long-accepted",
        "transformer/lm/config_checks.py",
        (
            (
                "not isinstance(value, tuple) or len(value) != config.n_layers or",
                "not isinstance(value, tuple) or len(value) < config.n_layers or",
            ),
        ),
        "window_layers and rope_layers longer than n_layers pass LMConfig's check (only a shorter one is "
        "refused): the docstring says 'one bool per layer', and the promise is that LMConfig refuses the Gemma "
        "fields (and rope_layers) that describe no model, naming them; LMConfig(n_layers=2, sliding_window=3, "
        "window_layers=(True, False, True)) builds silently, the extra entry ignored.",
    ),
    Mutant(
        "blind-d44-interleaved-saved-blockwise",
        "transformer/lm/pretrained/tensor_map.py",
        (
            (
                "            return torch.stack(split, dim=1).reshape(-1, *tensors[0].shape[1:])\n",
                "            return torch.stack(split, dim=0).reshape(-1, *tensors[0].shape[1:])\n",
            ),
        ),
        "TensorMap.to_theirs of the 'interleaved' layout writes all heads' queries, then all keys, then all values "
        "(same shape) instead of head by head: docs/pretrained.md promises query_key_value is 'saved back fused the "
        "same way' it is read. A GPT-NeoX model saved by save_pretrained loads (ours or transformers') with its q, "
        "k and v rows scrambled across heads: different logits; to_theirs no longer inverts their_views.",
    ),
    Mutant(
        "blind-d44-neox-whole-rotation-not-written",
        "transformer/lm/pretrained/gpt_neox.py",
        (('        rope.setdefault("partial_rotary_factor", 1.0)  # absent reads as 0.25\n', ""),),
        "GPT-NeoX's config.json omits partial_rotary_factor when the whole head rotates (rope_fraction 1.0), and "
        "an absent factor reads as rotary_pct's 0.25 (docs/pretrained.md): the written file no longer computes "
        "the model's config, so save_pretrained of a whole-rotation GPT-NeoX model is refused (writable's round "
        "trip fails) or, read by transformers, rotates only a quarter of each head: not the same logits.",
    ),
]

_TESTS = (
    "tests/test_pretrained_absent_fields.py",
    "tests/test_pretrained_gemma.py",
    "tests/test_pretrained_gpt_neox.py",
    "tests/test_pretrained_smollm3.py",
    "tests/test_pretrained_granite.py",
    "tests/test_lm_config_sweep.py",
    "tests/test_pretrained_config.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
