"""SIGTERM (what Slurm and Kubernetes send before they kill a job) ends ``typed-transformer train`` as Ctrl-C does: a
checkpoint of the current step is saved first, the command exits 143, and ``--resume`` continues exactly (issue 43).
The runs use ``--eval-every 0``: without the handler nothing at all would be on disk."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading

import pytest
import torch
from run_safety_helpers import tiny_trainer

from transformer.checkpoint import load_checkpoint
from transformer.training import TrainingInterrupted

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _train(out, steps, *extra):
    return [
        sys.executable,
        "-m",
        "transformer",
        "train",
        "copy",
        "--steps",
        str(steps),
        "--eval-every",
        "0",
        "--eval-examples",
        "2",
        "--batch-size",
        "8",
        "--seed",
        "5",
        "--out",
        str(out),
        *extra,
    ]


def _env():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}


def _sigterm_after_steps(cmd, steps):
    """Start ``cmd`` (SIGTERM at its default, as a batch job has it), send SIGTERM once the progress bar shows
    ``steps`` steps done, return (exit status, stderr)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    err, seen = bytearray(), threading.Event()

    def read():
        for chunk in iter(lambda: proc.stderr.read1(4096), b""):
            err.extend(chunk)
            done = [int(n) for n in re.findall(rb"\| *(\d+)/100000", bytes(err))]
            if done and max(done) >= steps:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert seen.wait(180), bytes(err).decode(errors="replace")[-3000:]
    proc.send_signal(signal.SIGTERM)
    proc.stdout.read()
    proc.wait(120)
    reader.join(30)
    return proc.returncode, bytes(err).decode(errors="replace")


def test_sigterm_saves_the_current_step_exits_143_and_the_run_resumes_exactly(tmp_path):
    out = tmp_path / "run"
    code, err = _sigterm_after_steps(_train(out, 100000), steps=2)
    assert code == 143, err[-3000:]
    step = load_checkpoint(out).trainer_state["step"]
    assert step >= 2
    assert err.strip().splitlines()[-1] == (
        f"typed-transformer train: interrupted by SIGTERM at step {step}: the checkpoint in {out} holds step {step}; "
        f"continue it with: typed-transformer train copy --resume --out {out}"
    )
    assert "interrupted by SIGTERM: saving at the end of this step (Ctrl-C again to stop at once)" in err
    assert "Traceback" not in err
    # resumed to step + 3, the run is the straight one's: the same losses, step by step, and the same weights
    last = step + 3
    resumed = subprocess.run(_train(out, last, "--resume", "--no-progress"), capture_output=True, text=True, env=_env())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    straight_dir = tmp_path / "straight"
    straight = subprocess.run(_train(straight_dir, last, "--no-progress"), capture_output=True, text=True, env=_env())
    assert straight.returncode == 0, straight.stderr[-3000:]
    a, b = load_checkpoint(out), load_checkpoint(straight_dir)
    assert a.trainer_state["step"] == b.trainer_state["step"] == last
    assert a.trainer_state["history"]["train_loss"] == b.trainer_state["history"]["train_loss"]
    theirs = b.model.state_dict()
    for name, value in a.model.state_dict().items():
        assert torch.equal(value, theirs[name]), name


@pytest.fixture
def sigterm_default():
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGTERM, previous)


def _sigterm_at(factory, batch_index, times=1):
    def batches(generator):
        for i, batch in enumerate(factory(generator)):
            if i == batch_index:
                for _ in range(times):
                    os.kill(os.getpid(), signal.SIGTERM)
            yield batch

    return batches


def test_the_trainer_takes_sigterm_at_the_step_boundary_and_gives_it_back(tmp_path, sigterm_default):
    trainer = tiny_trainer(steps=6)
    trainer.config.out_dir = str(tmp_path / "ck")
    trainer.make_batches = _sigterm_at(trainer.make_batches, 2)  # while step 3 draws its batch
    with pytest.raises(TrainingInterrupted) as info:
        trainer.train()
    assert info.value.step == 3 and info.value.signum == signal.SIGTERM
    assert str(info.value) == f"interrupted by SIGTERM at step 3: the checkpoint in {tmp_path / 'ck'} holds step 3"
    assert load_checkpoint(tmp_path / "ck").trainer_state["step"] == 3
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored


def test_a_sigterm_handler_of_the_callers_own_is_left_alone(tmp_path):
    heard = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: heard.append(signum))
    try:
        trainer = tiny_trainer(steps=4)
        trainer.make_batches = _sigterm_at(trainer.make_batches, 1)
        trainer.train()  # not stopped: the caller's handler took the signal
        assert trainer.step == 4 and heard == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_second_sigterm_still_saves_at_the_step_boundary(tmp_path, sigterm_default):
    """Under Slurm a rank hears SIGTERM twice (from Slurm, and forwarded by torchrun): the second changes nothing."""
    trainer = tiny_trainer(steps=6)
    trainer.config.out_dir = str(tmp_path / "ck")
    trainer.make_batches = _sigterm_at(trainer.make_batches, 2, times=2)
    with pytest.raises(TrainingInterrupted) as info:
        trainer.train()
    assert info.value.step == 3 and info.value.signum == signal.SIGTERM
    assert load_checkpoint(tmp_path / "ck").trainer_state["step"] == 3
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_ctrl_c_after_sigterm_stops_at_once(tmp_path, sigterm_default):
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        trainer = tiny_trainer(steps=6)
        trainer.config.out_dir = str(tmp_path / "ck")
        real = trainer.make_batches

        def batches(generator):
            for i, batch in enumerate(real(generator)):
                if i == 2:
                    os.kill(os.getpid(), signal.SIGTERM)
                    os.kill(os.getpid(), signal.SIGINT)
                yield batch

        trainer.make_batches = batches
        with pytest.raises(KeyboardInterrupt) as info:
            trainer.train()
        assert not isinstance(info.value, TrainingInterrupted) and not (tmp_path / "ck").exists()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, previous)
