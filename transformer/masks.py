"""Attention masks. Convention everywhere: True = may attend.

Two forms, accepted wherever a mask is:

* dense boolean tensors, as the Annotated Transformer builds them (:func:`subsequent_mask`,
  :func:`padding_mask`, :func:`target_mask`), broadcasting against scores of shape (batch, q_len, k_len);
* :class:`AttentionMask`, the same information in its most structured form (a causal flag, key and query
  lengths or a key mask, and a dense tensor only for patterns nothing else describes), so that each attention
  backend can skip work: the fused kernel skips blocks above the causal diagonal and runs interior blocks with
  no per-element mask, ``F.scaled_dot_product_attention`` takes ``is_causal`` instead of reading a mask.

A query row whose every key is masked produces a zero output and zero gradients (see ``transformer.attention``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from .common.arguments import is_int
from .common.dtypes import shape_text
from .contracts import Bool, Int, Tensor, TypeCheckError, checked, checks_enabled

__all__ = ["AttentionMask", "subsequent_mask", "padding_mask", "target_mask"]


def subsequent_mask(size: int, device: torch.device | str | None = None) -> Bool[Tensor, "1 size size"]:
    """Mask out subsequent positions (section 3.2.3): position i may attend to j iff j <= i."""
    if not is_int(size, at_least=1):
        raise ValueError(f"subsequent_mask: size must be a positive int, got {size!r}")
    return torch.ones(1, size, size, dtype=torch.bool, device=device).tril()


@checked
def padding_mask(tokens: Int[Tensor, "batch seq"], pad_id: int) -> Bool[Tensor, "batch 1 seq"]:
    """Keys that are real tokens (not ``pad_id``), shaped to broadcast over every query."""
    return (tokens != pad_id).unsqueeze(-2)


@checked
def target_mask(tgt: Int[Tensor, "batch seq"], pad_id: int | None) -> Bool[Tensor, "batch seq seq"]:
    """Decoder self-attention mask: causal, padded keys masked, and padded query rows masked too.

    The Annotated Transformer lets padded target positions attend; here their rows are fully
    masked, so they output zeros and contribute nothing.
    """
    causal = subsequent_mask(tgt.size(-1), device=tgt.device)
    if pad_id is None:
        return causal.expand(tgt.size(0), -1, -1)
    real = tgt != pad_id
    return causal & real.unsqueeze(-2) & real.unsqueeze(-1)


@dataclass(frozen=True, eq=False)
class AttentionMask:
    """Which keys each query may attend to, in the most structured form known (True = may attend).

    A query ``i`` of batch row ``b`` may attend key ``j`` when every given part allows it:

    * ``causal``: ``j <= i`` (top-left aligned, as ``F.scaled_dot_product_attention(is_causal=True)``);
    * ``key_lengths`` (batch,): ``j < key_lengths[b]``, keys padded at the end (FlashAttention's varlen lengths);
    * ``key_mask`` (batch, k_len): ``key_mask[b, j]``, padding anywhere;
    * ``query_lengths`` (batch,): ``i < query_lengths[b]``; padded query rows attend nothing, so they output 0;
    * ``dense`` (#batch, #q_len, k_len): anything else, as a boolean tensor.

    Build one with :meth:`padding` (source side: key padding), :meth:`target` (decoder self-attention: causal plus
    padding) or the constructor. :meth:`to_dense` gives the equivalent dense tensor; every backend computes the
    same function from either form (``tests/test_structured_masks.py``).
    """

    causal: bool = False
    key_lengths: Tensor | None = None
    key_mask: Tensor | None = None
    query_lengths: Tensor | None = None
    dense: Tensor | None = None

    # The largest key and query length, read at construction from lengths held on the host (see _read_bounds).
    _longest: dict = dataclasses.field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.causal, bool):
            raise ValueError(f"AttentionMask: causal must be a bool, got {self.causal!r}")
        for name in ("key_lengths", "query_lengths"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, Tensor)
                or value.dim() != 1
                or value.is_floating_point()
                or value.is_complex()
                or value.dtype == torch.bool
            ):
                raise ValueError(
                    f"AttentionMask: {name} must be an integer tensor of shape (batch,), got "
                    f"{shape_text(value) if isinstance(value, Tensor) else type(value).__name__}"
                )
            if value is not None:
                self._read_bounds(name, value)
        for name, dims in (("key_mask", 2), ("dense", 3)):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, Tensor) or value.dtype != torch.bool or value.dim() != dims
            ):
                raise ValueError(
                    f"AttentionMask: {name} must be a bool tensor with {dims} dims, got "
                    f"{shape_text(value) if isinstance(value, Tensor) else type(value).__name__}"
                )
        if self.key_lengths is not None and self.key_mask is not None:
            raise ValueError("AttentionMask: give key padding as key_lengths or as key_mask, not both")

    def _read_bounds(self, name: str, lengths: Tensor) -> None:
        """Refuse a negative length, and keep the largest for :meth:`check_fits` to compare with the attention's size.

        Only where reading the values costs no device synchronisation: lengths on the CPU, outside a torch.compile
        trace. Lengths on a GPU are not read (a host sync per mask); :meth:`padding` and :meth:`target` build valid
        ones, and the kernel clamps what it reads to [0, k_len]."""
        if lengths.device.type != "cpu" or lengths.numel() == 0 or torch.compiler.is_compiling():
            return
        low, high = (int(x) for x in torch.aminmax(lengths))
        if low < 0:
            row = int((lengths < 0).nonzero()[0, 0])
            raise ValueError(
                f"AttentionMask: {name} must be >= 0, got {low} in batch row {row} ({name}={_values(lengths)})"
            )
        self._longest[name] = high

    # ------------------------------------------------------------------ constructors
    @classmethod
    def padding(cls, tokens: Int[Tensor, "batch seq"], pad_id: int | None) -> AttentionMask:
        """Key padding of ``tokens`` (the source side): ``key_lengths`` when every row's padding is at its end,
        else ``key_mask``. The test reads the tokens once, where the batch is built."""
        if pad_id is None:
            return cls()
        lengths, trailing = _real_lengths(tokens, pad_id)
        return cls(key_lengths=lengths) if trailing else cls(key_mask=tokens != pad_id)

    @classmethod
    def target(cls, tgt: Int[Tensor, "batch seq"], pad_id: int | None) -> AttentionMask:
        """The decoder self-attention mask of :func:`target_mask` in structured form: causal, padded keys and padded
        query rows masked (``key_lengths`` = ``query_lengths`` when padding is at the end; a dense tensor else)."""
        if pad_id is None:
            return cls(causal=True)
        lengths, trailing = _real_lengths(tgt, pad_id)
        if trailing:
            return cls(causal=True, key_lengths=lengths, query_lengths=lengths)
        return cls(dense=target_mask(tgt, pad_id))

    def __repr__(self) -> str:
        parts = ["causal=True"] if self.causal else []
        parts += [
            f"{name}={getattr(self, name)!r}"
            for name in ("key_lengths", "key_mask", "query_lengths", "dense")
            if getattr(self, name) is not None
        ]
        return f"AttentionMask({', '.join(parts)})"

    # ------------------------------------------------------------------ views
    def to_dense(self, q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor | None:
        """The equivalent dense boolean mask, shaped (batch or 1, q_len or 1, k_len); None when nothing is masked."""
        device = next((t.device for t in self.tensors()), device)
        parts: list[Tensor] = []
        if self.causal:
            parts.append(torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril().unsqueeze(0))
        if self.key_lengths is not None:
            parts.append(torch.arange(k_len, device=device) < self.key_lengths[:, None, None])
        if self.key_mask is not None:
            parts.append(self.key_mask[:, None, :])
        if self.query_lengths is not None:
            parts.append(torch.arange(q_len, device=device)[:, None] < self.query_lengths[:, None, None])
        if self.dense is not None:
            parts.append(self.dense)
        if not parts:
            return None
        mask = parts[0]
        for part in parts[1:]:
            mask = mask & part
        return mask.expand(*mask.shape[:-1], k_len)  # a view: the key axis is always whole, as dense masks' is

    def named_parts(self) -> dict[str, Tensor]:
        """The tensor parts given, by field name (``{"key_lengths": ..., "dense": ...}``)."""
        return {
            name: getattr(self, name)
            for name in ("key_lengths", "key_mask", "query_lengths", "dense")
            if getattr(self, name) is not None
        }

    def tensors(self) -> list[Tensor]:
        return [t for t in (self.key_lengths, self.key_mask, self.query_lengths, self.dense) if t is not None]

    def is_empty(self) -> bool:
        """True when the mask allows everything (no part given)."""
        return not self.causal and not self.tensors()

    def key_only(self) -> bool:
        """True when only key padding is given (the same mask for every query)."""
        return not self.causal and self.query_lengths is None and self.dense is None

    def replace(self, **changes) -> AttentionMask:
        return dataclasses.replace(self, **changes)

    def to(self, device: torch.device | str) -> AttentionMask:
        return self._map(lambda t: t.to(device))

    def index_select(self, index: Tensor) -> AttentionMask:
        """Keep batch rows ``index`` (may repeat rows, as beam search does); a broadcast dense batch of 1 stays."""
        return self._map(lambda t: t if t.size(0) == 1 and t.dim() == 3 else t.index_select(0, index.to(t.device)))

    def _map(self, fn) -> AttentionMask:
        return dataclasses.replace(
            self,
            **{
                name: fn(getattr(self, name))
                for name in ("key_lengths", "key_mask", "query_lengths", "dense")
                if getattr(self, name) is not None
            },
        )

    def check_fits(self, batch: int, q_len: int, k_len: int) -> None:
        """Raise TypeCheckError when a part does not fit attention of this (batch, q_len, k_len) (while checks are on).

        Called inside a checked function, whose name the error then gains as a prefix.

        Whether checks are on or off, a length above the attention's size (``key_lengths`` above ``k_len``,
        ``query_lengths`` above ``q_len``) raises ValueError: a guard, read from the largest length kept at
        construction (lengths on the CPU; see :meth:`_read_bounds`), so it costs a comparison of two ints."""
        for name, size, dim in (("key_lengths", k_len, "k_len"), ("query_lengths", q_len, "q_len")):
            longest = self._longest.get(name)
            if longest is not None and longest > size:
                lengths = getattr(self, name)
                row = int((lengths > size).nonzero()[0, 0])
                raise ValueError(
                    f"AttentionMask: {name} holds {longest} in batch row {row}, more than the {size} "
                    f"positions attended ({dim}={size}; {name}={_values(lengths)})"
                )
        if not checks_enabled():
            return
        expected = {
            "key_lengths": ("batch",),
            "query_lengths": ("batch",),
            "key_mask": ("batch", "k_len"),
            "dense": ("#batch", "#q_len", "k_len"),
        }
        sizes = {"batch": batch, "q_len": q_len, "k_len": k_len}
        for name, dims in expected.items():
            value = getattr(self, name)
            if value is None:
                continue
            ok = value.dim() == len(dims) and all(
                got == sizes[d.lstrip("#")] or (d.startswith("#") and got == 1)
                for got, d in zip(value.shape, dims, strict=True)
            )
            if not ok:
                kind = "Int" if name.endswith("lengths") else "Bool"
                bound = ", ".join(f"{d}={n}" for d, n in sizes.items())
                raise TypeCheckError(
                    f"argument 'mask.{name}' is {shape_text(value)}, expected "
                    f"{kind}[Tensor, '{' '.join(dims)}'] with {bound}"
                )


def _values(lengths: Tensor) -> str:
    """The lengths as a short list for a message (a host tensor: no synchronisation)."""
    values = lengths.tolist()
    return str(values) if len(values) <= 8 else f"[{', '.join(map(str, values[:8]))}, ...]"


def _real_lengths(tokens: Tensor, pad_id: int) -> tuple[Tensor, bool]:
    """Per-row count of real tokens, and whether every row's padding sits at its end (one pass over the tokens)."""
    real = tokens != pad_id
    lengths = real.sum(-1)
    trailing = bool(torch.equal(real, torch.arange(tokens.size(-1), device=tokens.device) < lengths[:, None]))
    return lengths, trailing
