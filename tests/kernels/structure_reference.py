"""An independent float64 reference for documents, sliding windows, softcap and ALiBi (written from the formulas of
docs/kernels.md, not from the kernels), and random packed documents; used by test_kernel_structure.py and
test_block_skipping.py."""

import math
import random

import torch
from philox_model import P


def allowed_keys(
    batch, q_len, k_len, *, documents, window_left, window_right, causal, key_lengths, mask=None, key_mask=None,
    device="cpu",
):  # fmt: skip
    """Bool (batch, 1 or heads, q_len, k_len): query i (at position p(i) = k_len - q_len + i) may attend key j only in
    the document of p(i), within [p(i) - window_left, p(i) + window_right], with causal j <= i, below the key length,
    and where the dense ``mask`` (broadcastable) and ``key_mask`` (batch, k_len) say True."""
    i = torch.arange(q_len, device=device)[:, None]
    j = torch.arange(k_len, device=device)[None, :]
    pos = i + (k_len - q_len)
    allowed = torch.ones(batch, 1, q_len, k_len, dtype=torch.bool, device=device)
    if documents is not None:
        own = documents[:, pos[:, 0]]  # (batch, q_len): the document of each query's position
        allowed = allowed & (documents[:, None, :] == own[:, :, None])[:, None]
    if window_left is not None:
        allowed = allowed & (j >= pos - window_left)
    if window_right is not None:
        allowed = allowed & (j <= pos + window_right)
    if causal:
        allowed = allowed & (j <= i)
    if key_lengths is not None:
        allowed = allowed & (j < key_lengths.view(batch, 1, 1, 1))
    if mask is not None:
        allowed = allowed & mask
    if key_mask is not None:
        allowed = allowed & key_mask[:, None, None, :]
    return allowed


def reference(
    q, k, v, *, documents, window_left, window_right, softcap, alibi_slopes, causal, key_lengths, keep, mask=None,
    key_mask=None,
):  # fmt: skip
    """(out, lse) in q's dtype: s = scale * q k^T; s = c * tanh(s / c); s -= slope * |p(i) - j|; the keys
    :func:`allowed_keys` excludes are masked; softmax (rows with no allowed key give 0); dropout's keep mask scaled by
    1 / (1 - p). Grouped-query attention: k and v repeated with repeat_interleave."""
    batch, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    group = heads // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = (q @ k.transpose(-2, -1)) / math.sqrt(head_dim)
    if softcap is not None:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        distance = (
            torch.arange(q_len, device=q.device)[:, None] + (k_len - q_len) - torch.arange(k_len, device=q.device)
        )
        slopes = alibi_slopes.to(s.dtype).expand(batch, heads)
        s = s - slopes[:, :, None, None] * distance.abs().to(s.dtype)
    allowed = allowed_keys(
        batch, q_len, k_len, documents=documents, window_left=window_left, window_right=window_right, causal=causal,
        key_lengths=key_lengths, mask=mask, key_mask=key_mask, device=q.device,
    )  # fmt: skip
    s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s.float() if s.dtype == torch.float16 else s, dim=-1)
    probs = torch.softmax(s.masked_fill(~allowed.any(-1, keepdim=True), 0.0), dim=-1) * allowed
    if keep is not None:
        probs = probs * keep / (1.0 - P)
    return probs @ v, lse


def random_documents(rng: random.Random, batch: int, k_len: int, dtype) -> torch.Tensor:
    """Non-decreasing ids per row, with gaps between ids, from a random first id, and a document of length 1."""
    rows = []
    for _ in range(batch):
        cuts = sorted(rng.sample(range(1, k_len), min(k_len - 1, rng.randint(0, 5)))) if k_len > 1 else []
        if k_len > 2 and rng.random() < 0.5:  # a document of one token
            at = rng.randint(1, k_len - 2)
            cuts = sorted(set(cuts) | {at, at + 1})
        ids, doc = [], rng.randint(-3, 3)
        for start, end in zip([0, *cuts], [*cuts, k_len], strict=True):
            ids += [doc] * (end - start)
            doc += rng.randint(1, 3)
        rows.append(ids)
    return torch.tensor(rows, dtype=dtype)
