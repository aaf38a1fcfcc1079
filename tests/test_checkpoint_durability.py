"""A checkpoint on disk survives a crash (issue 31): every file, the manifest ``meta.json`` included, is flushed
(fsync) before the rename that makes the checkpoint visible, and the directory after it; and where interrupted saves
left several copies aside, a missing checkpoint is found in the newest of them.

A power cut cannot be had in a test, so the order of the flushes and renames is recorded (``os.fsync`` and
``os.rename`` wrapped, each flushed file read back as the disk would hold it); the copies left aside are made the way
a crash between a save's two renames leaves them.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
import torch
from run_safety_helpers import tiny_trainer

from transformer.checkpoint import (
    META_FILE,
    encode_state,
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
    swap_into_place,
)
from transformer.distributed.sharded_checkpoint import dcp_directory, write_sharded_files


@pytest.fixture
def disk_events(monkeypatch):
    """``("fsync", path, bytes or None)`` and ``("rename", src, dst)`` in the order they happen."""
    events = []
    real_fsync, real_rename = os.fsync, os.rename

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        events.append(("fsync", path, open(path, "rb").read() if os.path.isfile(path) else None))
        return real_fsync(fd)

    def rename(src, dst, *args, **kwargs):
        events.append(("rename", os.fspath(src), os.fspath(dst)))
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    return events


def _check_flushed_before_published(events, target):
    """Every file that ends up in ``target`` was flushed, complete, before the rename that published it; the
    manifest names them all; the parent directory is flushed after that rename."""
    published = [i for i, e in enumerate(events) if e[0] == "rename" and e[2] == target]
    assert len(published) == 1, events
    at, tmp = published[0], events[published[0]][1]
    flushed = {e[1]: e[2] for e in events[:at] if e[0] == "fsync"}
    on_disk = sorted(
        os.path.relpath(os.path.join(root, name), target) for root, _, names in os.walk(target) for name in names
    )
    for name in on_disk:
        assert os.path.join(tmp, name) in flushed, f"{name} was not flushed before the rename"
        assert flushed[os.path.join(tmp, name)] == open(os.path.join(target, name), "rb").read(), name
    assert tmp in flushed, "the new directory's entries were not flushed before the rename"
    meta = json.loads(flushed[os.path.join(tmp, META_FILE)])
    assert sorted(meta["sha256"]) == sorted(n for n in on_disk if n != META_FILE)
    after = [e[1] for e in events[at + 1 :] if e[0] == "fsync"]
    assert os.path.dirname(target) in after, "the parent directory was not flushed after the rename"


@pytest.mark.parametrize("previous", [False, True], ids=["first save", "over a checkpoint"])
def test_every_file_and_the_manifest_are_flushed_before_the_rename_and_the_directory_after(
    tmp_path, disk_events, previous
):
    trainer = tiny_trainer(steps=1)
    trainer.train()
    target = str(tmp_path / "ck")
    if previous:
        save_checkpoint(target, trainer.model)
    disk_events.clear()
    save_checkpoint(target, trainer.model, trainer_state=trainer.state(), assets={"notes.txt": "hello"})
    _check_flushed_before_published(disk_events, target)


def test_a_sharded_checkpoints_files_and_manifest_are_flushed_before_the_rename(tmp_path, disk_events):
    """Rank 0's part of a sharded (FSDP) save: ``write_sharded_files`` then ``swap_into_place`` (the shards DCP
    wrote stand in as one file)."""
    trainer = tiny_trainer(steps=1)
    trainer.train()
    tmp, target = tmp_path / "ck.tmp-x", str(tmp_path / "ck")
    os.makedirs(dcp_directory(str(tmp)))
    with open(os.path.join(dcp_directory(str(tmp)), "__0_0.distcp"), "wb") as f:
        f.write(b"shard")
    tensors: dict[str, torch.Tensor] = {}
    encoded = encode_state({"step": 1, "rng": torch.get_rng_state()}, tensors)
    write_sharded_files(str(tmp), trainer.model, encoded, tensors, {"task": "copy"}, 1, 1)
    swap_into_place(str(tmp), target)
    _check_flushed_before_published(disk_events, target)


# ---------------------------------------------------------------------------- copies left aside
def _left_aside(tmp_path, step, name, when):
    """What a crash between a save's two renames leaves: the checkpoint of ``step`` renamed to ``ck.old-NAME``,
    written at time ``when``."""
    trainer = tiny_trainer(steps=1)
    source = tmp_path / f"step{step}"
    save_checkpoint(source, trainer.model, trainer_state={"step": step})
    aside = tmp_path / f"ck.old-{name}"
    os.rename(source, aside)
    os.utime(aside, (when, when))
    return aside


def test_a_missing_checkpoint_is_found_in_the_newest_copy_left_aside(tmp_path):
    now = time.time()
    # names in the opposite order to their times, so that neither name order nor the first found is the newest
    _left_aside(tmp_path, 1, "zzzz", now - 300)
    newest = _left_aside(tmp_path, 3, "aaaa", now - 100)
    _left_aside(tmp_path, 2, "mmmm", now - 200)
    incomplete = _left_aside(tmp_path, 4, "bbbb", now - 10)  # newer still, but without its manifest
    os.remove(incomplete / META_FILE)
    target = tmp_path / "ck"
    assert find_checkpoint(target) == str(newest)
    with pytest.warns(UserWarning, match=f"checkpoint {target} is missing; using {newest}"):
        assert load_checkpoint(target).trainer_state == {"step": 3}
    shutil.rmtree(newest)
    assert find_checkpoint(target) == str(tmp_path / "ck.old-mmmm")  # then the next newest
