"""The attention formula of docs/attention.md ("Documents, windows and score modifiers") written with index
arithmetic, independent of ``AttentionMask.to_dense`` and of the reference: the issue-29 tests' expected values."""

from __future__ import annotations

import torch


def formula(q, k, v, *, scale, causal, key_lengths, documents, left, right, softcap, slopes, dtype=torch.float64):
    """softmax_j(cap(scale q_i.k_j) - m_h |p(i) - j|) over the allowed j, zeros for a row with none, in ``dtype``.
    q (batch, heads, q_len, d), k/v (batch, kv_heads, k_len, d): query head h reads key head h // (heads / kv_heads)."""
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    batch, heads, q_len, _ = q.shape
    k_len = k.size(2)
    group = heads // k.size(1)
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    i = torch.arange(q_len)[:, None]
    j = torch.arange(k_len)[None, :]
    p = k_len - q_len + i
    allowed = torch.ones(batch, 1, q_len, k_len, dtype=torch.bool)
    if causal:
        allowed &= j <= i
    if key_lengths is not None:
        allowed &= j < key_lengths[:, None, None, None]
    if documents is not None:
        allowed &= (documents[:, None, :] == documents[:, k_len - q_len :, None])[:, None]
    if left is not None:
        allowed &= j >= p - left
    if right is not None:
        allowed &= j <= p + right
    s = scale * q @ k.transpose(-1, -2)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        m = slopes.to(dtype)[..., None, None]  # (heads, 1, 1) or (batch, heads, 1, 1)
        s = s - m * (p - j).abs()
    s = s.masked_fill(~allowed, float("-inf"))
    top = s.amax(-1, keepdim=True).clamp_min(torch.finfo(dtype).min)  # a row with no key: -inf, kept finite
    w = torch.exp(s - top)
    total = w.sum(-1, keepdim=True)
    return w / total.clamp_min(torch.finfo(dtype).tiny) @ v  # a row with no key: 0 / tiny = 0
