"""Blind review of the merged LM, decoding, CLI and training code (2026-11-27), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-layout-cache-several-after-one",
        "transformer/cache.py",
        (("if new > 1 and self.length > 0:", "if new > 1 and self.length > 1:"),),
        "A cache holding exactly one position silently takes several new positions with a plain causal mask that "
        "ignores the cached offset, instead of the promised ValueError, so the outputs differ from a recompute.",
    ),
    Mutant(
        "blind-layout-lm-kv-heads-dropped",
        "transformer/lm/blocks.py",
        (('{"kv_heads": config.kv_heads}', '{"kv_heads": None}'),),
        "An LMConfig with kv_heads < n_heads (grouped-query attention) silently builds full multi-head attention: "
        "more parameters and a cache holding n_heads heads, and checkpoints of a GQA model no longer load.",
    ),
    Mutant(
        "blind-layout-lm-attention-mask-loses-causal",
        "transformer/lm/model.py",
        (("return mask.replace(causal=True)", "return mask"),),
        "A TransformerLM given an AttentionMask (key padding, e.g. left-padded prompts) is no longer causal: "
        "positions see later tokens, so training leaks the targets and outputs differ from the cached decode.",
    ),
    Mutant(
        "blind-layout-max-len-exact-refused",
        "transformer/decoding/requests.py",
        (("if limit is not None and max_len > limit:", "if limit is not None and max_len >= limit:"),),
        "greedy_decode/sample_decode/beam_search with max_len exactly the model's config.max_len raise ValueError, "
        "though every position up to max_len is encodable.",
    ),
    Mutant(
        "blind-layout-pad-prefers-end-symbol",
        "transformer/decoding/requests.py",
        (
            (
                '    if pad_symbol is None:\n        pad_symbol = getattr(config, "pad_id", None)\n'
                "        if pad_symbol is None:\n            pad_symbol = end_symbol if end_symbol is not None else 0",
                "    if pad_symbol is None:\n        pad_symbol = end_symbol\n"
                '        if pad_symbol is None:\n            pad_symbol = getattr(config, "pad_id", None) or 0',
            ),
        ),
        "With an end_symbol and no pad_symbol, finished rows are filled with the end symbol instead of the "
        "config's pad_id that the docs name as the default filler.",
    ),
    Mutant(
        "blind-layout-beam-last-step-live-dropped",
        "transformer/decoding/beam.py",
        (
            (
                "len(finished) >= beam_size and ys.size(1) + 1 < max_len",
                "len(finished) >= beam_size and ys.size(1) < max_len",
            ),
        ),
        "When beam_size hypotheses finish on the step that reaches max_len exactly, the live hypotheses of that "
        "step no longer compete, so beam search can return a worse-scoring result than the documented rule.",
    ),
    Mutant(
        "blind-layout-fraction-zero-refused",
        "transformer/cli/arguments.py",
        (("lambda value: 0.0 <= value < 1.0)", "lambda value: 0.0 < value < 1.0)"),),
        "`--dropout 0`, `--label-smoothing 0` and `--valid-fraction 0` are refused with exit status 2, though "
        "--help documents the range [0, 1).",
    ),
    Mutant(
        "blind-layout-noam-step-zero-is-zero",
        "transformer/training/schedule.py",
        (("    if step == 0:\n        step = 1\n", "    if step == 0:\n        return 0.0\n"),),
        "The Noam schedule gives 0 at step 0 instead of counting it as step 1, so the first optimizer step of "
        "every run (and a run resumed at step 0) does not update the weights.",
    ),
    Mutant(
        "blind-layout-aside-oldest-copy",
        "transformer/checkpoint/locate.py",
        (("key=os.path.getmtime, reverse=True)", "key=os.path.getmtime)"),),
        "When several copies were left aside by interrupted saves, --resume and load_checkpoint pick the oldest "
        "one, so a resumed run restarts from an earlier step than the newest kept checkpoint.",
    ),
    Mutant(
        "blind-layout-checkpoint-error-exit-3",
        "transformer/cli/__init__.py",
        (
            (
                "except (UsageError, CheckpointError, UnknownTokenError, PretrainedFormatError, MissingDependencyError) as error:",
                "except (UsageError, UnknownTokenError, PretrainedFormatError, MissingDependencyError) as error:",
            ),
            (
                "except (TrainingDiverged, OutputWriteError) as error:",
                "except (TrainingDiverged, OutputWriteError, CheckpointError) as error:",
            ),
        ),
        "A missing, corrupt or non-finite checkpoint (decode/generate --checkpoint, --resume) exits with status 3 "
        "instead of the documented 2 for a problem with the command's inputs.",
    ),
]

# the suites of the merged code the review looked at (the default TEST_FILES lack the CLI's, training's and
# checkpoints' tests)
_TESTS = (
    "tests/test_layout_edges.py",
    "tests/test_cache.py",
    "tests/test_lm.py",
    "tests/test_lm_generate.py",
    "tests/test_decoding.py",
    "tests/test_sampling.py",
    "tests/test_gqa.py",
    "tests/test_training.py",
    "tests/test_training_promises.py",
    "tests/test_checkpoint.py",
    "tests/test_cli.py",
    "tests/test_cli_flags.py",
    "tests/test_cli_flags_reach.py",
    "tests/test_run_safety_resume.py",
    "tests/test_run_safety_divergence.py",
    "tests/test_cli_lm.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
