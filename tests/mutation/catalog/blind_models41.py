"""Blind review of the pretrained models' parity with transformers (2026-12-02), by a reviewer who did not read the
tests: loading, RoPE rules, float32 decisions, sampling warpers, seeds, end ids, stop sequences, padded cache steps."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-m41-top-p-slack-sign",
        "transformer/decoding/sampling.py",
        (
            (
                "        drop_sorted = before >= top_p - TOP_P_SLACK  # keep the smallest prefix whose mass reaches top_p\n",
                "        drop_sorted = before >= top_p + TOP_P_SLACK  # keep the smallest prefix whose mass reaches top_p\n",
            ),
        ),
        "The slack of the nucleus cut is added instead of subtracted: a prefix whose mass reaches top_p exactly (or "
        "falls short of it by rounding) no longer counts as reaching it, so over probabilities 0.5, 0.25, 0.125, ... "
        "top_p=0.75 keeps three tokens, not the two docs/decoding.md promises and transformers' TopPLogitsWarper keeps "
        "(sampling_probabilities' support differs from the warper's).",
    ),
    Mutant(
        "blind-m41-top-k-vocab-minus-one-uncut",
        "transformer/decoding/sampling.py",
        (
            (
                "    if top_k is not None and top_k < logits.size(-1):\n",
                "    if top_k is not None and top_k < logits.size(-1) - 1:\n",
            ),
        ),
        "Off by one at the top-k boundary: top_k = vocab - 1 no longer cuts anything, so the least probable token "
        "keeps its mass, where transformers' TopKLogitsWarper (and the docstring: cut to the top_k most probable) "
        "removes it; sampling_probabilities differs from the warper for that k.",
    ),
    Mutant(
        "blind-m41-seed-none-from-entropy",
        "transformer/decoding/sampling.py",
        (
            (
                "        generator.manual_seed(int(torch.randint(0, 2**62, (1,))))\n",
                "        generator.seed()\n",
            ),
        ),
        "seed=None seeds the generator from the OS entropy instead of from torch's default generator: after "
        "torch.manual_seed(s), generate(sample=True) / sample_decode with seed=None no longer give the same tokens "
        "twice (seeded_generator's documented 'one seeded from torch's default generator (None)'), and the default "
        "generator's stream is no longer advanced.",
    ),
    Mutant(
        "blind-m41-eos-falls-back-to-config",
        "transformer/lm/pretrained/tokenizer.py",
        (
            (
                "    if generation is not None:\n",
                '    if generation is not None and generation.get("eos_token_id") is not None:\n',
            ),
        ),
        "A generation_config.json without eos_token_id (or with null) falls back to config.json's eos_token_id: "
        "PretrainedTokenizer.eos_ids and generation_arguments() name an end id where docs/pretrained.md promises "
        "none (transformers builds the generation config from config.json only when the file is missing), so our "
        "generate stops where transformers' does not.",
    ),
    Mutant(
        "blind-m41-decision-log-softmax-low-precision",
        "transformer/model.py",
        (
            (
                "        return F.log_softmax(self.proj(x).to(dtype), dim=-1)\n",
                "        return F.log_softmax(self.proj(x), dim=-1).to(dtype)\n",
            ),
        ),
        "Generator.decision_log_probs takes the log-softmax in the model's float16/bfloat16 and only then casts to "
        "float32: the dtype is float32 as promised but the values are rounded log-probabilities, so two candidates "
        "that differ in float32 logits tie and the lower id wins (docs/lm.md 'Decisions in float32'); bfloat16 "
        "greedy generation leaves transformers' tokens.",
    ),
    Mutant(
        "blind-m41-llama3-ramp-reversed",
        "transformer/lm/rotary.py",
        (
            (
                "    smoothed = (1 - smooth) * scaled / factor + smooth * scaled\n",
                "    smoothed = smooth * scaled / factor + (1 - smooth) * scaled\n",
            ),
        ),
        "Llama 3.1's smooth ramp runs backwards: medium wavelengths near the long end are kept and those near the "
        "short end divided by factor, the opposite of the docstring's '(original / wavelength - low) / (high - low)' "
        "interpolation and of transformers' _compute_llama3_parameters; inverse_frequencies('llama3') and a loaded "
        "llama3 checkpoint's logits differ wherever a frequency falls between the two wavelengths.",
    ),
    Mutant(
        "blind-m41-yarn-low-ceiled",
        "transformer/lm/rotary.py",
        (
            (
                "        low, high = math.floor(low), math.ceil(high)\n",
                "        low, high = math.ceil(low), math.ceil(high)\n",
            ),
        ),
        "YaRN's correction range is ceiled at both ends instead of floored at the low end (truncate=True floors low "
        "and ceils high, as the docstring and transformers' find_correction_range say): the ramp starts one "
        "dimension later, so yarn's inverse frequencies, and a yarn checkpoint's logits, differ from transformers'.",
    ),
    Mutant(
        "blind-m41-gelu-new-as-erf",
        "transformer/lm/pretrained/architectures.py",
        (('    "gelu_new": "gelu_new",  # written out', '    "gelu_new": "gelu",  # written out'),),
        "transformers' gelu_new (GPT-2's default activation_function) is read as the erf GELU instead of its tanh "
        'form (docs/pretrained.md: gelu_new = activation="gelu_tanh"): a loaded GPT-2\'s logits differ from '
        "transformers' by about 1e-3 relative, and saving a gelu_tanh GPT-2 is refused as not reading back.",
    ),
    Mutant(
        "blind-m41-stop-sequence-in-prompt",
        "transformer/lm/generation.py",
        (
            (
                "            if ys.size(1) > self.prompt_len and ys.size(1) >= n:  # ends with a generated token\n",
                "            if ys.size(1) >= self.prompt_len and ys.size(1) >= n:  # ends with a generated token\n",
            ),
        ),
        "Off by one at the prompt's end: a prompt that ends with one of stop_sequences is stopped at once (its first "
        "generated token forced to the end symbol, then padding), where StopSequences' docstring promises a stop "
        "sequence must end with a generated token and 'a prompt ending with one is not stopped'.",
    ),
    Mutant(
        "blind-m41-padded-cache-position-repeats",
        "transformer/lm/model.py",
        (
            (
                "            following = None if positions is None else positions[:, -1] + 1\n",
                "            following = None if positions is None else positions[:, -1]\n",
            ),
        ),
        "After a left-padded prompt, each cached one-token step records its own position as the row's next one: the "
        "first generated token is at the right position (cumsum - 1 continued) but every later step repeats it, so "
        "with the cache a padded rotary/learned-position model's logits from the second step on differ from the "
        "uncached run and from transformers' generate(attention_mask=...) (docs/lm.md: each row's positions count "
        "from its first real token; next_token_log_probs: with and without a cache give the same result).",
    ),
]

# Run against the generation, sampling and pretrained suites, the differential fuzzer against transformers included
# (before/after rates in tests/mutation/blind_runs/blind_models41_*.json and docs/guarantees.md)
_TESTS = (
    "tests/test_pretrained_differential.py",
    "tests/test_pretrained_token_ids.py",
    "tests/test_pretrained_parity.py",
    "tests/test_lm_generate.py",
    "tests/test_lm_generate_seeds_and_pads.py",
    "tests/test_sampling.py",
    "tests/test_decision_dtype.py",
    "tests/test_pretrained_generation.py",
    "tests/test_lm_rotary.py",
    "tests/test_lm_stop_strings.py",
    "tests/test_lm_attention_mask.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
