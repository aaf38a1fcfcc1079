"""Generation with the language model: greedy, sampling (temperature, top-k, top-p, from a seed) and beam search,
continuing a prompt, with an end token, stop sequences and an enforced maximum length.

Search is :mod:`transformer.decoding`'s (``search``, ``sampler``, ``beam_search_steps``) over the model's step
function (:meth:`TransformerLM.next_tokens`, with the modules' key/value cache). What this module adds is the
language model's side: validating the request, and stop sequences, which a step wrapper turns into the end token.

Every result has exactly ``prompt length + max_new_tokens`` columns, the prompt first: after a row's end token
(or the end token that follows a stop sequence), its positions hold ``pad_symbol``. A request longer than the
model's ``max_len`` raises ValueError naming the prompt length, ``max_new_tokens`` and the limit.

``checks`` says which steps run with the model's contracts checked, as in :mod:`transformer.decoding`: ``"first"``
(the default: the prompt, the first one-token step, and any step whose batch changes), ``"always"`` or ``"never"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ..contracts import Int, Tensor, checked, validate_nonempty, validate_token_ids
from ..decoding import (CheckedSteps, beam_search_steps, sampler, search, seeded_generator, validate_beam,
                       validate_sampling)

__all__ = ["generate", "beam_generate"]


@dataclass(frozen=True)
class GenerationRequest:
    """The validated arguments of a generation: total length, end and pad tokens, stop sequences."""

    max_len: int
    end: int | None
    pad: int
    stops: tuple[tuple[int, ...], ...]


def _token_id(name: str, value: object, vocab: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab:
        raise ValueError(f"{name}={value!r} must be a token id in [0, {vocab}) (the model's vocabulary)")


def validate_request(model: nn.Module, who: str, prompt: Tensor, max_new_tokens: object, end_symbol: int | None,
                     pad_symbol: int | None, stop_sequences: Sequence[Sequence[int]]) -> GenerationRequest:
    """Check a generation request whether contracts are on or off (guards), naming what is wrong."""
    config = model.config
    validate_nonempty(prompt, f"{who}: argument 'prompt'", "batch steps")
    validate_token_ids(prompt, config.vocab, f"{who}: argument 'prompt'")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"{who}: max_new_tokens must be a positive int, got {max_new_tokens!r}")
    total = prompt.size(1) + max_new_tokens
    if total > config.max_len:
        raise ValueError(f"{who}: the prompt ({prompt.size(1)} tokens) plus max_new_tokens={max_new_tokens} is {total} "
                         f"positions, more than the model's max_len={config.max_len}; ask for at most "
                         f"{max(config.max_len - prompt.size(1), 0)} new tokens or shorten the prompt")
    _token_id("end_symbol", end_symbol, config.vocab)
    if pad_symbol is None:
        pad_symbol = config.pad_id if config.pad_id is not None else (end_symbol if end_symbol is not None else 0)
    _token_id("pad_symbol", pad_symbol, config.vocab)
    stops = []
    for i, stop in enumerate(stop_sequences):
        stop = tuple(stop)
        if not stop:
            raise ValueError(f"{who}: stop_sequences[{i}] is empty; every stop sequence needs at least one token")
        for token in stop:
            _token_id(f"stop_sequences[{i}] token", token, config.vocab)
        stops.append(stop)
    if stops and end_symbol is None:
        raise ValueError(f"{who}: stop_sequences need an end_symbol (the token that ends a row once a stop sequence "
                         "has been generated)")
    return GenerationRequest(total, end_symbol, pad_symbol, tuple(stops))


class StopSequences:
    """A step function that ends a row once it has generated one of ``stops``: from then on the row's next token
    is ``end_symbol`` with probability 1, which the search turns into padding. A stop sequence must end with a
    generated token (it may begin in the prompt's ``prompt_len`` tokens); a prompt ending with one is not stopped."""

    def __init__(self, steps, stops: Sequence[Sequence[int]], end_symbol: int, prompt_len: int) -> None:
        self.steps, self.end, self.prompt_len = steps, end_symbol, prompt_len
        self.stops = [torch.tensor(stop, dtype=torch.long) for stop in stops]

    def __call__(self, ys: Tensor) -> Tensor:
        log_probs = self.steps(ys)
        stopped = torch.zeros(ys.size(0), dtype=torch.bool, device=ys.device)
        for stop in self.stops:
            n = stop.numel()
            if ys.size(1) > self.prompt_len and ys.size(1) >= n:  # ends with a generated token
                stopped |= (ys[:, -n:] == stop.to(ys.device)).all(dim=1)
        if bool(stopped.any()):
            forced = torch.full_like(log_probs, float("-inf"))
            forced[:, self.end] = 0.0
            log_probs = torch.where(stopped[:, None], forced, log_probs)
        return log_probs

    def reorder(self, index: Tensor) -> None:
        self.steps.reorder(index)


@checked
def generate(
    model: nn.Module,
    prompt: Int[Tensor, "batch steps"],
    max_new_tokens: int,
    *,
    sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | torch.Generator | None = None,
    end_symbol: int | None = None,
    pad_symbol: int | None = None,
    stop_sequences: Sequence[Sequence[int]] = (),
    use_cache: bool = True,
    checks: str = "first",
) -> Int[Tensor, "batch {max_new_tokens}+steps"]:
    """Continue ``prompt`` (batch, steps) by ``max_new_tokens`` tokens: greedy (``sample=False``), or drawn from
    softmax(log_probs / ``temperature``) cut to the ``top_k`` most probable and the ``top_p`` nucleus, from a
    ``torch.Generator`` seeded by ``seed`` (the same seed gives the same tokens).

    A row ends at ``end_symbol``, or after one of ``stop_sequences`` (token-id sequences; the end symbol is then
    appended); its later positions hold ``pad_symbol`` (default: the config's ``pad_id``). Decoding stops early
    once every row has ended. Runs under ``torch.no_grad``; put the model in eval mode first (dropout).
    ``checks``: which steps run with the contracts checked (``"first"``, ``"always"``, ``"never"``; see
    :class:`transformer.decoding.CheckedSteps`).
    """
    request = validate_request(model, "generate", prompt, max_new_tokens, end_symbol, pad_symbol, stop_sequences)
    validate_sampling("generate", temperature, top_k, top_p)
    steps = CheckedSteps(model.next_tokens(use_cache=use_cache), checks, "generate")
    if sample:
        pick = sampler(temperature, top_k, top_p, seeded_generator(seed), who="generate")
    else:
        given = [f"{name}={value!r}" for name, value, default in
                 (("temperature", temperature, 1.0), ("top_k", top_k, None), ("top_p", top_p, None)) if value != default]
        if given:
            raise ValueError(f"generate: {', '.join(given)} only applies to sampling; pass sample=True (or leave it "
                             "out for greedy decoding)")
        pick = lambda log_probs: log_probs.argmax(dim=-1)  # noqa: E731
    with torch.no_grad():
        if request.stops:
            steps = StopSequences(steps, request.stops, request.end, prompt.size(1))
        return search(steps, prompt, request.max_len, request.end, request.pad, pick)


@checked
def beam_generate(
    model: nn.Module,
    prompt: Int[Tensor, "1 steps"],
    max_new_tokens: int,
    *,
    beam_size: int = 4,
    length_penalty: float = 0.0,
    end_symbol: int | None = None,
    pad_symbol: int | None = None,
    use_cache: bool = True,
    checks: str = "first",
) -> tuple[Int[Tensor, "1 {max_new_tokens}+steps"], float]:
    """Beam search continuing one prompt (:func:`transformer.decoding.beam_search_steps`, GNMT length penalty over
    the generated tokens): the best continuation, padded like :func:`generate`, and its normalised score.
    ``checks`` as :func:`generate`."""
    request = validate_request(model, "beam_generate", prompt, max_new_tokens, end_symbol, pad_symbol, ())
    validate_beam("beam_generate", beam_size, length_penalty)
    steps = CheckedSteps(model.next_tokens(use_cache=use_cache), checks, "beam_generate")
    with torch.no_grad():
        tokens, score = beam_search_steps(steps, prompt, request.max_len, request.end, beam_size, length_penalty)
    out = torch.full((1, request.max_len), request.pad, dtype=prompt.dtype, device=prompt.device)
    out[0, : len(tokens)] = torch.tensor(tokens, dtype=prompt.dtype)
    return out, score
