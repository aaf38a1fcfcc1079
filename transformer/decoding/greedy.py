"""Growing a sequence one token per step: the search loop, the greedy step as a contract, and greedy decoding.

:func:`search` grows ``ys`` to exactly ``max_len`` columns, appending ``pick(log_probs)`` at every step (the argmax
for greedy decoding, a draw for sampling: :mod:`transformer.decoding.sampling`); after a row's end symbol its
positions hold ``pad_symbol``, never cut. :func:`greedy_step` states the one-token-per-step contract
``(batch, steps) -> (batch, steps+1)``, checked by jaxtyping while checks are on and by a ValueError always.
:func:`greedy_decode` is the Annotated Transformer's, over an encoder-decoder: encode once, then search.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..cache import DecoderCache
from ..contracts import Bool, Float, Int, Tensor, checked
from ..masks import AttentionMask
from .requests import SearchRequest, validate_search
from .steps import CheckedSteps, StepFunction

__all__ = [
    "next_token_log_probs",
    "greedy_step",
    "append_token",
    "search",
    "greedy_decode",
    "encode_and_search",
    "start_tokens",
    "full_batch_mask",
]


# ---------------------------------------------------------------------------- the step, as a contract
@checked
def next_token_log_probs(
    model: nn.Module,
    memory: Float[Tensor, "batch src_len d_model"],
    src_mask: Bool[Tensor, "batch 1 src_len"] | AttentionMask | None,
    ys: Int[Tensor, "batch steps"],
    cache: DecoderCache | None = None,
) -> Float[Tensor, "batch vocab"]:
    """Log-probabilities of the token after ``ys``: :meth:`EncoderDecoder.next_token_log_probs`."""
    return model.next_token_log_probs(memory, src_mask, ys, cache)


@checked
def greedy_step(
    model: nn.Module,
    memory: Float[Tensor, "batch src_len d_model"],
    src_mask: Bool[Tensor, "batch 1 src_len"] | AttentionMask | None,
    ys: Int[Tensor, "batch steps"],
    cache: DecoderCache | None = None,
) -> Int[Tensor, "batch steps+1"]:
    """One greedy decoding step: ``ys`` (batch, steps) -> (batch, steps+1), the most probable next token appended."""
    next_word = model.next_token_log_probs(memory, src_mask, ys, cache).argmax(dim=-1)
    return append_token(ys, next_word)


def append_token(ys: Tensor, token: Tensor) -> Tensor:
    """``ys`` (batch, steps) with ``token`` (batch,) appended: (batch, steps+1), a ValueError otherwise."""
    out = torch.cat([ys, token.unsqueeze(1).to(ys.dtype)], dim=1)
    if out.size(1) != ys.size(1) + 1:  # the invariant, also when checks are off
        raise ValueError(f"greedy_step must add exactly one token: {ys.size(1)} -> {out.size(1)}")
    return out


# ---------------------------------------------------------------------------- the search loop
def search(
    steps: StepFunction,
    ys: Tensor,
    max_len: int,
    end_symbol: int | None,
    pad_symbol: int,
    pick: Callable[[Tensor], Tensor],
    also_end: tuple[int, ...] = (),
    stopped: Callable[[Tensor], Tensor] | None = None,
    on_token: Callable[[Tensor, Tensor], None] | None = None,
) -> Tensor:
    """Grow ``ys`` (batch, t) to ``max_len`` columns, appending ``pick(log_probs)`` each step.

    After a row emits ``end_symbol`` (or a token of ``also_end``, used only with an ``end_symbol``), or once
    ``stopped(ys)`` (batch,) bool says it has ended with the token just appended (stop strings), its later
    positions hold ``pad_symbol``; once every row has ended the rest is padding and no step runs.
    ``on_token(tokens, live)`` sees each step's tokens (batch,) and which rows had not ended before them (a
    streamer: :mod:`transformer.decoding.streaming`).
    """
    batch = ys.size(0)
    finished = torch.zeros(batch, dtype=torch.bool, device=ys.device)
    ends = end_symbol is not None or stopped is not None
    while ys.size(1) < max_len:
        if ends and bool(finished.all()):
            rest = torch.full((batch, max_len - ys.size(1)), pad_symbol, dtype=ys.dtype, device=ys.device)
            ys = torch.cat([ys, rest], dim=1)
            break
        ys = append_token(ys, pick(steps(ys)))
        if ends:
            ys[:, -1] = torch.where(finished, torch.full_like(ys[:, -1], pad_symbol), ys[:, -1])
        if on_token is not None:
            on_token(ys[:, -1], ~finished)
        if end_symbol is not None:
            finished |= ys[:, -1] == end_symbol
            for token in also_end:
                finished |= ys[:, -1] == token
        if stopped is not None:
            finished |= stopped(ys)
    if ys.size(1) != max_len:  # the exact-length promise, also when checks are off
        raise ValueError(f"decoding produced {ys.size(1)} tokens instead of max_len={max_len}")
    return ys


# ---------------------------------------------------------------------------- over an encoder-decoder
def start_tokens(src: Tensor, start_symbol: int) -> Tensor:
    """The first column of every row's output: (batch, 1) start symbols."""
    return torch.full((src.size(0), 1), start_symbol, dtype=src.dtype, device=src.device)


def full_batch_mask(src_mask: Tensor | AttentionMask | None, batch: int) -> Tensor | AttentionMask | None:
    """A dense source mask with a broadcast batch of 1 is expanded, so steps can reorder its rows."""
    if isinstance(src_mask, Tensor) and src_mask.size(0) != batch:
        return src_mask.expand(batch, -1, -1)
    return src_mask


def encode_and_search(
    model: nn.Module,
    src: Tensor,
    src_mask: Tensor | AttentionMask | None,
    request: SearchRequest,
    pick: Callable[[Tensor], Tensor],
    use_cache: bool,
) -> Tensor:
    """Encode ``src`` once, then :func:`search` with ``pick`` choosing each next token (greedy and sampling)."""
    src_mask = full_batch_mask(src_mask, src.size(0))
    with torch.no_grad():
        steps = model.next_tokens(model.encode(src, src_mask), src_mask, use_cache=use_cache)
        steps = CheckedSteps(steps, request.checks, request.who)
        return search(steps, start_tokens(src, request.start), request.max_len, request.end, request.pad, pick)


@checked
def greedy_decode(
    model: nn.Module,
    src: Int[Tensor, "batch src_len"],
    src_mask: Bool[Tensor, "#batch 1 src_len"] | AttentionMask | None,
    max_len: int,
    start_symbol: int,
    end_symbol: int | None = None,
    pad_symbol: int | None = None,
    *,
    use_cache: bool = True,
    checks: str = "first",
) -> Int[Tensor, "batch {max_len}"]:
    """Greedy decoding (the Annotated Transformer's ``greedy_decode``) with an exact-length guarantee.

    Returns (batch, max_len) token ids starting with ``start_symbol``. With ``end_symbol``, every
    position after a row's first end symbol holds ``pad_symbol`` (default: ``model.config.pad_id``,
    or ``end_symbol`` when the config has no pad id), and decoding stops early once every row has
    ended. Runs under ``torch.no_grad``; put the model in eval mode first (dropout). ``checks``: which steps run
    with the contracts checked (``"first"``, ``"always"``, ``"never"``; see :class:`CheckedSteps`).
    """
    request = validate_search(model, "greedy_decode", src, max_len, start_symbol, end_symbol, pad_symbol, checks)
    return encode_and_search(model, src, src_mask, request, lambda log_probs: log_probs.argmax(dim=-1), use_cache)
