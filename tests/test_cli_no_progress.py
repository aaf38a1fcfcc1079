"""``--no-progress`` (for a log file) drops the progress bar, not the periodic loss lines: every evaluation still
prints ``step N: train loss X, eval loss Y``, the very line the bar writes above itself (issue 43)."""

from __future__ import annotations

import re

from transformer.checkpoint import load_checkpoint
from transformer.cli import main

LINE = re.compile(r"^step (\d+): train loss (\d+\.\d{4}), eval loss (\d+\.\d{4})$", re.M)


def _run(out, capsys, *extra):
    argv = ["train", "copy", "--steps", "6", "--eval-every", "2", "--batch-size", "8", "--eval-examples", "2"]
    assert main([*argv, "--seed", "3", "--out", str(out), *extra]) == 0
    return capsys.readouterr()


def test_no_progress_keeps_the_loss_line_of_every_evaluation(tmp_path, capsys):
    quiet = _run(tmp_path / "quiet", capsys, "--no-progress")
    lines = LINE.findall(quiet.out)
    assert [int(step) for step, _, _ in lines] == [2, 4, 6]
    # the values are the run's own: those its checkpoint's history holds
    history = load_checkpoint(tmp_path / "quiet").trainer_state["history"]
    train, held_out = dict(history["train_loss"]), dict(history["eval_loss"])
    for step, train_loss, eval_loss in lines:
        assert train_loss == f"{train[int(step)]:.4f}" and eval_loss == f"{held_out[int(step)]:.4f}"
    assert "tok/s" not in quiet.err and "it/s" not in quiet.err and "\r" not in quiet.err  # no bar
    # the same lines, to the digit, as the run with the bar writes above it
    with_bar = _run(tmp_path / "bar", capsys)
    assert "tok/s" in with_bar.err
    assert LINE.findall(with_bar.out) == lines
