"""Never silently wrong (issue 20), in one process: Ctrl-C saves at the step boundary and the run resumes exactly,
``--lr`` is the schedule's peak, and a training state resumes in full."""

from __future__ import annotations

import copy
import math
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from run_safety_helpers import params, shuffled_copy_batches, stateful_copy_trainer, tiny_trainer

import transformer as T
from transformer.checkpoint import (
    load_checkpoint,
)
from transformer.tasks import CopyTask
from transformer.training import (
    NoamSchedule,
    TrainingInterrupted,
    noam_factor,
)


# ---------------------------------------------------------------------------- Ctrl-C
@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler, as an interactive run has it (a job started in the background, e.g. by nohup,
    inherits SIGINT ignored, and then neither Ctrl-C nor the Trainer's handling of it applies)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _python_sigint_in_the_child():
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the child's Python then installs its own handler


def _sigint_at(factory, batch_index, times=1):
    def batches(generator):
        for i, batch in enumerate(factory(generator)):
            if i == batch_index:
                for _ in range(times):
                    os.kill(os.getpid(), signal.SIGINT)
            yield batch

    return batches


def test_ctrl_c_saves_at_the_step_boundary_and_the_run_resumes_exactly(tmp_path, python_sigint):
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    straight = tiny_trainer(steps=6, dropout=0.1, seed=3)
    straight.train()
    interrupted = tiny_trainer(steps=6, dropout=0.1, seed=3)
    interrupted.config.out_dir = str(tmp_path / "ck")
    interrupted.make_batches = _sigint_at(interrupted.make_batches, 2)  # while step 3 draws its batch
    with pytest.raises(TrainingInterrupted) as info:
        interrupted.train()
    assert isinstance(info.value, KeyboardInterrupt) and info.value.step == 3
    assert str(info.value) == f"interrupted at step 3: the checkpoint in {tmp_path / 'ck'} holds step 3"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    resumed = tiny_trainer(steps=6, dropout=0.1, seed=99)
    resumed.resume(str(tmp_path / "ck"))
    assert resumed.step == 3
    resumed.train()
    assert resumed.history.train_loss == straight.history.train_loss
    for name, value in params(straight.model).items():
        assert torch.equal(value, dict(resumed.model.named_parameters())[name].detach()), name


def test_a_second_ctrl_c_stops_at_once_without_saving(tmp_path, python_sigint):
    trainer = tiny_trainer(steps=6, eval_every=2)
    trainer.config.out_dir, trainer.config.checkpoint_every = str(tmp_path / "ck"), 2
    trainer.make_batches = _sigint_at(trainer.make_batches, 4, times=2)  # step 5's batch
    with pytest.raises(KeyboardInterrupt) as info:
        trainer.train()
    assert not isinstance(info.value, TrainingInterrupted)
    assert trainer.step == 4 and load_checkpoint(tmp_path / "ck").trainer_state["step"] == 4
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_without_the_step_boundary_ctrl_c_stops_at_once(tmp_path, python_sigint):
    trainer = tiny_trainer(steps=6)
    trainer.config.out_dir, trainer.config.interrupt_at_step_boundary = str(tmp_path / "ck"), False
    trainer.make_batches = _sigint_at(trainer.make_batches, 2)
    with pytest.raises(KeyboardInterrupt) as info:
        trainer.train()
    assert not isinstance(info.value, TrainingInterrupted) and trainer.step == 2 and not (tmp_path / "ck").exists()


def test_the_cli_exits_130_after_saving_on_ctrl_c(tmp_path, monkeypatch, capsys, python_sigint):
    from transformer.cli import main

    real = CopyTask.batches
    monkeypatch.setattr(CopyTask, "batches", lambda self, g, n: _sigint_at(lambda g: real(self, g, n), 1)(g))
    out = tmp_path / "run"
    assert main(["train", "copy", "--steps", "50", "--out", str(out), "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        f"typed-transformer train: interrupted at step 2: the checkpoint in {out} "
        f"holds step 2; continue it with: typed-transformer train copy --resume --out {out}"
    )
    assert "interrupted: saving at the end of this step (Ctrl-C again to stop at once)" in err
    assert load_checkpoint(out).trainer_state["step"] == 2


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_on_the_command_line_saves_then_exits_130(tmp_path):
    """The real thing: a SIGINT to ``typed-transformer train`` once its first checkpoint exists."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "transformer",
            "train",
            "copy",
            "--steps",
            "100000",
            "--eval-every",
            "3",
            "--batch-size",
            "8",
            "--out",
            str(out),
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_python_sigint_in_the_child,
    )
    deadline = time.monotonic() + 120
    while not (out / "meta.json").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    step = load_checkpoint(out).trainer_state["step"]
    assert f"interrupted at step {step}: the checkpoint in {out} holds step {step}" in err and step >= 3
    assert "Traceback" not in err


# ---------------------------------------------------------------------------- the learning rate
def test_noam_factor_gives_a_schedule_whose_peak_is_the_learning_rate():
    for peak, d_model, warmup in [(1e-3, 64, 200), (3e-4, 512, 4000), (0.5, 16, 2)]:
        schedule = NoamSchedule(d_model, noam_factor(peak, d_model, warmup), warmup)
        values = [schedule(step) for step in range(0, 3 * warmup + 2)]
        assert max(values) == pytest.approx(peak, rel=1e-12) and values.index(max(values)) == warmup
        assert schedule.peak == pytest.approx(peak, rel=1e-12)
    assert NoamSchedule(512, 1.0, 4000).peak == pytest.approx(512**-0.5 * 4000**-0.5)
    with pytest.raises(ValueError, match="must be a positive number, got 0"):
        noam_factor(0, 64, 10)


# ---------------------------------------------------------------------------- a resume restores the whole state
def assert_same_state(a, b, where="state"):
    """Equal in full: every tensor (dtype, shape, values), key, list element and number; NaN equals NaN."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_same_state(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_state(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert a == b and type(a) is type(b), f"{where}: {a!r} != {b!r}"


def _stateful_trainer(seed, kind):
    """A trainer whose every piece of state matters: dropout (torch's RNG), a data stream that draws from its
    generator and from Python's random (or a token-budget plan whose position lives in the generator), label
    smoothing, Adam, the Noam schedule, periodic evaluation (history)."""
    from transformer.data.token_batches import ResumableBatches

    torch.manual_seed(seed)
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=2, dropout=0.2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, NoamSchedule(16, 1.0, 3))
    task = CopyTask()
    if kind == "generator":
        batches = shuffled_copy_batches(task)
    else:
        lengths = torch.randint(2, 9, (40,), generator=torch.Generator().manual_seed(5)).tolist()

        def make_batch(indices):
            rows = [[1] + [2 + (int(i) + j) % 9 for j in range(lengths[int(i)] - 1)] for i in indices]
            width = max(len(r) for r in rows)
            ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
            return task.batch(ids, ids)

        batches = ResumableBatches(lengths, 24, make_batch, seed=5)  # the plan: part of the trainer's definition
    return stateful_copy_trainer(model, optimizer, batches, scheduler=scheduler, seed=seed)


@pytest.mark.parametrize("kind", ["generator", "token-budget plan"])
def test_a_resume_restores_the_whole_training_state(tmp_path, kind):
    """The state at the save and at the end equal an uninterrupted run's in full: step and token counters, the
    optimizer's moments and step counts, the schedule (with its factor), torch's, Python's and the data's RNG
    states (the data position), the loss histories, the last loss; and the weights."""
    random.seed(11)
    straight = _stateful_trainer(4, kind)
    straight.train(3)
    at_save = copy.deepcopy(straight.state())  # the optimizer's state_dict holds its live tensors
    straight.save(str(tmp_path / "ck"))
    straight.train()
    end = copy.deepcopy(straight.state())
    random.seed(12345)  # another process: other global RNG states, another seed
    torch.manual_seed(12345)
    resumed = _stateful_trainer(77, kind)
    resumed.resume(str(tmp_path / "ck"))
    assert_same_state(resumed.state(), at_save)
    resumed.train()
    assert_same_state(resumed.state(), end)
    assert resumed.history.eval_loss and len(resumed.history.train_loss) == 6
    for name, value in params(straight.model).items():
        assert torch.equal(value, dict(resumed.model.named_parameters())[name].detach()), name
