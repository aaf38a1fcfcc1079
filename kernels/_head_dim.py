"""Which head-dim tile each kernel runs: one padded power-of-two tile, or two power-of-two pieces (issue 27).

Triton's tensors have power-of-two shapes, so head_dim 80 runs in a 128-wide tile (37.5 % of every product on zero
padding) unless the tile is split into pieces: 80 = 64 + 16, 96 = 64 + 32 (kernels/_pieces.py). :func:`pieces` says
where a split saves anything; :data:`SPLIT_BY_DEFAULT` names the kernels whose sm_90 compile check says it pays at
the head_dims it measured, :data:`SPLIT_HEAD_DIMS` (docs/kernels.md, "head_dim 80 and 96"), and :func:`tile` gives a
launch its ``BLOCK_D``/``BLOCK_D2``.

``TYPED_TRANSFORMER_HEAD_DIM_TILES`` overrides the choice for every kernel: ``padded`` (one tile, as before issue 27)
or ``split`` (pieces wherever :func:`pieces` has them); unset or ``auto``: pieces for the kernels of
:data:`SPLIT_BY_DEFAULT` at :data:`SPLIT_HEAD_DIMS`, the padded tile elsewhere. It is read at
the first launch; :func:`forced` overrides it inside a block (tests, scripts/gpu_check).
"""

import contextlib
import functools
import os

from ._args import block_d

TILES_ENV = "TYPED_TRANSFORMER_HEAD_DIM_TILES"
MODES = ("auto", "padded", "split")
KERNELS = ("forward", "split", "dkdv", "dq")  # kernels/_tuning.py's names (the split-KV forward is "split")
# The compile check's decision (benchmarks/kernel_split_head_dim.py, docs/kernels.md): at 80 and 96 the split has
# fewer products, registers and shared memory at every pipelined config of these kernels; the split-KV forward's
# 16-row blocks (Ampere-style MMAs) need more registers and MMA instructions split, so it stays padded.
SPLIT_BY_DEFAULT = frozenset({"forward", "dkdv", "dq"})
SPLIT_HEAD_DIMS = frozenset({80, 96})  # where it was measured; other head_dims split only when forced


def pieces(head_dim: int) -> tuple[int, int] | None:
    """(BLOCK_D, BLOCK_D2): the largest power of two below ``head_dim`` and the power of two (at least 16, tl.dot's
    minimum) at or above the rest, when together they are narrower than the padded tile; else None (a power of two,
    or no saving: 112 = 64 + 64 is 128 again). 80 -> (64, 16), 96 -> (64, 32), 72 -> (64, 16), 48 -> (32, 16),
    40 -> (32, 16), 160 -> (128, 32)."""
    if head_dim <= 16 or head_dim & (head_dim - 1) == 0:
        return None
    first = 1 << (head_dim.bit_length() - 1)
    second = block_d(head_dim - first)
    return (first, second) if first + second < block_d(head_dim) else None


def parse_mode(value: str | None) -> str:
    """The mode named by ``value`` (the environment variable's text; None or empty: ``auto``). A value outside
    MODES raises ValueError naming the variable."""
    mode = (value or "auto").strip()
    if mode not in MODES:
        raise ValueError(f"{TILES_ENV} must be one of {MODES}, got {value!r}")
    return mode


@functools.cache
def _env_mode() -> str:
    return parse_mode(os.environ.get(TILES_ENV))


_forced: list = []  # forced(): the innermost mode wins


@contextlib.contextmanager
def forced(mode: str):
    """Inside this block every launch uses ``mode`` (``padded``, ``split`` or ``auto``) whatever the environment
    says."""
    _forced.append(parse_mode(mode))
    try:
        yield
    finally:
        _forced.pop()


@functools.lru_cache(maxsize=1024)
def _tile(kernel: str, head_dim: int, mode: str) -> tuple:
    split = pieces(head_dim)
    default = kernel in SPLIT_BY_DEFAULT and head_dim in SPLIT_HEAD_DIMS
    if split is None or mode == "padded" or (mode == "auto" and not default):
        return ("BLOCK_D", block_d(head_dim)), ("BLOCK_D2", 0)
    return ("BLOCK_D", split[0]), ("BLOCK_D2", split[1])


def tile(kernel: str, head_dim: int) -> tuple:
    """The (("BLOCK_D", first), ("BLOCK_D2", second)) constexprs of a launch of ``kernel`` (one of KERNELS) at
    ``head_dim``: second == 0 for the one padded tile."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    return _tile(kernel, head_dim, _forced[-1] if _forced else _env_mode())


def width(constexprs: dict) -> int:
    """The head-dim columns a launch's tiles hold (BLOCK_D + BLOCK_D2): what its shared memory scales with."""
    return constexprs["BLOCK_D"] + constexprs.get("BLOCK_D2", 0)
