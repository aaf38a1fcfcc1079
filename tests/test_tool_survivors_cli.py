"""Tests for the mutants of transformer/cli/arguments.py and messages.py that mutmut's run left alive.

Each test names the promise it checks (docs/training.md's flag table, the docstrings); tests/mutation/tool_runs/cli.json
names the mutants it kills (scripts/mutation_tool.py, issue 31).
"""

from __future__ import annotations

import argparse

import pytest

from transformer.checkpoint import save_checkpoint
from transformer.cli import build_parser
from transformer.cli.arguments import number
from transformer.cli.messages import describe_checkpoint, resumed_message


def _train(*flags: str) -> argparse.Namespace:
    return build_parser().parse_args(["train", "copy", *flags])


def test_the_training_flags_take_their_documented_defaults_and_values():
    """docs/training.md: --seed 0, --threads 1, --device cpu, --out runs/TASK, --resume/--overwrite/--no-progress
    off, --strategy and --attention-backend unset (the config's)."""
    args = _train()
    assert (args.seed, args.threads, args.device, args.resume, args.overwrite, args.no_progress) == (
        0, 1, "cpu", False, False, False)  # fmt: skip
    assert args.strategy is None and args.attention_backend is None and args.lr is None and args.lr_factor is None
    assert args.out.replace("\\", "/") == "runs/copy"
    args = _train("--seed", "7", "--threads", "3", "--strategy", "fsdp", "--attention-backend", "eager",
                  "--resume", "--no-progress", "--lr-factor", "2.5", "--warmup", "40")  # fmt: skip
    assert (args.seed, args.threads, args.strategy, args.attention_backend, args.resume, args.no_progress) == (
        7, 3, "fsdp", "eager", True, True)  # fmt: skip
    assert (args.lr_factor, args.warmup) == (2.5, 40)
    assert _train("--overwrite").overwrite is True


@pytest.mark.parametrize(
    "flags",
    [["--seed", "-1"], ["--threads", "0"], ["--strategy", "zero"], ["--attention-backend", "flash"],
     ["--lr-factor", "0"], ["--lr-factor", "x"]],
)  # fmt: skip
def test_a_flag_outside_its_values_is_refused(flags, capsys):
    with pytest.raises(SystemExit) as exit_:
        _train(*flags)
    assert exit_.value.code == 2
    assert flags[0] in capsys.readouterr().err


def test_the_lr_help_names_the_default_peak_of_the_noam_schedule(capsys):
    """docs/training.md: --lr's default is the factor's peak, copy 0.00884 (the Noam peak of the task's d_model,
    factor and warm-up)."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "copy", "--help"])
    assert "0.00884" in capsys.readouterr().out


def test_a_number_flag_reads_its_kind_and_names_what_it_expected():
    """number: ``kind(text)`` when ``accepts`` it; else the error ``expected {what}, got ...``."""
    parse = number(int, "a positive int", lambda v: v > 0)
    assert parse("3") == 3 and isinstance(parse("3"), int)
    with pytest.raises(argparse.ArgumentTypeError) as error:
        parse("x")
    assert str(error.value) == "expected a positive int, got 'x'"
    with pytest.raises(argparse.ArgumentTypeError) as error:
        parse("0")
    assert str(error.value) == "expected a positive int, got 0"


def test_the_resumed_message_names_a_restart_only_when_there_was_one():
    assert resumed_message("runs/a", 12) == "resumed from runs/a at step 12"
    assert resumed_message("runs/a", 12, restart=0) == "restart 0: resumed from runs/a at step 12"


def test_a_checkpoint_is_described_by_what_it_says(tmp_path):
    """describe_checkpoint: `` (step 600 of train copy)``, less when the checkpoint says less."""
    from transformer import make_model

    model = make_model(7, 7, N=1, d_model=8, d_ff=16, h=2, dropout=0.0)
    assert describe_checkpoint(str(tmp_path / "none")) == ""
    save_checkpoint(tmp_path / "a", model, trainer_state={"step": 600}, metadata={"task": "copy"})
    assert describe_checkpoint(str(tmp_path / "a")) == " (step 600 of train copy)"
    save_checkpoint(tmp_path / "b", model, metadata={"task": "copy"})
    assert describe_checkpoint(str(tmp_path / "b")) == " (train copy)"
    save_checkpoint(tmp_path / "c", model, trainer_state={"step": 5})
    assert describe_checkpoint(str(tmp_path / "c")) == " (step 5)"


def test_the_data_flags_of_train_lm_take_their_documented_values(capsys):
    """train lm: --tokenizer bpe or char (unset: bpe), --min-frequency a positive int, --encoding-errors strict
    (the default) or replace."""
    args = build_parser().parse_args(["train", "lm", "--text", "x.txt"])
    assert (args.tokenizer, args.min_frequency, args.encoding_errors) == (None, None, "strict")
    args = build_parser().parse_args(
        ["train", "lm", "--text", "x.txt", "--tokenizer", "char", "--min-frequency", "3", "--encoding-errors",
         "replace"]
    )  # fmt: skip
    assert (args.tokenizer, args.min_frequency, args.encoding_errors) == ("char", 3, "replace")
    for flags in (["--tokenizer", "wordpiece"], ["--min-frequency", "0"], ["--encoding-errors", "ignore"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["train", "lm", "--text", "x.txt", *flags])
        assert flags[0] in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["train", "translate", "--valid", "v.tsv"], "the following arguments are required: --train"),
        (["train", "translate", "--train", "t.tsv"], "the following arguments are required: --valid"),
        (["train", "lm"], "the following arguments are required: --text"),
        (["generate", "hello"], "one of the arguments --checkpoint --model is required"),
    ],
)
def test_a_required_flag_left_out_is_named_and_exits_2(argv, named, capsys, tmp_path, monkeypatch):
    """`train translate` needs `--train` and `--valid`, `train lm` needs `--text` (unless `--resume` reads them from
    the checkpoint: checked when the command runs, before anything is written), `generate` `--checkpoint` or
    `--model`: leaving one out is argparse's one-line usage error naming it, exit status 2."""
    from transformer.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert not list(tmp_path.iterdir())  # nothing written
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err
