"""The tokenizer of a Hugging Face checkpoint folder: ``tokenizer.json`` through the ``tokenizers`` library, the
special tokens of ``tokenizer_config.json`` and the end-of-sequence ids generation stops at.

The ids generation stops at are transformers' ``generate``'s: ``generation_config.json``'s ``eos_token_id`` (one
id or a list, as Llama 3 lists three) when that file exists (without the field: none), else ``config.json``'s, else
none (the tokenizer's ``eos_token`` alone does
not stop transformers' ``generate`` either). :meth:`PretrainedTokenizer.generation_arguments` gives them to
:func:`~transformer.lm.generation.generate`: the first as ``end_symbol``, the others as ``end_symbols`` (a row
ends at any of them, keeps it and pads after it, as transformers' ``generate`` does).
Encoding adds what the tokenizer's post-processor adds (Llama's ``<s>``), as transformers' tokenizer does; the
``add_bos_token`` / ``add_eos_token`` flags of ``tokenizer_config.json`` are not read (transformers' Llama tokenizer
rebuilds the post-processor from them: a file whose flags disagree with its ``tokenizer.json`` encodes differently).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...common.optional import require
from .config_fields import ConfigFields
from .errors import PretrainedFormatError
from .files import CONFIG_FILE, GENERATION_CONFIG_FILE, read_json

__all__ = ["PretrainedTokenizer", "TOKENIZER_FILE", "TOKENIZER_CONFIG_FILE", "SPECIAL_TOKEN_FIELDS"]

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
#: The special tokens ``tokenizer_config.json`` may name (a string, or an object with ``content``).
SPECIAL_TOKEN_FIELDS = ("bos_token", "eos_token", "pad_token", "unk_token")


class PretrainedTokenizer:
    """``encode(text) -> ids``, ``decode(ids) -> text``; ``special_tokens`` ({field: (token, id)}), ``eos_ids``
    (what generation stops at), ``pad_id``, ``vocab_size``."""

    def __init__(self, tokenizer: Any, special_tokens: dict[str, tuple[str, int]], eos_ids: Sequence[int]) -> None:
        self.tokenizer = tokenizer
        self.special_tokens = dict(special_tokens)
        self.eos_ids = tuple(eos_ids)
        self.pad_id = special_tokens["pad_token"][1] if "pad_token" in special_tokens else None
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)

    @classmethod
    def from_folder(cls, path: str | Path) -> PretrainedTokenizer:
        """The tokenizer of a checkpoint folder (``tokenizer.json`` required; ``tokenizer_config.json``,
        ``generation_config.json`` and ``config.json`` read when present)."""
        require("tokenizers", f"reading the tokenizer of {path}")
        from tokenizers import Tokenizer

        folder = Path(path)
        file = folder / TOKENIZER_FILE
        if not file.is_file():
            raise PretrainedFormatError(f"{file}: no such file (the tokenizer of a Hugging Face checkpoint folder)")
        try:
            tokenizer = Tokenizer.from_file(str(file))
        except Exception as error:  # the library raises plain Exception for a file it cannot parse
            raise PretrainedFormatError(f"{file}: not a tokenizers tokenizer.json ({error})") from None
        settings = read_json(folder / TOKENIZER_CONFIG_FILE, required=False) or {}
        special = {}
        for field in SPECIAL_TOKEN_FIELDS:
            token = settings.get(field)
            if isinstance(token, dict):
                token = token.get("content")
            if token is None:
                continue
            token_id = tokenizer.token_to_id(token) if isinstance(token, str) else None
            if token_id is None:
                raise PretrainedFormatError(
                    f"{folder / TOKENIZER_CONFIG_FILE}: field {field}={token!r} is not a token of {file}"
                )
            special[field] = (token, token_id)
        return cls(tokenizer, special, _eos_ids(folder))

    def encode(self, text: str) -> list[int]:
        """The token ids of ``text``, with what the tokenizer's post-processor adds (a start token, say)."""
        if not isinstance(text, str):
            raise TypeError(f"PretrainedTokenizer.encode: text must be a str, got {type(text).__name__}")
        return self.tokenizer.encode(text).ids

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        """The text of ``ids`` (special tokens left out unless ``skip_special_tokens=False``)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def generation_arguments(self) -> dict[str, Any]:
        """``end_symbol`` and ``stop_sequences`` for :func:`~transformer.lm.generation.generate`: generation stops
        at every id of :attr:`eos_ids`. Empty when there is none."""
        if not self.eos_ids:
            return {}
        return {"end_symbol": self.eos_ids[0], "end_symbols": list(self.eos_ids[1:])}


def _eos_ids(folder: Path) -> list[int]:
    """``eos_token_id`` of ``generation_config.json`` when the file is there (absent or null in it: none, even if
    ``config.json`` names one), else of ``config.json``, else none: what transformers' ``generate`` stops at, since
    ``from_pretrained`` builds the generation config from ``config.json`` only when ``generation_config.json`` is
    missing."""
    generation = read_json(folder / GENERATION_CONFIG_FILE, required=False)
    if generation is not None:
        return ConfigFields(generation, folder / GENERATION_CONFIG_FILE).token_ids("eos_token_id")
    values = read_json(folder / CONFIG_FILE, required=False)
    return [] if values is None else ConfigFields(values, folder / CONFIG_FILE).token_ids("eos_token_id")
