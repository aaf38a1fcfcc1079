"""Streaming: the text of a generation given out as its tokens come, as transformers' ``TextStreamer`` does
(``transformers/generation/streamers.py``): ``generate(..., streamer=TextStreamer(tokenizer))``.

The searches call ``streamer.put(ids)`` first with the prompt (1, steps), then with each token generated (until the
row ends: the token that ends it included, nothing after it), and ``streamer.end()`` once; a streamer follows one row
(batch size 1, as transformers'). :class:`TextStreamer` gives out text only at valid UTF-8 boundaries: a character
whose bytes are split across tokens (a byte-level BPE writes "é" or an emoji as two or more tokens) is held until its
last byte has come, so what it gives out never holds a replacement character that the final text does not. The
continuation is decoded after its prompt and the prompt's text taken off (a SentencePiece tokenizer drops the leading
space of a text decoded alone), so the text given out, joined, is exactly the text of the whole continuation decoded
at once; :meth:`TextStreamer.end` gives out what was held (bytes that never completed a character included).

Where transformers' ``TextStreamer`` waits for a space (or a newline, or a CJK character) before printing a word,
this one prints every complete character at once; the text in the end is the same.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import torch

from ..contracts import Tensor

__all__ = ["TextStreamer", "REPLACEMENT"]

#: What a decoder writes for bytes that are not (yet) a whole UTF-8 character.
REPLACEMENT = "\ufffd"


class TextStreamer:
    """Gives out the text of one generated row as it grows: ``on_text(text)`` for every new piece (default: printed
    to ``sys.stdout`` and flushed, as transformers' ``TextStreamer``), and :attr:`text`, everything given out.

    ``tokenizer`` decodes (``decode(ids, skip_special_tokens=...)``: ours, a ``tokenizers.Tokenizer`` or a
    transformers tokenizer). ``skip_prompt=True`` gives out only the continuation; ``skip_special_tokens`` is passed
    to ``decode`` (default True); ``end_ids`` are tokens that end the row and are never text (the end-of-sequence
    ids, for a tokenizer that does not mark them special)."""

    def __init__(
        self,
        tokenizer: object,
        *,
        skip_prompt: bool = False,
        skip_special_tokens: bool = True,
        end_ids: Sequence[int] = (),
        on_text: Callable[[str], None] | None = None,
    ) -> None:
        if not callable(getattr(tokenizer, "decode", None)):
            raise TypeError(f"TextStreamer: tokenizer must have a decode(ids) method, got {type(tokenizer).__name__}")
        self.tokenizer, self.skip_prompt, self.skip_special_tokens = tokenizer, skip_prompt, skip_special_tokens
        self.end_ids = frozenset(int(i) for i in end_ids)
        self.on_text = on_text if on_text is not None else _print
        self.prompt: list[int] | None = None
        self.new: list[int] = []
        self.given = ""  # the continuation's text given out so far
        self.text = ""  # everything given out (the prompt's text too unless skip_prompt)
        self.ended = False

    def put(self, value: Tensor | Sequence[int] | int) -> None:
        """The prompt (the first call), then the next token(s) of the row: (1, n) or (n,) ids, or one id."""
        if self.ended:
            raise RuntimeError("TextStreamer: put after end(); make a new streamer for a new generation")
        ids = _ids(value)
        if self.prompt is None:
            self.prompt = ids
            if not self.skip_prompt:
                self._give(self._decode(ids))
            return
        self.new += [i for i in ids if i not in self.end_ids]
        self._flush(final=False)

    def end(self) -> None:
        """The generation is over: give out what was held back."""
        if self.prompt is None:
            self.prompt = []
        self._flush(final=True)
        self.ended = True

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def _flush(self, final: bool) -> None:
        head, whole = self._decode(self.prompt), self._decode(self.prompt + self.new)
        text = whole[len(head) :] if whole.startswith(head) else self._decode(self.new)
        if not final:
            text = text.rstrip(REPLACEMENT)  # the first bytes of a character whose last has not come
        if text.startswith(self.given) and len(text) > len(self.given):
            piece, self.given = text[len(self.given) :], text
            self._give(piece)

    def _give(self, piece: str) -> None:
        if piece:
            self.text += piece
            self.on_text(piece)


def _print(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _ids(value: Tensor | Sequence[int] | int) -> list[int]:
    """``value`` as a flat list of ids; a ValueError for more than one row (a streamer follows one)."""
    if isinstance(value, torch.Tensor):
        if value.dim() > 1 and value.size(0) != 1:
            raise ValueError(
                f"TextStreamer follows one row (batch size 1, as transformers'), got shape {tuple(value.shape)}"
            )
        return [int(i) for i in value.reshape(-1).tolist()]
    if isinstance(value, int):
        return [value]
    return [int(i) for i in value]
