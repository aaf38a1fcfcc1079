"""Token ids on disk, read back memory-mapped: a corpus is never held as Python objects.

A :class:`TokenStore` is a directory with

    tokens.bin     every sequence's ids, one after another (uint16 when the vocabulary fits, else uint32)
    offsets.npy    int64 (n + 1,): sequence i is tokens[offsets[i]:offsets[i + 1]]
    store.json     dtype, sizes, and what built it (e.g. the tokenizer's fingerprint): ``info``

:func:`write_token_store` (or :class:`TokenStoreWriter`, for several stores written side by side) writes sequences
as they come (one at a time in memory) into a temporary directory and renames it into place, so a store is either
complete or absent. :meth:`TokenStore.open` maps ``tokens.bin``
with ``numpy.memmap``; reading a sequence or a window copies only those ids.

A disk that fills up (or a read-only directory) while a store is written raises
:class:`~transformer.common.output_dirs.OutputWriteError`: one sentence naming the store, nothing left behind (neither
the temporary directory nor the folders the write created above the store); a store that was there before is
intact. Temporary
directories of writes that were interrupted (``PATH.tmp-HOST-PID-*``) are removed by the next write to the same path
when their process no longer exists (:mod:`transformer.common.output_dirs`).
"""

from __future__ import annotations

import json
import operator
import os
import shutil
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..common.arguments import is_integral
from ..common.output_dirs import is_write_failure, make_temp_dir, remove_stale_temps, write_failure

__all__ = ["TokenStore", "TokenStoreWriter", "write_token_store"]

_TOKENS, _OFFSETS, _INFO = "tokens.bin", "offsets.npy", "store.json"


def _missing_parents(path: str) -> list[str]:
    """The folders above ``path`` that do not exist yet, innermost first (what ``os.makedirs`` will create)."""
    missing, folder = [], os.path.dirname(path)
    while folder and not os.path.exists(folder) and os.path.dirname(folder) != folder:
        missing.append(folder)
        folder = os.path.dirname(folder)
    return missing


def _dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.uint32)


class TokenStoreWriter:
    """Writes a store sequence by sequence: ``add(ids)`` appends one; leaving the ``with`` block without an error
    commits (``info`` may be updated until then), with an error removes everything written.

    ``commit=False`` leaves the finished store in its temporary directory at the end of the ``with`` block, for
    stores that belong together (a source and a target store): :meth:`commit` each once all are finished, or
    :meth:`discard` them all if one failed, so that none replaces its previous version unless all can."""

    def __init__(
        self, path: str | os.PathLike, vocab_size: int, info: dict[str, Any] | None = None, *, commit: bool = True
    ) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.vocab_size, self.dtype, self.info = vocab_size, _dtype(vocab_size), dict(info or {})
        self.tmp, self.file, self.auto_commit = None, None, commit
        self.offsets = [0]
        self.store: TokenStore | None = None
        self.made_dirs = _missing_parents(self.path)  # removed again when the write fails
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            remove_stale_temps(self.path)
            self.tmp = make_temp_dir(self.path)
            self.file = open(os.path.join(self.tmp, _TOKENS), "wb")
        except OSError as error:
            raise self._failed(error) from None

    def _failed(self, error: BaseException) -> BaseException:
        """Remove everything written (once); the error to raise (one sentence when the disk refused the write, naming
        the temporary directory if it could not be removed: a disk turned read-only keeps it)."""
        tmp = self.tmp
        self.discard()
        if is_write_failure(error):
            kept = "nothing was left behind (its temporary directory was removed)"
            if tmp is not None and os.path.exists(tmp):
                kept = f"its unfinished temporary directory {tmp} could not be removed (delete it by hand)"
            return write_failure(error, "the token store", self.path, kept=kept)
        return error

    def discard(self) -> None:
        """Remove what this writer wrote: its temporary directory and the folders it created above the store."""
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None
        for folder in self.made_dirs:  # innermost first; one that another writer filled in the meantime stays
            try:
                os.rmdir(folder)
            except OSError:
                break
        self.made_dirs = []

    def add(self, ids: Sequence[int]) -> None:
        array = np.asarray(ids, dtype=np.int64)
        if array.size and (array.min() < 0 or array.max() >= self.vocab_size):
            bad = int(array[(array < 0) | (array >= self.vocab_size)][0])
            raise ValueError(f"TokenStoreWriter: token id {bad} is outside [0, {self.vocab_size})")
        try:
            self.file.write(array.astype(self.dtype).tobytes())
        except OSError as error:
            raise self._failed(error) from None
        self.offsets.append(self.offsets[-1] + array.size)

    def __enter__(self) -> TokenStoreWriter:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if error is not None:
            self._failed(error)
            return
        self._guarded(self._finish)
        if self.auto_commit:
            self.commit()

    def _guarded(self, step) -> None:
        try:
            step()
        except BaseException as failure:
            raised = self._failed(failure)
            if raised is failure:
                raise
            raise raised from None

    def _finish(self) -> None:
        self.file.close()
        np.save(os.path.join(self.tmp, _OFFSETS), np.asarray(self.offsets, dtype=np.int64))
        with open(os.path.join(self.tmp, _INFO), "w") as f:
            json.dump(
                {
                    "dtype": self.dtype.name,
                    "vocab_size": self.vocab_size,
                    "sequences": len(self.offsets) - 1,
                    "tokens": self.offsets[-1],
                    "info": self.info,
                },
                f,
                indent=2,
            )

    def commit(self) -> TokenStore:
        """Rename the finished store into place (a previous store there is replaced, or kept if the rename fails)."""
        self._guarded(self._rename)
        self.store = TokenStore.open(self.path)
        return self.store

    def _rename(self) -> None:
        aside = None
        if os.path.exists(self.path):
            aside = make_temp_dir(self.path)  # a killed commit leaves it to remove_stale_temps
            os.rename(self.path, os.path.join(aside, "store"))
        try:
            os.rename(self.tmp, self.path)
        except BaseException:
            if aside is not None:
                os.rename(os.path.join(aside, "store"), self.path)
                os.rmdir(aside)
            raise
        self.tmp = None
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)


def write_token_store(
    path: str | os.PathLike, sequences: Iterable[Sequence[int]], vocab_size: int, info: dict[str, Any] | None = None
) -> TokenStore:
    """Write ``sequences`` (each a sequence of ids in ``[0, vocab_size)``) to directory ``path``; returns it opened.

    ``info`` (JSON values) is stored beside the ids, e.g. the fingerprint of the tokenizer that made them.
    """
    with TokenStoreWriter(path, vocab_size, info) as writer:
        for ids in sequences:
            writer.add(ids)
    return writer.store


class TokenStore:
    """Sequences of token ids, memory-mapped (see the module docstring). ``store[i]`` is sequence ``i``
    (a numpy int64 array), ``store.lengths`` their lengths, ``store.tokens`` the flat memory map."""

    def __init__(self, path: str, tokens: np.ndarray, offsets: np.ndarray, meta: dict[str, Any]) -> None:
        self.path, self.tokens, self.offsets, self.meta = path, tokens, offsets, meta

    @classmethod
    def open(cls, path: str | os.PathLike) -> TokenStore:
        """The store at ``path``. Refused (``ValueError``, one line naming ``path``) unless its three files agree:
        ``store.json`` names a dtype, ``offsets.npy`` starts at 0 and never decreases, and ``tokens.bin`` holds
        exactly as many ids as the offsets end at (a ``tokens.bin`` of another store is refused, naming both)."""
        path = os.fspath(path)
        try:
            with open(os.path.join(path, _INFO)) as f:
                meta = json.load(f)
            offsets = np.load(os.path.join(path, _OFFSETS))
            dtype = np.dtype(meta["dtype"])
            size = os.path.getsize(os.path.join(path, _TOKENS))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}: not a token store ({type(error).__name__}: {error})") from None
        if offsets.ndim != 1 or offsets.size < 1 or offsets.dtype.kind not in "iu" or offsets[0] != 0:
            raise ValueError(f"{path}: not a token store ({_OFFSETS} must be 1-D integers from 0, got {offsets[:4]})")
        if np.any(np.diff(offsets) < 0):
            raise ValueError(f"{path}: not a token store ({_OFFSETS} decreases)")
        count = int(offsets[-1])
        if size != count * dtype.itemsize:
            held = f"{size // dtype.itemsize} ids" if size % dtype.itemsize == 0 else f"{size} bytes"
            raise ValueError(
                f"{path}: {_TOKENS} holds {held} of {dtype.name} but {_OFFSETS} says {count} ids: the two files do "
                "not belong together (another store's file?); delete the store to rebuild it"
            )
        tokens = np.memmap(os.path.join(path, _TOKENS), dtype=dtype, mode="r") if count else np.zeros(0, dtype)
        return cls(path, tokens, offsets.astype(np.int64), meta)

    @property
    def info(self) -> dict[str, Any]:
        """What the writer recorded (``write_token_store``'s ``info``)."""
        return self.meta.get("info", {})

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int | slice) -> np.ndarray | list[np.ndarray]:
        """Sequence ``index`` as a Python sequence indexes: ``-1`` is the last; a slice gives a list of them."""
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        try:
            index = operator.index(index)
        except TypeError:
            raise TypeError(f"TokenStore indices must be integers or slices, not {type(index).__name__}") from None
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"TokenStore: index {index} is out of range for {n} sequences (valid: {-n} to {n - 1})")
        index %= n
        return np.asarray(self.tokens[self.offsets[index] : self.offsets[index + 1]], dtype=np.int64)

    def window(self, start: int, length: int) -> np.ndarray:
        """``length`` ids of the flat stream from ``start`` (across sequence boundaries); the window must lie inside
        the stream (``IndexError`` naming it and the stream's length otherwise)."""
        total = int(self.offsets[-1])
        if not is_integral(start, at_least=0) or not is_integral(length, at_least=0) or start + length > total:
            raise IndexError(
                f"TokenStore.window: start {start!r} and length {length!r} are not inside the {total} tokens"
            )
        return np.asarray(self.tokens[start : start + length], dtype=np.int64)
