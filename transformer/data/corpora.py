"""File corpora as memory-mapped token ids, and the datasets that cut them into examples.

* Language modelling: :func:`build_text_store` tokenizes each file (``</s>`` after each) into one
  :class:`~transformer.data.token_store.TokenStore`; :class:`TextWindows` cuts a span of its flat stream into
  windows of ``block + 1`` tokens, consecutive windows sharing one token, so every token of the span but the first
  is predicted exactly once per epoch. Packed (``pack=True``) each window's documents (its files) are kept apart:
  no token attends to another document, positions restart at each, and the first token of a document is not a
  label (:class:`~transformer.data.lm_batch.LMBatch`).
* Translation: :func:`build_pair_stores` tokenizes ``source<TAB>target`` (or JSON-lines) files into a source store
  and a target store, aligned row by row; :class:`PairDataset` makes :class:`~transformer.training.batch.Batch` objects
  (target wrapped in ``<s> ... </s>``). Pairs longer than the model's ``max_len`` are refused (naming file and
  line), truncated or skipped, as ``too_long`` says, and counted (:class:`CorpusReport`).

A store is rebuilt only when what it was built from changes: the files (path, size, modification time and content,
by SHA-256), the tokenizer's fingerprint and the reading options are recorded in it and compared
(:func:`cached_store`); a store whose files disagree with each other is rebuilt too.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..common.arguments import is_int, is_integral
from ..common.output_dirs import remove_stale_temps
from ..training.batch import Batch
from .lm_batch import LMBatch
from .text_files import ReadReport, TextFileError, pair_format, read_lines, read_text
from .token_store import TokenStore, TokenStoreWriter
from .tokenizers import TextTokenizer

__all__ = [
    "CorpusReport",
    "TextWindows",
    "PairDataset",
    "build_text_store",
    "build_pair_stores",
    "cached_store",
    "iter_pairs",
    "TOO_LONG_POLICIES",
]

TOO_LONG_POLICIES = ("refuse", "truncate", "skip")


@dataclass
class CorpusReport:
    """What building a corpus did: lines read (and UTF-8 replaced), pairs truncated or skipped for length."""

    read: ReadReport = field(default_factory=ReadReport)
    truncated: list[tuple[str, int]] = field(default_factory=list)
    skipped: list[tuple[str, int]] = field(default_factory=list)

    def summary(self) -> str:
        text = self.read.summary()
        for verb, where in (("truncated", self.truncated), ("skipped", self.skipped)):
            if where:
                first = ", ".join(f"{path}:{line}" for path, line in where[:3])
                text += f"; {len(where)} pairs longer than max_len {verb} (first: {first})"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "lines": self.read.lines,
            "replaced_utf8_lines": len(self.read.replaced_lines),
            "blank_lines": self.read.blank_lines,
            "truncated": len(self.truncated),
            "skipped": len(self.skipped),
        }


def _file_identity(paths: Sequence[str]) -> list[list]:
    """Each file's absolute path, size, modification time (ns) and SHA-256: a store built from other bytes, even
    of the same size and time (an edit within one tick of the file system's clock), is not reused."""
    identity = []
    for p in paths:
        if not os.path.isfile(p):
            what = "is a directory, expected a text file" if os.path.isdir(p) else "no such file"
            raise TextFileError(f"{p}: {what}")
        digest = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        stat = os.stat(p)
        identity.append([os.path.abspath(p), stat.st_size, stat.st_mtime_ns, digest.hexdigest()])
    return identity


def cached_store(path: str, build: Callable[[], TokenStore], identity: dict[str, Any]) -> tuple[TokenStore, bool]:
    """The store at ``path`` if it was built from ``identity`` (JSON values), else ``build()``; and whether it
    was rebuilt. Temporary directories that interrupted writes of ``path`` left behind are removed first, when their
    process no longer exists (:func:`transformer.common.output_dirs.remove_stale_temps`)."""
    remove_stale_temps(path)
    if os.path.isdir(path):
        try:
            store = TokenStore.open(path)
            if store.info.get("identity") == identity:
                return store, False
        except ValueError:
            pass
    return build(), True


# ---------------------------------------------------------------------------- language modelling
def build_text_store(
    path: str,
    files: Sequence[str],
    tokenizer: TextTokenizer,
    *,
    encoding_errors: str = "strict",
    report: CorpusReport | None = None,
) -> TokenStore:
    """Tokenize each of ``files`` (then ``</s>``) into the store at ``path``, one sequence per file (reused when
    nothing changed; a reused store's reading counts are in ``store.info["report"]``)."""
    report = report if report is not None else CorpusReport()
    identity = {
        "kind": "text",
        "files": _file_identity(files),
        "tokenizer": tokenizer.fingerprint,
        "encoding_errors": encoding_errors,
    }

    def build() -> TokenStore:
        with TokenStoreWriter(path, tokenizer.vocab_size) as writer:
            for file in files:
                text = read_text(file, encoding_errors=encoding_errors, report=report.read)
                writer.add(tokenizer.encode(text) + [tokenizer.eos_id])
            writer.info = {"identity": identity, "report": report.to_json()}
        return writer.store

    return cached_store(path, build, identity)[0]


class TextWindows:
    """Windows of ``block + 1`` tokens over ``store``'s flat stream from ``start`` to ``end``: window ``i`` starts at
    ``start + i * block``, so consecutive windows overlap by one token and each token after the first is a label
    exactly once. ``make_batch(indices)`` stacks windows into an :class:`~transformer.data.lm_batch.LMBatch`.

    ``pack=True``: the store's sequences (one per file, each ending in ``</s>``) are documents kept apart within a
    window (``LMBatch(documents=...)``): a label that begins a document becomes ``ignore_index``, which the loss
    leaves out. Which windows there are, and so the plan of batches, is the same either way."""

    def __init__(
        self,
        store: TokenStore,
        block: int,
        start: int = 0,
        end: int | None = None,
        *,
        pack: bool = False,
        ignore_index: int | None = None,
    ) -> None:
        end = int(store.offsets[-1]) if end is None else end
        for name, value in (("start", start), ("end", end)):
            if not is_integral(value):
                raise ValueError(f"TextWindows: {name} must be an int, got {value!r}")
        start, end = int(start), int(end)
        if not is_int(block, at_least=1):
            raise ValueError(f"TextWindows: block must be a positive int, got {block!r}")
        if pack and not is_int(ignore_index):
            raise ValueError(
                "TextWindows: pack=True needs an int ignore_index (the label the loss leaves out), got "
                f"{ignore_index!r}"
            )
        self.pack, self.ignore_index = pack, ignore_index
        if 0 <= start == end:
            raise ValueError(f"TextWindows: span [{start}, {end}) is empty: 0 tokens make no window")
        if not 0 <= start < end <= int(store.offsets[-1]):
            raise ValueError(f"TextWindows: span [{start}, {end}) is not inside the {int(store.offsets[-1])} tokens")
        self.store, self.block, self.start, self.end = store, block, start, end
        self.count = (end - start - 1) // block
        if self.count < 1:
            raise ValueError(
                f"TextWindows: {end - start} tokens make no window of {block + 1} tokens; use a shorter "
                "block (--block-len) or more text"
            )

    def __len__(self) -> int:
        return self.count

    @property
    def lengths(self) -> np.ndarray:
        """Every window's cost in the batch budget: its ``block`` input positions."""
        return np.full(self.count, self.block, dtype=np.int64)

    def _first(self, index: int) -> int:
        """Where window ``index`` starts (``-1`` is the last window, as in a Python sequence)."""
        if not is_integral(index):
            raise TypeError(f"TextWindows indices must be integers, not {type(index).__name__}")
        if not -self.count <= index < self.count:
            raise IndexError(
                f"TextWindows: window {index} is out of range for {self.count} windows "
                f"(valid: {-self.count} to {self.count - 1})"
            )
        return self.start + (int(index) % self.count) * self.block

    def window(self, index: int) -> np.ndarray:
        """The ``block + 1`` tokens of window ``index``: the stream from ``start + index * block``."""
        return self.store.window(self._first(index), self.block + 1)

    def documents(self, index: int) -> np.ndarray:
        """The document (store sequence) of each of window ``index``'s ``block + 1`` tokens."""
        first = self._first(index)
        return np.searchsorted(self.store.offsets, np.arange(first, first + self.block + 1), side="right") - 1

    def make_batch(self, indices: Iterable[int]) -> LMBatch:
        indices = list(indices)
        if not indices:
            raise ValueError("TextWindows.make_batch: no window indices given (a batch needs at least one)")
        rows = torch.from_numpy(np.stack([self.window(i) for i in indices]))
        if not self.pack:
            return LMBatch(rows, pad=None)
        documents = torch.from_numpy(np.stack([self.documents(i) for i in indices]))
        return LMBatch(rows, pad=None, documents=documents, ignore_index=self.ignore_index)

    def labels(self) -> np.ndarray:
        """Every label of every window, in order: the stream from ``start + 1`` over ``count * block`` tokens (packed:
        without the labels that begin a document, which the loss leaves out)."""
        labels = self.store.window(self.start + 1, self.count * self.block)
        if not self.pack:
            return labels
        positions = np.arange(self.start + 1, self.start + 1 + labels.size)
        return labels[~np.isin(positions, self.store.offsets)]


# ---------------------------------------------------------------------------- translation
def iter_pairs(
    path: str, *, format: str | None = None, encoding_errors: str = "strict", report: ReadReport | None = None
) -> Iterator[tuple[int, str, str]]:
    """``(line number, source, target)`` for each pair of a TSV or JSON-lines file (see :mod:`.text_files`)."""
    from .text_files import _pair_from_line

    format = pair_format(path, format)
    report = report if report is not None else ReadReport()
    found = False
    for number, line in read_lines(path, encoding_errors=encoding_errors, report=report):
        if not line.strip():
            report.blank_lines += 1
            continue
        found = True
        src, tgt = _pair_from_line(path, number, line, format)
        yield number, src, tgt
    if not found:
        raise TextFileError(f"{path}: no {'tab-separated' if format == 'tsv' else 'JSON'} pairs (only blank lines)")


def _fit(
    path: str, number: int, src: list[int], tgt: list[int], max_len: int, too_long: str, report: CorpusReport
) -> tuple[list[int], list[int]] | None:
    """The pair within ``max_len`` (source: max_len tokens; target: max_len - 2, room for <s> and </s>)."""
    if len(src) <= max_len and len(tgt) + 2 <= max_len:
        return src, tgt
    if too_long == "refuse":
        raise TextFileError(
            f"{path}:{number}: the pair is too long for max_len={max_len}: source {len(src)} tokens "
            f"(at most {max_len}), target {len(tgt)} tokens (at most {max_len - 2}, with <s> and </s>); "
            "raise --max-len, or pass --too-long truncate or --too-long skip"
        )
    if too_long == "skip":
        report.skipped.append((path, number))
        return None
    report.truncated.append((path, number))
    return src[:max_len], tgt[: max_len - 2]


def build_pair_stores(
    directory: str,
    files: Sequence[str],
    tokenizer: TextTokenizer,
    max_len: int,
    *,
    format: str | None = None,
    encoding_errors: str = "strict",
    too_long: str = "refuse",
    report: CorpusReport | None = None,
    chunk: int = 4096,
) -> tuple[TokenStore, TokenStore]:
    """Tokenize the pairs of ``files`` into ``directory/src`` and ``directory/tgt`` (reused when nothing changed),
    row by row; the target side without ``<s>``/``</s>`` (added per batch). A reused store's counts of truncated and
    skipped pairs are in ``store.info["report"]``."""
    if too_long not in TOO_LONG_POLICIES:
        raise ValueError(f"too_long must be one of {', '.join(TOO_LONG_POLICIES)}; got {too_long!r}")
    report = report if report is not None else CorpusReport()
    identity = {
        "kind": "pairs",
        "files": _file_identity(files),
        "tokenizer": tokenizer.fingerprint,
        "format": format,
        "encoding_errors": encoding_errors,
        "too_long": too_long,
        "max_len": max_len,
    }
    src_path, tgt_path = os.path.join(directory, "src"), os.path.join(directory, "tgt")

    def build() -> TokenStore:
        src = TokenStoreWriter(src_path, tokenizer.vocab_size, commit=False)
        try:
            tgt = TokenStoreWriter(tgt_path, tokenizer.vocab_size, commit=False)
        except BaseException:
            src.discard()
            raise
        try:
            with src, tgt:
                for file in files:
                    batch: list[tuple[int, str, str]] = []
                    for item in iter_pairs(file, format=format, encoding_errors=encoding_errors, report=report.read):
                        batch.append(item)
                        if len(batch) == chunk:
                            _encode_pairs(file, batch, tokenizer, max_len, too_long, report, src, tgt)
                            batch = []
                    _encode_pairs(file, batch, tokenizer, max_len, too_long, report, src, tgt)
                for writer in (tgt, src):  # the source store last: its identity says both are complete
                    writer.info = {"identity": identity, "report": report.to_json()}
            tgt.commit()  # only once both are finished: a full disk leaves both previous stores as they were
        except BaseException:
            tgt.discard()
            src.discard()
            raise
        return src.commit()

    src, _ = cached_store(src_path, build, identity)
    tgt = TokenStore.open(tgt_path)
    if len(src) != len(tgt) or tgt.info.get("identity") != identity:
        raise ValueError(f"{directory}: the source and target stores do not belong together; delete it to rebuild")
    return src, tgt


def _encode_pairs(
    file: str,
    batch: list[tuple[int, str, str]],
    tokenizer: TextTokenizer,
    max_len: int,
    too_long: str,
    report: CorpusReport,
    src: TokenStoreWriter,
    tgt: TokenStoreWriter,
) -> None:
    if not batch:
        return
    src_ids = tokenizer.encode_batch([s for _, s, _ in batch])
    tgt_ids = tokenizer.encode_batch([t for _, _, t in batch])
    for (number, _, _), source, target in zip(batch, src_ids, tgt_ids, strict=True):
        fitted = _fit(file, number, source, target, max_len, too_long, report)
        if fitted is not None:
            src.add(fitted[0])
            tgt.add(fitted[1])


class PairDataset:
    """Aligned source and target stores as training examples: ``make_batch(indices)`` pads the sources and
    ``<s> target </s>`` with ``pad`` into a :class:`~transformer.training.batch.Batch`; ``lengths`` is each pair's cost
    in the batch budget, ``max(source, target + 1)`` (the decoder reads ``<s> target``)."""

    def __init__(self, src: TokenStore, tgt: TokenStore, *, pad: int, bos: int, eos: int) -> None:
        if len(src) != len(tgt):
            raise ValueError(f"PairDataset: {len(src)} sources but {len(tgt)} targets")
        self.src, self.tgt, self.pad, self.bos, self.eos = src, tgt, pad, bos, eos

    def __len__(self) -> int:
        return len(self.src)

    @property
    def lengths(self) -> np.ndarray:
        return np.maximum(self.src.lengths, self.tgt.lengths + 1)

    def make_batch(self, indices: Iterable[int]) -> Batch:
        indices = [int(i) for i in indices]
        sources = [self.src[i] for i in indices]
        targets = [np.concatenate([[self.bos], self.tgt[i], [self.eos]]) for i in indices]
        return Batch(
            _pad(sources, self.pad),
            _pad(targets, self.pad),
            pad=self.pad,
            src_vocab=self.src.vocab_size,
            tgt_vocab=self.tgt.vocab_size,
        )


def _pad(rows: list[np.ndarray], pad: int) -> torch.Tensor:
    out = np.full((len(rows), max(len(r) for r in rows)), pad, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return torch.from_numpy(out)
