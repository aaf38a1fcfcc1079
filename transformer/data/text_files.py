"""Reading the user's text files, with errors that name the file and the line.

* A missing file, a directory, or a file with no text raise :class:`TextFileError` naming the file.
* Invalid UTF-8: ``encoding_errors="strict"`` (the default) raises naming the file, the line and the byte offset;
  ``"replace"`` puts U+FFFD (the replacement character) in place of each bad byte sequence, counts the lines
  where it did, and goes on (:class:`ReadReport`).
* Parallel corpora (:func:`read_pairs`): tab-separated ``source<TAB>target`` lines (``.tsv``, ``.txt``) or JSON lines
  with ``"src"`` and ``"tgt"`` string fields (``.jsonl``, ``.json``). Blank lines are skipped; a line without
  exactly one tab, malformed JSON, a missing field or an empty side raise naming the file and the line.

Lines end at ``\\n``; a ``\\r`` before it (Windows line ends) is removed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

__all__ = ["TextFileError", "ReadReport", "read_lines", "read_text", "read_pairs", "ENCODING_ERRORS", "PAIR_FORMATS"]

ENCODING_ERRORS = ("strict", "replace")
PAIR_FORMATS = ("tsv", "jsonl")


class TextFileError(ValueError):
    """A problem with an input file: the message starts with ``FILE`` or ``FILE:LINE``."""


@dataclass
class ReadReport:
    """What reading did besides returning text: lines whose invalid UTF-8 was replaced, blank lines skipped."""

    lines: int = 0
    replaced_lines: list[tuple[str, int]] = field(default_factory=list)
    blank_lines: int = 0

    def summary(self) -> str:
        text = f"{self.lines} lines"
        if self.replaced_lines:
            first = ", ".join(f"{path}:{line}" for path, line in self.replaced_lines[:3])
            text += f"; invalid UTF-8 replaced by U+FFFD on {len(self.replaced_lines)} lines (first: {first})"
        if self.blank_lines:
            text += f"; {self.blank_lines} blank lines skipped"
        return text


def _check_policy(encoding_errors: str) -> None:
    if encoding_errors not in ENCODING_ERRORS:
        raise ValueError(f"encoding_errors must be one of {', '.join(ENCODING_ERRORS)}; got {encoding_errors!r}")


def _open_bytes(path: str):
    if not os.path.exists(path):
        raise TextFileError(f"{path}: no such file")
    if os.path.isdir(path):
        raise TextFileError(f"{path}: is a directory, expected a text file")
    if os.path.getsize(path) == 0:
        raise TextFileError(f"{path}: the file is empty")
    return open(path, "rb")


def read_lines(
    path: str | os.PathLike, *, encoding_errors: str = "strict", report: ReadReport | None = None
) -> Iterator[tuple[int, str]]:
    """``(line number from 1, text without its line end)`` for each line of ``path``, decoded as UTF-8."""
    _check_policy(encoding_errors)
    path = os.fspath(path)
    report = report if report is not None else ReadReport()
    with _open_bytes(path) as f:
        for number, raw in enumerate(f, start=1):
            raw = raw.rstrip(b"\n").removesuffix(b"\r")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                if encoding_errors == "strict":
                    raise TextFileError(
                        f"{path}:{number}: invalid UTF-8 (byte 0x{raw[error.start]:02x} at column {error.start + 1}: "
                        f"{error.reason}); fix the file, or read it with encoding errors 'replace' "
                        "(--encoding-errors replace) to put U+FFFD in place of bad bytes"
                    ) from None
                text = raw.decode("utf-8", errors="replace")
                report.replaced_lines.append((path, number))
            report.lines += 1
            yield number, text


def read_text(path: str | os.PathLike, *, encoding_errors: str = "strict", report: ReadReport | None = None) -> str:
    """The whole of ``path`` as one string (lines joined by ``\\n``); raises if it holds only whitespace."""
    text = "\n".join(line for _, line in read_lines(path, encoding_errors=encoding_errors, report=report))
    if not text.strip():
        raise TextFileError(f"{os.fspath(path)}: the file holds no text (only whitespace)")
    return text + "\n"


def pair_format(path: str, format: str | None) -> str:
    """``format`` when given, else from the file name: ``.jsonl``/``.json`` are JSON lines, anything else TSV."""
    if format is not None:
        if format not in PAIR_FORMATS:
            raise ValueError(f"format must be one of {', '.join(PAIR_FORMATS)}; got {format!r}")
        return format
    return "jsonl" if path.endswith((".jsonl", ".json")) else "tsv"


def _pair_from_line(path: str, number: int, line: str, format: str) -> tuple[str, str]:
    if format == "tsv":
        tabs = line.count("\t")
        if tabs != 1:
            found = "no tab" if tabs == 0 else f"{tabs} tabs"
            raise TextFileError(
                f"{path}:{number}: expected 'source<TAB>target' (exactly one tab), found {found}: {line[:60]!r}"
            )
        src, tgt = line.split("\t")
    else:
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise TextFileError(
                f"{path}:{number}: invalid JSON ({error.msg} at column {error.colno}): {line[:60]!r}"
            ) from None
        if not isinstance(record, dict):
            raise TextFileError(
                f'{path}:{number}: expected a JSON object with "src" and "tgt", got {type(record).__name__}'
            )
        for key in ("src", "tgt"):
            if not isinstance(record.get(key), str):
                got = "nothing" if key not in record else type(record[key]).__name__
                raise TextFileError(f"{path}:{number}: expected a string field {key!r}, got {got}")
        src, tgt = record["src"], record["tgt"]
    for side, text in (("source", src), ("target", tgt)):
        if not text.strip():
            raise TextFileError(f"{path}:{number}: the {side} side is empty")
    return src.strip(), tgt.strip()


def read_pairs(
    path: str | os.PathLike,
    *,
    format: str | None = None,
    encoding_errors: str = "strict",
    report: ReadReport | None = None,
) -> tuple[list[str], list[str], list[int]]:
    """Source texts, target texts and their line numbers from a TSV or JSON-lines file (see the module docstring)."""
    path = os.fspath(path)
    format = pair_format(path, format)
    report = report if report is not None else ReadReport()
    sources: list[str] = []
    targets: list[str] = []
    numbers: list[int] = []
    for number, line in read_lines(path, encoding_errors=encoding_errors, report=report):
        if not line.strip():
            report.blank_lines += 1
            continue
        src, tgt = _pair_from_line(path, number, line, format)
        sources.append(src)
        targets.append(tgt)
        numbers.append(number)
    if not sources:
        raise TextFileError(f"{path}: no {'tab-separated' if format == 'tsv' else 'JSON'} pairs (only blank lines)")
    return sources, targets, numbers


def check_files(paths: Sequence[str | os.PathLike], what: str) -> list[str]:
    """The paths as strings; raises naming ``what`` when none is given."""
    if not paths:
        raise TextFileError(f"{what}: no files given")
    return [os.fspath(p) for p in paths]
