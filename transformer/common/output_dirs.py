"""Output directories: checked before a run, write failures said in one sentence, leftovers of interrupted writes.

Checkpoints (:mod:`transformer.checkpoint`, the FSDP strategy's sharded ones) and token stores
(:mod:`transformer.data.token_store`) are written into a temporary directory beside their target, then renamed into
place. The temporary directory is named after who made it, ``TARGET.tmp-HOST-PID-XXXXXXXX`` (:func:`make_temp_dir`).
An interrupted write (a killed process, a power cut) leaves it behind; the next write to the same target removes it
when it is provably a leftover (:func:`remove_stale_temps`): made on this host by a process that no longer exists.
Anything else (another host's, a live process's, a name in any other pattern, e.g. one written by an older version)
is left alone.

A write that fails for a reason outside the program (disk full, a read-only filesystem, a quota, no permission)
raises :class:`OutputWriteError`: one sentence naming the path, what it needed and what was kept
(:func:`write_failure`). :func:`check_writable` tries a write where a run will save, before it trains.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import tempfile

__all__ = [
    "OutputWriteError",
    "WRITE_ERRNOS",
    "check_writable",
    "write_failure",
    "make_temp_dir",
    "remove_stale_temps",
    "is_write_failure",
    "human_bytes",
]

#: The errors of a write that the environment refused (``errno`` values): disk full, read-only, quota, permission.
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EFBIG})


class OutputWriteError(OSError):
    """Writing an output (a checkpoint, a token store) failed for a reason outside the program: the disk is full, the
    filesystem read-only, a quota reached, permission denied. ``str(error)`` is one sentence naming the path; what
    was there before is intact. ``errno`` is the underlying error's."""

    def __init__(self, errno_value: int | None, message: str) -> None:
        super().__init__(errno_value, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


#: How a writer written in Rust (safetensors' ``SafetensorError``, tokenizers' ``Exception``) words the OS error it
#: wraps without being an ``OSError``: ``"... No space left on device (os error 28)"``.
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def _wrapped_os_error(error: BaseException) -> OSError | None:
    """The OSError a writer that raises its own exception type words in its message (``(os error N)``, Rust's
    ``std::io::Error``), as an ``OSError`` of that errno; None when the message names none."""
    match = _RUST_OS_ERROR.search(str(error))
    if match is None:
        return None
    number = int(match[1])
    return OSError(number, os.strerror(number))


def _root_os_error(error: BaseException | None) -> OSError | None:
    """The OSError with a ``WRITE_ERRNOS`` errno that ``error`` is, was raised from, words in its message (a Rust
    writer's ``(os error N)``: safetensors raises ``SafetensorError``, not ``OSError``, on a full disk), or (torch's
    distributed checkpoint ``CheckpointException``: one failure per rank) holds; None when there is none."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        error = pending.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in WRITE_ERRNOS:
            return error
        wrapped = None if isinstance(error, OSError) else _wrapped_os_error(error)
        if wrapped is not None and wrapped.errno in WRITE_ERRNOS:
            return wrapped
        pending += [error.__cause__, error.__context__]
        failures = getattr(error, "failures", None)
        if isinstance(failures, dict):
            pending += [pair[0] if isinstance(pair, tuple) else pair for pair in failures.values()]
    return None


def _disk_refusal(path: str | None, needed: int | None) -> OSError | None:
    """What the disk under ``path`` says about a write that failed without naming an errno (PyTorch's zip writer,
    which ``torch.distributed.checkpoint`` uses, reports a full disk as ``RuntimeError: ... unexpected pos``): EROFS
    when the filesystem is mounted read-only, ENOSPC when it has less room than the ``needed`` bytes; else None."""
    if path is None:
        return None
    try:
        stats = os.statvfs(_existing_parent(path))
    except OSError:
        return None
    if stats.f_flag & os.ST_RDONLY:
        return OSError(errno.EROFS, os.strerror(errno.EROFS))
    if needed is not None and stats.f_bavail * stats.f_frsize < needed:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return None


def _from_a_writer(error: BaseException) -> bool:
    """Whether ``error`` can be a writer's that names no errno: a ``RuntimeError`` (PyTorch's zip writer), an
    ``OSError``, or torch's distributed checkpoint ``CheckpointException`` (a ``BaseException``: one failure per rank)
    holding one. A bad value (``TypeError``, ``ValueError``) or an interrupt never is."""
    failures = getattr(error, "failures", None)
    if isinstance(failures, dict):
        return any(_from_a_writer(pair[0] if isinstance(pair, tuple) else pair) for pair in failures.values())
    return isinstance(error, (RuntimeError, OSError))


def _cause(error: BaseException, path: str | None, needed: int | None) -> OSError | None:
    """The environment's refusal behind ``error``: the errno it names, else what the disk says (see
    :func:`_disk_refusal`) when a writer raised it."""
    root = _root_os_error(error)
    if root is None and _from_a_writer(error):
        root = _disk_refusal(path, needed)
    return root


def is_write_failure(error: BaseException, path: str | None = None, needed: int | None = None) -> bool:
    """Whether ``error`` is (or was raised from) an OSError the environment caused (``WRITE_ERRNOS``): disk full,
    read-only, quota, permission; or, given the ``path`` written (and the bytes ``needed`` there), an error of a
    writer that names no errno while that disk is read-only or has less room than ``needed``."""
    return _cause(error, path, needed) is not None


def human_bytes(n: float) -> str:
    """``n`` bytes as ``"812 B"``, ``"1.2 MB"``, ``"3.4 GB"`` (powers of 1000)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"  # pragma: no cover


def _reason(error: OSError) -> str:
    name = errno.errorcode.get(error.errno, str(error.errno)) if error.errno is not None else "?"
    return f"{error.strerror or error} ({name})"


def write_failure(
    error: BaseException, what: str, path: str, *, needed: int | None = None, kept: str | None = None
) -> OutputWriteError:
    """The one sentence for a failed write of ``what`` (e.g. "the checkpoint") to ``path``: the reason (see
    :func:`is_write_failure`), the space it ``needed`` and the space free there (on a full disk), and ``kept`` (what
    is intact, e.g. "the previous checkpoint in runs/copy is intact")."""
    root = _cause(error, path, needed)
    reason = _reason(root) if root is not None else str(error)
    sentence = f"cannot write {what} to {path}: {reason}"
    if root is not None and root.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) and needed is not None:
        try:
            free = shutil.disk_usage(_existing_parent(path)).free
            sentence += f"; it needs about {human_bytes(needed)} and {human_bytes(free)} is free there"
        except OSError:
            sentence += f"; it needs about {human_bytes(needed)}"
    if kept:
        sentence += f"; {kept}"
    return OutputWriteError(root.errno if root is not None else None, sentence)


def _existing_parent(path: str) -> str:
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def check_writable(path: str | os.PathLike, what: str) -> None:
    """Try, before a run, the writes it will make to ``path`` (a directory written atomically beside itself):
    create its parent directories, then a temporary directory with a file in it beside ``path``, and remove them.
    Raises :class:`OutputWriteError` naming ``what`` (e.g. "--out") when that fails, or when ``path`` exists and is
    not a directory."""
    path = os.path.abspath(os.fspath(path))
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputWriteError(errno.ENOTDIR, f"{what} {path} exists and is not a directory")
    parent = os.path.dirname(path)
    existing = _existing_parent(parent)
    if not os.path.isdir(existing):
        raise OutputWriteError(errno.ENOTDIR, f"{what} {path}: cannot write in {parent}: {existing} is not a directory")
    probe = None
    try:
        os.makedirs(parent, exist_ok=True)
        probe = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.write-test-", dir=parent)
        with open(os.path.join(probe, "probe"), "wb") as f:
            f.write(b"typed-transformer write test\n")
    except OSError as error:
        raise OutputWriteError(
            error.errno, f"{what} {path}: cannot write in {parent}: {_reason(error)}; choose a writable directory"
        ) from None
    finally:
        if probe is not None:
            shutil.rmtree(probe, ignore_errors=True)


# ---------------------------------------------------------------------------- temporary directories
def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"


def make_temp_dir(target: str | os.PathLike, kind: str = "tmp") -> str:
    """A new empty directory beside ``target`` named ``TARGET.KIND-HOST-PID-XXXXXXXX`` (see the module docstring)."""
    target = os.path.abspath(os.fspath(target))
    return tempfile.mkdtemp(
        prefix=f"{os.path.basename(target)}.{kind}-{_host()}-{os.getpid()}-", dir=os.path.dirname(target)
    )


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: another user's live process; anything else: assume alive
        return True
    return True


def remove_stale_temps(target: str | os.PathLike) -> list[str]:
    """Remove the temporary directories of interrupted writes to ``target`` that are provably leftovers: named
    ``TARGET.tmp-HOST-PID-XXXXXXXX`` with this host's name and the pid of a process that no longer exists. Returns
    the paths removed. Never touches a directory of a live process, of another host, or of any other name."""
    target = os.path.abspath(os.fspath(target))
    parent, base = os.path.dirname(target), os.path.basename(target)
    pattern = re.compile(re.escape(base) + r"\.tmp-(?P<host>.+)-(?P<pid>\d+)-[a-z0-9_]{8}")
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    host = _host()
    for name in names:
        match = pattern.fullmatch(name)
        if match is None or match["host"] != host or _alive(int(match["pid"])):
            continue
        path = os.path.join(parent, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed
