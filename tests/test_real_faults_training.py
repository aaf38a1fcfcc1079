"""Real faults on every write path of training and checkpoints (issue 31): a small tmpfs that is really full, at the
first save and at a later one; a read-only remount; a process killed with SIGKILL while it writes a checkpoint.

The promise (docs/troubleshooting.md, ``transformer.cli.errors``): one line naming the path and the cause (ENOSPC,
EROFS), exit status 3 for a save that fails during a run (2 for an ``--out`` found unwritable before training),
nothing left behind, the previous checkpoint intact and loadable, and the next run resumes from it. A simulated
``OSError`` could not find that safetensors' writer raises its own ``SafetensorError`` on a full disk; these are the
real thing (skipped with the reason where the machine cannot mount a tmpfs).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from real_faults import fill, make_read_only, make_writable, small_disk, snapshot
from run_safety_helpers import tiny_trainer

from transformer.checkpoint import load_checkpoint, save_checkpoint
from transformer.cli import main
from transformer.common.output_dirs import OutputWriteError

ROOM = 64 * 1024  # what a filled disk keeps free: room for --out's write test, never for a checkpoint
COPY = ["train", "copy", "--steps", "2", "--eval-every", "0", "--no-progress", "--eval-examples", "2"]
REPO = Path(__file__).resolve().parents[1]


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _left_on(disk: Path) -> list[str]:
    """Every entry the disk holds besides the ballast (directories included: a leftover temporary one counts)."""
    return sorted(str(p.relative_to(disk)) for p in disk.rglob("*") if p.name != ".ballast")


# ---------------------------------------------------------------------------- the train command: a full disk
def test_a_full_disk_at_the_first_save_is_one_line_exit_3_and_leaves_nothing(tmp_path, capsys):
    with small_disk(tmp_path, 4096) as disk:
        fill(disk, ROOM)
        out = disk / "run"
        assert main([*COPY, "--out", str(out)]) == 3
        line = _one_line(capsys.readouterr().err)
        assert line.startswith(
            f"typed-transformer train: error: cannot write the checkpoint to {out}: No space left on device (ENOSPC)"
        ), line
        assert line.endswith("there was no checkpoint there before, and nothing was left behind"), line
        assert _left_on(disk) == []


def test_a_full_disk_at_a_later_save_keeps_the_previous_checkpoint_and_the_next_run_resumes(tmp_path, capsys):
    with small_disk(tmp_path, 8192) as disk:
        out = disk / "run"
        assert main([*COPY, "--out", str(out)]) == 0
        capsys.readouterr()
        before, entries = snapshot(disk), _left_on(disk)
        ballast = fill(disk, ROOM)
        resumed = [*COPY[:3], "4", *COPY[4:], "--eval-every", "1", "--out", str(out), "--resume"]
        assert main(resumed) == 3
        line = _one_line(capsys.readouterr().err)
        assert f"cannot write the checkpoint to {out}: No space left on device (ENOSPC)" in line, line
        assert line.endswith(f"the previous checkpoint in {out} (step 2) is intact"), line
        assert snapshot(disk) == before and _left_on(disk) == entries
        assert load_checkpoint(out).trainer_state["step"] == 2
        ballast.unlink()
        assert main(resumed) == 0
        assert load_checkpoint(out).trainer_state["step"] == 4


# ---------------------------------------------------------------------------- a read-only remount
def test_a_read_only_disk_is_one_line_and_the_checkpoint_on_it_stays(tmp_path, capsys):
    """Before training, ``train`` finds ``--out`` unwritable (exit 2); a remount during the run fails the save itself
    (``Trainer.save``, which the train commands call): one sentence naming the path and EROFS, nothing changed."""
    with small_disk(tmp_path, 4096) as disk:
        trainer = tiny_trainer(steps=2)
        trainer.config.out_dir = str(disk / "run")
        trainer.train()
        before = snapshot(disk)
        make_read_only(disk)
        try:
            with pytest.raises(OutputWriteError) as info:
                trainer.save(str(disk / "run"))
            assert str(info.value) == (
                f"cannot write the checkpoint to {disk / 'run'}: Read-only file system (EROFS); "
                f"the previous checkpoint in {disk / 'run'} (step 2) is intact"
            )
            with pytest.raises(OutputWriteError, match=r"Read-only file system \(EROFS\); there was no checkpoint"):
                save_checkpoint(disk / "new", trainer.model)
            assert main([*COPY, "--out", str(disk / "run"), "--resume"]) == 2
            line = _one_line(capsys.readouterr().err)
            assert f"--out {disk / 'run'}: cannot write in {disk}: Read-only file system (EROFS)" in line, line
            assert snapshot(disk) == before
            assert load_checkpoint(disk / "run").trainer_state["step"] == 2
        finally:
            make_writable(disk)


@pytest.mark.parametrize("first", [True, False], ids=["first save", "later save"])
@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_every_checkpoint_writer_says_a_real_fault_in_one_sentence(tmp_path, fault, first):
    """``save_checkpoint`` with and without a training state (the tensors go through safetensors' own writer):
    the sentence names the path and the cause, what was there is intact, nothing is left."""
    cause = "No space left on device (ENOSPC)" if fault == "full" else "Read-only file system (EROFS)"
    trainer = tiny_trainer(steps=1)
    trainer.train()
    with small_disk(tmp_path, 4096) as disk:
        target = disk / "ck"
        if not first:
            save_checkpoint(target, trainer.model, trainer_state={"step": 1})
        before, entries = snapshot(disk), _left_on(disk)
        fill(disk, 8192) if fault == "full" else make_read_only(disk)  # room for config.json, not the weights
        try:
            for state in (None, trainer.state()):
                with pytest.raises(OutputWriteError) as info:
                    save_checkpoint(target, trainer.model, trainer_state=state)
                message = str(info.value)
                assert message.startswith(f"cannot write the checkpoint to {target}: {cause}"), message
                kept = f"the previous checkpoint in {target} (step 1) is intact" if not first else "nothing was left"
                assert kept in message and "\n" not in message, message
                assert snapshot(disk) == before and _left_on(disk) == entries
        finally:
            if fault == "read-only":
                make_writable(disk)
        if not first:
            assert load_checkpoint(target).trainer_state == {"step": 1}


def test_a_bad_state_on_a_full_disk_is_named_for_what_it_is_not_as_a_full_disk(tmp_path):
    """Only a writer's error is read from the disk: a value the checkpoint cannot hold stays a ``TypeError``."""
    trainer = tiny_trainer(steps=1)
    with small_disk(tmp_path, 1024) as disk:
        fill(disk, 256 * 1024)  # room for the weights, not for the state's 4 MiB
        with pytest.raises(TypeError, match="cannot store a object at .bad in a checkpoint"):
            save_checkpoint(disk / "ck", trainer.model, trainer_state={"bad": object(), "big": torch.zeros(1 << 20)})
        assert _left_on(disk) == []


# ---------------------------------------------------------------------------- sharded (FSDP) checkpoints
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_0_of_1(*argv: str) -> subprocess.CompletedProcess:
    """``python -m transformer ARGV`` as the one rank of a torchrun job (torchrun's environment, without torchrun)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    env.update(LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    return subprocess.run(
        [sys.executable, "-m", "transformer", *argv], env=env, capture_output=True, text=True, timeout=240, cwd=REPO
    )


def test_a_sharded_checkpoint_and_its_consolidation_on_a_full_disk_are_one_line_exit_3(tmp_path, capsys):
    """The sharded (FSDP) checkpoint of ``train --strategy fsdp`` (DCP's writer reports a full disk as a
    ``RuntimeError`` without an errno) and ``consolidate`` (its only write is the consolidated checkpoint)."""
    with small_disk(tmp_path, 8192) as disk:
        out = disk / "run"
        fsdp = [*COPY, "--strategy", "fsdp", "--out", str(out)]
        first = _rank_0_of_1(*fsdp)
        assert first.returncode == 0, first.stderr[-3000:]
        before, entries = snapshot(disk), _left_on(disk)
        ballast = fill(disk, ROOM)
        later = _rank_0_of_1(*fsdp[:3], "3", *fsdp[4:], "--resume")
        assert later.returncode == 3, later.stderr[-3000:]
        line = _one_line(later.stderr)
        assert f"cannot write the sharded checkpoint to {out}: No space left on device (ENOSPC)" in line, line
        assert line.endswith(f"the previous checkpoint in {out} (step 2) is intact"), line
        assert snapshot(disk) == before and _left_on(disk) == entries
        assert main(["consolidate", str(out), str(disk / "full")]) == 3
        line = _one_line(capsys.readouterr().err)
        assert line.startswith(
            f"typed-transformer consolidate: error: cannot write the checkpoint to {disk / 'full'}: "
            "No space left on device (ENOSPC)"
        ), line
        assert line.endswith("nothing was left behind") and _left_on(disk) == entries
        ballast.unlink()
        assert main(["consolidate", str(out), str(disk / "full")]) == 0
        assert load_checkpoint(disk / "full").model is not None


# ---------------------------------------------------------------------------- SIGKILL mid-save
_SAVER = """
import sys, torch
sys.path.insert(0, {tests!r})
from run_safety_helpers import tiny_trainer
from transformer.checkpoint import save_checkpoint
trainer = tiny_trainer(steps=4)
trainer.train(2)
trainer.save({out!r})
print("saved", flush=True)
trainer.train(3)
state = trainer.state()
state["ballast"] = torch.ones(64 * 1024 * 1024)  # 256 MiB: a save long enough to be killed in
save_checkpoint({out!r}, trainer.model, trainer_state=state)
print("finished", flush=True)
"""


def test_a_process_killed_mid_save_leaves_the_previous_checkpoint_and_the_next_run_resumes_from_it(tmp_path):
    out = tmp_path / "ck"
    code = _SAVER.format(tests=str(Path(__file__).parent), out=str(out))
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert child.stdout.readline().strip() == "saved"
        before = snapshot(out)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # kill it while it writes the new checkpoint's state tensors
            writing = list(tmp_path.glob("ck.tmp-*/model.safetensors"))  # the state tensors come next
            if writing:
                break
            time.sleep(0.001)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert writing and child.returncode == -signal.SIGKILL, "the child finished before it could be killed"
    assert list(tmp_path.glob("ck.tmp-*")), "the kill left no half-written save (it came too late)"
    assert snapshot(out) == before
    assert load_checkpoint(out).trainer_state["step"] == 2
    resumed = tiny_trainer(steps=4)
    resumed.resume(str(out))
    resumed.config.out_dir = str(out)
    resumed.train()
    straight = tiny_trainer(steps=4)
    straight.train()
    # another process: the same steps up to the order of float sums (the weights of k_proj.bias, whose gradient is
    # zero in exact arithmetic, are Adam-normalised rounding noise; the losses are not)
    assert [step for step, _ in resumed.history.train_loss] == [1, 2, 3, 4]
    assert [loss for _, loss in resumed.history.train_loss] == pytest.approx(
        [loss for _, loss in straight.history.train_loss], rel=1e-5
    )
    assert not list(tmp_path.glob("ck.tmp-*")), "the next save removes what the killed one left"
    assert load_checkpoint(out).trainer_state["step"] == 4
