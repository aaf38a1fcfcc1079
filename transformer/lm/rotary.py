"""Rotary position embeddings (RoPE; Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding",
section 3.4, equation 34) and the frequency rules that real checkpoints use to stretch them to longer contexts.

Position ``m`` rotates each pair of a query's or key's first ``dim`` dimensions by the angle ``m * theta_i``; the
score ``q_m . k_n`` then depends on ``m - n`` only. The pairs are Hugging Face's (GPT-NeoX's) convention: dimension
``i`` is paired with ``i + dim/2`` (``rotate_half``), not with its neighbour as in the paper's figure; the two are the
same function of permuted weights, and checkpoints in Hugging Face's format are written for this one.

The inverse frequencies ``theta_i`` follow a rule (Hugging Face's ``modeling_rope_utils``, computed the same way, in
float32):

* ``"none"``: ``theta_i = base^(-2i/dim)`` (RoFormer eq. 15);
* ``"linear"``: ``theta_i / factor`` (position interpolation, Chen et al. 2023);
* ``"llama3"``: long wavelengths divided by ``factor``, short ones kept, a smooth ramp between (Llama 3.1);
* ``"yarn"``: NTK-by-parts interpolation, and cos/sin multiplied by an attention factor (Peng et al. 2023, YaRN).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ..contracts import Int, Tensor, checked

__all__ = ["RotaryEmbedding", "Rotation", "inverse_frequencies", "rotate_half", "MIN_TABLE_ROWS"]

#: The fewest rows a rotary table is built with (a power of two): short forwards share one small table.
MIN_TABLE_ROWS = 64


def _base_frequencies(dim: int, theta: float) -> Tensor:
    """``1 / theta^(2i/dim)``, i = 0 .. dim/2 - 1, in float32 (RoFormer eq. 15)."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))


def _llama3(inv_freq: Tensor, factor: float, low: float, high: float, original: int) -> Tensor:
    """Llama 3.1: wavelengths above ``original / low`` divided by ``factor``, below ``original / high`` kept, and in
    between interpolated by ``(original / wavelength - low) / (high - low)``."""
    low_freq_wavelen, high_freq_wavelen = original / low, original / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def _yarn(
    dim: int, theta: float, factor: float, beta_fast: float, beta_slow: float, original: int, truncate: bool = True
) -> Tensor:
    """YaRN's NTK-by-parts (Peng et al. 2023, section 3.2): dimensions that turn fewer than ``beta_slow`` times
    over the original context are interpolated (divided by ``factor``), more than ``beta_fast`` times kept, a linear
    ramp between (the correction range floored and ceiled with ``truncate``, as Hugging Face's ``truncate=True``;
    without, the real-valued range, as its ``truncate=False``: gpt-oss's files)."""

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # no singularity, as Hugging Face
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = theta ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    keep = 1 - ramp
    return interpolation * (1 - keep) + extrapolation * keep


def inverse_frequencies(dim: int, theta: float, scaling: str = "none", **rule: Any) -> tuple[Tensor, float]:
    """The ``dim / 2`` inverse frequencies of RoPE under a scaling rule, and the factor on cos and sin (1 except
    for yarn), as Hugging Face's ``ROPE_INIT_FUNCTIONS[scaling]`` returns them. ``rule`` holds the rule's numbers:
    ``factor``, ``original_max_len``, ``low_freq_factor``, ``high_freq_factor``, ``beta_fast``, ``beta_slow``,
    ``attention_factor`` (yarn; None: ``0.1 ln(factor) + 1``, or 1 for factor <= 1), ``truncate`` (yarn; default
    True)."""
    if scaling == "none":
        return _base_frequencies(dim, theta), 1.0
    factor = rule["factor"]
    if scaling == "linear":
        return _base_frequencies(dim, theta) / factor, 1.0
    original = rule["original_max_len"]
    if scaling == "llama3":
        inv = _llama3(
            _base_frequencies(dim, theta), factor, rule["low_freq_factor"], rule["high_freq_factor"], original
        )
        return inv, 1.0
    if scaling == "yarn":
        attention = rule.get("attention_factor")
        if attention is None:
            attention = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0
        truncate = rule.get("truncate", True)
        return _yarn(dim, theta, factor, rule["beta_fast"], rule["beta_slow"], original, truncate), float(attention)
    raise ValueError(f"rope_scaling must be 'none', 'linear', 'llama3' or 'yarn', got {scaling!r}")


def rotate_half(x: Tensor) -> Tensor:
    """``(x1, x2) -> (-x2, x1)`` for the two halves of the last axis: the 90-degree turn of each pair (i, i + d/2)."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Rotation:
    """The cos and sin of every position of one forward, (batch, 1, seq, dim) in the queries' dtype (or float32
    for a bfloat16 model that rotates in float32, OLMo 2's): what each layer's attention applies to its queries and
    keys (:meth:`__call__`, the result in the queries' dtype). Made by :class:`RotaryEmbedding`."""

    def __init__(self, cos: Tensor, sin: Tensor) -> None:
        self.cos, self.sin = cos, sin
        self.dim = cos.size(-1)

    def __call__(self, x: Tensor) -> Tensor:
        """``x * cos + rotate_half(x) * sin`` on the first ``dim`` dimensions of ``x`` (batch, heads, seq, d_k); the
        others pass unchanged (partial rotation)."""
        if self.dim == x.size(-1):
            return (x * self.cos + rotate_half(x) * self.sin).to(x.dtype)
        turned, passed = x[..., : self.dim], x[..., self.dim :]
        return torch.cat(((turned * self.cos + rotate_half(turned) * self.sin).to(x.dtype), passed), dim=-1)


class RotaryEmbedding(nn.Module):
    """RoPE's angles (RoFormer eq. 34) for the first ``dim`` dimensions of each head: ``forward(positions)`` gives
    the :class:`Rotation` of those positions.

    cos and sin are computed in float32 as Hugging Face's rotary embeddings compute them (``positions * inv_freq``,
    duplicated over both halves, times the attention factor), for the lengths in use: the first forward builds the
    rows up to the next power of two of its length (at least :data:`MIN_TABLE_ROWS`, at most ``max_len``), a longer
    one later builds them again up to its own next power of two, so a model whose ``max_len`` is 131072 holds 64
    rows after an 8-token forward, not 131072 (128 MiB at ``dim`` 128). Each row is the same number whatever the
    table's size (every entry is computed on its own), so the logits do not depend on what ran before. Each forward
    gathers its rows and casts them to the model's dtype. Under ``torch.compile`` and ``torch.export`` the table is
    built up to ``max_len`` at once, as before, so that a new length never changes a tensor the compiled graph
    guards on (no recompilation per length). ``inv_freq`` (a non-persistent buffer: never in a checkpoint) follows
    the scaling rule of :func:`inverse_frequencies`.
    """

    def __init__(self, dim: int, theta: float = 10000.0, max_len: int = 2048, scaling: str = "none", **rule: Any):
        super().__init__()
        if dim <= 0 or dim % 2 != 0:
            raise ValueError(f"RotaryEmbedding: the rotated width must be even and > 0, got dim={dim}")
        self.dim, self.theta, self.max_len, self.scaling, self.rule = dim, theta, max_len, scaling, rule
        inv_freq, self.attention_factor = inverse_frequencies(dim, theta, scaling, **rule)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._cos: Tensor | None = None
        self._sin: Tensor | None = None

    def reset_buffers(self) -> None:
        """Compute ``inv_freq`` again, on the device it is on, and forget the tables: for a model built on the meta
        device and materialised with ``to_empty`` (``inv_freq`` is in no checkpoint, so loading never fills it)."""
        inv_freq, _ = inverse_frequencies(self.dim, self.theta, self.scaling, **self.rule)
        with torch.no_grad():
            self.inv_freq.copy_(inv_freq.to(self.inv_freq.device))
        self._cos = self._sin = None

    @classmethod
    def from_config(cls, config: Any) -> RotaryEmbedding:
        """The rotary embedding an :class:`~transformer.lm.config.LMConfig` with ``positional_encoding="rotary"``
        describes."""
        return cls(
            config.rotary_dim,
            config.rope_theta,
            config.max_len,
            config.rope_scaling,
            factor=config.rope_factor,
            original_max_len=config.rope_original_max_len,
            low_freq_factor=config.rope_low_freq_factor,
            high_freq_factor=config.rope_high_freq_factor,
            beta_fast=config.rope_beta_fast,
            beta_slow=config.rope_beta_slow,
            attention_factor=config.rope_attention_factor,
            truncate=config.rope_yarn_truncate,
        )

    def table_rows(self, length: int) -> int:
        """How many rows :meth:`tables` builds for positions below ``length``: the next power of two of ``length``,
        at least :data:`MIN_TABLE_ROWS` and at most ``max_len`` (``length`` itself past ``max_len``); ``max_len`` (or
        ``length``) under ``torch.compile`` and ``torch.export``, where the table is built once for every length."""
        if torch.compiler.is_compiling() or torch.compiler.is_exporting():
            return max(length, self.max_len)
        grown = max(MIN_TABLE_ROWS, 1 << max(length - 1, 0).bit_length())
        return max(length, min(grown, self.max_len))

    def tables(self, length: int) -> tuple[Tensor, Tensor]:
        """cos and sin (at least ``length``, dim) in float32 for positions 0, 1, ...: built for the lengths in use
        (:meth:`table_rows`), kept, built again when ``length`` passes what is kept or the module moved device."""
        inv_freq = self.inv_freq
        if self._cos is None or self._cos.size(0) < length or self._cos.device != inv_freq.device:
            positions = torch.arange(self.table_rows(length), device=inv_freq.device, dtype=torch.float32)
            freqs = positions[:, None] * inv_freq.to(dtype=torch.float32)[None, :]
            angles = torch.cat((freqs, freqs), dim=-1)
            cos, sin = angles.cos() * self.attention_factor, angles.sin() * self.attention_factor
            if torch.compiler.is_exporting():  # torch.export traces with fake tensors: none may stay on the module
                return cos, sin  # (torch 2.9 leaves an attribute set while exporting; later ones warn and undo it)
            self._cos, self._sin = cos, sin
        return self._cos, self._sin

    @checked
    def forward(self, positions: Int[Tensor, "#batch seq"], dtype: torch.dtype, length: int | None = None) -> Rotation:
        """The rotation of ``positions`` in ``dtype``. ``length`` bounds the positions from above (known on the
        host: no device read); None reads it from ``positions`` (``max_len`` under ``torch.compile`` and
        ``torch.export``: no data-dependent read in a graph)."""
        if length is None:
            if torch.compiler.is_compiling() or torch.compiler.is_exporting():
                length = self.max_len
            else:
                length = int(positions.max()) + 1 if positions.numel() else 0
        cos, sin = self.tables(length)
        return Rotation(cos[positions].to(dtype).unsqueeze(1), sin[positions].to(dtype).unsqueeze(1))

    def extra_repr(self) -> str:
        return f"dim={self.dim}, theta={self.theta}, scaling={self.scaling!r}"
