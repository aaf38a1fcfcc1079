"""Tokenizers for your own text: byte-level BPE and characters, both Hugging Face ``tokenizers`` models.

* ``"bpe"``: byte-level BPE (GPT-2's scheme: bytes, then learned merges; every text round-trips, nothing is
  unknown), trained offline on the user's files with ``tokenizers.trainers.BpeTrainer``.
* ``"char"``: one token per character (a ``WordLevel`` model over single characters, ``Fuse`` decoder); characters
  never seen in training become ``<unk>`` and are dropped when decoding.

Both reserve the same four special tokens, at the same ids: ``<pad>`` 0, ``<s>`` 1 (start), ``</s>`` 2 (end),
``<unk>`` 3. A :class:`TextTokenizer` saves itself as two files (:meth:`TextTokenizer.files`): ``tokenizer.json``,
the library's own format and nothing else (``tokenizers.Tokenizer.from_file`` and transformers'
``PreTrainedTokenizerFast(tokenizer_file=...)`` read it), and ``tokenizer_extra.json``, what is ours (the kind, a
pretrained tokenizer's special ids). Files written before 2026-12-02 held both in ``tokenizer.json``, which is still
read (:func:`tokenizer_from_texts`). A tokenizer is identified by its :attr:`TextTokenizer.fingerprint`, the SHA-256
of :meth:`TextTokenizer.to_json` (the library's JSON with our fields, keys sorted: the one file of before, so the
fingerprints recorded in older checkpoints and data caches still match), which is how a checkpoint and a tokenizer
that do not belong together are told apart.

A third kind, ``"pretrained"`` (:class:`PretrainedTextTokenizer`), is a pretrained model's own tokenizer (``train lm
--init``): never trained here, its special ids are the model's (recorded in the JSON), and encoding adds what its
post-processor adds (Llama's ``<s>``), as the model saw text in pre-training.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..common.arguments import is_int
from ..common.optional import require
from ..common.output_dirs import is_write_failure, write_failure

__all__ = [
    "TextTokenizer",
    "train_tokenizer",
    "load_tokenizer",
    "SPECIAL_TOKENS",
    "TOKENIZER_FILE",
    "TOKENIZER_EXTRA_FILE",
    "TOKENIZER_KINDS",
    "tokenizer_from_texts",
    "TokenizerMismatchError",
    "PretrainedTextTokenizer",
]

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
PAD, BOS, EOS, UNK = range(4)
TOKENIZER_FILE = "tokenizer.json"
#: Our fields of a saved tokenizer (its kind, a pretrained tokenizer's special ids), beside ``tokenizer.json``.
TOKENIZER_EXTRA_FILE = "tokenizer_extra.json"
#: The fields of ours, which files of before 2026-12-02 held inside ``tokenizer.json`` itself.
_OUR_FIELDS = ("typed_transformer_kind", "typed_transformer_special_ids")
TOKENIZER_KINDS = ("bpe", "char")


class TokenizerMismatchError(ValueError):
    """A tokenizer does not belong with a checkpoint or a data cache (another vocabulary or another fingerprint)."""


class TextTokenizer:
    """A trained tokenizer: ``encode(text) -> ids`` (no special tokens), ``decode(ids) -> text`` (special tokens
    dropped), ``pad_id``/``bos_id``/``eos_id``/``unk_id``, ``eos_ids`` (the ids that end a text: ``(eos_id,)``),
    ``vocab_size``, ``to_json()`` and ``fingerprint``."""

    def __init__(self, tokenizer, kind: str) -> None:
        if kind not in TOKENIZER_KINDS:
            raise ValueError(f"tokenizer kind must be one of {', '.join(TOKENIZER_KINDS)}; got {kind!r}")
        for token_id, token in enumerate(SPECIAL_TOKENS):
            if tokenizer.token_to_id(token) != token_id:
                raise ValueError(
                    f"tokenizer: special token {token!r} must have id {token_id}, got {tokenizer.token_to_id(token)}"
                )
        self.tokenizer, self.kind = tokenizer, kind
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = PAD, BOS, EOS, UNK
        self._json = self.to_json()
        self.fingerprint = hashlib.sha256(self._json.encode()).hexdigest()

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    @property
    def eos_ids(self) -> tuple[int, ...]:
        """The ids generation stops at."""
        return (self.eos_id,)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` of many texts at once (the library spreads them over threads)."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``; special tokens (padding, start, end, unknown) are dropped."""
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)

    def extra(self) -> dict[str, Any]:
        """Our fields (``typed_transformer_kind``; a pretrained tokenizer's ``typed_transformer_special_ids``): the
        content of ``tokenizer_extra.json``."""
        return {"typed_transformer_kind": self.kind}

    def to_json(self) -> str:
        """The tokenizer as one JSON text: the library's JSON with :meth:`extra`'s fields in it, keys sorted (what
        :attr:`fingerprint` hashes, what ranks exchange; not a file the library reads: :meth:`files` are)."""
        data = json.loads(self.tokenizer.to_str())
        data.update(self.extra())
        return json.dumps(data, sort_keys=True, ensure_ascii=False)

    def files(self) -> dict[str, str]:
        """The files a saved tokenizer is: ``tokenizer.json`` (the library's JSON alone: ``tokenizers`` and
        transformers read it) and ``tokenizer_extra.json`` (:meth:`extra`)."""
        return {
            TOKENIZER_FILE: self.tokenizer.to_str(),
            TOKENIZER_EXTRA_FILE: json.dumps(self.extra(), sort_keys=True, ensure_ascii=False),
        }

    def save(self, directory: str | os.PathLike) -> str:
        """Write :meth:`files` (``tokenizer.json``, ``tokenizer_extra.json``) into ``directory`` (an existing folder);
        returns the path of ``tokenizer.json``. Both are written beside their places, then renamed into them, so
        each file is whole or as it was: a write the disk refuses (full, read-only) raises
        :class:`~transformer.common.output_dirs.OutputWriteError`, one sentence naming the path, and leaves nothing
        behind."""
        path = os.path.join(os.fspath(directory), TOKENIZER_FILE)
        written = []
        try:
            for name, content in self.files().items():
                target = os.path.join(os.fspath(directory), name)
                tmp = f"{target}.tmp-{os.getpid()}"
                written.append((tmp, target))
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(content)
            for tmp, target in written:
                os.replace(tmp, target)
        except OSError as error:
            for tmp, _ in written:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            if not is_write_failure(error):
                raise
            before = "the previous tokenizer file is intact" if os.path.exists(path) else "nothing was left behind"
            raise write_failure(error, "the tokenizer", path, kept=before) from None
        return path

    @classmethod
    def from_json(cls, text: str, source: str = "tokenizer") -> TextTokenizer:
        """The tokenizer of :meth:`to_json`'s text (the one ``tokenizer.json`` of before 2026-12-02)."""
        require("tokenizers", f"reading {source}")
        from tokenizers import Tokenizer

        try:
            data = json.loads(text)
            kind = data.pop("typed_transformer_kind")
            if kind == PretrainedTextTokenizer.KIND:
                special = data.pop("typed_transformer_special_ids")
                return PretrainedTextTokenizer(Tokenizer.from_str(json.dumps(data)), **special)
            return cls(Tokenizer.from_str(json.dumps(data)), kind)
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
            raise ValueError(
                f"{source} is not a typed-transformer tokenizer ({type(error).__name__}: {error})"
            ) from None
        except Exception as error:  # the library raises plain Exception on malformed definitions
            if isinstance(error, ValueError):
                raise
            raise ValueError(f"{source} cannot be read by the tokenizers library: {error}") from None

    def __repr__(self) -> str:
        return f"TextTokenizer(kind={self.kind!r}, vocab_size={self.vocab_size}, fingerprint={self.fingerprint[:12]})"


class PretrainedTextTokenizer(TextTokenizer):
    """A pretrained model's tokenizer as the file tasks use one (kind ``"pretrained"``): ``eos_ids`` end a text (the
    first also separates documents in the training stream), ``pad_id``, ``bos_id`` and ``unk_id`` are the model's (or
    None). ``encode`` adds what the tokenizer's post-processor adds; the special ids are saved in the JSON."""

    KIND = "pretrained"

    def __init__(
        self,
        tokenizer,
        *,
        eos_ids: Sequence[int],
        pad_id: int | None = None,
        bos_id: int | None = None,
        unk_id: int | None = None,
    ) -> None:
        if not eos_ids or not all(is_int(i, at_least=0) for i in eos_ids):
            raise ValueError(f"a pretrained tokenizer needs its end-of-sequence ids (a list of ids), got {eos_ids!r}")
        self.tokenizer, self.kind = tokenizer, self.KIND
        self.special_ids = {"eos_ids": [int(i) for i in eos_ids], "pad_id": pad_id, "bos_id": bos_id, "unk_id": unk_id}
        self.pad_id, self.bos_id, self.unk_id = pad_id, bos_id, unk_id
        self.eos_id = int(eos_ids[0])
        self._json = self.to_json()
        self.fingerprint = hashlib.sha256(self._json.encode()).hexdigest()

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    @property
    def eos_ids(self) -> tuple[int, ...]:
        return tuple(self.special_ids["eos_ids"])

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(list(texts))]

    def extra(self) -> dict[str, Any]:
        return {"typed_transformer_kind": self.KIND, "typed_transformer_special_ids": self.special_ids}

    def __repr__(self) -> str:
        return (
            f"PretrainedTextTokenizer(vocab_size={self.vocab_size}, eos_ids={list(self.eos_ids)}, "
            f"fingerprint={self.fingerprint[:12]})"
        )


def tokenizer_from_texts(tokenizer_json: str, extra_json: str | None, source: str = "tokenizer") -> TextTokenizer:
    """The tokenizer of a ``tokenizer.json``'s text and its ``tokenizer_extra.json``'s (None: a file of before
    2026-12-02, our fields inside ``tokenizer.json``). A ``tokenizer.json`` of no typed-transformer tokenizer (no
    fields of ours in either) raises ValueError naming ``source``."""
    if extra_json is None:
        return TextTokenizer.from_json(tokenizer_json, source=source)
    try:
        data, extra = json.loads(tokenizer_json), json.loads(extra_json)
        if not isinstance(data, dict) or not isinstance(extra, dict):
            raise TypeError(f"expected two JSON objects, got {type(data).__name__} and {type(extra).__name__}")
    except (json.JSONDecodeError, TypeError) as error:
        raise ValueError(f"{source} is not a typed-transformer tokenizer ({type(error).__name__}: {error})") from None
    data.update({k: v for k, v in extra.items() if k in _OUR_FIELDS})
    return TextTokenizer.from_json(json.dumps(data), source=source)


def load_tokenizer(path: str | os.PathLike) -> TextTokenizer:
    """Read a tokenizer saved by :meth:`TextTokenizer.save`: ``path`` is its ``tokenizer.json`` or the directory
    holding it; ``tokenizer_extra.json`` is read from beside a ``tokenizer.json`` (a file of before 2026-12-02, or
    of another name, holds our fields itself)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, TOKENIZER_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such tokenizer file") from None
    extra_path = os.path.join(os.path.dirname(path), TOKENIZER_EXTRA_FILE)
    inline = _has_our_fields(text) or os.path.basename(path) != TOKENIZER_FILE
    if inline or not os.path.isfile(extra_path):
        source = path if inline else f"{path} (with no {TOKENIZER_EXTRA_FILE} beside it)"
        return TextTokenizer.from_json(text, source=source)
    with open(extra_path, encoding="utf-8") as f:
        return tokenizer_from_texts(text, f.read(), source=path)


def _has_our_fields(text: str) -> bool:
    """Whether a ``tokenizer.json``'s text holds our fields itself (a file of before 2026-12-02)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return True  # let from_json name the error
    return isinstance(data, dict) and "typed_transformer_kind" in data


def _bpe(vocab_size: int, min_frequency: int):
    require("tokenizers", "training a byte-level BPE tokenizer")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        show_progress=False,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    return tokenizer, trainer


def _char(vocab_size: int, min_frequency: int):
    require("tokenizers", "training a character tokenizer")
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    # Oniguruma's (?m) lets '.' match a newline too: every character is its own piece
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    trainer = trainers.WordLevelTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False, special_tokens=list(SPECIAL_TOKENS)
    )
    return tokenizer, trainer


def train_tokenizer(
    texts: Iterable[str], kind: str = "bpe", *, vocab_size: int = 8000, min_frequency: int = 2
) -> TextTokenizer:
    """Train a ``kind`` tokenizer on ``texts`` (an iterable of strings, e.g. lines or whole files), offline.

    ``vocab_size`` bounds the vocabulary, special tokens and (BPE) the 256 byte symbols included; the char
    tokenizer keeps at most that many characters, the most frequent first. ``min_frequency``: merges (BPE) or
    characters (char) seen fewer times are left out.
    """
    if kind not in TOKENIZER_KINDS:
        raise ValueError(f"tokenizer kind must be one of {', '.join(TOKENIZER_KINDS)}; got {kind!r}")
    smallest = len(SPECIAL_TOKENS) + (256 if kind == "bpe" else 1)
    if not is_int(vocab_size, at_least=smallest):
        raise ValueError(f"vocab_size must be an int >= {smallest} for a {kind} tokenizer, got {vocab_size!r}")
    if not is_int(min_frequency, at_least=1):
        raise ValueError(f"min_frequency must be a positive int, got {min_frequency!r}")
    tokenizer, trainer = (_bpe if kind == "bpe" else _char)(vocab_size, min_frequency)
    tokenizer.train_from_iterator(_chunks(texts), trainer=trainer)
    return TextTokenizer(tokenizer, kind)


def _chunks(texts: Iterable[str], size: int = 1 << 16) -> Iterator[str]:
    """Long texts in pieces of about ``size`` characters, cut after a newline where there is one (the trainer
    counts words within a piece, so cuts between lines lose nothing)."""
    for text in texts:
        start = 0
        while start < len(text):
            end = min(start + size, len(text))
            if end < len(text):
                newline = text.rfind("\n", start, end)
                end = newline + 1 if newline >= start else end
            yield text[start:end]
            start = end
