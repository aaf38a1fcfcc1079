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
from torch._subclasses.fake_tensor import is_fake

from .common.arguments import is_int
from .common.dtypes import shape_text
from .common.pytrees import register as register_pytree
from .contracts import Bool, Int, Tensor, TypeCheckError, checked, checks_enabled
from .mask_inputs import check_documents, is_integer, lengths_text, real_lengths, short_list

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
    * ``documents`` (batch, k_len): ``documents[b, j] == documents[b, p(i)]``: several documents packed in one row
      (ids non-decreasing along the row; :meth:`from_cu_seqlens`, :meth:`from_position_ids`);
    * ``window_left`` / ``window_right`` (ints >= 0): ``p(i) - window_left <= j <= p(i) + window_right``, a sliding
      window (Mistral's window W: ``causal=True, window_left=W - 1``);
    * ``dense`` (#batch, #q_len, k_len): anything else, as a boolean tensor.

    The documents and the window place query ``i`` at position ``p(i) = k_len - q_len + i`` (the queries are the last
    ``q_len`` of the ``k_len`` positions, as FlashAttention aligns them; ``p(i) = i`` when ``q_len == k_len``);
    ``causal`` keeps torch's top-left alignment.

    Build one with :meth:`padding` (source side: key padding), :meth:`target` (decoder self-attention: causal plus
    padding) or the constructor. :meth:`to_dense` gives the equivalent dense tensor; every backend computes the
    same function from either form (``tests/test_structured_masks.py``).
    """

    causal: bool = False
    key_lengths: Tensor | None = None
    key_mask: Tensor | None = None
    query_lengths: Tensor | None = None
    dense: Tensor | None = None
    documents: Tensor | None = None
    window_left: int | None = None
    window_right: int | None = None

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
        if self.documents is not None:
            check_documents(self.documents)
        for name in ("window_left", "window_right"):
            value = getattr(self, name)
            if value is not None and not is_int(value, at_least=0):
                raise ValueError(f"AttentionMask: {name} must be an int >= 0 (None: unbounded), got {value!r}")

    def _read_bounds(self, name: str, lengths: Tensor) -> None:
        """Refuse a negative length, and keep the largest for :meth:`check_fits` to compare with the attention's size.

        Only where reading the values costs no device synchronisation: lengths on the CPU, outside a torch.compile
        trace. Lengths on a GPU are not read (a host sync per mask); :meth:`padding` and :meth:`target` build valid
        ones, and the kernel clamps what it reads to [0, k_len]."""
        if lengths.device.type != "cpu" or torch.compiler.is_compiling() or is_fake(lengths) or lengths.numel() == 0:
            return  # (fake: torch.export rebuilding a mask input, see transformer/common/pytrees.py)
        low, high = (int(x) for x in torch.aminmax(lengths))
        if low < 0:
            row = int((lengths < 0).nonzero()[0, 0])
            raise ValueError(
                f"AttentionMask: {name} must be >= 0, got {low} in batch row {row} ({name}={lengths_text(lengths)})"
            )
        self._longest[name] = high

    # ------------------------------------------------------------------ constructors
    @classmethod
    def padding(cls, tokens: Int[Tensor, "batch seq"], pad_id: int | None) -> AttentionMask:
        """Key padding of ``tokens`` (the source side): ``key_lengths`` when every row's padding is at its end,
        else ``key_mask``. The test reads the tokens once, where the batch is built."""
        if pad_id is None:
            return cls()
        lengths, trailing = real_lengths(tokens, pad_id)
        return cls(key_lengths=lengths) if trailing else cls(key_mask=tokens != pad_id)

    @classmethod
    def target(cls, tgt: Int[Tensor, "batch seq"], pad_id: int | None) -> AttentionMask:
        """The decoder self-attention mask of :func:`target_mask` in structured form: causal, padded keys and padded
        query rows masked (``key_lengths`` = ``query_lengths`` when padding is at the end; a dense tensor else)."""
        if pad_id is None:
            return cls(causal=True)
        lengths, trailing = real_lengths(tgt, pad_id)
        if trailing:
            return cls(causal=True, key_lengths=lengths, query_lengths=lengths)
        return cls(dense=target_mask(tgt, pad_id))

    @classmethod
    def from_cu_seqlens(
        cls,
        cu_seqlens: Tensor,
        length: int | None = None,
        *,
        causal: bool = True,
        window_left: int | None = None,
        window_right: int | None = None,
    ) -> AttentionMask:
        """Documents packed in one row, given by cumulative lengths as FlashAttention's varlen functions take them:
        ``cu_seqlens = [0, end_1, ..., total]`` (1-D, int), document ``d`` holding positions ``cu_seqlens[d] ..
        cu_seqlens[d + 1] - 1``. Gives ``documents`` of shape (1, total); ``length`` given (the row's length) must
        equal ``total``. Causal by default (a packed language-model row). The lengths are read to check them (on a
        GPU, one synchronisation, where the batch is built)."""
        if not isinstance(cu_seqlens, Tensor) or cu_seqlens.dim() != 1 or not is_integer(cu_seqlens):
            raise ValueError(
                "AttentionMask.from_cu_seqlens: cu_seqlens must be a 1-D integer tensor [0, end_1, ..., total], got "
                f"{shape_text(cu_seqlens) if isinstance(cu_seqlens, Tensor) else type(cu_seqlens).__name__}"
            )
        ends = cu_seqlens.tolist()
        if not ends or ends[0] != 0:
            raise ValueError(f"AttentionMask.from_cu_seqlens: cu_seqlens must start at 0, got {short_list(ends)}")
        drop = next((d for d in range(1, len(ends)) if ends[d] < ends[d - 1]), None)
        if drop is not None:
            raise ValueError(
                f"AttentionMask.from_cu_seqlens: cu_seqlens must not decrease, got {ends[drop]} after "
                f"{ends[drop - 1]} at index {drop} ({short_list(ends)})"
            )
        if length is not None and ends[-1] != length:
            raise ValueError(
                f"AttentionMask.from_cu_seqlens: the documents' lengths add up to {ends[-1]} positions, the row has "
                f"length={length} (cu_seqlens={short_list(ends)})"
            )
        lengths = torch.diff(cu_seqlens.to(torch.int64))
        ids = torch.repeat_interleave(torch.arange(len(ends) - 1, device=cu_seqlens.device), lengths)
        return cls(causal=causal, documents=ids.unsqueeze(0), window_left=window_left, window_right=window_right)

    @classmethod
    def from_position_ids(
        cls,
        position_ids: Int[Tensor, "batch seq"],
        *,
        causal: bool = True,
        window_left: int | None = None,
        window_right: int | None = None,
    ) -> AttentionMask:
        """Documents packed in each row, found from the tokens' positions as transformers finds them for a
        padding-free batch: a document starts wherever ``position_ids[b, t] != position_ids[b, t - 1] + 1`` (and at
        ``t = 0``). Causal by default."""
        if not isinstance(position_ids, Tensor) or position_ids.dim() != 2 or not is_integer(position_ids):
            raise ValueError(
                "AttentionMask.from_position_ids: position_ids must be an integer tensor of shape (batch, seq), got "
                f"{shape_text(position_ids) if isinstance(position_ids, Tensor) else type(position_ids).__name__}"
            )
        starts = torch.ones_like(position_ids, dtype=torch.bool)
        starts[:, 1:] = position_ids[:, 1:] != position_ids[:, :-1] + 1
        return cls(
            causal=causal,
            documents=starts.long().cumsum(-1) - 1,
            window_left=window_left,
            window_right=window_right,
        )

    def __repr__(self) -> str:
        parts = ["causal=True"] if self.causal else []
        parts += [f"{name}={value!r}" for name, value in self.named_parts().items()]
        parts += [f"{name}={getattr(self, name)}" for name in _WINDOW if getattr(self, name) is not None]
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
        if self.documents is not None:
            slots = self.documents[:, k_len - q_len :] if q_len <= k_len else None
            if slots is None:
                raise ValueError(f"AttentionMask: documents need q_len <= k_len, got q_len={q_len}, k_len={k_len}")
            parts.append(slots[:, :, None] == self.documents[:, None, :])
        if self.window_left is not None or self.window_right is not None:
            parts.append(self.window_dense(q_len, k_len, device))
        if not parts:
            return None
        mask = parts[0]
        for part in parts[1:]:
            mask = mask & part
        return mask.expand(*mask.shape[:-1], k_len)  # a view: the key axis is always whole, as dense masks' is

    def window_dense(self, q_len: int, k_len: int, device: torch.device | str | None = None) -> Tensor:
        """The window's part alone, (1, q_len, k_len) bool: ``p(i) - window_left <= j <= p(i) + window_right``."""
        offset = torch.arange(k_len, device=device) - torch.arange(k_len - q_len, k_len, device=device)[:, None]
        allowed = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
        if self.window_left is not None:
            allowed &= offset >= -self.window_left
        if self.window_right is not None:
            allowed &= offset <= self.window_right
        return allowed.unsqueeze(0)

    def named_parts(self) -> dict[str, Tensor]:
        """The tensor parts given, by field name (``{"key_lengths": ..., "dense": ...}``)."""
        return {name: getattr(self, name) for name in _TENSORS if getattr(self, name) is not None}

    def tensors(self) -> list[Tensor]:
        return list(self.named_parts().values())

    def has_window(self) -> bool:
        """True when a sliding window is given (either side)."""
        return self.window_left is not None or self.window_right is not None

    def is_empty(self) -> bool:
        """True when the mask allows everything (no part given)."""
        return not self.causal and not self.tensors() and not self.has_window()

    def key_only(self) -> bool:
        """True when only key padding is given (the same mask for every query)."""
        return (
            not self.causal
            and self.query_lengths is None
            and self.dense is None
            and self.documents is None
            and not self.has_window()
        )

    def replace(self, **changes) -> AttentionMask:
        return dataclasses.replace(self, **changes)

    def to(self, device: torch.device | str) -> AttentionMask:
        return self._map(lambda t: t.to(device))

    def index_select(self, index: Tensor) -> AttentionMask:
        """Keep batch rows ``index`` (may repeat rows, as beam search does); a broadcast dense batch of 1 stays."""
        return self._map(lambda t: t if t.size(0) == 1 and t.dim() == 3 else t.index_select(0, index.to(t.device)))

    def _map(self, fn) -> AttentionMask:
        return dataclasses.replace(self, **{name: fn(value) for name, value in self.named_parts().items()})

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
                    f"positions attended ({dim}={size}; {name}={lengths_text(lengths)})"
                )
        if self.documents is not None and q_len > k_len:
            raise ValueError(
                f"AttentionMask: documents place the queries at the last q_len of the k_len positions, so they need "
                f"q_len <= k_len; got q_len={q_len}, k_len={k_len}"
            )
        if not checks_enabled():
            return
        expected = {
            "key_lengths": ("batch",),
            "query_lengths": ("batch",),
            "key_mask": ("batch", "k_len"),
            "dense": ("#batch", "#q_len", "k_len"),
            "documents": ("batch", "k_len"),
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
                kind = "Int" if name.endswith("lengths") or name == "documents" else "Bool"
                bound = ", ".join(f"{d}={n}" for d, n in sizes.items())
                raise TypeCheckError(
                    f"argument 'mask.{name}' is {shape_text(value)}, expected "
                    f"{kind}[Tensor, '{' '.join(dims)}'] with {bound}"
                )


_TENSORS = ("key_lengths", "key_mask", "query_lengths", "dense", "documents")
_WINDOW = ("window_left", "window_right")


# an input torch.export takes (docs/proved-shapes.md): its tensor parts are the children, the flag and window fixed
register_pytree(AttentionMask, _TENSORS, ("causal", *_WINDOW), lambda parts, fixed: AttentionMask(**fixed, **parts))
