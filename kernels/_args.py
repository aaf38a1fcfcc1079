"""Turn the optional masks into kernel arguments (pointers and strides) without materializing anything; the
launch's device guard; eager launches that skip the autotuner's per-call key once it has chosen (see
:func:`launch`)."""

import contextlib

import torch
from triton.runtime.autotuner import Autotuner

_NO_GUARD = contextlib.nullcontext()


def device_guard(device: torch.device):
    """A context manager making ``device`` the current CUDA device for the launches inside it: Triton launches on
    the current device, so a tensor on cuda:1 while cuda:0 is current would otherwise be read by a kernel running
    on cuda:0. A no-op context (no device switch) when ``device`` is already current or not a CUDA device."""
    if device.type != "cuda" or device.index == torch.cuda.current_device():
        return _NO_GUARD
    return torch.cuda.device(device.index)


def side_inputs(q: torch.Tensor, mask, key_mask, key_lengths, batch: int, heads: int, q_len: int, k_len: int):
    """The kernels' (MASK, KMASK, KLEN) pointers and their strides (s_mb, s_mh, s_mm, s_mn, s_kmb, s_kmn, s_klb);
    an absent input gets q as a dummy pointer (never read: its HAS_ flag is off) and zero strides.

    Every tensor goes with its strides: a sliced, transposed or expanded input is read where it lies, never copied
    (a broadcast mask is a view whose broadcast dims have stride 0)."""
    if mask is not None:
        full = torch.broadcast_to(mask, (batch, heads, q_len, k_len))
        mask_ptr, mask_strides = full.view(torch.uint8), full.stride()
    else:
        mask_ptr, mask_strides = q, (0, 0, 0, 0)
    if key_mask is not None:
        kmask_ptr, kmask_strides = key_mask.view(torch.uint8), key_mask.stride()
    else:
        kmask_ptr, kmask_strides = q, (0, 0)
    if key_lengths is not None:
        klen_ptr, klen_stride = key_lengths, key_lengths.stride(0)
    else:
        klen_ptr, klen_stride = q, 0
    return (mask_ptr, kmask_ptr, klen_ptr), (*mask_strides, *kmask_strides, klen_stride)


def document_bounds(documents: torch.Tensor) -> torch.Tensor:
    """(batch, 2, k_len) int32: for each key position t of row b, the [start, end) of t's document (the positions
    whose id equals ``documents[b, t]``), found by ``torch.searchsorted`` on the (non-decreasing) rows."""
    docs = documents.contiguous()
    start = torch.searchsorted(docs, docs, side="left", out_int32=True)
    end = torch.searchsorted(docs, docs, side="right", out_int32=True)
    return torch.stack((start, end), dim=1)


def window_bounds(window_left, window_right, q_len: int, k_len: int) -> tuple[int, int]:
    """The windows as kernel integers: None (unbounded) and anything wider than q_len + k_len become q_len + k_len,
    which no query and key are apart, so the 32-bit sums p(i) +- window cannot overflow."""
    unbounded = q_len + k_len
    left = unbounded if window_left is None else min(int(window_left), unbounded)
    right = unbounded if window_right is None else min(int(window_right), unbounded)
    return left, right


def structure_inputs(q, doc_bounds, alibi_slopes, window_left, window_right, softcap, q_len: int, k_len: int):
    """The kernels' (DOCB, SLOPES) pointers and the scalars (s_sb, s_sh, window_left, window_right, softcap) of the
    documents, windows and score modifiers (kernels/_structure.py); absent ones get q as a dummy pointer (never
    read: their HAS_ flag is off), zero strides, unbounded windows and a cap of 1.0. Slopes of shape (heads,) are
    read with a zero batch stride."""
    if alibi_slopes is None:
        slopes, slope_strides = q, (0, 0)
    elif alibi_slopes.dim() == 1:
        slopes, slope_strides = alibi_slopes, (0, alibi_slopes.stride(0))
    else:
        slopes, slope_strides = alibi_slopes, alibi_slopes.stride()
    left, right = window_bounds(window_left, window_right, q_len, k_len)
    cap = 1.0 if softcap is None else float(softcap)
    return (q if doc_bounds is None else doc_bounds, slopes), (*slope_strides, left, right, cap)


def structure_flags(doc_bounds, alibi_slopes, window_left, window_right, softcap) -> tuple:
    """The (name, value) pairs of the kernels' compile-time switches HAS_DOCS, HAS_WINDOW, HAS_SOFTCAP, HAS_ALIBI."""
    return (
        ("HAS_DOCS", doc_bounds is not None),
        ("HAS_WINDOW", window_left is not None or window_right is not None),
        ("HAS_SOFTCAP", softcap is not None),
        ("HAS_ALIBI", alibi_slopes is not None),
    )


def tma_ok(*tensors: torch.Tensor) -> bool:
    """Whether tensor descriptors (TMA) may read these (batch, heads, len, head_dim) tensors: a unit head_dim stride,
    a positive row stride, every other stride a multiple of 16 bytes and the data 16-byte aligned (what
    ``tl.make_tensor_descriptor`` requires of each (batch, head) slice's base and rows). Otherwise the kernels read
    through pointers (any strides)."""
    for t in tensors:
        s_b, s_h, s_row, s_d = t.stride()
        size = t.element_size()
        if s_d != 1 or s_row <= 0 or (s_b * size) % 16 or (s_h * size) % 16 or (s_row * size) % 16:
            return False
        if t.data_ptr() % 16:
            return False
    return True


def block_d(head_dim: int) -> int:
    """The head-dim tile: the power of two at or above head_dim, at least 16 (tl.dot's minimum)."""
    return max(16, 1 << (head_dim - 1).bit_length())


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 inputs use full-precision dots (eager PyTorch does not use TF32 by default either)."""
    return "ieee" if dtype in (torch.float32, torch.float64) else "tf32"


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulator and logsumexp dtype: float32, or float64 for float64 inputs (interpreter only)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


_CONSTEXPRS: dict = {}  # kernel_constexprs' answers by what decides them


def kernel_constexprs(
    q: torch.Tensor, mask, key_mask, key_lengths, causal: bool, dropout_p: float, blocks: tuple, extra: tuple = ()
) -> dict:
    """The compile-time switches every attention kernel (forward, dK/dV, dQ) is launched with; ``blocks``: the
    interpreter's (("BLOCK_M", m), ("BLOCK_N", n)) (() for an autotuned kernel, which passes its config's);
    ``extra``: more (name, value) pairs, among them the head-dim tile (kernels/_head_dim.py ``tile``). Built once
    per combination (host time per call): the same dict is returned every time, so callers must not modify it."""
    key = (q.shape[-1], q.dtype, mask is None, key_mask is None, key_lengths is None, causal, dropout_p > 0.0)
    key = (*key, blocks, extra)
    found = _CONSTEXPRS.get(key)
    if found is None:
        head_dim = q.shape[-1]
        found = _CONSTEXPRS[key] = dict(
            HEAD_DIM=head_dim,
            HAS_MASK=mask is not None,
            HAS_KMASK=key_mask is not None,
            HAS_KLEN=key_lengths is not None,
            CAUSAL=bool(causal),
            DROPOUT=dropout_p > 0.0,
            PRECISION=dot_precision(q.dtype),
            **dict(blocks),
            **dict(extra),
        )
    return found


# Eager launches that skip the autotuner's per-call key once it has chosen.
#
# Triton's ``Autotuner.run`` rebuilds its key from the launch's ~50 arguments at every call: a scan of the list of
# argument names per argument (quadratic) and ``str(dtype)`` per tensor, tens of microseconds of host time per launch
# (benchmarks/kernel_host_cost.py's "autotuner key" row). The launchers already build their own key, which
# determines Triton's (the tuning buckets, the compile-time switches, the GQA group, the split counts and the dtypes:
# every value of ``TUNE_KEY`` and every argument's dtype follows from it). After the autotuner has run once for a
# launcher key (timing its configs, or reading them from Triton's cache), :func:`launch` remembers the config it chose
# and later launches with that key call the chosen config's kernel directly, with the same arguments the autotuner
# would pass it: the same config, so the same bits.
#
# Only eager launches use this; under torch.compile (``wrap_triton``) the kernels are launched as they are.

_chosen: dict = {}  # launcher key -> (constexprs with the chosen config's kwargs, the config's block sizes)
MAX_CHOSEN = 4096  # a bounded memory (keys hold length buckets, not lengths, so real programs stay far below)


def eager_launch(kernel):
    """The kernel wrapper of eager calls (kernels/_op.py hands it to the launchers): the identity. A launcher given
    this very function launches through :func:`launch`; any other wrapper (wrap_triton, a test's recorder) is used
    as ``wrapper(kernel)[grid](...)``."""
    return kernel


def autotuned(kernel) -> bool:
    """Whether ``kernel`` is an autotuner (CUDA) rather than one jit function (the interpreter)."""
    return isinstance(kernel, Autotuner)


def launch(kernel, grid, key: tuple, args: tuple, constexprs: dict) -> None:
    """``kernel[grid](*args, **constexprs)``; ``grid`` maps a config's kwargs (BLOCK_M, BLOCK_N) to the launch grid.
    An autotuner that has chosen a config for ``key`` is bypassed: its chosen config's kernel is launched directly."""
    chosen = _chosen.get(key)
    if chosen is not None:
        kwargs, blocks = chosen
        kernel.fn.run(*args, grid=grid(blocks), warmup=False, **kwargs)
        return
    kernel.run(*args, grid=grid, warmup=False, **constexprs)  # what kernel[grid](*args, ...) calls
    if isinstance(kernel, Autotuner) and torch._C._len_torch_dispatch_stack() == 0:
        config = kernel.best_config
        if len(_chosen) >= MAX_CHOSEN:
            _chosen.clear()
        _chosen[key] = ({**constexprs, **config.all_kwargs()}, dict(config.kwargs))


def forget() -> None:
    """Forget every remembered choice (tests; a rebuilt kernel)."""
    _chosen.clear()
