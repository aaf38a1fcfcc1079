"""Score modifiers: what changes the scaled scores ``s = scale * q k^T`` before the mask and the softmax.

* **softcap** (Gemma 2, Team Gemma 2024, section 2.2 "Logit soft-capping"): ``s <- c * tanh(s / c)``, so every score
  lies in (-c, c);
* **ALiBi** (Press et al. 2022, "Train Short, Test Long", section 3): ``s <- s - m_h * |p(i) - j|``, a linear
  penalty on the distance between query ``i`` (at position ``p(i) = k_len - q_len + i``) and key ``j``, one slope
  ``m_h`` per head (FlashAttention's ``alibi_slopes``, one per query head, or one per batch row and head).

In that order (the cap, then the bias), as FlashAttention applies them. :func:`modify_scores` is the formula the
reference computes; every backend computes the same.

Not a score modifier but checked here with them: the attention **sinks** (gpt-oss; Xiao et al. 2024, "Efficient
Streaming Language Models with Attention Sinks"), one logit ``z_h`` per query head that joins each softmax's
denominator and nothing else: ``p_ij = exp(s_ij) / (exp(z_h) + sum_j' exp(s_ij'))`` (:func:`check_sinks`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["alibi_slopes", "check_score_modifiers", "check_sinks", "modify_scores", "alibi_bias"]


def alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi's slopes for ``n_heads`` heads (float32, (n_heads,)): the geometric sequence starting at and multiplying by
    ``2^(-8 / n)`` for ``n`` a power of two (Press et al. 2022, section 3); otherwise those of the power of two below
    and every other slope of the next one, as BLOOM's ``build_alibi_tensor`` and MPT compute them."""
    if not isinstance(n_heads, int) or isinstance(n_heads, bool) or n_heads < 1:
        raise ValueError(f"alibi_slopes: n_heads must be a positive int, got {n_heads!r}")
    power = 2 ** math.floor(math.log2(n_heads))
    base = 2.0 ** (-8.0 / power)
    slopes = [base ** (h + 1) for h in range(power)]
    if power < n_heads:
        extra = 2.0 ** (-4.0 / power)  # the slopes of 2 * power heads, taking every other one
        slopes += [extra ** (2 * h + 1) for h in range(n_heads - power)]
    return torch.tensor(slopes, dtype=torch.float32)


def check_score_modifiers(
    where: str, softcap: float | None, slopes: Tensor | None, batch: int, heads: int, device: torch.device
) -> None:
    """Refuse a softcap that is not a finite number > 0, and slopes that are not (heads,) or (batch, heads) floats on
    the queries' device (ValueError naming the argument, the expected and the actual)."""
    if softcap is not None and (
        isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not math.isfinite(softcap) or softcap <= 0
    ):
        raise ValueError(f"{where}: argument 'softcap' must be a finite number > 0 (None: no cap), got {softcap!r}")
    if slopes is None:
        return
    if not isinstance(slopes, Tensor) or not slopes.is_floating_point():
        kind = f"a {slopes.dtype} tensor" if isinstance(slopes, Tensor) else type(slopes).__name__
        raise ValueError(f"{where}: argument 'alibi_slopes' must be a float tensor, got {kind}")
    if tuple(slopes.shape) not in ((heads,), (batch, heads)):
        raise ValueError(
            f"{where}: argument 'alibi_slopes' must hold one slope per query head, shape ({heads},) or "
            f"({batch}, {heads}) (batch={batch}, heads={heads}), got {tuple(slopes.shape)}"
        )
    if slopes.device != device:
        raise ValueError(f"{where}: argument 'alibi_slopes' is on {slopes.device}, the queries on {device}")


def check_sinks(where: str, sinks: Tensor | None, heads: int, device: torch.device) -> None:
    """Refuse sinks that are not a float tensor of shape (heads,) (one logit per query head) on the queries' device
    (ValueError naming the argument, the expected and the actual)."""
    if sinks is None:
        return
    if not isinstance(sinks, Tensor) or not sinks.is_floating_point() or tuple(sinks.shape) != (heads,):
        got = f"{tuple(sinks.shape)} {sinks.dtype}" if isinstance(sinks, Tensor) else type(sinks).__name__
        raise ValueError(
            f"{where}: argument 'sinks' must be a float tensor of one logit per query head, shape ({heads},), got {got}"
        )
    if sinks.device != device:
        raise ValueError(f"{where}: argument 'sinks' is on {sinks.device}, the queries on {device}")


def alibi_bias(slopes: Tensor, q_len: int, k_len: int, dtype: torch.dtype) -> Tensor:
    """``-m_h * |p(i) - j|`` broadcastable to (batch, heads, q_len, k_len): (heads, q_len, k_len) for (heads,) slopes,
    (batch, heads, q_len, k_len) for (batch, heads) ones."""
    device = slopes.device
    distance = (torch.arange(k_len - q_len, k_len, device=device)[:, None] - torch.arange(k_len, device=device)).abs()
    return -(slopes.to(dtype)[..., None, None] * distance.to(dtype))


def modify_scores(scores: Tensor, softcap: float | None, slopes: Tensor | None) -> Tensor:
    """The scaled scores (..., heads, q_len, k_len) with the cap, then the ALiBi bias, applied."""
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if slopes is not None:
        scores = scores + alibi_bias(slopes, scores.size(-2), scores.size(-1), scores.dtype)
    return scores
