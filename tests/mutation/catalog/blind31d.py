"""Blind review of issue 31's fixes (2026-11-27, evening), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-31d-empty-trainer-state-dropped",
        "transformer/checkpoint/save.py",
        (("        if trainer_state is not None:\n", "        if trainer_state:\n"),),
        "save_checkpoint(..., trainer_state={}) writes no state files: load_checkpoint gives trainer_state None "
        "instead of {} (an empty training state is not 'no training state').",
    ),
    Mutant(
        "blind-31d-aside-copy-without-meta",
        "transformer/checkpoint/locate.py",
        (
            (
                "        if os.path.isfile(os.path.join(candidate, META_FILE)):\n",
                "        if os.path.isdir(candidate):\n",
            ),
        ),
        "When the checkpoint is missing and the newest copy left aside has no meta.json (a half-removed one), "
        "find_checkpoint returns it instead of the newest complete copy: load/resume fail although a good copy is "
        "there.",
    ),
    Mutant(
        "blind-31d-python-gauss-state-dropped",
        "transformer/training/trainer.py",
        (("    return (version, tuple(internal), gauss)\n", "    return (version, tuple(internal), None)\n"),),
        "Resume restores Python's random state without its cached Gaussian (gauss_next): after an odd number of "
        "random.gauss calls before the save, the resumed run's next random.gauss differs from the uninterrupted "
        "run's.",
    ),
    Mutant(
        "blind-31d-last-train-loss-not-restored",
        "transformer/training/trainer.py",
        (
            (
                '        self.last_train_loss = float(state.get("last_train_loss", float("nan")))\n',
                '        self.last_train_loss = float(state.get("last_loss", float("nan")))\n',
            ),
        ),
        "The last training loss is saved but read back under another key: resuming a run that already reached its "
        "steps returns NaN from train() (and results' final_train_loss is NaN) instead of the saved loss.",
    ),
    Mutant(
        "blind-31d-compiled-dict-keys-unchecked",
        "transformer/contracts/traced_rules.py",
        (
            (
                "            if not fits(hint[1], key, memo, bound, contract) or not fits(hint[2], item, memo, bound, "
                "contract):\n",
                "            if not fits(hint[2], item, memo, bound, contract):\n",
            ),
        ),
        "Under torch.compile a dict[K, V] contract checks only the values: a dict with keys of the wrong type "
        "passes compiled while the eager call raises.",
    ),
    Mutant(
        "blind-31d-compiled-sequence-class-loose",
        "transformer/contracts/traced_rules.py",
        (
            (
                '        if not isinstance(value, tuple if kind == "tuple_of" else list):\n',
                '        if not isinstance(value, (tuple, list) if kind == "tuple_of" else list):\n',
            ),
        ),
        "Under torch.compile a tuple[X, ...] contract accepts a list of X (only list[X] checks its container's "
        "class), where the eager call raises.",
    ),
    Mutant(
        "blind-31d-store-first-by-negative-index",
        "transformer/data/token_store.py",
        (("        if not -n <= index < n:\n", "        if not -n < index < n:\n"),),
        "store[-len(store)] (the first sequence, as a Python sequence indexes) raises IndexError.",
    ),
    Mutant(
        "blind-31d-cache-ignores-encoding-errors",
        "transformer/data/corpora.py",
        (
            (
                '        "encoding_errors": encoding_errors,\n    }\n\n    def build() -> TokenStore:\n        with TokenStoreWriter(path, tokenizer.vocab_size) as writer:\n',
                "    }\n\n    def build() -> TokenStore:\n        with TokenStoreWriter(path, tokenizer.vocab_size) as writer:\n",
            ),
        ),
        "The LM token cache does not record the reading option encoding_errors: a store built with "
        "encoding_errors='replace' is reused for 'strict' (the undecodable file is not refused) and vice versa.",
    ),
    Mutant(
        "blind-31d-dropout-zero-is-default",
        "transformer/cli/train_files.py",
        (
            (
                "    value = getattr(args, name, None)\n    return defaults[default_name or name] if value is None else value\n",
                "    value = getattr(args, name, None)\n    return value or defaults[default_name or name]\n",
            ),
        ),
        "train lm/translate --dropout 0 trains with the default dropout 0.1 (a 0 given on the command line is "
        "taken as not given).",
    ),
    Mutant(
        "blind-31d-learned-positions-unscaled-at-positions",
        "transformer/lm/layers.py",
        (
            (
                '        """``lambda_pe`` times the rows at ``positions`` (#batch, seq): a left-padded row\'s, or the cache\'s."""\n'
                "        return self.scale * self.pe[0][positions]\n",
                '        """``lambda_pe`` times the rows at ``positions`` (#batch, seq): a left-padded row\'s, or the cache\'s."""\n'
                "        return self.pe[0][positions]\n",
            ),
        ),
        "Learned positions ignore positional_scale (lambda_pe) wherever positions are given per row: packed "
        "documents and left-padded prompts compute other logits than the same text alone.",
    ),
]

# The before rate ran on 43c94f6's tests grouped by area (checkpoint and training, contracts, data, the command line,
# the LM: tests/mutation/blind_runs/blind31d_before.json); the tests that catch the three survivors come first.
_TESTS = (
    "tests/test_tool_survivors_checkpoint.py",
    "tests/test_resume_promises.py",
    "tests/test_cli_flags_reach.py",
    "tests/test_checkpoint_durability.py",
    "tests/test_checkpoint.py",
    "tests/test_contracts_compiled_containers.py",
    "tests/test_data_promises.py",
    "tests/test_data_store_edges.py",
    "tests/test_lm_positions.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
