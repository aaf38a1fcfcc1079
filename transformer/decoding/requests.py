"""Validating a decoding request before any step runs: lengths, token ids, padding, sampling and beam options.

These are guards, not shape contracts: they run whether contracts are on or off, and a ValueError names the argument
and its value. The encoder-decoder's searches validate into a :class:`SearchRequest` (:func:`validate_search`), the
language model's generation into a :class:`GenerationRequest` (:func:`validate_generation`); both read token ids,
the default padding and the model's limits the same way (:func:`validate_token_id`, :func:`default_pad_symbol`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from ..common.arguments import is_int, is_integral, is_real
from ..contracts import Tensor, validate_nonempty, validate_token_ids
from .steps import validate_step_checks

__all__ = [
    "SearchRequest",
    "validate_search",
    "GenerationRequest",
    "validate_generation",
    "validate_end_symbols",
    "validate_max_len",
    "validate_token_id",
    "default_pad_symbol",
    "validate_sampling",
    "validate_beam",
    "validate_transformers_beam",
]


def validate_token_id(name: str, value: object, vocab: int | None, vocabulary: str) -> None:
    """``value`` (None: not given) must be a token id in ``[0, vocab)`` (any id >= 0 when ``vocab`` is None);
    ``vocabulary`` says in the error which vocabulary that is."""
    if value is None:
        return
    if not is_int(value, at_least=0, below=vocab):
        raise ValueError(f"{name}={value!r} must be a token id in [0, {vocab}) ({vocabulary})")


def default_pad_symbol(pad_symbol: int | None, config: object, end_symbol: int | None) -> object:
    """The filler after a row's end symbol: ``pad_symbol``, else the config's pad id, else the end symbol, else 0."""
    if pad_symbol is None:
        pad_symbol = getattr(config, "pad_id", None)
        if pad_symbol is None:
            pad_symbol = end_symbol if end_symbol is not None else 0
    return pad_symbol


# ---------------------------------------------------------------------------- the encoder-decoder's searches
def validate_max_len(model: nn.Module, max_len: object) -> int:
    """A search's ``max_len`` (start symbol included): a positive int within the model's ``config.max_len``."""
    if not is_int(max_len):
        raise ValueError(f"max_len must be a positive int, got {max_len!r} ({type(max_len).__name__})")
    if max_len < 1:
        raise ValueError(f"max_len must be positive (it counts the start symbol), got max_len={max_len}")
    limit = getattr(getattr(model, "config", None), "max_len", None)
    if limit is not None and max_len > limit:
        raise ValueError(f"max_len={max_len} exceeds the model's max_len={limit} (positions it can encode)")
    return max_len


@dataclass(frozen=True)
class SearchRequest:
    """The validated arguments every search of an encoder-decoder shares."""

    max_len: int
    start: int
    end: int | None
    pad: int
    checks: str
    who: str


def validate_search(
    model: nn.Module,
    who: str,
    src: Tensor,
    max_len: object,
    start_symbol: int,
    end_symbol: int | None,
    pad_symbol: int | None,
    checks: object,
) -> SearchRequest:
    """Check the arguments of an encoder-decoder search (``who``), naming what is wrong."""
    validate_nonempty(src, f"{who}: argument 'src'", "batch src_len")
    validate_max_len(model, max_len)
    config = getattr(model, "config", None)
    vocab = getattr(config, "tgt_vocab", None)
    validate_token_id("start_symbol", start_symbol, vocab, "the target vocabulary")
    validate_token_id("end_symbol", end_symbol, vocab, "the target vocabulary")
    policy = validate_step_checks(who, checks)
    pad_symbol = default_pad_symbol(pad_symbol, config, end_symbol)
    validate_token_id("pad_symbol", pad_symbol, vocab, "the target vocabulary")
    return SearchRequest(max_len, start_symbol, end_symbol, pad_symbol, policy, who)


# ---------------------------------------------------------------------------- the language model's generation
@dataclass(frozen=True)
class GenerationRequest:
    """The validated arguments of a generation: total length, end and pad tokens, stop sequences."""

    max_len: int
    end: int | None
    pad: int
    stops: tuple[tuple[int, ...], ...]


def validate_generation(
    model: nn.Module,
    who: str,
    prompt: Tensor,
    max_new_tokens: object,
    end_symbol: int | None,
    pad_symbol: int | None,
    stop_sequences: Sequence[Sequence[int]],
) -> GenerationRequest:
    """Check a language model's generation request (``who``), naming what is wrong."""
    config = model.config
    validate_nonempty(prompt, f"{who}: argument 'prompt'", "batch steps")
    validate_token_ids(prompt, config.vocab, f"{who}: argument 'prompt'")
    if not is_int(max_new_tokens, at_least=1):
        raise ValueError(f"{who}: max_new_tokens must be a positive int, got {max_new_tokens!r}")
    total = prompt.size(1) + max_new_tokens
    if total > config.max_len:
        raise ValueError(
            f"{who}: the prompt ({prompt.size(1)} tokens) plus max_new_tokens={max_new_tokens} is {total} "
            f"positions, more than the model's max_len={config.max_len}; ask for at most "
            f"{max(config.max_len - prompt.size(1), 0)} new tokens or shorten the prompt"
        )
    validate_token_id("end_symbol", end_symbol, config.vocab, "the model's vocabulary")
    pad_symbol = default_pad_symbol(pad_symbol, config, end_symbol)
    validate_token_id("pad_symbol", pad_symbol, config.vocab, "the model's vocabulary")
    stops = []
    for i, stop in enumerate(stop_sequences):
        stop = tuple(stop)
        if not stop:
            raise ValueError(f"{who}: stop_sequences[{i}] is empty; every stop sequence needs at least one token")
        for token in stop:
            validate_token_id(f"stop_sequences[{i}] token", token, config.vocab, "the model's vocabulary")
        stops.append(stop)
    if stops and end_symbol is None:
        raise ValueError(
            f"{who}: stop_sequences need an end_symbol (the token that ends a row once a stop sequence "
            "has been generated)"
        )
    return GenerationRequest(total, end_symbol, pad_symbol, tuple(stops))


def validate_end_symbols(who: str, end_symbols: object, end_symbol: int | None, vocab: int) -> tuple[int, ...]:
    """``end_symbols`` (more tokens that end a row) as a tuple of token ids, each checked against ``vocab``; they
    need an ``end_symbol`` (the token stop sequences end with, and the first end token)."""
    if isinstance(end_symbols, (str, bytes)) or not isinstance(end_symbols, Sequence):
        raise ValueError(f"{who}: end_symbols must be a sequence of token ids, got {end_symbols!r}")
    ends = tuple(end_symbols)
    for i, token in enumerate(ends):
        validate_token_id(f"end_symbols[{i}]", token, vocab, "the model's vocabulary")
    if ends and end_symbol is None:
        raise ValueError(f"{who}: end_symbols={list(ends)} need an end_symbol (pass the first end token as end_symbol)")
    return ends


# ---------------------------------------------------------------------------- sampling and beam options
def validate_sampling(who: str, temperature: object, top_k: object, top_p: object) -> None:
    """Refuse sampling options that have no meaning, naming the argument and its value (a guard: always on)."""
    if not (is_real(temperature) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(
            f"{who}: temperature must be a positive finite number, got {temperature!r} "
            "(a temperature near 0 is greedy decoding)"
        )
    if top_k is not None and not is_integral(top_k, at_least=1):
        raise ValueError(f"{who}: top_k must be a positive int or None, got {top_k!r}")
    if top_p is not None and not (is_real(top_p) and 0.0 < top_p <= 1.0):
        raise ValueError(f"{who}: top_p must be a number in (0, 1] or None, got {top_p!r}")


def validate_beam(who: str, beam_size: object, length_penalty: object) -> None:
    """Refuse beam options that have no meaning, naming the argument and its value (a guard: always on)."""
    if not is_integral(beam_size, at_least=1):
        raise ValueError(f"{who}: beam_size must be a positive int, got {beam_size!r}")
    if not (is_real(length_penalty) and math.isfinite(length_penalty) and length_penalty >= 0):
        raise ValueError(f"{who}: length_penalty must be a finite number >= 0, got {length_penalty!r}")


def validate_transformers_beam(who: str, num_beams: object, length_penalty: object, early_stopping: object) -> int:
    """transformers' beam options (``num_beams``, ``length_penalty``, ``early_stopping``): the number of beams, after
    a ValueError naming a wrong value, or a beam option given without beams (``num_beams=1``)."""
    if not is_integral(num_beams, at_least=1):
        raise ValueError(f"{who}: num_beams must be a positive int, got {num_beams!r}")
    if not (is_real(length_penalty) and math.isfinite(length_penalty)):
        raise ValueError(f"{who}: length_penalty must be a finite number, got {length_penalty!r}")
    if not any(early_stopping is value for value in (True, False)) and early_stopping != "never":
        raise ValueError(
            f"{who}: early_stopping must be True, False or 'never' (transformers'), got {early_stopping!r}"
        )
    if num_beams == 1 and (length_penalty != 1.0 or early_stopping is not False):
        raise ValueError(f"{who}: length_penalty and early_stopping only apply to beam search; pass num_beams > 1")
    return int(num_beams)
