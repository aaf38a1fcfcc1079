"""Blind review of the command line with pretrained folders (typed-transformer generate --model DIR, train lm --init DIR
with checkpoints, resume and the pretrained tokenizer), generation with several end ids (generate's end_symbols), and
the preallocated key/value cache (KVCache.reserve) (2026-11-27), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-usepretrained-reserve-held-values-from-keys",
        "transformer/cache.py",
        (
            (
                "self._keys, self._values = self._room(self.keys), self._room(self.values)",
                "self._keys, self._values = self._room(self.keys), self._room(self.keys)",
            ),
        ),
        "KVCache.reserve called on a cache that already holds keys (after the prompt) copies the cached keys into "
        "the value buffer too: the cached values are lost and the outputs differ from a recompute.",
    ),
    Mutant(
        "blind-usepretrained-reserve-zero-accepted",
        "transformer/cache.py",
        (("if not is_int(positions, at_least=1):", "if not is_int(positions, at_least=0):"),),
        "KVCache.reserve(0) (and StackCache.reserve(0)) is silently accepted instead of the documented ValueError "
        "for a non-positive number of positions.",
    ),
    Mutant(
        "blind-usepretrained-end-symbols-forget-finished",
        "transformer/decoding/greedy.py",
        (("finished |= ys[:, -1] == token", "finished = ys[:, -1] == token"),),
        "With end_symbols, a row that ended (at end_symbol or an extra end id) is marked unfinished again at the next "
        "step, so after one padding position it generates tokens again instead of holding pad_symbol to the end.",
    ),
    Mutant(
        "blind-usepretrained-end-symbols-vocab-unchecked",
        "transformer/decoding/requests.py",
        (
            (
                'validate_token_id(f"end_symbols[{i}]", token, vocab, "the model\'s vocabulary")',
                'validate_token_id(f"end_symbols[{i}]", token, None, "the model\'s vocabulary")',
            ),
        ),
        "generate(..., end_symbols=[vocab]) (an id outside the model's vocabulary) is accepted and silently never "
        "ends a row, instead of a ValueError naming end_symbols[i].",
    ),
    Mutant(
        "blind-usepretrained-cli-cut-first-eos-only",
        "transformer/cli/checkpoint_commands.py",
        (("cut = [new.index(i) for i in ends if i in new]", "cut = [new.index(i) for i in ends[:1] if i in new]"),),
        "generate --model (or --checkpoint) with a folder of several eos ids prints the continuation past a "
        "further end id (e.g. Qwen's <|im_end|>) instead of cutting it there: the end token's text shows.",
    ),
    Mutant(
        "blind-usepretrained-block-equal-context-refused",
        "transformer/tasks/pretrained_lm.py",
        (("if block > model.config.max_len:", "if block >= model.config.max_len:"),),
        "train lm --init DIR --block-len N with N equal to the pretrained model's max_len is refused although the "
        "message itself says 'give --block-len max_len or less'.",
    ),
    Mutant(
        "blind-usepretrained-tokenizer-keeps-first-eos-only",
        "transformer/tasks/pretrained_lm.py",
        (
            (
                "eos_ids = list(pretrained.eos_ids) or",
                "eos_ids = list(pretrained.eos_ids)[:1] or",
            ),
        ),
        "train lm --init keeps only the folder's first end-of-sequence id in the saved tokenizer, so a checkpoint's "
        "generate --checkpoint no longer ends at the further eos ids of generation_config.json.",
    ),
    Mutant(
        "blind-usepretrained-init-warmup-ignored-for-peak",
        "transformer/cli/train_setup.py",
        (
            (
                '        return noam_factor(defaults["peak"], d_model, warmup), warmup\n',
                '        return noam_factor(defaults["peak"], d_model, defaults["warmup"]), warmup\n',
            ),
        ),
        "train lm --init with --warmup W no longer has its documented 5e-5 peak learning rate: the factor is "
        "computed for the task's default warm-up and applied with W steps, so the peak drifts.",
    ),
    Mutant(
        "blind-usepretrained-resume-init-read-wrong-field",
        "transformer/cli/file_run.py",
        (
            (
                'recorded, init = read_metadata(found).get("init"),',
                'recorded, init = read_metadata(found).get("init_dir"),',
            ),
        ),
        "train lm --resume of a --init run is no longer tied to its folder: resuming with --init DIR (as documented) "
        "is refused as 'a new model', and resuming without it is not refused by name (it fails on a config mismatch).",
    ),
    Mutant(
        "blind-usepretrained-pretrained-encode-drops-special",
        "transformer/data/tokenizers.py",
        (
            (
                "    def encode(self, text: str) -> list[int]:\n        return self.tokenizer.encode(text).ids",
                "    def encode(self, text: str) -> list[int]:\n"
                "        return self.tokenizer.encode(text, add_special_tokens=False).ids",
            ),
        ),
        "The 'pretrained' tokenizer (train lm --init, generate --checkpoint of such a run) no longer adds what the "
        "folder's post-processor adds (Llama's <s>), so training windows and prompts lack the start token.",
    ),
]

# Run against the test files of the code reviewed (the before rate: on commit d9405e7, before the tests the
# review prompted).
_TESTS = (
    "tests/test_cli_pretrained.py",
    "tests/test_lm_generate.py",
    "tests/test_cache.py",
    "tests/test_pretrained_generation.py",
    "tests/test_data_tokenizers.py",
    "tests/test_cli_lm.py",
    "tests/test_decoding.py",
    "tests/test_attention.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
