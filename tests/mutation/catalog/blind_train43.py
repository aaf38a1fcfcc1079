"""Blind review of issue 43's training of a fine-tune (2026-12-02), by a reviewer who did not read the tests: the
learning-rate schedules and --warmup-ratio, the resume that reads its flags back from the checkpoint, the resumed
run's summary, --block-len refused before tokenizing, the dtype recorded for resume, RoPE tables grown for the
lengths in use."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-t43-warmup-ratio-rounded-down",
        "transformer/training/schedule.py",
        (("    return math.ceil(steps * ratio)\n", "    return int(steps * ratio)\n"),),
        "warmup_steps truncates instead of rounding up (transformers' get_warmup_steps uses ceil): its docstring's "
        "'0.1 of 5 steps is 1' gives 0, so a 5-step run with the default --warmup-ratio 0.1 has no warm-up and its "
        "first step trains at the peak instead of 0 (and 0.15 of 30 gives 4, not 5).",
    ),
    Mutant(
        "blind-t43-cosine-phase-ignores-warmup",
        "transformer/training/schedule.py",
        (
            (
                "        progress = float(step - self.warmup) / float(max(1, self.total - self.warmup))\n",
                "        progress = float(step) / float(max(1, self.total - self.warmup))\n",
            ),
        ),
        "The cosine decay's phase is counted from step 0 instead of from the end of the warm-up: with a warm-up the "
        "learning rate at step --warmup is below the peak (docstring: 'peak is reached at step warmup') and differs "
        "from transformers' get_cosine_schedule_with_warmup at every step after the warm-up.",
    ),
    Mutant(
        "blind-t43-use-schedule-one-step-ahead",
        "transformer/training/schedule.py",
        (
            (
                '        group["lr"] = base * schedule(scheduler.last_epoch)\n',
                '        group["lr"] = base * schedule(scheduler.last_epoch + 1)\n',
            ),
        ),
        "use_schedule sets the optimizer's learning rate to the schedule's value one step ahead: a new run put on a "
        "linear/cosine/constant schedule (apply_schedule at step 0) takes its first optimizer step at peak/warmup "
        "instead of 0 (docstring: 'the learning rate becomes base * schedule(scheduler.last_epoch) at once'), and a "
        "schedule changed on resume is off by a step for the resumed step.",
    ),
    Mutant(
        "blind-t43-longer-steps-no-stretch",
        "transformer/cli/train_setup.py",
        (
            (
                "    if not schedule_given(args) and not (decays and saved.total != steps):\n",
                "    if not schedule_given(args):\n",
            ),
        ),
        "A resume with a longer --steps and no schedule flag keeps the checkpoint's linear/cosine decay to 0 at the "
        "old total: the steps past it train at learning rate 0, and no 'learning rate changed on resume: linear "
        "(..., to 0 at step 30) -> linear (..., to 0 at step 60)' line is printed (training.md: a longer --steps "
        "stretches the decay and says so).",
    ),
    Mutant(
        "blind-t43-recall-skips-defaulted-flags",
        "transformer/cli/train_setup.py",
        (
            (
                "        if name not in given:\n            setattr(args, name, value)\n",
                "        if name not in given and getattr(args, name) is None:\n            setattr(args, name, value)\n",
            ),
        ),
        "recall_flags fills in only the flags whose parsed value is None, not every flag the command line left out: "
        "flags with a non-None default (--block-len 128, --pack, --seed 0, --max-tokens, ...) keep the default on "
        "`--resume --out DIR`, so a run started with --block-len 16 (or --seed 4, --no-pack) is refused or "
        "continues on another plan instead of resuming as printed.",
    ),
    Mutant(
        "blind-t43-dtype-not-recorded",
        "transformer/cli/train_setup.py",
        (
            (
                '    "strategy", "lr", "lr_factor", "warmup", "warmup_ratio", "tokenizer_file", GIVEN,\n',
                '    "strategy", "dtype", "lr", "lr_factor", "warmup", "warmup_ratio", "tokenizer_file", GIVEN,\n',
            ),
        ),
        "--dtype is treated as a run-time flag and never recorded in the checkpoint's flags: a bfloat16 fine-tune "
        "resumed with `--resume --out DIR` alone reloads the folder in float32 (not the uninterrupted run), and a "
        "contradicting --dtype on the resume is accepted silently instead of refused naming both (training.md, "
        "troubleshooting.md: the recorded --dtype is read back, another is refused).",
    ),
    Mutant(
        "blind-t43-text-path-not-absolute",
        "transformer/cli/train_setup.py",
        (
            (
                '_PATHS = {"text", "valid", "train", "init", "data_dir"}\n',
                '_PATHS = {"valid", "train", "init", "data_dir"}\n',
            ),
        ),
        "--text is recorded as given (relative), not as absolute paths: `train lm --resume --out DIR` run from "
        "another directory looks for the text files relative to it and fails (or, with --text given again from "
        "there, is refused as other text), breaking 'files as absolute paths ... a resume from another directory "
        "reads the same files'.",
    ),
    Mutant(
        "blind-t43-trained-line-counts-total",
        "transformer/cli/train_setup.py",
        (("    this_run = trainer.step - first_step\n", "    this_run = trainer.step\n"),),
        "The summary of a resumed run counts the total as this run's steps: 'trained 30 steps (resumed at step 15; "
        "30 in all)' instead of the documented 'trained 15 steps (resumed at step 15; 30 in all)'.",
    ),
    Mutant(
        "blind-t43-block-len-checked-after-tokenizing",
        "transformer/cli/train_files.py",
        (
            (
                "    if init is not None:  # before anything is tokenized: a refused run leaves no OUT.data\n"
                "        check_block_fits(init, block)\n",
                "",
            ),
        ),
        "The early check of --block-len against the pretrained context is gone: the refusal now comes only from "
        "load_pretrained_lm, after the text was tokenized, so OUT.data is left behind and the message is no longer "
        "'--block-len N is longer than the pretrained model's context, max_len=M (DIR/config.json): give "
        "--block-len M or less' (troubleshooting.md, promises/cli.md).",
    ),
    Mutant(
        "blind-t43-rotary-given-positions-bounded-by-length",
        "transformer/lm/model.py",
        (
            (
                "            at, bound = slots if positions is None else positions, None if positions_given else offset + seq\n",
                "            at, bound = slots if positions is None else positions, offset + seq\n",
            ),
        ),
        "Given positions are bounded by the slots' length instead of read: the rotary table is built for only "
        "max(64, next power of two of seq) rows, so positions given far past the length (e.g. 1000 for a 4-token "
        "forward of a 2048-position model) index past the table (IndexError / device assert) instead of reading "
        "their own rows, though they are below max_len (RotaryEmbedding docstring, lm_blocks.md).",
    ),
]

_TESTS = (
    "tests/test_training_schedules.py",
    "tests/test_cli_resume_as_printed.py",
    "tests/test_cli_resume_schedule.py",
    "tests/test_lm_rotary_tables.py",
    "tests/test_lm_rotary.py",
    "tests/test_cli_pretrained.py",
    "tests/test_training.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
