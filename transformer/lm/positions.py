"""Positions of the decoder-only model: which position each token is at, the cache that remembers them between
decoding steps, and the sliding window that limits how far back a position looks.

* A token's position is its slot (``cache offset + i``) unless the batch is padded: a left-padded row counts from
  its first real token, as Hugging Face's ``attention_mask.cumsum(-1) - 1`` (:func:`positions_from_padding`).
* :func:`hugging_face_mask`: Hugging Face's ``attention_mask`` (batch, seq) of 1 = a real token and 0 = a pad, as a
  tokenizer returns it, read as the key-padding ``AttentionMask(key_mask=...)`` it means.
* :class:`LMCache`: the key/value caches of the stack (one :class:`~transformer.cache.KVCache` per layer), plus,
  once a padded prompt has gone in, which cached keys are real tokens and each row's next position, so that the
  one-token steps that follow skip the pads and continue each row's count.
* :func:`positions_from_documents`: in a packed row (several documents, ``AttentionMask(documents=...)``), each
  token's position counted from its document's first token, so every document sees the positions it would alone.
* Mistral's sliding window (Jiang et al. 2023, section 2, "Sliding Window Attention"): query ``i`` attends key ``j``
  only if ``i - window < j`` (``j <= i`` being causality's), passed as the structured ``AttentionMask(window_left=
  window - 1)`` (:func:`sliding_window_mask` is its dense form). Positions here are slots: the window counts cached
  slots, pads included, as Hugging Face's cache does. :class:`LMCache` built with ``window`` keeps only the last
  ``window - 1`` positions' keys and values after each call (the rolling buffer of Mistral's section 2), so its
  memory is bounded by the window, not the length; the positions it hands out stay absolute (RoPE).
"""

from __future__ import annotations

import torch

from ..cache import KVCache, StackCache
from ..common.arguments import is_int
from ..common.pytrees import register as register_pytree
from ..contracts import Bool, Int, Tensor, checked
from ..masks import AttentionMask

__all__ = [
    "LMCache",
    "real_tokens",
    "positions_from_padding",
    "positions_from_documents",
    "sliding_window_mask",
    "key_padding_only",
    "validate_positions",
    "hugging_face_mask",
]


def hugging_face_mask(who: str, tokens: Tensor, mask: object) -> object:
    """``mask`` as the model reads it: a 2-D (batch, seq) int or bool tensor is Hugging Face's ``attention_mask``
    (1 = a real token, 0 = a pad, the shape of ``tokens``) and becomes ``AttentionMask(key_mask=mask.bool())``,
    after a ValueError naming it for another shape or values other than 0 and 1 (eager only: under torch.compile
    the values are not read, and any non-zero value is a real token); any other ``mask`` is returned as it is."""
    if not isinstance(mask, Tensor) or mask.dim() != 2:
        return mask
    if tuple(mask.shape) != tuple(tokens.shape):
        raise ValueError(
            f"{who}: a 2-D mask is Hugging Face's attention_mask (1 = a real token, 0 = a pad) and must have the "
            f"tokens' shape (batch, seq) = {tuple(tokens.shape)}, got {tuple(mask.shape)}"
        )
    if mask.dtype != torch.bool and not torch.compiler.is_compiling():
        values = sorted(set(mask.unique().tolist()) - {0, 1})
        if values:
            raise ValueError(
                f"{who}: a 2-D mask is Hugging Face's attention_mask and must hold only 0 (a pad) and 1 (a real "
                f"token), got {values[:5]}"
            )
    return AttentionMask(key_mask=mask.bool())


def key_padding_only(mask: object) -> bool:
    """Whether ``mask`` says only which keys are padding: an :class:`AttentionMask` with ``key_mask`` or
    ``key_lengths`` alone, or a bool (batch, 1, seq) tensor (what a prompt may bring into an empty cache)."""
    if isinstance(mask, AttentionMask):
        return mask.key_only() and not mask.is_empty()
    return isinstance(mask, Tensor) and mask.dim() == 3 and mask.size(1) == 1


def real_tokens(mask: Tensor | AttentionMask | None, seq: int) -> Tensor | None:
    """Which of ``seq`` positions hold real tokens, (#batch, seq) bool, from a mask that hides padding: a key that
    no query may attend is padding. None when the mask hides no key by padding (no mask, only causality)."""
    if mask is None:
        return None
    if isinstance(mask, Tensor):
        return mask.any(dim=-2) if mask.size(-2) > 1 else mask[:, 0]
    parts = []
    if mask.key_mask is not None:
        parts.append(mask.key_mask)
    if mask.key_lengths is not None:
        parts.append(torch.arange(seq, device=mask.key_lengths.device) < mask.key_lengths[:, None])
    if mask.dense is not None:
        parts.append(mask.dense.any(dim=-2) if mask.dense.size(-2) > 1 else mask.dense[:, 0])
    if not parts:
        return None
    real = parts[0]
    for part in parts[1:]:
        real = real & part
    return real


@checked
def positions_from_padding(real: Bool[Tensor, "#batch seq"]) -> Int[Tensor, "#batch seq"]:
    """Each real token's position counted from its row's first real token (``cumsum - 1``); a pad keeps its slot
    (so a right-padded row's positions are ``0 .. seq - 1`` exactly as without padding)."""
    slots = torch.arange(real.size(-1), device=real.device)
    return torch.where(real, real.long().cumsum(-1) - 1, slots)


@checked
def positions_from_documents(documents: Int[Tensor, "batch seq"]) -> Int[Tensor, "batch seq"]:
    """Each token's position counted from the first token of its document (``documents``: the non-decreasing
    document id of every position, as ``AttentionMask.documents``): documents ``[0, 0, 1, 1, 1]`` give positions
    ``[0, 1, 0, 1, 2]``, each slot minus the slot where its document starts (a new document wherever the id changes)."""
    slots = torch.arange(documents.size(-1), device=documents.device)
    # (no slice assignment: `starts[:, 1:] = ...` copies seq - 1 positions, which torch's symbolic reasoning
    # specialises at seq 2, where the copy broadcasts; a roll compares each id with the one before, size-generically)
    starts = (documents != documents.roll(1, dims=-1)) | (slots == 0)
    return slots - torch.where(starts, slots, 0).cummax(-1).values


def sliding_window_mask(q_len: int, k_len: int, window: int, device: torch.device) -> Bool[Tensor, "1 q_len k_len"]:
    """True where query ``i`` (at slot ``k_len - q_len + i``: the queries are the last positions) may see key ``j``
    under the window: ``slot(i) - j < window``. Causality (``j <= slot(i)``) is the causal mask's part."""
    slots = torch.arange(k_len - q_len, k_len, device=device)[:, None]
    return (slots - torch.arange(k_len, device=device)[None, :] < window).unsqueeze(0)


class LMCache(StackCache):
    """The key/value caches of the whole stack: one :class:`~transformer.cache.KVCache` per layer.

    After a padded prompt it also holds ``real_keys`` (batch, held) bool, True = a real token's key, and
    ``next_positions`` (batch,), each row's next position; both are None for an unpadded prompt (the next position
    is then ``length``). Beam search's :meth:`reorder` keeps them with the keys.

    ``window`` (the model's ``sliding_window``, W): after each call :meth:`trim` keeps only the last ``W - 1``
    positions (all the next position may attend besides itself), so at most ``W - 1 + new`` positions are ever held;
    ``length`` still counts every position seen (``held + dropped``), the offset of the next position. Its
    :meth:`reserve` does nothing (the held keys are views that the next step copies, as without a reservation).
    """

    layer_type = KVCache

    def __init__(self, n_layers: int, *, window: int | None = None) -> None:
        super().__init__(n_layers)
        if window is not None and not is_int(window, at_least=1):
            raise ValueError(f"LMCache: window must be a positive int or None, got window={window!r}")
        self.window = window
        self.dropped = 0
        self.real_keys: Tensor | None = None
        self.next_positions: Tensor | None = None

    @property
    def held(self) -> int:
        """Positions whose keys and values are held (``length`` minus those a window dropped)."""
        return self.layers[0].length

    @property
    def length(self) -> int:
        """Positions seen so far, held or dropped (the offset of the next position)."""
        return self.held + self.dropped

    def reserve(self, positions: int) -> None:
        if self.window is None:
            super().reserve(positions)

    def trim(self) -> None:
        """With a ``window``, forget every position but the last ``window - 1`` (and their pads in ``real_keys``)."""
        drop = self.held - (self.window - 1) if self.window is not None else 0
        if drop <= 0:
            return
        for layer in self.layers:
            layer.drop_first(drop)
        if self.real_keys is not None:
            self.real_keys = self.real_keys[:, drop:]
        self.dropped += drop

    def reorder(self, index: Tensor) -> None:
        super().reorder(index)
        if self.real_keys is not None:
            self.real_keys = self.real_keys.index_select(0, index.to(self.real_keys.device))
        if self.next_positions is not None:
            self.next_positions = self.next_positions.index_select(0, index.to(self.next_positions.device))

    def positions(self, new: int, device: torch.device) -> Tensor | None:
        """The positions of ``new`` positions after the cached ones: each row's count continued, (batch, new); None
        when they are the slots ``length .. length + new - 1`` (no padding was cached)."""
        if self.next_positions is None:
            return None
        return self.next_positions[:, None] + torch.arange(new, device=device)

    def remember(self, new: int, real: Tensor | None, following: Tensor | None) -> None:
        """Record ``new`` positions going in (before the layers extend the key/value caches): which are real,
        (batch, new) (None: all), and each row's position after them, (batch,) (None: the next slot)."""
        if real is not None or self.real_keys is not None:
            like = real if real is not None else self.real_keys
            old = self.real_keys if self.real_keys is not None else like.new_ones(like.size(0), self.held)
            self.real_keys = torch.cat([old, real if real is not None else like.new_ones(like.size(0), new)], dim=1)
        if following is not None:
            self.next_positions = following

    def step_mask(self, new: int, window: int | None) -> AttentionMask | None:
        """The mask of ``new`` (one) position(s) after the held ones: the held pads hidden, the window applied (as
        ``window_left = window - 1``; a cache trimmed to its window holds no key outside it)."""
        real = self.real_keys
        parts: dict = {}
        if real is not None:
            parts["key_mask"] = torch.cat([real, real.new_ones(real.size(0), new)], dim=1)
        if window is not None and window < self.held + new:
            parts["window_left"] = window - 1
        return AttentionMask(**parts) if parts else None


def _lm_cache(parts: dict, fixed: dict) -> LMCache:
    cache = LMCache.__new__(LMCache)
    cache.layers = list(parts.pop("layers"))
    for name, value in {**parts, **fixed}.items():
        setattr(cache, name, value)
    return cache


# an input torch.export takes (docs/proved-shapes.md): the layers' caches and the pads and positions are the children
register_pytree(LMCache, ("layers", "real_keys", "next_positions"), ("window", "dropped"), _lm_cache)


def validate_positions(positions: Tensor, max_len: int) -> None:
    """Refuse ``positions`` given to the model outside ``[0, max_len)`` (ValueError naming the argument, the value and
    the limit): the positions a table or RoPE was built for. Reads the values (a device sync on a GPU): only for
    positions a caller passes, never for the ones the model derives."""
    if positions.numel() == 0:
        return
    low, high = (int(v) for v in torch.aminmax(positions))
    if low < 0 or high >= max_len:
        raise ValueError(
            f"TransformerLM.forward: argument 'positions' must lie in [0, max_len={max_len}), got values from {low} "
            f"to {high}"
        )
