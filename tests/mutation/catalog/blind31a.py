"""Blind review of the decoder-only LM, its generation and the CLI (2026-11-27), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-lm31-learned-scale-off-given-positions",
        "transformer/lm/layers.py",
        (("        return self.scale * self.pe[0][positions]", "        return self.pe[0][positions]"),),
        "Learned positions drop positional_scale (lambda_pe) whenever positions are gathered rather than sliced: "
        "a left-padded batch, a packed row or explicit positions= compute something else than the same tokens alone.",
    ),
    Mutant(
        "blind-lm31-qk-norm-after-rope",
        "transformer/lm/attention.py",
        (
            (
                "        elif self.qk_norm:\n            q, k = self.q_norm(q), None if k is None else self.k_norm(k)\n        if rotation is not None:\n            q, k = rotation(q), None if k is None else rotation(k)\n",
                '        if rotation is not None:\n            q, k = rotation(q), None if k is None else rotation(k)\n        if self.qk_norm and self.qk_norm_scope == "head":\n            q, k = self.q_norm(q), None if k is None else self.k_norm(k)\n',
            ),
        ),
        "QK-norm runs after RoPE instead of before it (Qwen3's order): identical while the q_norm/k_norm gains are "
        "ones, wrong queries and keys as soon as the gains are trained or loaded from a checkpoint.",
    ),
    Mutant(
        "blind-lm31-rmsnorm-gain-before-cast",
        "transformer/lm/rms_norm.py",
        (
            (
                "        return self.weight * normalised.to(x.dtype)",
                "        return (self.weight * normalised).to(x.dtype)",
            ),
        ),
        "RMSNorm multiplies by the gain in float32 and casts afterwards: the same in float32 and float64, but a "
        "bfloat16 model no longer matches Hugging Face's LlamaRMSNorm to the last bit (one rounding instead of two).",
    ),
    Mutant(
        "blind-lm31-prompt-mask-cached-only",
        "transformer/lm/model.py",
        (
            (
                "        if prompt_mask is not None and (cache is None or cache.length == 0):",
                "        if prompt_mask is not None and cache is not None and cache.length == 0:",
            ),
        ),
        "generate/beam_generate(..., prompt_mask=..., use_cache=False) ignore the mask: left pads are attended and "
        "positions count from the slot, so a padded row no longer generates what it generates alone (cached path fine).",
    ),
    Mutant(
        "blind-lm31-llama3-equal-freq-factors",
        "transformer/lm/config_checks.py",
        (
            (
                "config.rope_high_freq_factor <= config.rope_low_freq_factor:",
                "config.rope_high_freq_factor < config.rope_low_freq_factor:",
            ),
        ),
        "LMConfig accepts rope_scaling='llama3' with rope_high_freq_factor equal to rope_low_freq_factor (the ramp "
        "divides by high - low = 0) instead of refusing it naming both fields.",
    ),
    Mutant(
        "blind-lm31-positions-max-len-accepted",
        "transformer/lm/positions.py",
        (("    if low < 0 or high >= max_len:", "    if low < 0 or high > max_len:"),),
        "TransformerLM.forward(positions=...) lets a position equal to max_len through its check: the call then fails "
        "with an IndexError inside the positional table / RoPE tables instead of the ValueError naming [0, max_len).",
    ),
    Mutant(
        "blind-lm31-topk-vocab-minus-one-keeps-all",
        "transformer/decoding/sampling.py",
        (
            (
                "    if top_k is not None and top_k < logits.size(-1):",
                "    if top_k is not None and top_k < logits.size(-1) - 1:",
            ),
        ),
        "Sampling with top_k = vocab - 1 keeps every token (the least probable one can be drawn); other top_k values "
        "and top_k >= vocab behave as documented.",
    ),
    Mutant(
        "blind-lm31-stop-sequence-spanning-whole-prefix",
        "transformer/lm/generation.py",
        (
            (
                "if ys.size(1) > self.prompt_len and ys.size(1) >= n:",
                "if ys.size(1) > self.prompt_len and ys.size(1) > n:",
            ),
        ),
        "A stop sequence exactly as long as everything so far (it begins at the prompt's first token) is never "
        "matched: generate(prompt=[[5]], stop_sequences=[[5, t]]) keeps going after generating t.",
    ),
    Mutant(
        "blind-lm31-cli-generate-seed-default",
        "transformer/cli/checkpoint_commands.py",
        (("    seeds = args.seed or [0]\n", "    seeds = args.seed or [None]\n"),),
        "`generate --sample` without --seed draws from torch's global generator instead of the documented seed 0: "
        "the text differs from --seed 0's and from one call of main() to the next in the same process.",
    ),
    Mutant(
        "blind-lm31-resume-warmup-alone-ignored",
        "transformer/cli/train_setup.py",
        (
            (
                '    names = ("lr", "lr_factor", "warmup", "warmup_ratio", "lr_schedule")\n',
                '    names = ("lr", "lr_factor", "warmup_ratio", "lr_schedule")\n',
            ),
        ),
        "`train ... --resume --warmup N` without --lr/--lr-factor keeps the checkpoint's warm-up: the new --warmup is "
        "silently ignored (and nothing is printed), although --help says a resumed run changes its schedule when any "
        "of --lr, --lr-factor, --warmup is given.",
    ),
]

# The before rate ran on commit eb200ba against the files after the issue-31 ones (the areas' suites of that morning);
# the files issue 31 added, which catch the survivors, come first.
_TESTS = (
    "tests/test_lm_sampling_bounds.py",
    "tests/test_cli_generate_flags.py",
    "tests/test_cli_resume_schedule.py",
    "tests/test_lm_config_sweep.py",
    "tests/test_lm_generate_options.py",
    "tests/test_lm.py",
    "tests/test_lm_blocks.py",
    "tests/test_lm_positions.py",
    "tests/test_lm_rotary.py",
    "tests/test_lm_generate.py",
    "tests/test_lm_packing.py",
    "tests/test_lm_window_cache.py",
    "tests/test_lm_checkpoint_compat.py",
    "tests/test_pretrained_parity.py",
    "tests/test_pretrained_config.py",
    "tests/test_sampling.py",
    "tests/test_decoding.py",
    "tests/test_cli_lm.py",
    "tests/test_cli_flags.py",
    "tests/test_cli_flags_reach.py",
    "tests/test_cli.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
