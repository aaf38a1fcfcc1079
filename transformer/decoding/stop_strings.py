"""Stop strings: a row ends once the text of its tokens contains one of them, as transformers' ``stop_strings``.

The semantics are those of transformers' ``StopStringCriteria`` (``generation/stopping_criteria.py``): after each
generated token, a row stops when one of the strings occurs in the text of its last tokens (the prompt's included)
and that occurrence ends inside the token just generated, at least one of its characters coming from it. So the
string may lie inside one token (" willing" holds "will"), run across several ("wi" + "ll"), begin in the prompt,
or carry a space a byte-level BPE writes in front of a word; an occurrence wholly in the prompt never stops a row.
The row keeps every token it generated, the one that completed the string included (transformers' output).

Matching is on each token's own bytes (:func:`token_bytes`), found as transformers finds them: a byte-level BPE's
(GPT-2's ``ByteLevel`` decoder) token strings read back through the byte alphabet, a SentencePiece ``<0xNN>``
byte-fallback token as its byte, any other token as its decoder writes it after a fixed prefix.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import torch

from ..contracts import Tensor

__all__ = ["StopStrings", "token_bytes"]

#: What transformers writes a token after, then removes, so that a decoder's handling of a text's start is undone.
_PREFIX = "abcdef"


def _byte_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet read backwards: the printable character that stands for each byte -> the byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    printable += list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


def _decoder_kinds(decoder: object) -> set[str]:
    """The types of a ``tokenizers`` decoder and of the decoders it is made of (a ``Sequence``'s)."""
    if decoder is None:
        return set()
    kinds, state = {type(decoder).__name__}, getattr(decoder, "__getstate__", lambda: None)()
    try:
        state = json.loads(state) if isinstance(state, (str, bytes)) else None
    except ValueError:
        state = None

    def walk(value: object) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("type"), str):
                kinds.add(value["type"])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(state)
    return kinds


def _backend(tokenizer: object) -> object:
    """The ``tokenizers.Tokenizer`` of ``tokenizer``: itself, or what ours (``.tokenizer``) or a transformers
    tokenizer (``.backend_tokenizer``) wraps; a TypeError when there is none."""
    for candidate in (getattr(tokenizer, "backend_tokenizer", None), getattr(tokenizer, "tokenizer", None), tokenizer):
        if hasattr(candidate, "get_vocab") and hasattr(candidate, "id_to_token") and hasattr(candidate, "decoder"):
            return candidate
    raise TypeError(
        f"stop_strings need a tokenizer of the `tokenizers` library (a tokenizers.Tokenizer, or a tokenizer that "
        f"wraps one: PretrainedTokenizer, the checkpoints' TextTokenizer, a transformers fast tokenizer), got "
        f"{type(tokenizer).__name__}"
    )


def token_bytes(tokenizer: object) -> list[bytes]:
    """Every token id's bytes (index = id), as transformers' ``StopStringCriteria.clean_tokenizer_vocab`` reads
    them: byte-level tokens through the byte alphabet, ``<0xNN>`` byte-fallback tokens as their byte, the others
    decoded after the prefix ``"abcdef"``, which is then cut off with whatever the decoder put before it."""
    backend = _backend(tokenizer)
    vocab = backend.get_vocab(with_added_tokens=True)
    kinds = _decoder_kinds(backend.decoder)
    mode = "byte_fallback" if "ByteFallback" in kinds else "byte_level" if "ByteLevel" in kinds else None
    alphabet = _byte_alphabet() if mode == "byte_level" else {}
    base = backend.encode(_PREFIX, add_special_tokens=False).tokens
    table = [b""] * (max(vocab.values()) + 1 if vocab else 0)
    for token, index in vocab.items():
        if mode == "byte_level" and token and all(char in alphabet for char in token):
            table[index] = bytes(alphabet[char] for char in token)
        elif mode == "byte_fallback" and len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            table[index] = bytes([int(token[3:5], 16)])
        else:
            text = backend.decoder.decode(base + [token]) if backend.decoder is not None else " ".join(base + [token])
            table[index] = text[text.index(_PREFIX) + len(_PREFIX) :].encode("utf-8") if _PREFIX in text else b""
    return table


class StopStrings:
    """Which rows of ``ys`` (batch, t) have just completed one of ``strings`` with their last token (the module's
    rule); ``table`` is :func:`token_bytes`. Only the last ``max(len(string in bytes))`` tokens are read, as
    transformers reads them (a token of at least one byte each, no string needs more)."""

    def __init__(self, strings: Sequence[str], table: Sequence[bytes]) -> None:
        self.strings = [string.encode("utf-8") for string in strings]
        self.table = list(table)
        self.window = max(len(string) for string in self.strings)

    def row_stops(self, ids: Sequence[int]) -> bool:
        """Whether the token sequence ``ids`` (a prompt and what followed it) stops at its last token."""
        tail = [self.table[i] if 0 <= i < len(self.table) else b"" for i in ids[-self.window :]]
        if not tail:
            return False
        text = b"".join(tail)
        last_start = len(text) - len(tail[-1])  # an occurrence must end after this byte offset
        for string in self.strings:
            at = text.find(string, max(0, last_start - len(string) + 1))
            if at >= 0 and at + len(string) > last_start:
                return True
        return False

    def __call__(self, ys: Tensor) -> Tensor:
        rows = [self.row_stops(row) for row in ys[:, -self.window :].tolist()]
        return torch.tensor(rows, dtype=torch.bool, device=ys.device)
