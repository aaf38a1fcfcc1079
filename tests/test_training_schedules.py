"""Warm-up and decay (transformer/training/schedule.py, ``--lr-schedule``, ``--warmup-ratio``; issue 43): the constant,
linear and cosine schedules give transformers' learning rates (``get_constant_schedule_with_warmup``,
``get_linear_schedule_with_warmup``, ``get_cosine_schedule_with_warmup``: the oracle) at every step, the boundaries
checked by name (step 0, the end of the warm-up, the last step); a 30-step ``train lm --init`` run warms up for 3 steps
(``--warmup-ratio 0.1``, rounded up) and trains at the announced peak; a resumed run continues the schedule exactly
(the same weights and state as without the interruption), a longer ``--steps`` on resume stretches the decay and says
so; and the flags that make no sense together are refused by name."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from transformer.cli import main
from transformer.training import (
    NoamSchedule,
    WarmupDecaySchedule,
    schedule_from_state,
    use_schedule,
    warmup_steps,
)

transformers = pytest.importorskip("transformers")

ORACLES = {
    "constant": lambda opt, warmup, total: transformers.get_constant_schedule_with_warmup(opt, warmup),
    "linear": lambda opt, warmup, total: transformers.get_linear_schedule_with_warmup(opt, warmup, total),
    "cosine": lambda opt, warmup, total: transformers.get_cosine_schedule_with_warmup(opt, warmup, total),
}
SHAPES = [(3, 30), (0, 10), (10, 10), (1, 2), (200, 1000), (7, 5)]


def _rates(make_scheduler, peak_as_base: float, steps: int) -> list[float]:
    """The learning rate of each of ``steps`` optimizer steps (LambdaLR's value before the step)."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak_as_base)
    scheduler = make_scheduler(opt)
    rates = []
    for _ in range(steps):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return rates


@pytest.mark.parametrize("kind", list(ORACLES))
@pytest.mark.parametrize("warmup,total", SHAPES)
def test_each_schedule_gives_transformers_learning_rate_at_every_step(kind, warmup, total):
    peak = 3e-4
    schedule = WarmupDecaySchedule(kind, peak, warmup, total)
    ours = _rates(lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, schedule), 1.0, total + 3)
    theirs = _rates(lambda opt: ORACLES[kind](opt, warmup, total), peak, total + 3)
    assert ours == theirs  # bit for bit: the same operations in the same order
    # the boundaries, by name
    assert ours[0] == (0.0 if warmup else peak)  # step 0: nothing yet with a warm-up
    if warmup < total:
        assert ours[warmup] == pytest.approx(peak)  # the end of the warm-up: the peak
    last = {"constant": peak, "linear": peak / max(1, total - warmup)}.get(kind)
    if warmup < total and last is not None:
        assert ours[total - 1] == pytest.approx(last)  # the last step
    if kind == "cosine" and warmup < total:
        progress = (total - 1 - warmup) / max(1, total - warmup)
        assert ours[total - 1] == pytest.approx(peak * 0.5 * (1 + math.cos(math.pi * progress)))
    if kind != "constant" and warmup < total:
        assert ours[total] == 0.0  # decayed to 0 at step total


def test_the_warmup_of_a_ratio_is_rounded_up_as_transformers_rounds_it():
    assert [warmup_steps(0.1, n) for n in (30, 5, 0, 1000, 31)] == [3, 1, 0, 100, 4]
    with pytest.raises(ValueError, match="ratio must lie in"):
        warmup_steps(1.0, 10)


def test_a_schedule_is_refused_by_name_for_impossible_arguments():
    with pytest.raises(ValueError, match="decay must be one of"):
        WarmupDecaySchedule("noam", 1e-3, 1, 10)
    with pytest.raises(ValueError, match="peak learning rate must be a positive number, got 0"):
        WarmupDecaySchedule("linear", 0.0, 1, 10)
    with pytest.raises(ValueError, match="warmup=-1"):
        WarmupDecaySchedule("linear", 1e-3, -1, 10)


def test_the_schedule_travels_as_json_and_comes_back_as_its_own_class():
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    for schedule in (WarmupDecaySchedule("cosine", 2e-4, 3, 30), NoamSchedule(64, 1.5, 20)):
        scheduler = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
        saved = json.loads(json.dumps(scheduler.state_dict()))["lr_lambdas"][0]
        back = schedule_from_state(saved)
        assert type(back) is type(schedule) and vars(back) == vars(schedule)
        assert [back(s) for s in range(40)] == [schedule(s) for s in range(40)]


def test_use_schedule_takes_effect_at_the_current_step():
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, NoamSchedule(64, 1.0, 10))
    for _ in range(4):
        opt.step()
        scheduler.step()
    new = WarmupDecaySchedule("linear", 1e-3, 2, 10)
    use_schedule(scheduler, new)
    assert opt.param_groups[0]["lr"] == new(4) == scheduler.get_last_lr()[0]
    opt.step()
    scheduler.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(new(5))


# ---------------------------------------------------------------- the command line
@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from test_cli_pretrained import write_folder

    return write_folder(tmp_path_factory.mktemp("pretrained") / "model")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from test_cli_pretrained import LINES

    path = tmp_path_factory.mktemp("text") / "text.txt"
    path.write_text("\n".join(LINES * 40) + "\n")
    return str(path)


TRAIN = ["--block-len", "16", "--max-tokens", "64", "--no-progress", "--eval-every", "0"]


@pytest.fixture
def rates_used(monkeypatch):
    """The learning rate of every optimizer step the Trainer takes (read just before the step)."""
    import transformer.training.trainer as trainer_module

    used: list[float] = []
    real = trainer_module.optimizer_step

    def spy(model, optimizer, scheduler, clip_grad):
        used.append(optimizer.param_groups[0]["lr"])
        real(model, optimizer, scheduler, clip_grad)

    monkeypatch.setattr(trainer_module, "optimizer_step", spy)
    return used


def test_a_30_step_init_run_warms_up_for_3_steps_and_trains_at_the_announced_peak(
    folder, corpus, tmp_path, capsys, rates_used
):
    out = tmp_path / "run"
    assert (
        main(["train", "lm", "--init", str(folder), "--text", corpus, "--steps", "30", "--out", str(out), *TRAIN]) == 0
    )
    printed = capsys.readouterr().out
    assert "learning rate: linear schedule: 3 warm-up steps to a peak of 5e-05, then linear decay to 0 at step 30" in (
        printed
    )
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=5e-5)
    oracle = _rates(lambda o: transformers.get_linear_schedule_with_warmup(o, 3, 30), 5e-5, 30)
    del opt
    assert rates_used == oracle
    assert max(rates_used) == pytest.approx(5e-5) == rates_used[3]  # the announced peak, reached (not 15 % of it)
    assert rates_used[0] == 0.0 and rates_used[-1] == pytest.approx(5e-5 / 27)
    saved = json.loads((out / "state.json").read_text())["scheduler"]["lr_lambdas"][0]
    assert saved == {"schedule": "linear", "peak": 5e-5, "warmup": 3, "total": 30}


def test_an_init_run_on_noam_with_its_own_warmup_peaks_at_the_fine_tune_peak(
    folder, corpus, tmp_path, capsys, rates_used
):
    """``--lr-schedule noam --warmup 4`` on a fine-tune: the factor is computed for those 4 warm-up steps, so the
    rate reaches the fine-tune's peak 5e-5 at step 4 (a factor computed for the default 200 steps would peak
    sqrt(50) times higher)."""
    argv = ["train", "lm", "--init", str(folder), "--text", corpus, "--steps", "6", "--out", str(tmp_path / "run")]
    assert main([*argv, *TRAIN, "--lr-schedule", "noam", "--warmup", "4"]) == 0
    assert "4 warm-up steps to a peak of 5e-05" in capsys.readouterr().out
    assert max(rates_used) == pytest.approx(5e-5) == rates_used[4]  # the rate at step 4, before its update


@pytest.mark.parametrize(
    "flags,expected",
    [
        (["--lr-schedule", "cosine", "--lr", "1e-3", "--warmup-ratio", "0.25"], ("cosine", 1e-3, 3, 12)),
        (["--lr-schedule", "constant", "--lr", "1e-3", "--warmup", "0"], ("constant", 1e-3, 0, 12)),
        (["--lr-schedule", "linear"], ("linear", NoamSchedule(64, 1.0, 200).peak, 2, 12)),
    ],
)
def test_a_synthetic_task_trains_on_the_schedule_asked(flags, expected, tmp_path, capsys, rates_used):
    out = tmp_path / "run"
    argv = ["train", "copy", "--steps", "12", "--batch-size", "8", "--eval-examples", "2", "--no-progress"]
    assert main([*argv, "--out", str(out), *flags]) == 0
    kind, peak, warmup, total = expected
    assert rates_used == pytest.approx([WarmupDecaySchedule(kind, peak, warmup, total)(s) for s in range(12)])
    assert f"{kind} schedule: {warmup} warm-up steps to a peak of {peak:.3g}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--lr-schedule", "linear", "--lr-factor", "2"], "--lr-factor is the Noam schedule's factor"),
        (["--warmup", "0"], "--warmup 0 gives no warm-up step, and the Noam schedule divides by its warm-up"),
        (["--warmup-ratio", "0"], "--warmup-ratio 0.0 gives no warm-up step"),
    ],
)
def test_flags_that_make_no_schedule_are_refused_naming_them(flags, message, tmp_path, capsys):
    argv = ["train", "copy", "--steps", "12", "--batch-size", "8", "--out", str(tmp_path / "run"), *flags]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_warmup_and_warmup_ratio_together_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["train", "copy", "--warmup", "3", "--warmup-ratio", "0.1", "--out", str(tmp_path / "run")])
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.fixture
def interrupt_at(monkeypatch):
    """``interrupt_at(k)``: Ctrl-C (SIGINT to this process) arrives during optimizer step ``k`` of the next run, so the
    Trainer saves at the end of that step and stops (exit status 130), as a real Ctrl-C does."""
    import os
    import signal

    from transformer.training import Trainer

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, as an interactive run has
    real = Trainer.train_step
    at: list[int] = []

    def train_step(self):
        if at and self.step == at[0] - 1:
            at.clear()
            os.kill(os.getpid(), signal.SIGINT)
        return real(self)

    monkeypatch.setattr(Trainer, "train_step", train_step)
    yield at.append
    signal.signal(signal.SIGINT, previous)


def test_a_resumed_fine_tune_continues_its_schedule_exactly(folder, corpus, tmp_path, capsys, rates_used, interrupt_at):
    straight, split = tmp_path / "straight", tmp_path / "split"
    base = ["train", "lm", "--init", str(folder), "--text", corpus, *TRAIN, "--lr-schedule", "cosine", "--lr", "1e-3"]
    assert main([*base, "--steps", "8", "--out", str(straight)]) == 0
    uninterrupted = list(rates_used)
    rates_used.clear()
    interrupt_at(4)
    assert main([*base, "--steps", "8", "--out", str(split)]) == 130
    assert json.loads((split / "state.json").read_text())["step"] == 4
    assert main([*base, "--steps", "8", "--out", str(split), "--resume"]) == 0
    assert "learning rate changed" not in capsys.readouterr().out
    assert rates_used == uninterrupted == [WarmupDecaySchedule("cosine", 1e-3, 1, 8)(s) for s in range(8)]
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    states = [json.loads((d / "state.json").read_text()) for d in (straight, split)]
    for key in ("scheduler", "history", "optimizer", "step", "tokens"):
        assert states[0][key] == states[1][key], key


def test_a_longer_steps_on_resume_stretches_the_decay_and_says_so(folder, corpus, tmp_path, capsys, rates_used):
    out = tmp_path / "run"
    base = ["train", "lm", "--init", str(folder), "--text", corpus, *TRAIN, "--lr", "1e-3"]
    assert main([*base, "--steps", "4", "--out", str(out)]) == 0
    capsys.readouterr()
    rates_used.clear()
    assert main([*base, "--steps", "10", "--out", str(out), "--resume"]) == 0
    printed = capsys.readouterr().out
    assert (
        "learning rate changed on resume: linear (warm-up 1, peak 0.001, to 0 at step 4) -> linear (warm-up 1, "
        "peak 0.001, to 0 at step 10)" in printed
    )
    assert rates_used == pytest.approx([WarmupDecaySchedule("linear", 1e-3, 1, 10)(s) for s in range(4, 10)])


FUZZ_BUDGET = int(os.environ.get("TT_SCHEDULE_FUZZ_BUDGET", "60"))  # the short budget: seeds 0 .. 59


def test_the_seeded_fuzzer_finds_no_step_where_we_and_transformers_disagree():
    """``tests/differential_schedules.py`` on its short fixed-seed budget (``TT_SCHEDULE_FUZZ_BUDGET=N`` for N
    cases; the long run by hand writes benchmarks/results/differential/schedules.json): every step of every drawn
    schedule equal to transformers' bit for bit, and each one restored from its JSON state; the draws meet each kind
    and a warm-up of 0, equal to the steps and past them."""
    from differential_schedules import run_cases

    report = run_cases(transformers, range(FUZZ_BUDGET))
    assert report["disagreements"] == 0, report["disagreeing_cases"]
    assert report["cases"] == FUZZ_BUDGET and min(report["by_kind"].values()) > 0
    assert report["warmup_0"] and report["warmup_equal_to_total"] and report["warmup_past_total"]


def test_the_committed_long_run_found_no_disagreement():
    report = json.loads(
        (Path(__file__).resolve().parents[1] / "benchmarks/results/differential/schedules.json").read_text()
    )
    assert report["disagreements"] == 0 and report["cases"] >= 10000
    assert report["command"].startswith("python tests/differential_schedules.py") and report["transformers"]
    page = " ".join((Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text().split())
    assert (
        f"compared {report['cases']:,} drawn schedules, {report['steps_compared']:,} steps, with 0 disagreements"
        in page
    )
