"""Real faults for the write-path tests: a small tmpfs that fills up, a read-only remount, a child killed mid-write.

A simulated ``OSError`` cannot find a writer that raises its own exception type (safetensors' Rust writer raises
``SafetensorError`` on ENOSPC), so these fixtures give the real thing wherever the machine allows it: CI runs as root
on Linux, where ``mount -t tmpfs`` works. Elsewhere each test is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Why a real-fault test cannot run here, or None where it can.
_WHY_NOT: str | None = None


def _probe() -> str | None:
    if os.name != "posix" or not Path("/proc/mounts").exists():
        return "real faults need Linux (tmpfs mounts)"
    if os.geteuid() != 0:
        return "real faults need root (mount -t tmpfs); CI runs as root"
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return "real faults need mount and umount on PATH"
    return None


def why_not() -> str | None:
    """The reason real faults cannot be made on this machine (None where they can); probed once per process."""
    global _WHY_NOT
    if _WHY_NOT is None:
        _WHY_NOT = _probe() or ""
    return _WHY_NOT or None


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True)


@contextlib.contextmanager
def small_disk(parent: Path, size_kib: int = 512) -> Iterator[Path]:
    """A fresh tmpfs of ``size_kib`` KiB mounted under ``parent``; unmounted (and its contents gone) on exit.

    Skips the calling test where the machine cannot mount one (not root, not Linux, or the mount refused).
    """
    reason = why_not()
    if reason:
        pytest.skip(reason)
    mount_point = Path(parent) / f"disk-{uuid.uuid4().hex[:8]}"
    mount_point.mkdir(parents=True)
    try:
        _run("mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0777", "tmpfs", str(mount_point))
    except subprocess.CalledProcessError as error:  # a container without CAP_SYS_ADMIN
        mount_point.rmdir()
        pytest.skip(f"mount -t tmpfs refused here: {error.stderr.strip() or error}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False, capture_output=True)
        with contextlib.suppress(OSError):
            mount_point.rmdir()


def fill(disk: Path, leave_bytes: int = 0) -> Path:
    """Fill ``disk`` with one ballast file until at most ``leave_bytes`` bytes are free; returns the ballast's path."""
    ballast = disk / ".ballast"
    free = shutil.disk_usage(disk).free - leave_bytes
    chunk = b"\0" * 4096
    with open(ballast, "ab") as handle:
        while free > 0:
            try:
                handle.write(chunk[: min(len(chunk), free)])
                handle.flush()
            except OSError:  # ENOSPC: the disk is as full as it gets
                break
            free = shutil.disk_usage(disk).free - leave_bytes
    return ballast


def make_read_only(disk: Path) -> None:
    """Remount a disk made by :func:`small_disk` read-only (root can still not write to it)."""
    _run("mount", "-o", "remount,ro", str(disk))


def make_writable(disk: Path) -> None:
    """Undo :func:`make_read_only`."""
    _run("mount", "-o", "remount,rw", str(disk))


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> bytes), to show that a failed write changed nothing."""
    folder = Path(folder)
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != ".ballast"
    }
