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
``add_special_tokens=False`` leaves them out (a prompt already rendered with its start token, as a chat template's).

Calling the tokenizer on a list of texts (``tokenizer(texts, padding=True, return_tensors="pt")``) encodes them in one
call, padded with the pad token to the longest on :attr:`PretrainedTokenizer.padding_side` (``tokenizer_config.json``'s
``padding_side``, else ``"right"``, as transformers; generation needs ``"left"``), with the ``attention_mask`` (1 = a
real token): transformers' ``input_ids`` and ``attention_mask`` for the same side.

:meth:`PretrainedTokenizer.apply_chat_template` renders a conversation, or a batch of them, with the folder's chat
template (:mod:`transformer.lm.pretrained.chat_template`) and encodes it without special tokens (padded as the call
above pads), as transformers does; ``continue_final_message`` leaves the last message open.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...common.optional import require
from .chat_template import choose_template, read_chat_templates, render_chat
from .config_fields import ConfigFields
from .errors import PretrainedFormatError
from .files import CONFIG_FILE, GENERATION_CONFIG_FILE, read_json

__all__ = ["PretrainedTokenizer", "TOKENIZER_FILE", "TOKENIZER_CONFIG_FILE", "SPECIAL_TOKEN_FIELDS"]

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
#: The special tokens ``tokenizer_config.json`` may name (a string, or an object with ``content``).
SPECIAL_TOKEN_FIELDS = ("bos_token", "eos_token", "pad_token", "unk_token")
PADDING_SIDES = ("left", "right")


class PretrainedTokenizer:
    """``encode(text) -> ids``, ``decode(ids) -> text``, ``tokenizer(texts, padding=True)``,
    ``apply_chat_template(messages)``; ``special_tokens`` ({field: (token, id)}), ``eos_ids`` (what generation stops
    at), ``pad_id``, ``vocab_size``, ``padding_side``, ``chat_template`` (the folder's: a string, {name: template}
    or None)."""

    def __init__(
        self,
        tokenizer: Any,
        special_tokens: dict[str, tuple[str, int]],
        eos_ids: Sequence[int],
        *,
        chat_template: str | dict[str, str] | None = None,
        padding_side: str = "right",
        where: str = "this tokenizer",
    ) -> None:
        self.tokenizer = tokenizer
        self.special_tokens = dict(special_tokens)
        self.eos_ids = tuple(eos_ids)
        self.pad_id = special_tokens["pad_token"][1] if "pad_token" in special_tokens else None
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.chat_template = chat_template
        self.padding_side = _padding_side("padding_side", padding_side)
        self.where = where

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
        side = settings.get("padding_side", "right")
        if side not in PADDING_SIDES:
            raise PretrainedFormatError(
                f"{folder / TOKENIZER_CONFIG_FILE}: field padding_side must be 'left' or 'right', got {side!r}"
            )
        templates = read_chat_templates(folder, settings)
        return cls(tokenizer, special, _eos_ids(folder), chat_template=templates, padding_side=side, where=str(folder))

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """The token ids of ``text``, with what the tokenizer's post-processor adds (a start token, say) unless
        ``add_special_tokens=False`` (a text that already holds them, as a rendered chat prompt does)."""
        if not isinstance(text, str):
            raise TypeError(f"PretrainedTokenizer.encode: text must be a str, got {type(text).__name__}")
        if not isinstance(add_special_tokens, bool):
            raise TypeError(
                f"PretrainedTokenizer.encode: add_special_tokens must be a bool, got {add_special_tokens!r}"
            )
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def __call__(
        self,
        texts: str | Sequence[str],
        *,
        padding: bool | str = False,
        padding_side: str | None = None,
        add_special_tokens: bool = True,
        return_tensors: str | None = None,
    ) -> dict[str, Any]:
        """``{"input_ids", "attention_mask"}`` of ``texts`` (one text or a list), as transformers' tokenizer call:
        lists of ids (one list for one text), or (batch, steps) long tensors with ``return_tensors="pt"``.
        ``padding=True`` (or ``"longest"``) pads every row to the longest with the pad token on ``padding_side``
        (default :attr:`padding_side`); the mask holds 1 for a real token, 0 for a pad. Rows of different lengths
        without padding cannot make a tensor (ValueError, as transformers')."""
        single = isinstance(texts, str)
        batch = [texts] if single else list(texts)
        for i, text in enumerate(batch):
            if not isinstance(text, str):
                raise TypeError(f"PretrainedTokenizer: texts[{i}] must be a str, got {type(text).__name__}")
        if padding not in (True, False, "longest", "do_not_pad"):
            raise ValueError(
                f"PretrainedTokenizer: padding must be True, False, 'longest' or 'do_not_pad', got {padding!r}"
            )
        if return_tensors not in (None, "pt"):
            raise ValueError(f"PretrainedTokenizer: return_tensors must be None or 'pt', got {return_tensors!r}")
        side = _padding_side("padding_side", self.padding_side if padding_side is None else padding_side)
        ids = [self.encode(text, add_special_tokens=add_special_tokens) for text in batch]
        masks = [[1] * len(row) for row in ids]
        width = max(map(len, ids), default=0)
        if padding in (True, "longest") and any(len(row) != width for row in ids):
            if self.pad_id is None:
                raise ValueError(
                    f"PretrainedTokenizer: padding needs a pad token, and {self.where} names none "
                    "(tokenizer_config.json's pad_token); as transformers, set one (tokenizer.pad_id = "
                    "tokenizer.eos_ids[0] is usual for generation)"
                )
            pad = [[self.pad_id] * (width - len(row)) for row in ids]
            holes = [[0] * (width - len(row)) for row in ids]
            if side == "left":
                ids = [p + row for p, row in zip(pad, ids, strict=True)]
                masks = [h + m for h, m in zip(holes, masks, strict=True)]
            else:
                ids = [row + p for p, row in zip(pad, ids, strict=True)]
                masks = [m + h for h, m in zip(holes, masks, strict=True)]
        if return_tensors == "pt":
            if any(len(row) != width for row in ids):
                raise ValueError(
                    f"PretrainedTokenizer: texts of {sorted(set(map(len, ids)))} tokens make no tensor without "
                    "padding; pass padding=True"
                )
            import torch

            return {"input_ids": torch.tensor(ids, dtype=torch.long), "attention_mask": torch.tensor(masks)}
        return (
            {"input_ids": ids[0], "attention_mask": masks[0]} if single else {"input_ids": ids, "attention_mask": masks}
        )

    def apply_chat_template(
        self,
        messages: Sequence[dict[str, Any]] | Sequence[Sequence[dict[str, Any]]],
        *,
        add_generation_prompt: bool = False,
        continue_final_message: bool = False,
        tokenize: bool = True,
        padding: bool | str = False,
        padding_side: str | None = None,
        return_tensors: str | None = None,
        return_dict: bool = False,
        chat_template: str | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
        documents: Sequence[dict[str, Any]] | None = None,
        **variables: Any,
    ) -> Any:
        """The conversation ``messages`` (``[{"role": "user", "content": ...}, ...]``), or a batch of them (a list
        of such lists), rendered with the chat template (:attr:`chat_template`, or ``chat_template=``: a template or
        the name of one), as transformers' ``apply_chat_template``: the text (``tokenize=False``; a list of texts for
        a batch) or its ids encoded with ``add_special_tokens=False`` by :meth:`__call__` (with ``padding``,
        ``padding_side`` and ``return_tensors``: transformers' ``input_ids``, a list of lists for a batch).
        ``return_dict=True`` gives ``{"input_ids", "attention_mask"}`` (transformers 5's default; ours is False, the
        ids alone, what its ``return_dict=False`` gives). ``add_generation_prompt=True`` ends each with the
        template's opening of the assistant's answer; ``continue_final_message=True`` leaves the last message open
        for the model to continue (refused with ``add_generation_prompt``, as transformers refuses); ``tools``,
        ``documents`` and extra keywords reach the template as variables. A folder without a template, or a
        conversation the template refuses: :class:`~transformer.lm.pretrained.chat_template.ChatTemplateError`."""
        batched = _is_batch(messages)
        if not isinstance(return_dict, bool):
            raise TypeError(f"PretrainedTokenizer.apply_chat_template: return_dict must be a bool, got {return_dict!r}")
        template = choose_template(self.chat_template, chat_template, tools, self.where)
        tokens = {field: token for field, (token, _) in self.special_tokens.items()}
        texts = [
            render_chat(
                template,
                conversation,
                add_generation_prompt=bool(add_generation_prompt),
                continue_final_message=continue_final_message,
                tools=tools,
                documents=documents,
                **{**tokens, **variables},
            )
            for conversation in (messages if batched else [messages])
        ]
        if not tokenize:
            return texts if batched else texts[0]
        encoded = self(
            texts if batched else texts[0],
            padding=padding,
            padding_side=padding_side,
            add_special_tokens=False,
            return_tensors=return_tensors,
        )
        return encoded if return_dict else encoded["input_ids"]

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        """The text of ``ids`` (special tokens left out unless ``skip_special_tokens=False``)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def generation_arguments(self) -> dict[str, Any]:
        """``end_symbol`` and ``stop_sequences`` for :func:`~transformer.lm.generation.generate`: generation stops
        at every id of :attr:`eos_ids`. Empty when there is none."""
        if not self.eos_ids:
            return {}
        return {"end_symbol": self.eos_ids[0], "end_symbols": list(self.eos_ids[1:])}


def _is_batch(messages: object) -> bool:
    """Whether ``messages`` is a batch of conversations (its first item a list or tuple), transformers' test."""
    return isinstance(messages, (list, tuple)) and len(messages) > 0 and isinstance(messages[0], (list, tuple))


def _padding_side(name: str, side: object) -> str:
    if side not in PADDING_SIDES:
        raise ValueError(f"PretrainedTokenizer: {name} must be 'left' or 'right', got {side!r}")
    return side


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
