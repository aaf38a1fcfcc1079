"""The public functions: validate, pick the scale and the dropout seed, run the op (kernels/_op.py)."""

import math

import torch

from ._args import acc_dtype, document_bounds
from ._op import attention
from ._validate import run_reason
from ._validate import validate as check_inputs
from ._validate import validate_structure as check_structure

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def philox_state(seed, device) -> torch.Tensor:
    """The dropout generator's (seed, offset) as a 2-element int64 tensor on ``device``.

    ``seed=None``: both drawn by ``torch.randint`` on ``device``, i.e. from torch's generator of that device (the
    CUDA generator on a GPU, the default CPU generator otherwise), the way torch.compile's inductor seeds its own
    random kernels (``aten.randint.low_out`` over the int64 range, torch/_inductor/ir.py ``RandomSeeds``). The
    draw is a device kernel: no host sync, and under CUDA graph capture it is recorded with the generator's
    graph-safe Philox state, so every replay draws a new pair (and advances the generator's offset as any random
    op does), while ``torch.manual_seed`` makes a run reproducible. An explicit ``seed`` (any int, taken modulo
    2**64) gives (seed, 0): the same mask every call, also in every graph replay. It is written by two fill
    kernels on ``device`` (the value travels as a kernel argument): no host-to-device copy, so no wait for the GPU
    and nothing that graph capture forbids (``torch.tensor([seed, 0], device="cuda")`` would copy from pageable
    host memory, synchronising, and raises inside ``torch.cuda.graph``).
    """
    if seed is None:
        return torch.randint(INT64_MIN, INT64_MAX, (2,), dtype=torch.int64, device=device)
    state = torch.full((2,), (int(seed) - INT64_MIN) % 2**64 + INT64_MIN, dtype=torch.int64, device=device)
    state[1:].zero_()
    return state


def flash_attention_with_lse(
    q,
    k,
    v,
    *,
    mask=None,
    key_mask=None,
    key_lengths=None,
    causal=False,
    scale=None,
    dropout_p=0.0,
    seed=None,
    documents=None,
    window_left=None,
    window_right=None,
    softcap=None,
    alibi_slopes=None,
    sinks=None,
    validate: bool = True,
):
    """Fused attention; returns (out, logsumexp). See :func:`flash_attention` and docs/kernels.md.

    The logsumexp has shape (batch, heads, q_len), float32, natural log, of the scaled (softcapped, ALiBi-biased)
    and masked scores before dropout, the sink's logit included with ``sinks``; -inf for a query row with no allowed
    key (without sinks). It is differentiable.
    """
    structure = (documents, window_left, window_right, softcap, alibi_slopes, sinks)
    return _call(q, k, v, mask, key_mask, key_lengths, causal, scale, dropout_p, seed, structure, validate, True)


def _call(q, k, v, mask, key_mask, key_lengths, causal, scale, dropout_p, seed, structure, validate, with_lse: bool):
    """(out, lse) with ``with_lse``, else out alone (the eager autograd graph then has one output: less host time).
    ``structure``: (documents, window_left, window_right, softcap, alibi_slopes, sinks) as the public functions take
    them."""
    if validate:
        check_inputs(q, k, v, mask, key_mask, key_lengths, dropout_p, scale)
        check_structure(q, k, *structure)
        reason = run_reason(q, k)
        if reason is not None:
            raise RuntimeError(f"flash_attention cannot run here: {reason}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if scale < 0.0:  # the kernels need scale >= 0 (running max of unscaled scores); softmax((-q) k^T * -scale)
        q, scale = -q, -scale  # is the same, and autograd carries dq back through the negation
    dropout_p = float(dropout_p)
    seed_t = philox_state(seed, q.device) if dropout_p > 0.0 else None
    documents, window_left, window_right, softcap, alibi_slopes, sinks = structure
    if (
        documents is None
        and window_left is None
        and window_right is None
        and softcap is None
        and alibi_slopes is None
        and sinks is None
    ):
        kernel_structure = ()
    else:
        doc_bounds = None if documents is None else document_bounds(documents)
        windows = (None if w is None else int(w) for w in (window_left, window_right))
        cap = None if softcap is None else float(softcap)
        if sinks is not None:  # in the logsumexp's dtype, differentiably: the gradient goes back through the cast
            sinks = sinks.to(acc_dtype(q.dtype)).contiguous()
        kernel_structure = (doc_bounds, alibi_slopes, *windows, cap, sinks)
    args = (q, k, v, mask, key_mask, key_lengths, seed_t, bool(causal), scale, dropout_p)
    return attention(*args, with_lse, kernel_structure)


def flash_attention(
    q,
    k,
    v,
    *,
    mask=None,
    key_mask=None,
    key_lengths=None,
    causal=False,
    scale=None,
    dropout_p=0.0,
    seed=None,
    documents=None,
    window_left=None,
    window_right=None,
    softcap=None,
    alibi_slopes=None,
    sinks=None,
    validate: bool = True,
) -> torch.Tensor:
    """softmax(q k^T * scale, masked) v with dropout on the probabilities, in one fused Triton kernel.

    q: (batch, heads, q_len, head_dim); k, v: (batch, heads, k_len, head_dim). Masks say True = may attend:
    ``mask`` bool broadcastable to (batch, heads, q_len, k_len); ``key_mask`` bool (batch, k_len);
    ``key_lengths`` int (batch,), keys at positions >= length are masked; ``causal`` is top-left aligned
    (query i may attend key j iff j <= i), as F.scaled_dot_product_attention(is_causal=True).
    A query row with no allowed key outputs 0 (and gets zero gradients). ``scale`` defaults to
    1/sqrt(head_dim). ``dropout_p`` drops probabilities with an in-kernel Philox generator keyed by ``seed``
    (None: a (seed, offset) pair drawn on q's device from torch's generator there, graph-safe; an int: that
    seed, offset 0) and scales the kept ones by 1/(1-p).

    Documents, windows and score modifiers (docs/kernels.md), with query i at position p(i) = k_len - q_len + i:
    ``documents`` int32/int64 (batch, k_len), non-decreasing ids along each row: query i attends only keys j with
    ``documents[b, j] == documents[b, p(i)]`` (needs q_len <= k_len); ``window_left`` / ``window_right`` ints >= 0
    (None: unbounded): only keys with p(i) - window_left <= j <= p(i) + window_right (Mistral's window W:
    ``causal=True, window_left=W - 1``); ``softcap`` float > 0: the scaled scores s become softcap * tanh(s /
    softcap) (Gemma 2); ``alibi_slopes`` (heads,) or (batch, heads) of the query heads, float32 or q's dtype: then
    -slope * |p(i) - j| is added (ALiBi). Order: scale, softcap, ALiBi, masks, softmax. Key blocks outside every
    query's document and window are never loaded. The slopes get no gradient.
    ``sinks`` float (heads,), one logit z_h per query head (gpt-oss's attention sinks; docs/moe.md): a column of
    logit z_h and value zero joins every row's softmax, out_i = sum_j exp(s_ij - lse_i) v_j with
    lse_i = log(exp(z_h) + sum_j exp(s_ij)); a row with no allowed key outputs 0. The sinks get a gradient,
    d z_h = -sum_i exp(z_h - lse_i) rowsum(dO_i * O_i) (summed over the batch).
    ``validate=False`` skips the input checks, for a caller that has just had :func:`unsupported_reason`
    check the same inputs (the attention dispatcher): the inputs are then validated once per call, not twice.
    """
    structure = (documents, window_left, window_right, softcap, alibi_slopes, sinks)
    return _call(q, k, v, mask, key_mask, key_lengths, causal, scale, dropout_p, seed, structure, validate, False)


def tune(
    q,
    k,
    v,
    *,
    mask=None,
    key_mask=None,
    key_lengths=None,
    causal=False,
    scale=None,
    dropout_p=0.0,
    documents=None,
    window_left=None,
    window_right=None,
    softcap=None,
    alibi_slopes=None,
    sinks=None,
    backward: bool = True,
) -> None:
    """Autotune (and compile) the kernels for these inputs now, outside any CUDA graph capture: one forward call,
    and with ``backward`` one backward, on copies of the inputs (their values do not matter, only what the
    autotune key reads: the length buckets, (batch x heads) bucket, head_dim, dtype, the masks present, causal,
    dropout, the documents, windows and score modifiers present, and the GQA group). A later call with the same key
    never times configs, so it may then be captured (``torch.cuda.graph``, ``torch.compile(mode="reduce-overhead")``);
    a call during capture whose key was not tuned raises a RuntimeError that names this function. Without CUDA (the
    interpreter) it just runs the calls."""
    check_inputs(q, k, v, mask, key_mask, key_lengths, dropout_p, scale)
    structure = dict(
        documents=documents,
        window_left=window_left,
        window_right=window_right,
        softcap=softcap,
        alibi_slopes=alibi_slopes,
        sinks=sinks,
    )
    check_structure(q, k, *structure.values())
    if q.is_cuda and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("transformer.kernels.tune must be called before CUDA graph capture, not during it")
    leaves = [t.detach().clone().requires_grad_(backward) for t in (q, k, v)]
    with torch.enable_grad():
        out = flash_attention(
            *leaves,
            mask=mask,
            key_mask=key_mask,
            key_lengths=key_lengths,
            causal=causal,
            scale=scale,
            dropout_p=dropout_p,
            seed=0,
            **structure,
        )
        if backward:
            torch.autograd.grad(out, leaves, torch.ones_like(out))
