"""Never silently wrong (issue 20), in one process: a full or read-only disk is one sentence, leftovers of interrupted
saves are removed only when provably leftovers, one rule finds a checkpoint, a new run never replaces a checkpoint
unasked."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
import torch
from run_safety_helpers import tiny_trainer

import transformer as T
import transformer.checkpoint.save as checkpoint_save
import transformer.common.output_dirs as output_dirs
from transformer.checkpoint import (
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from transformer.common.output_dirs import OutputWriteError, make_temp_dir, remove_stale_temps
from transformer.tasks import CopyTask
from transformer.training import (
    Trainer,
)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# ---------------------------------------------------------------------------- disk full, read-only
def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_during_a_save_is_one_sentence_and_the_previous_checkpoint_stays(tmp_path, monkeypatch):
    trainer = tiny_trainer(steps=2)
    trainer.config.out_dir = str(tmp_path / "ck")
    trainer.train()
    before = {name: (tmp_path / "ck" / name).read_bytes() for name in os.listdir(tmp_path / "ck")}
    monkeypatch.setattr(checkpoint_save, "save_file", _enospc)  # the training state's tensors
    with pytest.raises(OutputWriteError) as info:
        trainer.save(str(tmp_path / "ck"))
    message = str(info.value)
    assert message.startswith(
        f"cannot write the checkpoint to {tmp_path / 'ck'}: No space left on device (ENOSPC); it needs about "
    )
    assert " is free there; the previous checkpoint in " in message and "(step 2) is intact" in message
    needed = sum(p.numel() * 4 for p in trainer.model.state_dict().values())
    assert f"needs about {output_dirs.human_bytes(needed)}" not in message  # the optimizer state counts too
    assert info.value.errno == errno.ENOSPC and "\n" not in message
    assert {name: (tmp_path / "ck" / name).read_bytes() for name in os.listdir(tmp_path / "ck")} == before
    assert sorted(os.listdir(tmp_path)) == ["ck"]
    monkeypatch.setattr(
        output_dirs.tempfile,
        "mkdtemp",
        lambda *a, **k: (_ for _ in ()).throw(OSError(errno.EROFS, "Read-only file system")),
    )
    with pytest.raises(
        OutputWriteError,
        match=r"cannot write the checkpoint to .*: Read-only file system \(EROFS\); "
        r"the previous checkpoint .* is intact$",
    ):
        save_checkpoint(tmp_path / "ck", trainer.model)


def test_a_full_disk_while_writing_a_token_store_is_one_sentence(tmp_path, monkeypatch):
    from transformer.data import token_store

    monkeypatch.setattr(token_store.np, "save", _enospc)
    with pytest.raises(
        OutputWriteError,
        match=r"^cannot write the token store .*/store: No space left on device "
        r"\(ENOSPC\); nothing was left behind",
    ):
        token_store.write_token_store(tmp_path / "store", [[1, 2, 3], [4]], vocab_size=10)
    assert os.listdir(tmp_path) == []


class _FillsUp:
    """A file whose disk fills up after ``room`` bytes."""

    def __init__(self, file, room: int) -> None:
        self.file, self.room = file, room

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.file.write(data)

    def close(self) -> None:
        self.file.close()


def test_a_disk_that_fills_up_while_the_ids_are_written_is_one_sentence(tmp_path):
    from transformer.data import token_store

    with pytest.raises(
        OutputWriteError,
        match=r"^cannot write the token store .*/store: No space left on device "
        r"\(ENOSPC\); nothing was left behind",
    ) as info:
        with token_store.TokenStoreWriter(tmp_path / "store", vocab_size=10) as writer:
            writer.file = _FillsUp(writer.file, room=8)
            writer.add([1, 2, 3])  # 3 bytes (uint8 ids)
            writer.add([4, 5, 6, 7, 8, 9])  # 6 more: the disk is full
    assert "\n" not in str(info.value)
    assert os.listdir(tmp_path) == []


def test_the_cli_says_a_full_disk_in_one_line_exit_3(tmp_path, monkeypatch, capsys):
    from transformer.cli import main

    calls = []
    real = checkpoint_save.save_file

    def second_save_fails(*args, **kwargs):
        calls.append(1)
        return _enospc() if len(calls) == 2 else real(*args, **kwargs)

    monkeypatch.setattr(checkpoint_save, "save_file", second_save_fails)
    out = tmp_path / "run"
    code = main(
        [
            "train",
            "copy",
            "--steps",
            "4",
            "--eval-every",
            "2",
            "--out",
            str(out),
            "--no-progress",
            "--eval-examples",
            "2",
        ]
    )
    err = capsys.readouterr().err
    assert code == 3 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"typed-transformer train: error: cannot write the checkpoint to {out}: No space left on device" in err
    assert f"the previous checkpoint in {out} (step 2) is intact" in err
    assert load_checkpoint(out).trainer_state["step"] == 2


def test_an_out_that_cannot_be_written_is_refused_before_training(tmp_path, monkeypatch, capsys):
    from transformer.cli import main

    trained = []
    monkeypatch.setattr(Trainer, "train", lambda self, *a, **k: trained.append(1))
    (tmp_path / "file").write_text("not a directory")
    assert main(["train", "copy", "--out", str(tmp_path / "file" / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert (
        f"--out {tmp_path / 'file' / 'run'}: cannot write in {tmp_path / 'file'}: {tmp_path / 'file'} is not a "
        "directory" in err
    )
    assert main(["train", "copy", "--out", str(tmp_path / "file"), "--no-progress"]) == 2
    assert f"--out {tmp_path / 'file'} exists and is not a directory" in capsys.readouterr().err
    # a read-only directory: root writes through chmod, so the refusal is planted where the write test writes
    monkeypatch.setattr(
        output_dirs.tempfile,
        "mkdtemp",
        lambda *a, **k: (_ for _ in ()).throw(PermissionError(errno.EACCES, "Permission denied")),
    )
    assert main(["train", "copy", "--out", str(tmp_path / "ro" / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"--out {tmp_path / 'ro' / 'run'}: cannot write in {tmp_path / 'ro'}: Permission denied (EACCES)" in err
    assert trained == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_out_directory_is_refused_before_training(tmp_path, capsys):  # pragma: no cover - not as root
    from transformer.cli import main

    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "ro", 0o500)
    try:
        assert main(["train", "copy", "--out", str(tmp_path / "ro" / "run"), "--no-progress"]) == 2
        assert "Permission denied (EACCES)" in capsys.readouterr().err
    finally:
        os.chmod(tmp_path / "ro", 0o700)


# ---------------------------------------------------------------------------- leftovers of interrupted saves
def test_only_provable_leftovers_of_interrupted_saves_are_removed(tmp_path):
    host = output_dirs._host()
    dead = _dead_pid()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        names = {
            "dead": f"ck.tmp-{host}-{dead}-abcd_123",
            "ours": f"ck.tmp-{host}-{os.getpid()}-abcd_123",
            "live": f"ck.tmp-{host}-{live.pid}-abcd_123",
            "other host": f"ck.tmp-{host}x-{dead}-abcd_123",
            "old pattern": "ck.tmp-abcd1234",
            "another target": f"ckpt.tmp-{host}-{dead}-abcd_123",
            "user's": f"ck.tmp-{host}-{dead}-abcd_123.bak",
        }
        for name in names.values():
            (tmp_path / name).mkdir()
            (tmp_path / name / "f").write_text("x")
        torch.manual_seed(0)
        save_checkpoint(tmp_path / "ck", T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=2))
        left = set(os.listdir(tmp_path))
        assert names["dead"] not in left
        assert left == {"ck"} | {name for key, name in names.items() if key != "dead"}
    finally:
        live.kill()
        live.wait()


def test_temporary_directories_are_named_after_their_host_and_process(tmp_path):
    path = make_temp_dir(tmp_path / "ck")
    assert os.path.basename(path).startswith(f"ck.tmp-{output_dirs._host()}-{os.getpid()}-")
    assert remove_stale_temps(tmp_path / "ck") == []  # our own: alive
    os.rmdir(path)


def test_a_token_store_write_and_a_new_run_remove_dead_leftovers(tmp_path, monkeypatch, capsys):
    from transformer.cli import main
    from transformer.data.token_store import write_token_store

    dead = f"{output_dirs._host()}-{_dead_pid()}-abcdefgh"
    (tmp_path / f"store.tmp-{dead}").mkdir()
    write_token_store(tmp_path / "store", [[1, 2]], vocab_size=5)
    assert sorted(os.listdir(tmp_path)) == ["store"]
    (tmp_path / f"run.tmp-{dead}").mkdir()
    seen = []
    monkeypatch.setattr(Trainer, "train", lambda self, *a, **k: seen.append(sorted(os.listdir(tmp_path))) or 0.0)
    monkeypatch.setattr(CopyTask, "exact_match", lambda self, model, n: 0.0)
    assert main(["train", "copy", "--steps", "1", "--out", str(tmp_path / "run"), "--eval-examples", "1"]) == 0
    assert seen == [["store"]]  # removed before training started


# ---------------------------------------------------------------------------- one rule for finding a checkpoint
def _crash_between_the_renames(path):
    """Save twice into ``path``; the second save dies after moving the first aside (the state a crash leaves)."""
    torch.manual_seed(0)
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=2)
    save_checkpoint(path, model, metadata={"version": 1})
    real_rename, calls = os.rename, []

    def rename(src, dst):
        calls.append(1)
        if len(calls) >= 2:
            raise SystemExit("killed")
        return real_rename(src, dst)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoint_save.os, "rename", rename)
        patch.setattr(checkpoint_save.shutil, "rmtree", lambda *a, **k: None)
        with pytest.raises(SystemExit):
            save_checkpoint(path, model, metadata={"version": 2})


def test_resume_and_a_torchrun_restart_find_the_copy_a_crashed_save_left_aside(tmp_path, monkeypatch):
    from transformer.distributed import World, restarted_with_checkpoint

    out = tmp_path / "ck"
    _crash_between_the_renames(out)
    aside = [name for name in os.listdir(tmp_path) if name.startswith("ck.old-")]
    assert not out.exists() and len(aside) == 1
    assert find_checkpoint(out) == str(tmp_path / aside[0])
    assert restarted_with_checkpoint(World(restart_count=1), str(out))  # the restart resumes, as --resume does
    assert not restarted_with_checkpoint(World(restart_count=0), str(out))
    assert not restarted_with_checkpoint(None, str(out))
    with pytest.warns(UserWarning, match="interrupted save"):
        assert load_checkpoint(out).metadata == {"version": 1}
    (tmp_path / "empty").mkdir()
    assert find_checkpoint(tmp_path / "empty") is None and find_checkpoint(tmp_path / "nothing") is None
    assert not restarted_with_checkpoint(World(restart_count=1), str(tmp_path / "nothing"))


# ---------------------------------------------------------------------------- --out already holds a run
def test_a_new_run_into_an_out_that_holds_a_checkpoint_is_refused_unless_asked(tmp_path, monkeypatch, capsys):
    from transformer.cli import main

    out = tmp_path / "run"
    base = ["train", "copy", "--steps", "2", "--out", str(out), "--no-progress", "--eval-examples", "2"]
    assert main(base) == 0
    capsys.readouterr()
    saved = (out / "model.safetensors").read_bytes()
    assert main([*base, "--seed", "5"]) == 2
    err = capsys.readouterr().err
    assert (
        f"--out {out} already holds a checkpoint (step 2 of train copy): continue it with --resume, or start a "
        "new run over it with --overwrite" in err
    )
    assert (out / "model.safetensors").read_bytes() == saved
    assert main([*base, "--resume", "--overwrite"]) == 2
    assert "give one of them" in capsys.readouterr().err
    assert main([*base, "--seed", "5", "--overwrite"]) == 0
    assert (out / "model.safetensors").read_bytes() != saved
    # a directory typed-transformer did not write is never replaced, --overwrite or not
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    for extra in ([], ["--overwrite"]):
        assert main(["train", "copy", "--out", str(tmp_path / "mine"), "--steps", "1", *extra]) == 2
        assert "is a directory that is not empty and holds no checkpoint" in capsys.readouterr().err
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]
    # the copy a crashed save left aside counts as the checkpoint of --out (the one rule)
    monkeypatch.chdir(tmp_path)
    _crash_between_the_renames(tmp_path / "crashed")
    assert main(["train", "copy", "--out", "crashed", "--steps", "1"]) == 2
    assert "--out crashed already holds a checkpoint" in capsys.readouterr().err
