"""Generation with the language model: greedy, sampling (temperature, top-k, top-p, from a seed) and beam search,
continuing a prompt, with an end token, stop sequences, stop strings and an enforced maximum length.

Search is :mod:`transformer.decoding`'s (``search``, ``sampler``, ``beam_search_steps``) over the model's step
function (:meth:`TransformerLM.next_tokens`, with the modules' key/value cache). What this module adds is the
language model's side: stop sequences, which a step wrapper turns into the end token. Its request is validated by
:func:`transformer.decoding.validate_generation`, with the same token-id and padding rules as the searches'.

Every result has exactly ``prompt length + max_new_tokens`` columns, the prompt first: after a row's end token
(or the end token that follows a stop sequence), its positions hold ``pad_symbol``. A request longer than the
model's ``max_len`` raises ValueError naming the prompt length, ``max_new_tokens`` and the limit.

``checks`` says which steps run with the model's contracts checked, as in :mod:`transformer.decoding`: ``"first"``
(the default: the prompt, the first one-token step, and any step whose batch changes), ``"always"`` or ``"never"``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..contracts import Bool, Int, Tensor, checked
from ..decoding import (
    CheckedSteps,
    StopStrings,
    beam_search_steps,
    sampler,
    search,
    seeded_generator,
    token_bytes,
    transformers_beam_search,
    validate_beam,
    validate_end_symbols,
    validate_generation,
    validate_sampling,
    validate_transformers_beam,
)
from .decode_layout import check_weight_layout, laid_out_for_decoding
from .static_decode import StaticSteps, compiled_decode_step, static_decode_refusal

__all__ = ["generate", "beam_generate"]


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


def prompt_mask_from(who: str, prompt: Tensor, prompt_mask: Tensor | None, attention_mask: object) -> Tensor | None:
    """The prompt mask of a call given Hugging Face's ``attention_mask`` (batch, steps) of 1 = a real token and
    0 = a pad, int or bool, as transformers' ``generate`` takes it: its bool form, after a ValueError naming the
    argument, the expected and the actual for a wrong shape, values other than 0/1, right padding, or both masks."""
    if attention_mask is None:
        return prompt_mask
    if prompt_mask is not None:
        raise ValueError(f"{who}: pass attention_mask (1/0, as transformers) or prompt_mask (True/False), not both")
    if not isinstance(attention_mask, Tensor):
        raise TypeError(
            f"{who}: attention_mask must be a torch.Tensor of 0/1 (batch, steps), got {type(attention_mask).__name__}"
        )
    if tuple(attention_mask.shape) != tuple(prompt.shape):
        raise ValueError(
            f"{who}: attention_mask must have the prompt's shape (batch, steps) = {tuple(prompt.shape)}, got "
            f"{tuple(attention_mask.shape)}"
        )
    if attention_mask.dtype.is_floating_point or attention_mask.dtype.is_complex:
        raise ValueError(f"{who}: attention_mask must be an integer or bool tensor of 0/1, got {attention_mask.dtype}")
    values = sorted(set(attention_mask.unique().tolist()) - {0, 1})
    if values:
        raise ValueError(f"{who}: attention_mask must hold only 0 (a pad) and 1 (a real token), got {values[:5]}")
    mask = attention_mask.bool().to(prompt.device)
    right = mask[:, :-1] & ~mask[:, 1:]  # a real token followed by a pad
    if bool(right.any()):
        row, col = (int(i) for i in right.nonzero()[0])
        raise ValueError(
            f"{who}: attention_mask must pad on the left (0s before 1s in every row: generation continues each row's "
            f"last position; tokenizer.padding_side = 'left', as transformers asks), got a 1 followed by a 0 in row "
            f"{row} at column {col}"
        )
    return mask


def _next_tokens(model: nn.Module, use_cache: bool, prompt_mask: Tensor | None, who: str, length: int | None):
    """The model's step function, given the prompt's real tokens when there is a ``prompt_mask``; its key/value
    cache (if it has one) holds room for the request's ``length`` positions from the start (no copy per step).
    Beam search passes None: it reorders the cache at every step, which copies all the room reserved."""
    _check_real_rows(who, prompt_mask)
    if prompt_mask is None:
        steps = model.next_tokens(use_cache=use_cache)
    else:
        steps = model.next_tokens(use_cache=use_cache, prompt_mask=prompt_mask)
    if length is not None and getattr(steps, "cache", None) is not None and hasattr(steps.cache, "reserve"):
        steps.cache.reserve(length)
    return steps


def _check_real_rows(who: str, prompt_mask: Tensor | None) -> None:
    """A ValueError naming the first row of ``prompt_mask`` without a real token."""
    if prompt_mask is not None and bool((~prompt_mask.any(dim=1)).any()):
        row = int((~prompt_mask.any(dim=1)).nonzero()[0, 0])
        raise ValueError(f"{who}: prompt_mask has no real token in row {row} (True = a real token)")


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
    end_symbols: Sequence[int] = (),
    pad_symbol: int | None = None,
    stop_sequences: Sequence[Sequence[int]] = (),
    use_cache: bool = True,
    checks: str = "first",
    prompt_mask: Bool[Tensor, "batch steps"] | None = None,
    attention_mask: Tensor | None = None,
    stop_strings: Sequence[str] = (),
    tokenizer: object = None,
    streamer: object = None,
    num_beams: int = 1,
    length_penalty: float = 1.0,
    early_stopping: bool | str = False,
    compile: bool = False,
    weight_layout: str = "auto",
) -> Int[Tensor, "batch {max_new_tokens}+steps"]:
    """Continue ``prompt`` (batch, steps) by ``max_new_tokens`` tokens: greedy (``sample=False``), or drawn from
    softmax(log_probs / ``temperature``) cut to the ``top_k`` most probable and the ``top_p`` nucleus, from a
    ``torch.Generator`` seeded by ``seed`` (the same seed gives the same tokens).

    A row ends at ``end_symbol`` or at any token of ``end_symbols`` (more end tokens, as Hugging Face's list of
    ``eos_token_id``: the row keeps the token it ended with; they need an ``end_symbol``), or after one of
    ``stop_sequences`` (token-id sequences; the end symbol is then
    appended); its later positions hold ``pad_symbol`` (default: the config's ``pad_id``). Decoding stops early
    once every row has ended. Runs under ``torch.no_grad``; put the model in eval mode first (dropout).
    ``checks``: which steps run with the contracts checked (``"first"``, ``"always"``, ``"never"``; see
    :class:`transformer.decoding.CheckedSteps`).

    ``prompt_mask`` (batch, steps) bool, True = a real token (Hugging Face's ``attention_mask``), generates from
    left-padded prompts: the pads are never attended and each row's positions count from its first real token.
    ``attention_mask`` is the same mask as transformers takes it, int or bool, 1 = a real token and 0 = a pad
    (left padding only; refused with ``prompt_mask``).

    ``stop_strings`` (texts, with the ``tokenizer`` the prompt was encoded with: ours or a ``tokenizers`` /
    transformers fast tokenizer) end a row as transformers' ``generate(stop_strings=..., tokenizer=...)`` does: at
    the first token whose text completes one of them (inside a token, across tokens, from the prompt on; see
    :mod:`transformer.decoding.stop_strings`). The row keeps that token; its later positions hold ``pad_symbol``.

    ``streamer`` (:class:`transformer.decoding.TextStreamer`, or any object with ``put(ids)`` and ``end()``, as
    transformers' ``generate(streamer=...)``) follows a batch of one row: ``put`` gets the prompt's real tokens,
    then each token as it is generated up to the one that ends the row, then ``end()``.

    ``num_beams=K`` > 1 is transformers' beam search (``generate(num_beams=K, do_sample=False, length_penalty=...,
    early_stopping=...)``, same defaults: 1.0 and False; :mod:`transformer.decoding.beam_transformers`), each row of
    the batch searched on its own, the end tokens those of ``end_symbol`` and ``end_symbols``: the best finished
    hypothesis, padded after it like the other rows. It takes no sampling, stop strings, stop sequences or streamer.

    ``compile=True`` decodes over a static cache with a step compiled by ``torch.compile``, once per batch size and
    room (:mod:`transformer.lm.static_decode`): the same tokens, greedy or sampled with the same generator. The
    contracts are checked as ``checks`` says on the prompt; the compiled step's are checked while it is traced (its
    shapes never change), and not at all with ``checks="never"``. Beam search, and a model the static step cannot
    take (:func:`~transformer.lm.static_decode.static_decode_refusal`: training mode, a mixture of experts,
    ``use_cache=False``, ...), decode eagerly as with ``compile=False``, the default (docs/benchmarks.md, "A compiled
    decode step": 1.06x-1.17x the eager step's speed on an idle 2-core machine, after a compile of 8-18 s per batch
    size and room that a request of a few hundred tokens does not repay).

    ``weight_layout="auto"`` (the default) decodes a request of at least 32 new tokens with the float32 CPU weights
    whose products it speeds up (the output head; at batch 1 also the wide maps such as gate and up) stored
    transposed, and lays them back when it ends (:mod:`transformer.lm.decode_layout`; docs/benchmarks.md, "Weights
    laid out for decoding"): the same tokens up to float32 rounding of the logits. ``"as_loaded"`` keeps the weights
    as they are (the logits bit for bit a forward call's). Half precision and CUDA weights are never relaid.
    """
    request = validate_generation(model, "generate", prompt, max_new_tokens, end_symbol, pad_symbol, stop_sequences)
    stopped = _stop_strings("generate", stop_strings, tokenizer)
    prompt_mask = prompt_mask_from("generate", prompt, prompt_mask, attention_mask)
    validate_sampling("generate", temperature, top_k, top_p)
    also_end = validate_end_symbols("generate", end_symbols, end_symbol, model.config.vocab)
    beams = validate_transformers_beam("generate", num_beams, length_penalty, early_stopping)
    check_weight_layout("generate", weight_layout)
    if beams > 1:
        given = [name for name, value in (("sample=True", sample), ("stop_strings", stopped), ("stop_sequences",
                 request.stops), ("streamer", streamer)) if value]  # fmt: skip
        if given:
            raise ValueError(f"generate: num_beams={beams} (beam search) takes no {', '.join(given)}")
        ends = ([] if end_symbol is None else [end_symbol]) + list(also_end)
        out = torch.full((prompt.size(0), request.max_len), request.pad, dtype=prompt.dtype, device=prompt.device)
        with torch.no_grad(), laid_out_for_decoding(model, beams, max_new_tokens, weight_layout):
            for row in range(prompt.size(0)):
                mask = None if prompt_mask is None else prompt_mask[row : row + 1]
                steps = CheckedSteps(_next_tokens(model, use_cache, mask, "generate", None), checks, "generate")
                tokens = transformers_beam_search(
                    steps, prompt[row : row + 1], request.max_len, ends, beams, length_penalty, early_stopping
                )
                out[row, : len(tokens)] = torch.tensor(tokens, dtype=prompt.dtype)
        return out
    if not isinstance(compile, bool):
        raise TypeError(f"generate: compile must be a bool, got {compile!r}")
    layout = laid_out_for_decoding(model, prompt.size(0), max_new_tokens, weight_layout)
    length = prompt.size(1) + max_new_tokens
    if compile and static_decode_refusal(model, use_cache) is None:
        _check_real_rows("generate", prompt_mask)
        steps = StaticSteps(model, length, prompt_mask, compiled_decode_step(), greedy=not sample, checks=checks)
    else:
        steps = CheckedSteps(_next_tokens(model, use_cache, prompt_mask, "generate", length), checks, "generate")
    if sample:
        pick = sampler(temperature, top_k, top_p, seeded_generator(seed, "generate"), who="generate")
    else:
        given = [
            f"{name}={value!r}"
            for name, value, default in (
                ("temperature", temperature, 1.0),
                ("top_k", top_k, None),
                ("top_p", top_p, None),
            )
            if value != default
        ]
        if given:
            raise ValueError(
                f"generate: {', '.join(given)} only applies to sampling; pass sample=True (or leave it "
                "out for greedy decoding)"
            )
        pick = lambda log_probs: log_probs.argmax(dim=-1)  # noqa: E731
    on_token = _streaming("generate", streamer, prompt, prompt_mask)
    with torch.no_grad(), layout:
        if request.stops:
            steps = StopSequences(steps, request.stops, request.end, prompt.size(1))
        out = search(steps, prompt, request.max_len, request.end, request.pad, pick, also_end, stopped, on_token)
    if streamer is not None:
        streamer.end()
    return out


def _streaming(who: str, streamer: object, prompt: Tensor, prompt_mask: Tensor | None):
    """The search's ``on_token`` for ``streamer`` (None without one), after giving it the prompt's real tokens; a
    ValueError for a batch of several rows, a TypeError for an object without ``put`` and ``end``."""
    if streamer is None:
        return None
    if not (callable(getattr(streamer, "put", None)) and callable(getattr(streamer, "end", None))):
        raise TypeError(f"{who}: streamer must have put(ids) and end() (a TextStreamer), got {type(streamer).__name__}")
    if prompt.size(0) != 1:
        raise ValueError(
            f"{who}: a streamer follows one row (batch size 1, as transformers'), got a prompt of {prompt.size(0)} rows"
        )
    streamer.put(prompt[0] if prompt_mask is None else prompt[0][prompt_mask[0]])

    def on_token(tokens: Tensor, live: Tensor) -> None:
        if bool(live[0]):
            streamer.put(tokens[:1])

    return on_token


def _stop_strings(who: str, stop_strings: object, tokenizer: object) -> StopStrings | None:
    """The stop-string test of a call, or None without stop strings; a ValueError naming what is wrong."""
    if isinstance(stop_strings, str):
        stop_strings = [stop_strings]  # transformers takes one string as a list of one
    stop_strings = list(stop_strings)
    for i, text in enumerate(stop_strings):
        if not isinstance(text, str) or not text:
            raise ValueError(f"{who}: stop_strings[{i}] must be a non-empty str, got {text!r}")
    if not stop_strings:
        return None
    if tokenizer is None:
        raise ValueError(
            f"{who}: stop_strings need the tokenizer the prompt was encoded with (tokenizer=...), as transformers'"
        )
    return StopStrings(stop_strings, token_bytes(tokenizer))


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
    prompt_mask: Bool[Tensor, "1 steps"] | None = None,
    attention_mask: Tensor | None = None,
) -> tuple[Int[Tensor, "1 {max_new_tokens}+steps"], float]:
    """Beam search continuing one prompt (:func:`transformer.decoding.beam_search_steps`, GNMT length penalty over
    the generated tokens): the best continuation, padded like :func:`generate`, and its normalised score.
    ``checks``, ``prompt_mask`` and ``attention_mask`` (a left-padded prompt's real tokens) as :func:`generate`."""
    request = validate_generation(model, "beam_generate", prompt, max_new_tokens, end_symbol, pad_symbol, ())
    prompt_mask = prompt_mask_from("beam_generate", prompt, prompt_mask, attention_mask)
    validate_beam("beam_generate", beam_size, length_penalty)
    steps = CheckedSteps(_next_tokens(model, use_cache, prompt_mask, "beam_generate", None), checks, "beam_generate")
    with torch.no_grad():
        tokens, score = beam_search_steps(steps, prompt, request.max_len, request.end, beam_size, length_penalty)
    out = torch.full((1, request.max_len), request.pad, dtype=prompt.dtype, device=prompt.device)
    out[0, : len(tokens)] = torch.tensor(tokens, dtype=prompt.dtype)
    return out, score
