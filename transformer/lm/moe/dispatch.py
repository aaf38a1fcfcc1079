"""Token dispatch of a mixture of experts: every (token, slot) pair sorted by its expert, so each expert's tokens
are one contiguous block of rows (as Megablocks, Gale et al. 2023, section 5, and transformers' ``grouped_mm``
path), and the way back.

With ``tokens`` tokens and ``k`` experts each there are ``S = tokens * k`` pairs, pair ``p = t * k + j`` being slot
``j`` of token ``t``. :func:`dispatch` sorts the pairs by expert (stably: within one expert, in token order) and
gives the :class:`Dispatch`: ``order`` (the permutation: sorted row ``r`` is pair ``order[r]``), ``inverse`` (its
inverse: pair ``p`` is sorted row ``inverse[p]``), ``token`` (the token of each sorted row) and ``counts`` (tokens
per expert, summing to S). :meth:`Dispatch.gather` lays the tokens out by expert; :meth:`Dispatch.combine` brings
the experts' outputs back and sums each token's ``k`` of them weighted by the router. No Python loop over tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...contracts import Float, Int, Tensor, checked

__all__ = ["Dispatch", "dispatch"]


@dataclass(frozen=True)
class Dispatch:
    """The sorted layout of ``tokens * k`` (token, slot) pairs over ``n_experts`` experts (see the module)."""

    order: Tensor  #: (S,) int64, a permutation of range(S): sorted row r is pair order[r]
    inverse: Tensor  #: (S,) int64, inverse[order[r]] == r
    token: Tensor  #: (S,) int64, the token of sorted row r: order[r] // k
    counts: Tensor  #: (n_experts,) int64, the rows of each expert (sum S)
    k: int

    @checked
    def gather(self, x: Float[Tensor, "tokens d_model"]) -> Float[Tensor, "pairs d_model"]:
        """The tokens laid out by expert: row r is ``x[token[r]]``."""
        if self.token.numel() != x.size(0) * self.k:
            raise ValueError(
                f"Dispatch.gather: argument 'x' has {x.size(0)} tokens, the dispatch {self.token.numel()} pairs "
                f"of k={self.k} (expected {self.token.numel() // self.k} tokens)"
            )
        return x.index_select(0, self.token)

    @checked
    def combine(
        self, y: Float[Tensor, "pairs d_model"], weights: Float[Tensor, "tokens k"]
    ) -> Float[Tensor, "tokens d_model"]:
        """Each token's ``sum_j weights[t, j] * y[inverse[t * k + j]]``, in ``y``'s dtype: the rows back in pair
        order, weighted, each token's ``k`` summed in slot order (as transformers' ``view(tokens, k, d).sum(1)``)."""
        if tuple(weights.shape) != (y.size(0) // self.k, self.k) or y.size(0) != self.order.numel():
            raise ValueError(
                f"Dispatch.combine: argument 'y' must have {self.order.numel()} rows and 'weights' shape "
                f"({self.order.numel() // self.k}, {self.k}), got y {tuple(y.shape)} and weights {tuple(weights.shape)}"
            )
        back = y.index_select(0, self.inverse) * weights.reshape(-1, 1)
        return back.view(-1, self.k, y.size(-1)).sum(dim=1).to(y.dtype)


@checked
def dispatch(experts: Int[Tensor, "tokens k"], n_experts: int) -> Dispatch:
    """The :class:`Dispatch` of each token's ``k`` chosen ``experts`` (indices in [0, n_experts))."""
    k = experts.size(1)
    flat = experts.reshape(-1)
    if flat.numel() and not torch.compiler.is_compiling():
        low, high = int(flat.min()), int(flat.max())
        if low < 0 or high >= n_experts:
            raise ValueError(
                f"dispatch: argument 'experts' must hold expert indices in [0, {n_experts}), got values in "
                f"[{low}, {high}]"
            )
    order = torch.sort(flat, stable=True).indices
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    # one count of fixed length, eager and traced alike (bincount's length would depend on the values under trace)
    counts = torch.zeros(n_experts, dtype=torch.long, device=flat.device).index_add_(0, flat, torch.ones_like(flat))
    return Dispatch(order=order, inverse=inverse, token=order // k, counts=counts, k=k)
