"""Launching torchrun from the distributed tests: bounded in time (on a timeout torchrun and its workers are
stopped, found through /proc), its output kept in files (pipes could fill and block), a failure shown in full."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

LAUNCH_TIMEOUT = 240


@pytest.fixture(autouse=True)  # autouse in the test modules that import it
def restore_threads():
    previous = torch.get_num_threads()
    yield
    torch.set_num_threads(previous)


def launch(cmd: list[str], timeout: float, poll=None) -> subprocess.CompletedProcess:
    """Run ``cmd`` (a torchrun command); ``poll(proc)`` is called every 20 ms while it runs. On timeout torchrun
    gets SIGTERM (its agent stops the workers, which run in their own sessions), then its workers and it SIGKILL."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:  # pipes could fill and block
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        deadline = time.monotonic() + timeout
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                if poll is not None:
                    poll(proc)
                time.sleep(0.02)
        finally:
            if proc.poll() is None:  # ran past the deadline (or the poll raised)
                workers = worker_pids(proc.pid)
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                for pid in workers.values():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                proc.wait()
                timed_out = True
            else:
                timed_out = False
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if timed_out:
        pytest.fail(f"{' '.join(cmd[3:])} ran past {timeout:.0f} s:\n{stdout[-3000:]}\n{stderr[-6000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def torchrun(
    *args: str, nproc: int = 2, extra: tuple[str, ...] = (), timeout: float = LAUNCH_TIMEOUT
) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *extra, *args]
    return launch(cmd, timeout)


def check_ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, (
        f"torchrun failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}"
    )


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def worker_pids(parent: int) -> dict[int, int]:
    """rank -> pid of torchrun's worker processes (children of ``parent``), read from /proc."""
    found: dict[int, int] = {}
    if not os.path.isdir("/proc"):
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        for item in environ:
            if item.startswith(b"RANK="):
                found[int(item[5:])] = int(entry)
    return found
