"""Decoding as search over one step function: greedy (exact length), sampling, beam search.

A step function ``steps(ys) -> log_probs`` gives the log-probabilities (batch, vocab) of the token after the
tokens ``ys`` (batch, t), and ``steps.reorder(index)`` keeps the batch rows ``index``. The model supplies it
(:meth:`EncoderDecoder.next_tokens`, with the modules' own key/value cache, or a full recompute with
``use_cache=False``); this module only searches.

Every search grows ``ys`` one token per step from ``start_symbol``. The result has exactly ``max_len``
columns (start symbol included, as in the Annotated Transformer): with an ``end_symbol``, positions after a
row's end symbol hold ``pad_symbol``, never cut. :func:`greedy_step` states the one-token-per-step contract:
``(batch, steps) -> (batch, steps+1)``, checked by jaxtyping while checks are on and by a ValueError always.

Every search takes ``checks``, which steps run with the model's contracts checked (:class:`CheckedSteps`):
``"first"`` (the default) checks the first two steps (the prompt into an empty cache, then the first one-token step)
and every step whose batch differs from the step before, and runs the rest unchecked; ``"always"`` checks every
step; ``"never"`` none. A step after the second differs from it only in the number of positions attended, so
``"first"`` names a wrong shape that shows at every step exactly as ``"always"`` does, and spends the checks once per
search instead of once per token; a fault that appears only at some later length needs ``"always"``. The policy only
switches checks off: under ``checks(False)`` nothing is checked. The guards (token ids, lengths, the cache's
bookkeeping) run at every step whatever it says.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from ..cache import DecoderCache
from ..contracts import Bool, Float, Int, Tensor, checked, validate_nonempty
from ..contracts import checks as checks_switch
from ..masks import AttentionMask

__all__ = ["StepFunction", "greedy_decode", "greedy_step", "next_token_log_probs", "sample_decode", "beam_search",
           "BeamResult", "DecoderCache", "search", "beam_search_steps", "sampler", "CheckedSteps", "STEP_CHECKS"]


class StepFunction(Protocol):
    """What the searches need from a model: next-token log-probabilities, and following reordered rows."""

    def __call__(self, ys: Tensor) -> Tensor: ...

    def reorder(self, index: Tensor) -> None: ...


#: The values of the searches' ``checks`` argument: which decoding steps run with the contracts checked.
STEP_CHECKS = ("first", "always", "never")


class CheckedSteps:
    """A step function whose calls run with contracts checked as ``policy`` says (the searches' ``checks``).

    ``"first"``: the first two calls, and every call whose batch (``ys.size(0)``) differs from the call before
    (beam search's hypotheses finishing), run under the current setting; the others under ``checks(False)``.
    ``"always"``: every call under the current setting. ``"never"``: every call under ``checks(False)``. The policy
    never switches checks on. ``policy`` is validated here, whatever the switch says (ValueError naming ``who``).
    """

    def __init__(self, steps: StepFunction, policy: str, who: str) -> None:
        self.steps, self.policy = steps, validate_step_checks(who, policy)
        self.calls, self.batch = 0, -1

    def __call__(self, ys: Tensor) -> Tensor:
        check = self.policy == "always" or (self.policy == "first" and (self.calls < 2 or ys.size(0) != self.batch))
        self.calls, self.batch = self.calls + 1, ys.size(0)
        if check:
            return self.steps(ys)
        with checks_switch(False):
            return self.steps(ys)

    def reorder(self, index: Tensor) -> None:
        self.steps.reorder(index)


# ---------------------------------------------------------------------------- validation
def validate_step_checks(who: str, policy: object) -> str:
    """The searches' ``checks`` argument, refused with a ValueError naming it unless one of :data:`STEP_CHECKS`."""
    if not isinstance(policy, str) or policy not in STEP_CHECKS:
        raise ValueError(f"{who}: checks must be one of {', '.join(map(repr, STEP_CHECKS))}, got {policy!r}")
    return policy


def _model_max_len(model: nn.Module) -> int | None:
    return getattr(getattr(model, "config", None), "max_len", None)


def _validate_max_len(model: nn.Module, max_len: object) -> int:
    if isinstance(max_len, bool) or not isinstance(max_len, int):
        raise ValueError(f"max_len must be a positive int, got {max_len!r} ({type(max_len).__name__})")
    if max_len < 1:
        raise ValueError(f"max_len must be positive (it counts the start symbol), got max_len={max_len}")
    limit = _model_max_len(model)
    if limit is not None and max_len > limit:
        raise ValueError(f"max_len={max_len} exceeds the model's max_len={limit} (positions it can encode)")
    return max_len


def _validate_symbol(model: nn.Module, name: str, value: int | None) -> None:
    if value is None:
        return
    vocab = getattr(getattr(model, "config", None), "tgt_vocab", None)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or (vocab is not None and value >= vocab):
        raise ValueError(f"{name}={value!r} must be a token id in [0, {vocab}) (the target vocabulary)")


def _pad_symbol(model: nn.Module, pad_symbol: int | None, end_symbol: int | None) -> int:
    """The filler after a row's end symbol: ``pad_symbol``, else the config's pad id, else the end symbol, else 0."""
    if pad_symbol is None:
        pad_symbol = getattr(getattr(model, "config", None), "pad_id", None)
        if pad_symbol is None:
            pad_symbol = end_symbol if end_symbol is not None else 0
    _validate_symbol(model, "pad_symbol", pad_symbol)
    return pad_symbol


@dataclass(frozen=True)
class _Request:
    """The validated arguments every search of an encoder-decoder shares."""

    max_len: int
    start: int
    end: int | None
    pad: int
    checks: str
    who: str


def _validate(model: nn.Module, who: str, src: Tensor, max_len: object, start_symbol: int, end_symbol: int | None,
              pad_symbol: int | None, checks: object) -> _Request:
    validate_nonempty(src, f"{who}: argument 'src'", "batch src_len")
    _validate_max_len(model, max_len)
    _validate_symbol(model, "start_symbol", start_symbol)
    _validate_symbol(model, "end_symbol", end_symbol)
    policy = validate_step_checks(who, checks)
    return _Request(max_len, start_symbol, end_symbol, _pad_symbol(model, pad_symbol, end_symbol), policy, who)


def _full_batch_mask(src_mask: Tensor | AttentionMask | None, batch: int) -> Tensor | AttentionMask | None:
    """A dense source mask with a broadcast batch of 1 is expanded, so steps can reorder its rows."""
    if isinstance(src_mask, Tensor) and src_mask.size(0) != batch:
        return src_mask.expand(batch, -1, -1)
    return src_mask


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
    return _append(ys, next_word)


def _append(ys: Tensor, token: Tensor) -> Tensor:
    out = torch.cat([ys, token.unsqueeze(1).to(ys.dtype)], dim=1)
    if out.size(1) != ys.size(1) + 1:  # the invariant, also when checks are off
        raise ValueError(f"greedy_step must add exactly one token: {ys.size(1)} -> {out.size(1)}")
    return out


# ---------------------------------------------------------------------------- greedy and sampling
def search(steps: StepFunction, ys: Tensor, max_len: int, end_symbol: int | None, pad_symbol: int,
           pick: Callable[[Tensor], Tensor]) -> Tensor:
    """Grow ``ys`` (batch, t) to ``max_len`` columns, appending ``pick(log_probs)`` each step.

    After a row emits ``end_symbol``, its later positions hold ``pad_symbol``; once every row has ended the rest
    is padding and no step runs.
    """
    batch = ys.size(0)
    finished = torch.zeros(batch, dtype=torch.bool, device=ys.device)
    while ys.size(1) < max_len:
        if end_symbol is not None and bool(finished.all()):
            rest = torch.full((batch, max_len - ys.size(1)), pad_symbol, dtype=ys.dtype, device=ys.device)
            ys = torch.cat([ys, rest], dim=1)
            break
        ys = _append(ys, pick(steps(ys)))
        if end_symbol is not None:
            ys[:, -1] = torch.where(finished, torch.full_like(ys[:, -1], pad_symbol), ys[:, -1])
            finished |= ys[:, -1] == end_symbol
    if ys.size(1) != max_len:  # the exact-length promise, also when checks are off
        raise ValueError(f"decoding produced {ys.size(1)} tokens instead of max_len={max_len}")
    return ys


def _start(src: Tensor, start_symbol: int) -> Tensor:
    return torch.full((src.size(0), 1), start_symbol, dtype=src.dtype, device=src.device)


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
    request = _validate(model, "greedy_decode", src, max_len, start_symbol, end_symbol, pad_symbol, checks)
    return _encode_and_search(model, src, src_mask, request, lambda log_probs: log_probs.argmax(dim=-1), use_cache)


def _encode_and_search(model: nn.Module, src: Tensor, src_mask: Tensor | AttentionMask | None, request: _Request,
                       pick: Callable[[Tensor], Tensor], use_cache: bool) -> Tensor:
    """Encode ``src`` once, then :func:`search` with ``pick`` choosing each next token (greedy and sampling)."""
    src_mask = _full_batch_mask(src_mask, src.size(0))
    with torch.no_grad():
        steps = model.next_tokens(model.encode(src, src_mask), src_mask, use_cache=use_cache)
        steps = CheckedSteps(steps, request.checks, request.who)
        return search(steps, _start(src, request.start), request.max_len, request.end, request.pad, pick)


# Where the nucleus is cut: a prefix whose mass falls short of top_p by less than this counts as reaching it. The
# model's log-probabilities are float32 (relative error about 6e-8), so a nucleus exactly at top_p (top_p=0.75 over
# probabilities 0.5, 0.25, ...) must not depend on which way the rounding went.
TOP_P_SLACK = 1e-6


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def validate_sampling(who: str, temperature: object, top_k: object, top_p: object) -> None:
    """Refuse sampling options that have no meaning, naming the argument and its value (a guard: always on)."""
    if not (_is_real(temperature) and math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"{who}: temperature must be a positive finite number, got {temperature!r} "
                         "(a temperature near 0 is greedy decoding)")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1):
        raise ValueError(f"{who}: top_k must be a positive int or None, got {top_k!r}")
    if top_p is not None and not (_is_real(top_p) and 0.0 < top_p <= 1.0):
        raise ValueError(f"{who}: top_p must be a number in (0, 1] or None, got {top_p!r}")


def validate_beam(who: str, beam_size: object, length_penalty: object) -> None:
    """Refuse beam options that have no meaning, naming the argument and its value (a guard: always on)."""
    if isinstance(beam_size, bool) or not isinstance(beam_size, numbers.Integral) or beam_size < 1:
        raise ValueError(f"{who}: beam_size must be a positive int, got {beam_size!r}")
    if not (_is_real(length_penalty) and math.isfinite(length_penalty) and length_penalty >= 0):
        raise ValueError(f"{who}: length_penalty must be a finite number >= 0, got {length_penalty!r}")


def sampler(temperature: float, top_k: int | None, top_p: float | None, generator: torch.Generator, *,
            who: str = "sampler"):
    """``pick(log_probs)``: a token drawn from softmax(log_probs / temperature), cut to the top k and the top-p nucleus
    (the ``pick`` of :func:`search`; :func:`sample_decode` and the language model's ``generate`` use it).

    The tempered logits are computed in float64 from each row's best token (``(log_probs - max) / temperature``), so
    no temperature overflows: as it tends to 0 the draw becomes the most probable token (greedy decoding; tokens tied
    with it share the draw). Tokens tied with the k-th most probable are all kept. Log-probabilities that are NaN or
    +inf (a diverged model) raise ValueError naming the row."""
    validate_sampling(who, temperature, top_k, top_p)

    def pick(log_probs: Tensor) -> Tensor:
        logits = log_probs.detach().to(torch.float64)
        logits = (logits - logits.amax(-1, keepdim=True)) / temperature  # the row's best token at 0, the rest <= 0
        if top_k is not None and top_k < logits.size(-1):
            kth = logits.topk(top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if top_p is not None and top_p < 1.0:
            sorted_probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
            before = sorted_probs.cumsum(-1) - sorted_probs  # the mass of the more probable tokens
            drop_sorted = before >= top_p - TOP_P_SLACK  # keep the smallest prefix whose mass reaches top_p
            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
            logits = logits.masked_fill(drop, float("-inf"))
        probs = logits.softmax(-1).cpu()
        broken = probs.isnan().any(-1)
        if bool(broken.any()):
            row = int(broken.nonzero()[0, 0])
            raise ValueError(f"{who}: the next-token log-probabilities of row {row} are NaN, +inf or all -inf; "
                             f"there is nothing to sample from (a diverged model?): {log_probs[row, :8].tolist()}...")
        return torch.multinomial(probs, 1, generator=generator).squeeze(1).to(log_probs.device)

    return pick


def seeded_generator(seed: int | torch.Generator | None) -> torch.Generator:
    """The draws' source: ``seed`` itself (a generator), a generator seeded with it (an int), or one seeded from
    torch's default generator (None)."""
    generator = seed if isinstance(seed, torch.Generator) else torch.Generator()
    if isinstance(seed, int) and not isinstance(seed, bool):
        generator.manual_seed(seed)
    elif seed is None:
        generator.manual_seed(int(torch.randint(0, 2**62, (1,))))
    elif not isinstance(seed, torch.Generator):
        raise ValueError(f"seed must be an int, a torch.Generator or None, got {seed!r}")
    return generator


@checked
def sample_decode(
    model: nn.Module,
    src: Int[Tensor, "batch src_len"],
    src_mask: Bool[Tensor, "#batch 1 src_len"] | AttentionMask | None,
    max_len: int,
    start_symbol: int,
    end_symbol: int | None = None,
    pad_symbol: int | None = None,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | torch.Generator | None = None,
    use_cache: bool = True,
    checks: str = "first",
) -> Int[Tensor, "batch {max_len}"]:
    """Sampling: each token is drawn from softmax(log_probs / ``temperature``), restricted to the ``top_k`` most
    probable tokens and to the smallest set whose probability reaches ``top_p`` (nucleus sampling, Holtzman et
    al. 2020), then renormalised. The draws come from a ``torch.Generator`` seeded by ``seed`` (an int, a generator,
    or None: torch's default seed), so a seed reproduces the output. Length, padding and ``checks`` as
    :func:`greedy_decode`.
    """
    request = _validate(model, "sample_decode", src, max_len, start_symbol, end_symbol, pad_symbol, checks)
    pick = sampler(temperature, top_k, top_p, seeded_generator(seed), who="sample_decode")
    return _encode_and_search(model, src, src_mask, request, pick, use_cache)


# ---------------------------------------------------------------------------- beam search
@dataclass
class BeamResult:
    """Beam search output: ``tokens`` (batch, max_len) padded after the end symbol; ``scores`` (batch,)
    the length-normalised log-probability of each chosen hypothesis."""

    tokens: Tensor
    scores: Tensor


def _length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + |Y|) / 6) ** alpha (Wu et al. 2016); 1 at alpha = 0."""
    return ((5.0 + length) / 6.0) ** alpha


def beam_search_steps(steps: StepFunction, ys: Tensor, max_len: int, end_symbol: int | None, beam_size: int,
                      length_penalty: float) -> tuple[list[int], float]:
    """Beam search for one sequence from ``ys`` (1, t): the best hypothesis's tokens and its normalised score.

    Keeps ``beam_size`` live hypotheses. A hypothesis that emits ``end_symbol`` is finished and scored
    ``log P(Y) / ((5 + |Y|) / 6) ** length_penalty`` (|Y| counts generated tokens, end symbol included); the
    search stops when ``beam_size`` hypotheses have finished or ``max_len`` tokens are reached, after which live
    hypotheses compete with the same normalisation.
    """
    live = torch.zeros(1, dtype=torch.float32, device=ys.device)
    finished: list[tuple[float, list[int]]] = []  # (normalised score, tokens)
    prefix = ys.size(1) - 1  # the start symbol is not a generated token
    while ys.size(1) < max_len:
        logp = steps(ys).float()
        vocab = logp.size(-1)
        candidates = (live.unsqueeze(1) + logp).view(-1)
        top_scores, top_index = candidates.topk(min(2 * beam_size, candidates.numel()))
        keep_rows, keep_tokens, keep_scores = [], [], []
        for s, index in zip(top_scores.tolist(), top_index.tolist()):
            row, token = divmod(index, vocab)
            if end_symbol is not None and token == end_symbol:
                tokens = ys[row].tolist() + [token]
                finished.append((s / _length_penalty(len(tokens) - 1 - prefix, length_penalty), tokens))
            else:
                keep_rows.append(row)
                keep_tokens.append(token)
                keep_scores.append(s)
            if len(keep_rows) == beam_size:
                break
        if not keep_rows or (len(finished) >= beam_size and ys.size(1) + 1 < max_len):
            break  # stop early; on the step that reaches max_len the live hypotheses still compete below
        rows = torch.tensor(keep_rows, device=ys.device)
        new = torch.tensor(keep_tokens, dtype=ys.dtype, device=ys.device).unsqueeze(1)
        ys = torch.cat([ys.index_select(0, rows), new], dim=1)
        live = torch.tensor(keep_scores, dtype=torch.float32, device=ys.device)
        steps.reorder(rows)
    else:
        for row in range(ys.size(0)):
            tokens = ys[row].tolist()
            finished.append((float(live[row]) / _length_penalty(len(tokens) - 1 - prefix, length_penalty), tokens))
    score, tokens = max(finished, key=lambda item: item[0])
    return tokens, score


@checked
def beam_search(
    model: nn.Module,
    src: Int[Tensor, "batch src_len"],
    src_mask: Bool[Tensor, "#batch 1 src_len"] | AttentionMask | None,
    max_len: int,
    start_symbol: int,
    end_symbol: int | None = None,
    *,
    beam_size: int = 4,
    length_penalty: float = 0.0,
    pad_symbol: int | None = None,
    use_cache: bool = True,
    checks: str = "first",
) -> BeamResult:
    """Beam search with a GNMT length penalty; ``beam_size=1`` gives exactly ``greedy_decode``'s tokens.

    Each source is searched separately (:func:`beam_search_steps`). Output is (batch, max_len), padded like greedy;
    ``checks`` as :func:`greedy_decode` (for each source's search).
    """
    request = _validate(model, "beam_search", src, max_len, start_symbol, end_symbol, pad_symbol, checks)
    validate_beam("beam_search", beam_size, length_penalty)
    batch = src.size(0)
    src_mask = _full_batch_mask(src_mask, batch)
    out = torch.full((batch, max_len), request.pad, dtype=src.dtype, device=src.device)
    scores = torch.zeros(batch, dtype=torch.float32)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        for b in range(batch):
            row = torch.tensor([b], device=src.device)
            mask = None if src_mask is None else (src_mask.index_select(row) if isinstance(src_mask, AttentionMask)
                                                  else src_mask.index_select(0, row))
            steps = CheckedSteps(model.next_tokens(memory[b : b + 1], mask, use_cache=use_cache), checks, "beam_search")
            tokens, score = beam_search_steps(steps, _start(src[b : b + 1], start_symbol), max_len, end_symbol,
                                              beam_size, length_penalty)
            out[b, : len(tokens)] = torch.tensor(tokens, dtype=out.dtype)
            scores[b] = score
    return BeamResult(tokens=out, scores=scores)
