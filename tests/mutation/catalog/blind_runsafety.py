"""Blind review of the training command line's run safety (output_dirs, cli, trainer, checkpoint, batching, distributed/launch, data/token_store) (2026-11-24), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-runsafety-stale-other-host",
        "transformer/common/output_dirs.py",
        (
            (
                '        if match is None or match["host"] != host or _alive(int(match["pid"])):\n',
                '        if match is None or _alive(int(match["pid"])):\n',
            ),
        ),
        "remove_stale_temps (every save, every run into --out, every token store) deletes TARGET.tmp-HOST-PID-* "
        "directories made on OTHER hosts whenever their pid is not alive on this one: on a shared filesystem a "
        "save in progress on another machine has its temporary directory deleted under it",
    ),
    Mutant(
        "blind-runsafety-store-raw-oserror",
        "transformer/data/token_store.py",
        (
            (
                "        try:\n            self.file.write(array.astype(self.dtype).tobytes())\n"
                "        except OSError as error:\n            raise self._failed(error) from None\n",
                "        self.file.write(array.astype(self.dtype).tobytes())\n",
            ),
        ),
        "a disk that fills up (or goes read-only) while a token store's ids are written raises the bare OSError "
        "(ENOSPC) instead of OutputWriteError ('cannot write the token store ...; nothing was left behind'): "
        "the CLI shows a traceback and exits 1 instead of one line and exit 3",
    ),
    Mutant(
        "blind-runsafety-overwrite-nonempty-dir",
        "transformer/cli/train_setup.py",
        (
            (
                "        if found is None and os.path.isdir(out) and os.listdir(out):\n",
                "        if found is None and os.path.isdir(out) and os.listdir(out) and not args.overwrite:\n",
            ),
        ),
        "train --overwrite into a non-empty directory that holds no checkpoint is accepted: the run trains and its "
        "first save renames the user's directory aside and deletes it (documented: never replaced, --overwrite or "
        "not)",
    ),
    Mutant(
        "blind-runsafety-warmup-default-resume",
        "transformer/cli/arguments.py",
        (
            (
                '        "--warmup",\n        type=non_negative_int,\n        default=None,\n',
                '        "--warmup",\n        type=non_negative_int,\n        default=d["warmup"],\n',
            ),
        ),
        "--warmup always has a value (the task's 200), so every --resume counts as 'the command line sets the "
        "schedule': a run started with --warmup 50 and resumed without flags silently switches to warm-up 200 "
        "(and says 'learning rate changed on resume') instead of keeping its checkpoint's schedule",
    ),
    Mutant(
        "blind-runsafety-translate-task-defaults",
        "transformer/cli/arguments.py",
        (
            (
                '        d = LM_DEFAULTS if task == "lm" else TRANSLATE_DEFAULTS\n',
                '        d = LM_DEFAULTS if task == "lm" else LM_DEFAULTS\n',
            ),
        ),
        "train translate --help (and its parser) takes the LM's defaults: --steps defaults to 900 instead of 1000, "
        "the help shows --lr-factor 1.0 instead of 2.0 and a --lr peak computed for d_model 128 instead of 64",
    ),
    Mutant(
        "blind-runsafety-diverged-after-step",
        "transformer/training/trainer.py",
        (
            (
                "        if not math.isfinite(loss_sum):\n            self._diverged(group, loss_sum / max(ntokens, 1))\n"
                "        optimizer_step(self.model, self.optimizer, self.scheduler, self.config.clip_grad)\n",
                "        optimizer_step(self.model, self.optimizer, self.scheduler, self.config.clip_grad)\n"
                "        if not math.isfinite(loss_sum):\n            self._diverged(group, loss_sum / max(ntokens, 1))\n",
            ),
        ),
        "a NaN/inf training loss raises TrainingDiverged only after the optimizer stepped on the NaN gradients: "
        "the trainer's weights (and Adam moments, scheduler) are NaN afterwards, not those of the previous step "
        "as the message ('stopped before the optimizer step') says",
    ),
    Mutant(
        "blind-runsafety-ctrl-c-save-once",
        "transformer/training/trainer.py",
        (
            (
                "                    if cfg.out_dir and self.saved_step != self.step:\n",
                "                    if cfg.out_dir and self.saved_step is None:\n",
            ),
        ),
        "Ctrl-C after a periodic checkpoint was written does not save at the step boundary: "
        "TrainingInterrupted says 'the checkpoint in OUT holds step 13' while OUT holds the older step 10, and a "
        "--resume repeats the steps in between",
    ),
    Mutant(
        "blind-runsafety-inf-weights-pass",
        "transformer/checkpoint/nonfinite.py",
        (
            (
                "        counts.append((~torch.isfinite(local.detach())).sum())\n",
                "        counts.append(torch.isnan(local.detach()).sum())\n",
            ),
        ),
        "only NaN counts as non-finite: save_checkpoint and Trainer.save write weights holding +/-inf, and "
        "load_checkpoint (decode, generate, --resume) loads them without NonFiniteWeightsError",
    ),
    Mutant(
        "blind-runsafety-last-label-unchecked",
        "transformer/training/batch.py",
        (
            (
                '            _check_ids(tgt, tgt_vocab, "tgt", "target")\n',
                '            _check_ids(tgt[:, :-1], tgt_vocab, "tgt", "target")\n',
            ),
        ),
        "Batch(..., tgt_vocab=V) no longer checks the last target position (a label only): a label id >= V "
        "there passes Batch construction silently (documented: the last position is checked too)",
    ),
    Mutant(
        "blind-runsafety-restart-ignores-aside",
        "transformer/distributed/launch.py",
        (
            (
                (
                    "    from ..checkpoint import find_checkpoint\n"
                    "\n"
                    "    return world is not None and world.restart_count > 0 and find_checkpoint(out) is not None\n"
                ),
                (
                    "\n"
                    '    return world is not None and world.restart_count > 0 and os.path.isfile(os.path.join(out, "meta.json"))\n'
                ),
            ),
        ),
        "a torchrun restart no longer finds the checkpoint by find_checkpoint's rule: after a crash between a "
        "save's two renames (only OUT.old-* left) the restarted job does not resume, and train refuses --out "
        "('already holds a checkpoint', exit 2) on every rank",
    ),
]

# The files run for this review (its first run and after).
SUITE = (
    "tests/test_run_safety_divergence.py",
    "tests/test_run_safety_disk.py",
    "tests/test_run_safety_resume.py",
    "tests/test_cli_flags.py",
    "tests/test_cli_flags_reach.py",
    "tests/test_training_promises.py",
    "tests/test_training.py",
    "tests/test_checkpoint.py",
    "tests/test_cli.py",
    "tests/test_data_promises.py",
    "tests/test_cli_lm.py",
    "tests/test_distributed_setup.py",
    "tests/test_distributed_laws.py",
    "tests/test_distributed_cli.py",
)
MUTANTS = [dataclasses.replace(m, tests=SUITE) for m in MUTANTS]
