"""Blind review of training runs (trainer, training, batching, checkpoint, cli, tasks/run, tasks/base) (2026-11-24), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-training-run-epoch-train-log",
        "transformer/training/loop.py",
        (('    training = mode.startswith("train")\n', '    training = mode == "train"\n'),),
        "run_epoch(mode='train+log') silently evaluates instead of training: no backward, no optimizer or "
        "scheduler step, train_state not advanced, weights unchanged",
    ),
    Mutant(
        "blind-training-resume-torch-rng",
        "transformer/training/trainer.py",
        (('        torch.set_rng_state(rng["torch_rng"])\n', ""),),
        "Trainer.resume no longer restores the torch RNG state: dropout masks after a resume differ, so "
        "N steps + resume + M steps is not bit-identical to N+M steps straight",
    ),
    Mutant(
        "blind-training-accum-ntokens",
        "transformer/training/trainer.py",
        (("            ntokens += batch.ntokens\n", "            ntokens = batch.ntokens\n"),),
        "with accum_iter > 1, train_step's loss per token divides the whole group's loss by the last batch's "
        "tokens only (loss reported accum_iter times too large) and Trainer.tokens under-counts",
    ),
    Mutant(
        "blind-training-entropy-torch",
        "transformer/training/losses.py",
        (
            (
                "        others, each, confidence = size - 1, smoothing / size, 1.0 - smoothing + smoothing / size\n",
                "        others, each, confidence = size - 1, smoothing / size, 1.0 - smoothing\n",
            ),
        ),
        "label_smoothing_entropy(V, s) (torch style) uses the annotated confidence 1 - s, so H(q) is wrong: "
        "LabelSmoothing(V, pad, s) no longer equals F.cross_entropy(label_smoothing=s) - ntokens * H(q), and a "
        "perfect prediction q no longer gives loss 0",
    ),
    Mutant(
        "blind-training-ntokens-input",
        "transformer/training/batch.py",
        (
            (
                "            self.ntokens = int((self.tgt_y != pad).sum())\n",
                "            self.ntokens = int((self.tgt != pad).sum())\n",
            ),
        ),
        "Batch.ntokens counts the non-padding decoder inputs tgt[:, :-1] instead of the labels tgt[:, 1:]: "
        "one too many per row with end padding, so the per-token loss is normalised wrongly",
    ),
    Mutant(
        "blind-training-ckpt-runtime-mismatch",
        "transformer/checkpoint/load.py",
        (
            (
                "    diff = model.config.differences(config, architecture_only=True)\n",
                "    diff = model.config.differences(config, architecture_only=False)\n",
            ),
        ),
        "load_checkpoint into a model whose config differs only in a run-time field (attention_backend) raises "
        "ConfigMismatchError, so a run can no longer resume or decode on another backend",
    ),
    Mutant(
        "blind-training-ckpt-asset-sha",
        "transformer/checkpoint/format.py",
        (
            (
                "        if sha256_file(file) != digest:\n",
                "        if name in RESERVED_FILES and sha256_file(file) != digest:\n",
            ),
        ),
        "a changed byte in a checkpoint asset (e.g. tokenizer.json) is no longer detected: load_checkpoint "
        "loads it without CheckpointError although the asset's SHA-256 in meta.json does not match",
    ),
    Mutant(
        "blind-training-cli-nonneg-bound",
        "transformer/cli/arguments.py",
        (
            (
                'non_negative_int = number(int, "a non-negative integer", lambda value: value >= 0)\n',
                'non_negative_int = number(int, "a non-negative integer", lambda value: value >= 1)\n',
            ),
        ),
        "`typed-transformer train copy --eval-every 0` (documented: only at the end) and `--seed 0` are refused "
        "with exit status 2: 'expected a non-negative integer, got 0'",
    ),
    Mutant(
        "blind-training-run-eval-every-zero",
        "transformer/tasks/recipe.py",
        (
            (
                "        eval_every=defaults.eval_every if eval_every is None else eval_every,\n",
                "        eval_every=eval_every or defaults.eval_every,\n",
            ),
        ),
        "make_trainer(eval_every=0) / `train --eval-every 0` evaluates (and, in the CLI, checkpoints) every "
        "100 steps (the task's default) instead of only at the end",
    ),
    Mutant(
        "blind-training-task-batch-pad",
        "transformer/tasks/base.py",
        (
            (
                "        return Batch(src, tgt, self.pad, src_vocab=len(self.src_vocab), tgt_vocab=len(self.tgt_vocab))\n",
                "        return Batch(src, tgt, src_vocab=len(self.src_vocab), tgt_vocab=len(self.tgt_vocab))\n",
            ),
        ),  # re-targeted after run safety
        "Task.batches builds training batches with Batch's tutorial default pad=2 instead of the task's pad: "
        "for the copy task symbol 2 is masked out of attention and of the loss, ntokens is wrong, and the "
        "model never learns to emit 2",
    ),
]

# The tests that kill them (each survivor of the first run got one in tests/test_training_promises.py).
SUITE = (
    "tests/test_training_promises.py",
    "tests/test_training.py",
    "tests/test_checkpoint.py",
    "tests/test_cli.py",
    "tests/test_cli_flags.py",
    "tests/test_cli_flags_reach.py",
    "tests/test_tasks.py",
    "tests/test_cli_lm.py",
)
MUTANTS = [dataclasses.replace(m, tests=SUITE) for m in MUTANTS]
