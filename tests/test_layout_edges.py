"""Edge values of logic the layout merged (survivors of the blind review tests/mutation/catalog/blind_layout_models.py):
a fraction flag at its closed bound, and the newest of several copies an interrupted save left aside."""

from __future__ import annotations

import os
import time

import pytest

from transformer.checkpoint import find_checkpoint
from transformer.cli.arguments import fraction
from transformer.cli.parser import build_parser


@pytest.mark.parametrize(
    "argv, dest",
    [
        (["train", "lm", "--text", "a.txt", "--dropout", "0"], "dropout"),
        (["train", "lm", "--text", "a.txt", "--valid-fraction", "0"], "valid_fraction"),
        (["train", "translate", "--train", "a.tsv", "--valid", "b.tsv", "--label-smoothing", "0"], "label_smoothing"),
        (["train", "translate", "--train", "a.tsv", "--valid", "b.tsv", "--dropout", "0.0"], "dropout"),
    ],
)
def test_a_fraction_flag_takes_zero_as_help_says_its_range_is_0_to_1(argv, dest):
    assert getattr(build_parser().parse_args(argv), dest) == 0.0


def test_the_fraction_type_is_closed_at_0_and_open_at_1():
    import argparse

    assert fraction("0") == 0.0 and fraction("0.999") == 0.999
    for bad in ("1", "1.0", "-0.01", "nan", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            fraction(bad)


def _checkpoint(path: str, step: int, mtime: float) -> None:
    os.makedirs(path)
    with open(os.path.join(path, "meta.json"), "w") as f:
        f.write(f'{{"step": {step}}}')
    os.utime(path, (mtime, mtime))


def test_of_several_copies_left_aside_the_newest_is_the_checkpoint(tmp_path):
    """Each interrupted save leaves the previous checkpoint aside (``out.old-*``); with the checkpoint itself missing,
    resume and load take the newest copy, never an older step."""
    out = str(tmp_path / "run")
    now = time.time()
    _checkpoint(out + ".old-b", step=100, mtime=now - 300)  # names sort against mtimes: the name says nothing
    _checkpoint(out + ".old-a", step=300, mtime=now - 10)
    _checkpoint(out + ".old-c", step=200, mtime=now - 100)
    assert find_checkpoint(out) == out + ".old-a"
    os.utime(out + ".old-b", (now, now))
    assert find_checkpoint(out) == out + ".old-b"
