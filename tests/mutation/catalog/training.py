"""Mutants of training: label smoothing, the loss, the schedule, the training loop."""

from .base import M

MUTANTS = [
    # --- label smoothing (transformer/training/losses.py)
    M(
        "label-smoothing-wrong-mass",
        "transformer/training/losses.py",
        "            each = s / self.size\n",
        "            each = s / (self.size - 1)\n",
        "label smoothing spreads s/(V-1) instead of s/V (mass != 1)",
    ),
    M(
        "label-smoothing-full-confidence",
        "transformer/training/losses.py",
        "            cross = -((1.0 - s) * x_label + each * total)\n",
        "            cross = -(x_label + each * total)\n",
        "label smoothing keeps confidence 1 on the label (mass 1 + s)",
    ),
    M(
        "label-smoothing-mass-on-padding",
        "transformer/training/losses.py",
        "            columns[self.padding_idx] = False\n",
        "            columns[self.padding_idx] = True\n",
        "annotated label smoothing puts mass on the padding class",
    ),
]

# --- the training loop (transformer/training/trainer.py): killed by tests/test_training.py's comparisons with SGD by hand (accumulation groups,
# the trailing partial group, global-norm clipping, the schedule, the loss normalisation)
from .base import Mutant  # noqa: E402

_T = "transformer/training/trainer.py"
MUTANTS += [
    M(
        "accum-steps-every-batch",
        "transformer/training/loop.py",
        "                if (i + 1) % accum_iter == 0:\n",
        "                if True:\n",
        "run_epoch steps the optimizer on every batch, ignoring accum_iter",
    ),
    M(
        "accum-tutorial-off-by-one",
        "transformer/training/loop.py",
        "                if (i + 1) % accum_iter == 0:\n",
        "                if i % accum_iter == 0:\n",
        "run_epoch steps after the first batch alone, then every accum_iter (the tutorial's i % accum_iter)",
    ),
    M(
        "accum-trailing-group-applied",
        "transformer/training/loop.py",
        "        # gradients of a trailing partial accumulation are discarded, as in the tutorial\n",
        ("        if (i + 1) % accum_iter:\n            optimizer_step(model, optimizer, scheduler, clip_grad)\n"),
        "a trailing partial accumulation group gets its own optimizer step (documented: discarded)",
    ),
    M(
        "accum-trailing-gradient-leaks",
        "transformer/training/loop.py",
        (
            "        # gradients of a trailing partial accumulation are discarded, as in the tutorial\n"
            "        optimizer.zero_grad(set_to_none=True)\n"
        ),
        "        pass\n",
        "a trailing partial group's gradients stay and leak into the next epoch's first step",
    ),
    M(
        "clip-per-parameter",
        "transformer/training/loop.py",
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)\n",
        "        [torch.nn.utils.clip_grad_norm_([p], clip_grad) for p in model.parameters()]\n",
        "gradient clipping bounds each parameter's norm instead of the global norm",
    ),
    M(
        "clip-by-value",
        "transformer/training/loop.py",
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)\n",
        "        torch.nn.utils.clip_grad_value_(model.parameters(), clip_grad)\n",
        "gradient clipping by value instead of by global norm",
    ),
    M(
        "clip-after-step",
        "transformer/training/loop.py",
        (
            "    if clip_grad is not None:\n"
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)\n"
            "    optimizer.step()\n"
        ),
        (
            "    optimizer.step()\n"
            "    if clip_grad is not None:\n"
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)\n"
        ),
        "gradients are clipped after the optimizer step (no effect on the update)",
    ),
    M(
        "loss-normalised-by-batch-size",
        "transformer/training/loop.py",
        "        return loss_compute(out, batch.labels, batch.ntokens)\n",
        "        return loss_compute(out, batch.labels, len(batch))\n",
        "the loss is normalised by the number of sequences instead of ntokens",
    ),
    Mutant(
        "scheduler-steps-per-batch",
        "transformer/training/loop.py",
        (
            (
                "optimizer_step(model, optimizer, scheduler, clip_grad)",
                "optimizer_step(model, optimizer, None, clip_grad)",
            ),
            (
                "                train_state.step += 1",
                "                train_state.step += 1\n                if scheduler is not None:\n                    scheduler.step()",
            ),
        ),
        "run_epoch steps the learning-rate schedule on every batch, not every optimizer step",
    ),
    M(
        "scheduler-steps-before-optimizer",
        "transformer/training/loop.py",
        (
            "    optimizer.step()\n"
            "    optimizer.zero_grad(set_to_none=True)\n"
            "    if scheduler is not None:\n"
            "        scheduler.step()\n"
        ),
        (
            "    if scheduler is not None:\n"
            "        scheduler.step()\n"
            "    optimizer.step()\n"
            "    optimizer.zero_grad(set_to_none=True)\n"
        ),
        "the schedule advances before the optimizer step (the first step already uses the second rate)",
    ),
    M(
        "trainer-no-accumulation",
        _T,
        "        for _ in range(self.config.accum_iter):\n",
        "        for _ in range(1):\n",
        "Trainer.train_step uses one batch per optimizer step whatever accum_iter says",
    ),
    M(
        "trainer-ignores-clip",
        "transformer/training/trainer.py",
        "        optimizer_step(self.model, self.optimizer, self.scheduler, self.config.clip_grad)\n",
        "        optimizer_step(self.model, self.optimizer, self.scheduler, None)\n",
        "Trainer never clips the gradient",
    ),
    M(
        "trainer-loss-per-last-batch",
        _T,
        "        self.last_train_loss = loss_sum / max(ntokens, 1)\n",
        "        self.last_train_loss = loss_sum / max(batch.ntokens, 1)\n",
        "Trainer's loss per token divides by the last batch's tokens only",
    ),
    M(
        "loss-compute-unnormalised",
        "transformer/training/losses.py",
        "        sloss = self.criterion(x.contiguous().view(-1, x.size(-1)), y.contiguous().view(-1)) / norm\n",
        "        sloss = self.criterion(x.contiguous().view(-1, x.size(-1)), y.contiguous().view(-1))\n",
        "SimpleLossCompute back-propagates the summed loss, not the loss / norm",
    ),
]

# --- issue 20, never silently wrong: the command line, divergence, non-finite weights, label ids, disk writes,
# leftovers, the rule that finds a checkpoint, Ctrl-C, resumes. Each runs the sharpest of the files written for it.
_RS, _CF, _TP = (
    ("tests/test_run_safety_divergence.py", "tests/test_run_safety_disk.py", "tests/test_run_safety_resume.py"),
    ("tests/test_cli_flags.py", "tests/test_cli_flags_reach.py"),
    ("tests/test_training_promises.py",),
)
_TR = "transformer/training/losses.py"


def S(id: str, file: str, old: str, new: str, what: str, tests: tuple[str, ...] = _RS) -> Mutant:
    return Mutant(id, file, ((old, new),), what, tests)


MUTANTS += [
    # the command line
    S(
        "cli-abbreviations-allowed",
        "transformer/cli/arguments.py",
        '        kwargs["allow_abbrev"] = False\n',
        '        kwargs["allow_abbrev"] = True\n',
        "argparse expands prefixes again: --lr-fac 2 is read as --lr-factor 2",
        _CF,
    ),
    S(
        "cli-abbreviation-prescan-skipped",
        "transformer/cli/parser.py",
        "    _refuse_abbreviations(parser, argv)\n",
        "",
        "an abbreviated required option is reported as missing instead of as an abbreviation",
        _CF,
    ),
    S(
        "cli-lr-flag-ignored",
        "transformer/cli/train_setup.py",
        "    if args.lr is not None:\n",
        "    if False:\n",
        "--lr is accepted and ignored: the task's factor trains",
        _CF,
    ),
    S(
        "cli-lr-factor-formula-inverted",
        "transformer/training/schedule.py",
        "    return peak * math.sqrt(model_size * warmup)\n",
        "    return peak / math.sqrt(model_size * warmup)\n",
        "noam_factor divides where it multiplies: the peak is wrong",
    ),
    S(
        "cli-resume-keeps-old-schedule",
        "transformer/cli/train_setup.py",
        "    if not schedule_given(args) and not (decays and saved.total != steps):\n",
        "    if not (decays and saved.total != steps):\n",
        "--lr on --resume is silently ignored (the checkpoint's schedule stays)",
        _CF,
    ),
    S(
        "cli-resume-schedule-task-warmup",
        "transformer/cli/train_setup.py",
        "        new = NoamSchedule(saved.model_size, *schedule_settings(args, saved.model_size, vars(saved)))\n",
        '        new = NoamSchedule(saved.model_size, *schedule_settings(args, saved.model_size, {**vars(saved), "warmup": 200}))\n',
        "--lr alone on a resume replaces the checkpoint's warm-up by the task's default",
        _CF,
    ),
    S(
        "cli-resume-data-unchecked",
        "transformer/cli/file_run.py",
        "            if name in recorded and recorded[name] != value:\n",
        "            if False:\n",
        "a resumed file task trains on another plan of batches (--seed/--max-tokens) silently",
        _CF,
    ),
    S(
        "cli-bleu-note-only-when-all-short",
        "transformer/tasks/translation_files.py",
        "    if not lengths or short * 2 <= len(lengths):\n",
        "    if not lengths or short < len(lengths):\n",
        "BLEU's note is given only when every reference is short, not when most are",
        _CF,
    ),
    S(
        "cli-out-refusal-missing",
        "transformer/cli/train_setup.py",
        "        if found is not None and not args.overwrite:\n",
        "        if False:\n",
        "a new run into an --out that holds a checkpoint replaces it unasked",
    ),
    S(
        "cli-foreign-directory-replaced",
        "transformer/cli/train_setup.py",
        "        if found is None and os.path.isdir(out) and os.listdir(out):",
        "        if False:",
        "train replaces a non-empty directory it did not write (the user's files)",
    ),
    S(
        "cli-out-not-tried",
        "transformer/cli/train_setup.py",
        '        check_writable(out, "--out")',
        "        pass",
        "an --out that cannot be written is found out at the first save, after training",
    ),
    # divergence and non-finite weights
    S(
        "trainer-divergence-unchecked",
        "transformer/training/trainer.py",
        "        if not math.isfinite(loss_sum):\n",
        "        if False:\n",
        "a NaN loss is trained on and saved",
    ),
    Mutant(
        "trainer-divergence-after-the-step",
        "transformer/training/trainer.py",
        (
            (
                "        if not math.isfinite(loss_sum):\n            self._diverged(group, loss_sum / max(ntokens, 1))\n"
                "        optimizer_step(self.model, self.optimizer, self.scheduler, self.config.clip_grad)\n",
                "        optimizer_step(self.model, self.optimizer, self.scheduler, self.config.clip_grad)\n"
                "        if not math.isfinite(loss_sum):\n            self._diverged(group, loss_sum / max(ntokens, 1))\n",
            ),
        ),
        "the optimizer steps on the NaN loss before the run stops: the weights in memory are ruined",
        _RS,
    ),
    S(
        "trainer-eval-divergence-unchecked",
        "transformer/training/trainer.py",
        "                    if not math.isfinite(eval_loss):\n",
        "                    if False:\n",
        "a NaN held-out loss is recorded and training goes on",
    ),
    S(
        "trainer-saves-nonfinite-weights",
        "transformer/training/trainer.py",
        "        if self.strategy.all_reduce_sum([len(bad)])[0]:\n",
        "        if False:\n",
        "Trainer.save hands NaN weights to the strategy (only save_checkpoint's own check is left)",
    ),
    S(
        "checkpoint-saves-nonfinite-weights",
        "transformer/checkpoint/save.py",
        "    if not allow_nonfinite:\n",
        "    if False:\n",
        "save_checkpoint writes NaN weights over a good checkpoint",
    ),
    S(
        "checkpoint-loads-nonfinite-weights",
        "transformer/checkpoint/load.py",
        "    bad = nonfinite_tensors(model.state_dict().items())\n    if bad:",
        "    bad = []\n    if bad:",
        "load_checkpoint (decode, generate, --resume) takes NaN weights silently",
    ),
    S(
        "checkpoint-counts-nan-only",
        "transformer/checkpoint/nonfinite.py",
        "        counts.append((~torch.isfinite(local.detach())).sum())\n",
        "        counts.append(torch.isnan(local.detach()).sum())\n",
        "infinite weights pass the non-finite check",
    ),
    # label ids
    S(
        "labels-upper-bound-off-by-one",
        _TR,
        "    invalid = (labels < 0) | (labels >= vocab)\n",
        "    invalid = (labels < 0) | (labels > vocab)\n",
        "a label equal to the vocabulary size passes the check",
    ),
    S(
        "labels-gpu-path-not-nan",
        _TR,
        '            loss = torch.where(invalid.any(), torch.full_like(loss, float("nan")), loss)\n',
        "            pass\n",
        "on a GPU an out-of-range label gives a finite loss (it is silently trained as another label)",
    ),
    S(
        "labels-gpu-path-unclamped",
        _TR,
        "        keep = target != self.padding_idx if invalid is None else (target != self.padding_idx) & ~invalid\n",
        "        keep = target != self.padding_idx\n",
        "on a GPU an out-of-range label is gathered: a device-side assert",
    ),
    S(
        "batch-last-target-position-unchecked",
        "transformer/training/batch.py",
        '            _check_ids(tgt, tgt_vocab, "tgt", "target")\n',
        '            _check_ids(tgt[:, :-1], tgt_vocab, "tgt", "target")\n',
        "Batch checks the decoder input only, never the last label",
    ),
    S(
        "label-smoothing-entropy-zero-division",
        _TR,
        ("    if smoothing == 0.0:\n        return 0.0\n"),
        "",
        "annotated label smoothing of size 2 without smoothing divides by zero",
        _TP,
    ),
    # disk writes and leftovers
    S(
        "checkpoint-write-failure-traceback",
        "transformer/checkpoint/save.py",
        "        if is_write_failure(error, path, needed):\n            kept",
        "        if False:\n            kept",
        "a full disk during a save is a raw OSError traceback",
    ),
    S(
        "token-store-write-failure-traceback",
        "transformer/data/token_store.py",
        "        if is_write_failure(error):\n            kept = ",
        "        if False:\n            kept = ",
        "a full disk while tokenizing is a raw OSError traceback",
    ),
    S(
        "leftovers-of-other-hosts-removed",
        "transformer/common/output_dirs.py",
        '        if match is None or match["host"] != host or _alive(int(match["pid"])):\n',
        '        if match is None or _alive(int(match["pid"])):\n',
        "another host's temporary directory (a shared filesystem) is removed while its save may be running",
    ),
    S(
        "leftovers-of-live-processes-removed",
        "transformer/common/output_dirs.py",
        '        if match is None or match["host"] != host or _alive(int(match["pid"])):\n',
        '        if match is None or match["host"] != host:\n',
        "a live process's temporary directory is removed mid-save",
    ),
    S(
        "find-checkpoint-ignores-the-copy-aside",
        "transformer/checkpoint/locate.py",
        (
            "        return path if os.path.isfile(os.path.join(path, META_FILE)) else None\n"
            "    if os.path.exists(path):\n"
            "        return None\n"
        ),
        (
            "        return path if os.path.isfile(os.path.join(path, META_FILE)) else None\n"
            "    if True:\n"
            "        return None\n"
        ),
        "after a crash between a save's renames no checkpoint is found",
    ),
    # Ctrl-C
    S(
        "ctrl-c-request-not-reduced",
        "transformer/training/trainer.py",
        "        loss_sum, ntokens, stops = self.strategy.all_reduce_sum([loss_sum, ntokens, float(requested)])\n",
        "        loss_sum, ntokens, stops = self.strategy.all_reduce_sum([loss_sum, ntokens, 0.0])\n",
        "Ctrl-C is never acted on at the step boundary",
    ),
    S(
        "ctrl-c-no-save",
        "transformer/training/trainer.py",
        "                    if cfg.out_dir and self.saved_step != self.step:\n",
        "                    if False:\n",
        "Ctrl-C stops without saving: everything since the last periodic checkpoint is lost",
    ),
    S(
        "second-ctrl-c-ignored",
        "transformer/training/stops.py",
        "        if self.requested:\n",
        "        if False:\n",
        "a second Ctrl-C waits for the step to end instead of stopping at once",
    ),
    # the training setup
    S(
        "make-trainer-ignores-factor",
        "transformer/tasks/recipe.py",
        "        defaults.factor if factor is None else factor,\n",
        "        defaults.factor,\n",
        "make_trainer (so train copy/dates --lr) ignores the factor it is given",
        _TP,
    ),
    S(
        "checks-first-checks-always",
        "transformer/training/trainer.py",
        '                check = cfg.checks == "always" or (cfg.checks == "first" and first)\n',
        '                check = cfg.checks != "never"\n',
        'checks="first" checks every step',
        _TP,
    ),
]
