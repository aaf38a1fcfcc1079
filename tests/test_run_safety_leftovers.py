"""``remove_stale_temps``: "Never touches a directory of a live process" -- including a live process of another
user, whose existence ``os.kill(pid, 0)`` reports as PermissionError, not as ProcessLookupError (blind review of
issue 31: treating that error as "dead" survived every test).

A real PermissionError needs a process this one may not signal: pid 1 (root's init) when the tests run as another
user. As root (CI) every signal is permitted, so there the same error is simulated, the one place it must be."""

from __future__ import annotations

import errno
import os

import pytest

from transformer.common import output_dirs
from transformer.common.output_dirs import remove_stale_temps


def _kill_raises(monkeypatch, pid: int, error: OSError) -> None:
    """``os.kill(pid, ...)`` raises ``error``; any other pid is signalled for real."""
    real_kill = os.kill

    def kill(target, signal):
        if target == pid:
            raise error
        return real_kill(target, signal)

    monkeypatch.setattr(os, "kill", kill)


def _leftover(tmp_path, pid: int) -> str:
    name = f"ck.tmp-{output_dirs._host()}-{pid}-abcd_123"
    (tmp_path / name).mkdir()
    (tmp_path / name / "f").write_text("x")
    return name


def test_the_leftover_of_another_users_live_process_is_kept(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pid = 1  # root's init: alive, and not ours to signal (a real PermissionError)
        with pytest.raises(PermissionError):
            os.kill(pid, 0)
    else:
        pid = 999_999_9  # simulated: as root the kernel permits every signal
        _kill_raises(monkeypatch, pid, PermissionError(errno.EPERM, "Operation not permitted"))
    name = _leftover(tmp_path, pid)
    assert remove_stale_temps(tmp_path / "ck") == []
    assert (tmp_path / name / "f").read_text() == "x"


def test_the_leftover_of_a_process_that_no_longer_exists_is_removed(tmp_path, monkeypatch):
    pid = 999_999_8
    _kill_raises(monkeypatch, pid, ProcessLookupError(errno.ESRCH, "No such process"))
    name = _leftover(tmp_path, pid)
    assert remove_stale_temps(tmp_path / "ck") == [str(tmp_path / name)]
    assert not (tmp_path / name).exists()
