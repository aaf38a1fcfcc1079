"""Beam search with the GNMT length penalty (Wu et al. 2016): over any step function, and over an encoder-decoder.

:func:`beam_search_steps` searches one sequence on a step function (the language model's ``beam_generate`` runs it);
:func:`beam_search` runs it for each source of an encoder-decoder batch and pads the results like greedy decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..contracts import Bool, Int, Tensor, checked
from ..masks import AttentionMask
from .greedy import full_batch_mask, start_tokens
from .requests import validate_beam, validate_search
from .steps import CheckedSteps, StepFunction

__all__ = ["BeamResult", "length_penalty_factor", "beam_search_steps", "beam_search"]


@dataclass
class BeamResult:
    """Beam search output: ``tokens`` (batch, max_len) padded after the end symbol; ``scores`` (batch,)
    the length-normalised log-probability of each chosen hypothesis."""

    tokens: Tensor
    scores: Tensor


def length_penalty_factor(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + |Y|) / 6) ** alpha (Wu et al. 2016); 1 at alpha = 0."""
    return ((5.0 + length) / 6.0) ** alpha


def beam_search_steps(
    steps: StepFunction, ys: Tensor, max_len: int, end_symbol: int | None, beam_size: int, length_penalty: float
) -> tuple[list[int], float]:
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
        for s, index in zip(top_scores.tolist(), top_index.tolist(), strict=True):
            row, token = divmod(index, vocab)
            if end_symbol is not None and token == end_symbol:
                tokens = ys[row].tolist() + [token]
                finished.append((s / length_penalty_factor(len(tokens) - 1 - prefix, length_penalty), tokens))
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
            finished.append(
                (float(live[row]) / length_penalty_factor(len(tokens) - 1 - prefix, length_penalty), tokens)
            )
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
    request = validate_search(model, "beam_search", src, max_len, start_symbol, end_symbol, pad_symbol, checks)
    validate_beam("beam_search", beam_size, length_penalty)
    batch = src.size(0)
    src_mask = full_batch_mask(src_mask, batch)
    out = torch.full((batch, max_len), request.pad, dtype=src.dtype, device=src.device)
    scores = torch.zeros(batch, dtype=torch.float32)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        for b in range(batch):
            row = torch.tensor([b], device=src.device)
            mask = (
                None
                if src_mask is None
                else (
                    src_mask.index_select(row) if isinstance(src_mask, AttentionMask) else src_mask.index_select(0, row)
                )
            )
            steps = CheckedSteps(model.next_tokens(memory[b : b + 1], mask, use_cache=use_cache), checks, "beam_search")
            tokens, score = beam_search_steps(
                steps, start_tokens(src[b : b + 1], start_symbol), max_len, end_symbol, beam_size, length_penalty
            )
            out[b, : len(tokens)] = torch.tensor(tokens, dtype=out.dtype)
            scores[b] = score
    return BeamResult(tokens=out, scores=scores)
