"""Key/value caches for incremental decoding: what each attention has already computed.

Decoding one token at a time, a decoder layer's self-attention needs the keys and values of every earlier
position, and its cross-attention the projected encoder memory. :class:`KVCache` holds them for one attention
(``MultiHeadedAttention(..., cache=...)`` fills and reads it). :class:`StackCache` holds one layer's caches per layer
of a stack and says how new positions attend (:meth:`StackCache.self_attention_mask`); :class:`DecoderCache` (one
:class:`LayerCache` per decoder layer) is what ``EncoderDecoder.decode(..., cache=...)`` takes, and the language
model's ``LMCache`` (one :class:`KVCache` per layer) is the same with one attention per layer. All can be reordered
along the batch for beam search. Outputs computed with a cache equal those recomputed from scratch
(``tests/test_decoding.py``).
"""

from __future__ import annotations

import torch

from .common.arguments import is_int
from .common.pytrees import register as register_pytree
from .contracts import Float, Tensor, checked, validate_dtype_device
from .masks import AttentionMask

__all__ = ["KVCache", "LayerCache", "StackCache", "DecoderCache"]


class KVCache:
    """Keys and values of one attention, (batch, heads, steps, d_k) each, where ``heads`` is the attention's key/value
    heads: with grouped-query attention (``kv_heads`` < ``h``) the cache holds ``kv_heads`` heads, never a copy per
    query head.

    ``static=False`` (self-attention): every call appends the new positions' keys and values.
    ``static=True`` (cross-attention over a fixed memory): the first call stores them, later calls reuse them.

    :meth:`reserve` preallocates room for a request's whole length (generation knows it: prompt + new tokens): the
    keys and values then live in one buffer each and every step writes its position in place, instead of copying
    all the cached positions into a new tensor (``torch.cat``) at every step. ``keys`` and ``values`` are the
    filled part of the buffers either way.
    """

    def __init__(self, *, static: bool = False) -> None:
        self.static = static
        self._keys: Tensor | None = None  # (batch, heads, room, d_k); room >= length
        self._values: Tensor | None = None
        self._length = 0
        self._reserved = 0

    @property
    def keys(self) -> Tensor | None:
        return None if self._keys is None else self._keys[:, :, : self._length]

    @property
    def values(self) -> Tensor | None:
        return None if self._values is None else self._values[:, :, : self._length]

    @property
    def length(self) -> int:
        """Positions held (``steps``)."""
        return self._length

    @property
    def filled(self) -> bool:
        """A static cache that holds its memory already."""
        return self.static and self._keys is not None

    def reserve(self, positions: int) -> None:
        """Hold room for ``positions`` positions in all (a request's prompt and new tokens): allocated at the next
        :meth:`extend` (or now, if keys are held), filled in place by the extends that follow. More positions than
        reserved still fit (the buffers are then concatenated, as without a reservation)."""
        if not is_int(positions, at_least=1):
            raise ValueError(f"KVCache.reserve: positions must be a positive int, got {positions!r}")
        self._reserved = positions
        if self._keys is not None and not self.static and self._keys.size(2) < positions:
            self._keys, self._values = self._room(self.keys), self._room(self.values)

    def _room(self, held: Tensor) -> Tensor:
        """A buffer of ``self._reserved`` positions with ``held`` in its first ones."""
        buffer = held.new_empty(*held.shape[:2], self._reserved, held.size(3))
        buffer[:, :, : held.size(2)] = held
        return buffer

    @checked
    def extend(
        self, k: Float[Tensor, "batch heads k_len d_k"], v: Float[Tensor, "batch heads k_len d_k"]
    ) -> tuple[Float[Tensor, "batch heads steps d_k"], Float[Tensor, "batch heads steps d_k"]]:
        """Append the new positions (or, static, store the memory once); return every key and value held."""
        if self.filled:
            raise ValueError("KVCache: a static (cross-attention) cache is filled once; read keys and values instead")
        end = self._length + k.size(2)
        if self._keys is None:
            reserve = not self.static and self._reserved > end
            self._keys, self._values = (self._room(k), self._room(v)) if reserve else (k, v)
        else:
            held = self.keys
            validate_dtype_device("KVCache.extend", held, "the cached keys", k=k, v=v)
            if held.shape[:2] != k.shape[:2] or held.size(3) != k.size(3):
                raise ValueError(
                    f"KVCache.extend: new keys {tuple(k.shape)} do not continue the cached "
                    f"{tuple(held.shape)} (batch, heads, steps, d_k)"
                )
            if end <= self._keys.size(2):  # reserved room: written in place
                self._keys[:, :, self._length : end] = k
                self._values[:, :, self._length : end] = v
            else:
                self._keys, self._values = torch.cat([held, k], dim=2), torch.cat([self.values, v], dim=2)
        self._length = end
        return self.keys, self.values

    def drop_first(self, n: int) -> None:
        """Forget the first ``n`` positions held (a sliding window's cache keeps only the window's keys, Mistral's
        rolling buffer): the held keys and values become views of the last ones, which the next :meth:`extend` copies
        with the new positions into a tensor of their size, so memory follows what is held, not what was seen."""
        if self.static:
            raise ValueError("KVCache.drop_first: a static (cross-attention) cache holds its memory whole")
        if not is_int(n, at_least=0) or n > self._length:
            raise ValueError(f"KVCache.drop_first: n must be an int in [0, {self._length}] (positions held), got {n!r}")
        if n == 0:
            return
        self._keys = self._keys[:, :, n : self._length]
        self._values = self._values[:, :, n : self._length]
        self._length -= n

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (beam search follows its surviving hypotheses; rows may repeat)."""
        if self._keys is not None:
            self._keys = self._keys.index_select(0, index.to(self._keys.device))
            self._values = self._values.index_select(0, index.to(self._values.device))


class LayerCache:
    """One decoder layer's caches: its masked self-attention and its attention over the encoder memory."""

    def __init__(self) -> None:
        self.self_attn = KVCache()
        self.src_attn = KVCache(static=True)

    @property
    def length(self) -> int:
        """Target positions held by the self-attention."""
        return self.self_attn.length

    def reorder(self, index: Tensor) -> None:
        self.self_attn.reorder(index)
        self.src_attn.reorder(index)


class StackCache:
    """The caches of a whole stack of layers: one ``layer_type()`` per layer; ``length`` positions decoded so far.

    Subclasses name what one layer holds (``layer_type``: anything with ``length`` and ``reorder``)."""

    layer_type: type = KVCache

    def __init__(self, n_layers: int) -> None:
        if not is_int(n_layers, at_least=1):
            raise ValueError(f"{type(self).__name__}: n_layers must be a positive int, got {n_layers!r}")
        self.layers = [self.layer_type() for _ in range(n_layers)]

    @property
    def length(self) -> int:
        """Positions decoded so far (the offset of the next position)."""
        return self.layers[0].length

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` in every layer (rows may repeat: beam search)."""
        for layer in self.layers:
            layer.reorder(index)

    def reserve(self, positions: int) -> None:
        """Room for ``positions`` positions in every layer's self-attention cache (:meth:`KVCache.reserve`)."""
        for layer in self.layers:
            (layer.self_attn if isinstance(layer, LayerCache) else layer).reserve(positions)

    def self_attention_mask(
        self, new: int, mask: object, *, layers: int, who: str, stack: str, mask_name: str
    ) -> AttentionMask | None:
        """The self-attention mask of ``new`` positions after the cached ones, for a stack (``who``, ``stack``) of
        ``layers`` layers that was given ``mask_name`` = ``mask``: they attend to every cached position and causally
        among themselves (no mask for one position). More than one new position is taken only into an empty cache
        (a prompt), where causal is the whole rule; a mask, or a cache of another depth, raises ValueError."""
        if len(self.layers) != layers:
            raise ValueError(f"{who}: the cache has {len(self.layers)} layers, {stack} {layers}")
        if mask is not None:
            raise ValueError(f"{who}: with a cache, pass {mask_name}=None (new positions attend to every cached one)")
        if new > 1 and self.length > 0:
            raise ValueError(
                f"{who}: {new} new positions after {self.length} cached ones; after the first call a "
                "cache takes one position at a time"
            )
        return AttentionMask(causal=True) if new > 1 else None


class DecoderCache(StackCache):
    """The caches of a whole decoder stack: one :class:`LayerCache` per layer; ``length`` positions decoded so far."""

    layer_type = LayerCache


# Inputs torch.export takes (docs/proved-shapes.md): the held keys and values are the children (a cache rebuilt from
# them holds exactly them: no reserved room), the rest is fixed when the program is exported.
def _kv_cache(parts: dict, fixed: dict) -> KVCache:
    cache = KVCache(static=fixed["static"])
    cache._keys, cache._values = parts["_keys"], parts["_values"]
    cache._length = 0 if parts["_keys"] is None else parts["_keys"].size(2)
    return cache


def _rebuilt(cls: type, parts: dict):
    made = cls.__new__(cls)
    for name, value in parts.items():
        setattr(made, name, list(value) if name == "layers" else value)
    return made


def _held_only(cache: KVCache) -> None:
    """The buffers cut to the positions held (a reserved room is given up: the next extend concatenates)."""
    if cache._keys is not None and cache._keys.size(2) != cache._length:
        cache._keys, cache._values = cache.keys, cache.values
        cache._reserved = 0


register_pytree(KVCache, ("_keys", "_values"), ("static",), _kv_cache, prepare=_held_only)
for _cls in (LayerCache, StackCache, DecoderCache):
    register_pytree(
        _cls,
        ("self_attn", "src_attn") if _cls is LayerCache else ("layers",),
        (),
        lambda parts, fixed, cls=_cls: _rebuilt(cls, parts),
    )
