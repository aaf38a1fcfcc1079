"""`--help`: "A resumed run keeps its checkpoint's schedule unless one of these [--warmup, --lr, --lr-factor] is
given" -- each of the three alone, and the pairs, on a resume: what it sets changes, what it does not set stays the
checkpoint's, and the optimizer's learning rate at the resumed step is the new schedule's (blind review of issue 31:
a resume that ignored ``--warmup`` given alone survived every test)."""

from __future__ import annotations

import json
import shutil

import pytest

from transformer.cli import main
from transformer.training import NoamSchedule, noam_factor

D_MODEL = 64  # the copy task's default model width
SAVED_PEAK, SAVED_WARMUP = 0.004, 10
SAVED_FACTOR = noam_factor(SAVED_PEAK, D_MODEL, SAVED_WARMUP)


def _argv(out, steps: int) -> list[str]:
    return ["train", "copy", "--steps", str(steps), "--out", str(out), "--no-progress", "--eval-examples", "2"] + [
        "--batch-size",
        "8",
    ]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A two-step run with peak 0.004 and warm-up 10 (factor SAVED_FACTOR)."""
    out = tmp_path_factory.mktemp("schedule") / "run"
    assert main([*_argv(out, 2), "--lr", str(SAVED_PEAK), "--warmup", str(SAVED_WARMUP)]) == 0
    return out


# flags given on the resume -> the (factor, warm-up) the resumed schedule must have
CASES = {
    "warmup alone": (["--warmup", "4"], (SAVED_FACTOR, 4)),
    "lr-factor alone": (["--lr-factor", "2.5"], (2.5, SAVED_WARMUP)),
    "lr alone": (["--lr", "0.001"], (noam_factor(0.001, D_MODEL, SAVED_WARMUP), SAVED_WARMUP)),
    "lr and warmup": (["--lr", "0.001", "--warmup", "4"], (noam_factor(0.001, D_MODEL, 4), 4)),
    "lr-factor and warmup": (["--lr-factor", "2.5", "--warmup", "30"], (2.5, 30)),
    "none": ([], (SAVED_FACTOR, SAVED_WARMUP)),
    "the saved warm-up again": (["--warmup", str(SAVED_WARMUP)], (SAVED_FACTOR, SAVED_WARMUP)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_schedule_flag_on_a_resume_sets_what_it_names_and_keeps_the_rest(case, trained, tmp_path, capsys):
    flags, (factor, warmup) = CASES[case]
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    capsys.readouterr()
    assert main([*_argv(out, 3), "--resume", *flags]) == 0
    printed = capsys.readouterr().out
    state = json.loads((out / "state.json").read_text())
    saved = state["scheduler"]["lr_lambdas"][0]
    assert (saved["factor"], saved["warmup"]) == (pytest.approx(factor), warmup)
    # the learning rate used for step 3 (saved after it) is the new schedule's, not the checkpoint's
    expected = NoamSchedule(D_MODEL, factor, warmup)
    assert state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(expected(3))
    changed = (factor, warmup) != (SAVED_FACTOR, SAVED_WARMUP)
    assert ("learning rate changed on resume" in printed) == changed
    if changed:
        assert f"warm-up {SAVED_WARMUP} -> {warmup}" in printed
