"""Beam search as transformers' ``generate(num_beams=K, do_sample=False)`` runs it (``GenerationMixin._beam_search``,
``transformers/generation/utils.py``), decision for decision, over one prompt's step function.

Every step scores each live hypothesis's continuations by the sum of their float32 log-probabilities and keeps the
best ``max(2, 1 + number of end tokens) * K`` of them (at the first step, only the first hypothesis's: the others
start at -1e9). Of these, a candidate that ends (an end token, or the last position allowed) is a finished
hypothesis if it ranks among the first K; its score is ``sum log p / (generated tokens) ** length_penalty``
(the end token counted), and the K best finished are kept. The next live hypotheses are the best K candidates that
did not end. ``early_stopping`` says when the search ends: ``True`` once K hypotheses have finished; ``False``
(transformers' default) once the best live hypothesis, scored at the current length, cannot beat the worst of K
finished; ``"never"`` the same with the longest length allowed when ``length_penalty > 0``. The result is the best
finished hypothesis. transformers' -1e9 masks are reproduced as they are (a score plus -1e9 in float32), so that
ties resolve as its ``torch.topk`` resolves them.

:func:`beam_search_steps` (:mod:`transformer.decoding.beam`) is the other beam search of the package: Wu et al.'s
GNMT length penalty, all finished hypotheses kept, a different stopping rule.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..contracts import Tensor
from .steps import StepFunction

__all__ = ["EARLY_STOPPING", "transformers_beam_search"]

#: transformers' values of ``early_stopping``.
EARLY_STOPPING = (True, False, "never")
_MASK = -1.0e9


def transformers_beam_search(
    steps: StepFunction,
    ys: Tensor,
    max_len: int,
    end_tokens: Sequence[int],
    num_beams: int,
    length_penalty: float,
    early_stopping: bool | str,
) -> list[int]:
    """The tokens (prompt first) of the best hypothesis transformers' beam search finds from ``ys`` (1, t) within
    ``max_len`` positions, on ``steps`` (whose cache holds one row at the first call, then ``num_beams``)."""
    device, k = ys.device, num_beams
    prompt_len = cur = ys.size(1)
    keep = max(2, 1 + len(end_tokens)) * k
    ends = torch.tensor(list(end_tokens), dtype=torch.long, device=device)
    top_k = torch.arange(keep, device=device) < k
    running = ys.expand(k, -1)
    running_scores = torch.full((k,), _MASK, dtype=torch.float32, device=device)
    running_scores[0] = 0.0
    finished = torch.zeros(k, max_len, dtype=torch.long, device=device)
    finished_len = torch.zeros(k, dtype=torch.long, device=device)
    finished_scores = torch.full((k,), _MASK, dtype=torch.float32, device=device)
    is_finished = torch.zeros(k, dtype=torch.bool, device=device)
    improvable = True
    while True:
        log_probs = steps(running if cur > prompt_len else ys).float()
        log_probs = log_probs.expand(k, -1) if cur == prompt_len else log_probs
        vocab = log_probs.size(-1)
        scores, index = (log_probs + running_scores[:, None]).reshape(-1).topk(keep)
        beam, token = index // vocab, index % vocab
        candidates = torch.cat([running.index_select(0, beam), token[:, None]], dim=1)
        hits = torch.isin(token, ends) if ends.numel() else torch.zeros_like(token, dtype=torch.bool)
        if cur + 1 >= max_len:
            hits = torch.ones_like(hits)
        # the next live hypotheses: the best K candidates that did not end
        live_scores = scores + hits.float() * _MASK
        nxt = live_scores.topk(k).indices
        # the finished hypotheses: the K best of those kept and the candidates among the first K that ended
        final = scores / ((cur + 1 - prompt_len) ** length_penalty)
        if bool(is_finished.all()) and early_stopping is True:
            final = final + _MASK
        if not improvable:
            final = final + _MASK
        final = final + (~(hits & top_k)).float() * _MASK
        merged = torch.cat([finished_scores, final]).topk(k).indices
        grown = torch.zeros(keep, max_len, dtype=torch.long, device=device)
        grown[:, : cur + 1] = candidates
        finished = torch.cat([finished, grown]).index_select(0, merged)
        finished_len = torch.cat([finished_len, torch.full((keep,), cur + 1, device=device)]).index_select(0, merged)
        finished_scores = torch.cat([finished_scores, final]).index_select(0, merged)
        is_finished = torch.cat([is_finished, hits & top_k]).index_select(0, merged)
        running, running_scores = candidates.index_select(0, nxt), live_scores.index_select(0, nxt)
        beams = beam.index_select(0, nxt)
        steps.reorder(beams if cur > prompt_len else torch.zeros_like(beams))
        cur += 1
        if early_stopping == "never" and length_penalty > 0.0:
            best_length = max_len - prompt_len
        else:
            best_length = cur - prompt_len
        best_running = running_scores[0] / (best_length**length_penalty)
        worst = torch.where(is_finished, finished_scores.min(), torch.tensor(_MASK, device=device))
        improvable = improvable and bool((best_running > worst).any())
        if not improvable or (bool(is_finished.all()) and early_stopping is True) or bool(hits.all()):
            break
    return finished[0, : int(finished_len[0])].tolist()
