"""Plain-PyTorch attention used as the reference in the kernel tests (True = may attend)."""

import math

import torch


def allowed_matrix(
    batch, heads, q_len, k_len, *, mask=None, key_mask=None, key_lengths=None, causal=False, device="cpu"
):
    """Bool (batch, heads, q_len, k_len): which scores the kernel should use."""
    allowed = torch.ones(batch, heads, q_len, k_len, dtype=torch.bool, device=device)
    if causal:  # top-left: query i may attend key j iff j <= i
        allowed &= torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril()
    if mask is not None:
        allowed &= mask
    if key_mask is not None:
        allowed &= key_mask[:, None, None, :]
    if key_lengths is not None:
        allowed &= (torch.arange(k_len, device=device)[None, :] < key_lengths[:, None])[:, None, None, :]
    return allowed


def attention(q, k, v, allowed, scale=None, keep=None, dropout_p=0.0):
    """(out, lse) in the dtype of q: a row with no allowed key gives out 0 and lse -inf, with zero gradients.
    k and v may have fewer heads than q (grouped-query attention): q head h uses kv head h // (heads // kv_heads),
    i.e. k and v repeated with repeat_interleave (torch's enable_gqa), so their gradients sum over each group."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-2, -1)) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores.float() if scores.dtype == torch.float16 else scores, dim=-1)
    any_key = allowed.any(-1, keepdim=True)
    probs = torch.softmax(scores.masked_fill(~any_key, 0.0), dim=-1) * allowed
    if keep is not None:
        probs = probs * keep / (1.0 - dropout_p)
    return probs @ v, lse


def max_err(a, b):
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def compiled_and_eager(f, inputs):
    """Loss and input gradients of ``torch.compile(f, fullgraph=True)`` and of eager ``f`` on the same inputs:
    ((compiled loss, compiled grads), (eager loss, eager grads))."""
    torch._dynamo.reset()
    results = []
    for fn in (torch.compile(f, fullgraph=True), f):
        for t in inputs:
            t.grad = None
        loss = fn(*inputs)
        loss.backward()
        results.append((loss.detach(), [t.grad.clone() for t in inputs]))
    return results
