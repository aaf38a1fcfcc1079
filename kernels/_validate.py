"""Input validation (clear ValueErrors) and the support check used by the attention dispatcher."""

import functools
import math

import torch
from torch.fx.experimental.symbolic_shapes import guard_or_false, guard_or_true

from ._grid import launch_reason
from ._tuning import interpreting

MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 256
FLOATS = (torch.float16, torch.bfloat16, torch.float32)


def _shape(t: torch.Tensor) -> str:
    return f"({', '.join(str(s) for s in t.shape)})"


_GOOD_QKV: set = set()  # (shapes, dtypes, devices) of q, k, v that passed _validate_qkv (plain tensors only)
_Tensor = torch.Tensor


def validate(q, k, v, mask=None, key_mask=None, key_lengths=None, dropout_p=0.0, scale=None) -> None:
    """Raise ValueError naming the argument, the expected and the actual value when the inputs are malformed.

    q, k and v are checked once per (shapes, dtypes, devices) of plain tensors: a later call with the same ones only
    looks them up (host time per call; not while torch.compile traces); masks, dropout and scale are checked at every
    call."""
    if type(q) is _Tensor and type(k) is _Tensor and type(v) is _Tensor and not torch.compiler.is_compiling():
        signature = (q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, q.device, k.device, v.device)
        if signature not in _GOOD_QKV:
            _validate_qkv(q, k, v)
            if len(_GOOD_QKV) > 4096:  # a bounded memory of shapes (decoding grows k_len by one a step)
                _GOOD_QKV.clear()
            _GOOD_QKV.add(signature)
    else:
        _validate_qkv(q, k, v)
    if mask is not None or key_mask is not None or key_lengths is not None:
        _validate_masks(q, k, mask, key_mask, key_lengths)
    if not isinstance(dropout_p, (int, float)) or not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be a float in [0, 1), got {dropout_p!r}")
    if scale is not None and not isinstance(scale, (int, float)):
        raise ValueError(f"scale must be a float or None, got {type(scale).__name__}")


def _validate_qkv(q, k, v) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have 4 dims (batch, heads, seq, head_dim), got shape {_shape(t)}")
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating tensor (float16, bfloat16 or float32), got {t.dtype}")
        if t.dtype not in FLOATS + (torch.float64,):
            raise ValueError(f"{name}.dtype must be float16, bfloat16 or float32, got {t.dtype}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise ValueError(f"{name}.dtype must equal q.dtype={q.dtype}, got {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name} must be on q's device {q.device}, got {t.device}")
    batch, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    for axis, label in ((0, "batch"), (3, "head_dim")):
        for name, t in (("k", k), ("v", v)):
            if t.shape[axis] != q.shape[axis]:
                raise ValueError(
                    f"{name} {label} (dim {axis}) must equal q's {q.shape[axis]}: "
                    f"q has shape {_shape(q)}, {name} has shape {_shape(t)}"
                )
    kv_heads = k.shape[1]
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(
            f"k heads (dim 1) must divide q's {heads} (grouped-query attention: each key/value head "
            f"serves heads // kv_heads query heads), got {kv_heads}: q has shape {_shape(q)}, "
            f"k has shape {_shape(k)}"
        )
    if v.shape[1] != kv_heads:
        raise ValueError(f"v heads (dim 1) must equal k's {kv_heads}: k has shape {_shape(k)}, v has shape {_shape(v)}")
    if v.shape[2] != k_len:
        raise ValueError(f"v must have k's length {k_len} (dim 2): k has shape {_shape(k)}, v has shape {_shape(v)}")
    if q_len < 1 or k_len < 1:
        raise ValueError(f"q_len and k_len must be >= 1, got q_len={q_len}, k_len={k_len}")
    if not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be in [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}], got {head_dim} (q shape {_shape(q)})")


def _fits(got, want) -> bool:
    """``got in (1, want)``, without guarding on a data-dependent (unbacked) size under torch.export: an unknown size is
    taken as not 1 (as torch's broadcasting does) and an undecidable equality is checked when the graph runs."""
    if type(got) is int and type(want) is int:
        return got in (1, want)
    if guard_or_false(got == 1):
        return True
    if not guard_or_true(got == want):
        return False
    torch._check(got == want, lambda: f"mask dim {got} must be 1 or {want}")
    return True


def _validate_masks(q, k, mask, key_mask, key_lengths) -> None:
    batch, heads, q_len, _ = q.shape
    k_len = k.shape[2]
    if mask is not None:
        _check_bool(mask, "mask", q)
        if mask.dim() > 4:
            raise ValueError(
                f"mask must have at most 4 dims, broadcastable to "
                f"(batch, heads, q_len, k_len)=({batch}, {heads}, {q_len}, {k_len}), got {_shape(mask)}"
            )
        padded = (1,) * (4 - mask.dim()) + tuple(mask.shape)
        labels = ("batch", "heads", "q_len", "k_len")
        for got, want, label in zip(padded, (batch, heads, q_len, k_len), labels, strict=True):
            if not _fits(got, want):
                raise ValueError(
                    f"mask of shape {_shape(mask)} is not broadcastable to (batch, heads, q_len, k_len)="
                    f"({batch}, {heads}, {q_len}, {k_len}): its {label} dim is {got}, expected 1 or {want}"
                )
    if key_mask is not None:
        _check_bool(key_mask, "key_mask", q)
        if tuple(key_mask.shape) != (batch, k_len):
            raise ValueError(f"key_mask must have shape (batch, k_len)=({batch}, {k_len}), got {_shape(key_mask)}")
    if key_lengths is not None:
        if (
            not isinstance(key_lengths, torch.Tensor)
            or key_lengths.dtype.is_floating_point
            or key_lengths.dtype in (torch.bool, torch.complex64, torch.complex128)
        ):
            raise ValueError(
                f"key_lengths must be an integer tensor of shape (batch,)=({batch},), got "
                f"{getattr(key_lengths, 'dtype', type(key_lengths).__name__)}"
            )
        if tuple(key_lengths.shape) != (batch,):
            raise ValueError(f"key_lengths must have shape (batch,)=({batch},), got {_shape(key_lengths)}")
        if key_lengths.device != q.device:
            raise ValueError(f"key_lengths must be on q's device {q.device}, got {key_lengths.device}")


def validate_structure(
    q, k, documents=None, window_left=None, window_right=None, softcap=None, alibi_slopes=None, sinks=None
):
    """Raise ValueError naming the argument, the expected and the actual value for malformed documents, windows or
    score modifiers (kernels/_structure.py). Non-decreasing document ids are checked when ``documents`` is on the
    CPU (elsewhere the check would wait for the device), except while torch.compile traces (a data-dependent branch).
    """
    batch, heads, q_len, _ = q.shape
    k_len = k.shape[2]
    if documents is not None:
        _validate_documents(documents, q, batch, q_len, k_len)
    for name, window in (("window_left", window_left), ("window_right", window_right)):
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
            raise ValueError(f"{name} must be an int >= 0 or None (unbounded), got {window!r}")
    if softcap is not None and (
        isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not math.isfinite(softcap) or softcap <= 0
    ):
        raise ValueError(f"softcap must be a finite float > 0 or None, got {softcap!r}")
    if alibi_slopes is not None:
        _validate_slopes(alibi_slopes, q, batch, heads)
    if sinks is not None:
        _validate_sinks(sinks, q, heads)


def _validate_sinks(sinks, q, heads: int) -> None:
    if not isinstance(sinks, torch.Tensor) or not sinks.is_floating_point() or tuple(sinks.shape) != (heads,):
        got = f"{_shape(sinks)} {sinks.dtype}" if isinstance(sinks, torch.Tensor) else type(sinks).__name__
        raise ValueError(
            f"sinks must be a float tensor of one logit per query head, shape (heads,)=({heads},), got {got}"
        )
    if sinks.device != q.device:
        raise ValueError(f"sinks must be on q's device {q.device}, got {sinks.device}")


def _validate_documents(documents, q, batch: int, q_len: int, k_len: int) -> None:
    if not isinstance(documents, torch.Tensor) or documents.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"documents must be an int32 or int64 tensor of shape (batch, k_len)=({batch}, {k_len}), got "
            f"{getattr(documents, 'dtype', type(documents).__name__)}"
        )
    if tuple(documents.shape) != (batch, k_len):
        raise ValueError(f"documents must have shape (batch, k_len)=({batch}, {k_len}), got {_shape(documents)}")
    if documents.device != q.device:
        raise ValueError(f"documents must be on q's device {q.device}, got {documents.device}")
    if q_len > k_len:
        raise ValueError(
            f"documents need q_len <= k_len (the queries are the last q_len key positions), got q_len={q_len}, "
            f"k_len={k_len}"
        )
    if documents.device.type == "cpu" and k_len > 1 and not torch.compiler.is_compiling():
        falls = documents[:, 1:] < documents[:, :-1]
        if bool(falls.any()):
            row, key = (int(i) for i in falls.nonzero()[0])
            before, after = int(documents[row, key]), int(documents[row, key + 1])
            raise ValueError(
                f"documents must be non-decreasing along each row: row {row} goes from {before} at key {key} "
                f"to {after} at key {key + 1}"
            )


def _validate_slopes(slopes, q, batch: int, heads: int) -> None:
    if not isinstance(slopes, torch.Tensor) or slopes.dtype not in (torch.float32, q.dtype):
        raise ValueError(
            f"alibi_slopes must be a float32 (or q's dtype {q.dtype}) tensor of shape (heads,)=({heads},) or "
            f"(batch, heads)=({batch}, {heads}), got {getattr(slopes, 'dtype', type(slopes).__name__)}"
        )
    if tuple(slopes.shape) not in ((heads,), (batch, heads)):
        raise ValueError(
            f"alibi_slopes must have shape (heads,)=({heads},) or (batch, heads)=({batch}, {heads}), one slope per "
            f"query head, got {_shape(slopes)}"
        )
    if slopes.device != q.device:
        raise ValueError(f"alibi_slopes must be on q's device {q.device}, got {slopes.device}")
    if slopes.requires_grad and torch.is_grad_enabled():
        raise ValueError("alibi_slopes must not require grad: the kernel computes no gradient for the slopes")


def _check_bool(t, name: str, q: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor) or t.dtype != torch.bool:
        raise ValueError(
            f"{name} must be a bool tensor (True = may attend), got {getattr(t, 'dtype', type(t).__name__)}"
        )
    if t.device != q.device:
        raise ValueError(f"{name} must be on q's device {q.device}, got {t.device}")


def run_reason(q: torch.Tensor, k: torch.Tensor) -> str | None:
    """Why the kernels cannot run these (well-formed) inputs here: the device, the dtype, or sizes no launch grid
    can take (see _grid.py); None when they can. Decided once per (device, dtype, sizes, interpreter on or off)."""
    reason = _uncached_while_compiling(_run_reason)
    return reason(q.device, q.dtype, q.shape, k.shape[1], k.shape[2], q.is_cuda or interpreting())


def _uncached_while_compiling(cached):
    """The function under ``cached`` while torch.compile traces (Dynamo skips an ``lru_cache`` wrapper and warns that
    it did), ``cached`` itself otherwise: the cache only saves host time per eager call."""
    return cached.__wrapped__ if torch.compiler.is_compiling() else cached


@functools.lru_cache(maxsize=4096)
def _run_reason(device, dtype, shape, kv_heads, k_len, _interpreting) -> str | None:
    batch, heads, q_len, _ = shape
    return _device_reason(device, dtype) or launch_reason(batch, heads, kv_heads, q_len, k_len)


def device_reason(q: torch.Tensor) -> str | None:
    """Why this machine cannot run the kernel on q's device/dtype, or None."""
    return _device_reason(q.device, q.dtype)


def _device_reason(device, dtype) -> str | None:
    if device.type == "cuda":
        if dtype == torch.float64:
            return "float64 runs only under the Triton interpreter (TRITON_INTERPRET=1); use float32 on CUDA"
        return None
    if device.type != "cpu":
        return f"the Triton kernel runs on CUDA tensors (or CPU tensors under TRITON_INTERPRET=1), got device {device}"
    if not interpreting():
        return "q is on the CPU and TRITON_INTERPRET=1 is not set; the Triton kernel needs CUDA tensors"
    if dtype == torch.bfloat16:
        return "bfloat16 is not supported by the Triton CPU interpreter (triton#11584); use float16 or float32"
    return _old_interpreter_reason()


_OLD_INTERPRETER: list = []  # the reason below, once asked


def _old_interpreter_reason() -> str | None:
    """Triton <= 3.6's interpreter turns 1-element arrays into loop bounds with int(), which NumPy >= 2.4 rejects.
    (Installed versions do not change while running: asked once. While torch.compile traces, Dynamo calls it for
    real and takes the answer as a constant: it cannot trace ``importlib.metadata`` before torch 2.13.)"""
    if not _OLD_INTERPRETER:
        _OLD_INTERPRETER.append(_ask_old_interpreter())
    return _OLD_INTERPRETER[0]


_old_interpreter_reason._dynamo_marked_constant = True  # type: ignore[attr-defined]  # = assume_constant_result


def _ask_old_interpreter() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    import triton

    from ._triton_version import TRITON_VERSION

    try:
        numpy_version = tuple(int(part) for part in version("numpy").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return None
    if TRITON_VERSION <= (3, 6) and numpy_version >= (2, 4):
        return (
            f"the Triton {triton.__version__} interpreter fails with NumPy {version('numpy')} (dynamic loop "
            "bounds); use numpy<2.4 or triton>=3.9 to interpret"
        )
    return None


def unsupported_reason(
    q,
    k,
    v,
    *,
    mask=None,
    key_mask=None,
    key_lengths=None,
    dropout_p=0.0,
    scale=None,
    documents=None,
    window_left=None,
    window_right=None,
    softcap=None,
    alibi_slopes=None,
    sinks=None,
) -> str | None:
    """None when the Triton path can run these inputs on this machine, else a sentence saying why not."""
    try:
        validate(q, k, v, mask, key_mask, key_lengths, dropout_p, scale)
        validate_structure(q, k, documents, window_left, window_right, softcap, alibi_slopes, sinks)
    except ValueError as error:
        return str(error)
    return run_reason(q, k)


AUTO_MAX_HEAD_DIM = 128  # auto backend selection: above this, SDPA until a GPU measures the kernel


def auto_reason(q) -> str | None:
    """Why automatic backend selection should not pick the kernel for these (supported) inputs, or None.

    head_dim above 128 runs with a 256-wide head-dim tile: compiled for sm_90, every dK/dV config spills registers
    there and the fitting forward configs have small blocks (benchmarks/results/kernel_resources_*.json), so
    SDPA is expected to be faster. The kernel still runs them when asked for by name; this stands until a GPU
    figure says otherwise (docs/kernels.md)."""
    head_dim = q.shape[-1]
    if head_dim > AUTO_MAX_HEAD_DIM:
        return (
            f"head_dim {head_dim} > {AUTO_MAX_HEAD_DIM}: the kernel's head_dim-256 configs spill registers "
            "in the backward on sm_90 and are expected to be slower than SDPA (not yet measured on a GPU)"
        )
    return None
