"""Launch configuration: autotuning on CUDA, one fixed configuration under TRITON_INTERPRET=1.

On CUDA each kernel is a ``triton.autotune`` over a few block configs, keyed on the query and key length buckets,
a (batch x heads) bucket, head_dim, causal and dropout (and the dtypes). Tuned choices persist in Triton's cache
directory (``cache_results``), so later processes reuse them instead of timing again; the environment variable
``TYPED_TRANSFORMER_KERNEL_CONFIGS`` pins configs instead (see :func:`pinned_configs`), read when the kernels are
first used. docs/kernels.md says what this makes bitwise reproducible across processes.

Autotuning with more than one config touches the driver, which does not exist without a GPU. The interpreter's
block shape is 32 x 32 unless changed with :func:`interpret_blocks` (a context manager) or
:func:`set_interpret_blocks`, so that tests can run the kernels' block-shape-dependent logic (BLOCK_M != BLOCK_N)
on the CPU. It has no effect on CUDA, where the autotuner picks the blocks.
"""

import contextlib
import functools
import inspect
import os
import re

import torch
import triton
import triton.language as tl

from . import _grid
from ._triton_version import TRITON_VERSION

_HAS_DESCRIPTORS = hasattr(tl, "make_tensor_descriptor")  # Triton >= 3.4


# Triton 3.4 and 3.5's interpreter checks a descriptor's strides in elements, not bytes ("stride must be 16-byte
# aligned" for a float32 row of 20): on the CPU the forward reads through pointers there (compiled, on a GPU, the
# check is in bytes)
def interpreted_descriptors(triton_version: tuple[int, int]) -> bool:
    """Whether the CPU interpreter of this Triton release reads tensor descriptors as the compiled kernels do."""
    return _HAS_DESCRIPTORS and triton_version >= (3, 6)


_INTERPRETED_DESCRIPTORS = interpreted_descriptors(TRITON_VERSION)

INTERPRET_BLOCKS = {"BLOCK_M": 32, "BLOCK_N": 32}  # the default interpreter block shape
_interpret_blocks = dict(INTERPRET_BLOCKS)  # the current one (read at each launch)
interpret_block_items = tuple(_interpret_blocks.items())  # the same as (name, size) pairs (a launch's cache key)
BLOCK_SIZES = (16, 32, 64, 128)  # tl.dot needs at least 16 rows and columns


def get_interpret_blocks() -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) that kernels launched under TRITON_INTERPRET=1 use now."""
    return _interpret_blocks["BLOCK_M"], _interpret_blocks["BLOCK_N"]


def set_interpret_blocks(block_m: int, block_n: int) -> tuple[int, int]:
    """Use (BLOCK_M, BLOCK_N) for every later interpreted launch (forward, dK/dV and dQ kernels); returns the
    previous shape. Each must be one of BLOCK_SIZES. Ignored on CUDA (autotuned there)."""
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if isinstance(value, bool) or not isinstance(value, int) or value not in BLOCK_SIZES:
            raise ValueError(f"{name} must be one of {BLOCK_SIZES}, got {value!r}")
    previous = get_interpret_blocks()
    _interpret_blocks.update(BLOCK_M=block_m, BLOCK_N=block_n)
    global interpret_block_items
    interpret_block_items = tuple(_interpret_blocks.items())
    return previous


@contextlib.contextmanager
def interpret_blocks(block_m: int, block_n: int):
    """Context manager: interpreted launches inside it use (BLOCK_M, BLOCK_N); the previous shape comes back
    on exit, also after an exception."""
    previous = set_interpret_blocks(block_m, block_n)
    try:
        yield
    finally:
        set_interpret_blocks(*previous)


def interpreting() -> bool:
    """True when Triton runs kernels on the CPU interpreter (read at call time, not import time)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _configs(pairs):
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s) for (m, n, w, s) in pairs]


# (BLOCK_M, BLOCK_N, num_warps, num_stages), best guess first; the small last one fits in shared memory at every
# head_dim and dtype. Configs that do not fit a launch's head_dim and dtype are pruned before it (see fits()).
FWD_CONFIGS = _configs(
    [
        (128, 64, 8, 3),
        (128, 128, 8, 3),
        (128, 128, 8, 2),
        (128, 32, 4, 3),
        (64, 64, 4, 3),
        (64, 32, 4, 2),
        (32, 32, 4, 1),
    ]
)
DKDV_CONFIGS = _configs(
    [(32, 128, 8, 3), (32, 128, 8, 2), (32, 128, 8, 4), (64, 128, 8, 2), (64, 64, 4, 3), (32, 64, 4, 2), (16, 32, 4, 1)]
)
DQ_CONFIGS = _configs(
    [(128, 64, 8, 3), (128, 32, 8, 3), (128, 64, 8, 2), (128, 32, 8, 2), (64, 64, 4, 3), (64, 32, 4, 2), (32, 16, 4, 1)]
)
# the split-KV forward (short queries: 16-row query blocks first; long key blocks)
SPLIT_CONFIGS = _configs(
    [(16, 128, 4, 3), (16, 64, 4, 3), (16, 128, 8, 2), (32, 64, 4, 3), (64, 64, 4, 2), (16, 32, 4, 1)]
)
# What changes the best config: the lengths (bucketed), the grid's (batch x heads) bucket, head_dim, causal,
# dropout, which masks are present (a mask tensor adds a load per score; masks turn off the interior fast path), the
# documents, windows and score modifiers present (the same: more work per score, no interior blocks), and the GQA
# group (dK/dV loops over it). Triton adds the tensors' dtypes.
TUNE_KEY = [
    "Q_BUCKET",
    "K_BUCKET",
    "BH_BUCKET",
    "HEAD_DIM",
    "CAUSAL",
    "DROPOUT",
    "HAS_MASK",
    "HAS_KMASK",
    "HAS_KLEN",
    "HAS_DOCS",
    "HAS_WINDOW",
    "HAS_SOFTCAP",
    "HAS_ALIBI",
    "group",
]
KERNEL_CONFIGS = {"forward": FWD_CONFIGS, "split": SPLIT_CONFIGS, "dkdv": DKDV_CONFIGS, "dq": DQ_CONFIGS}
CONFIGS_ENV = "TYPED_TRANSFORMER_KERNEL_CONFIGS"
LENGTH_BUCKETS = (16, 16384)  # lengths tune in powers of two from 16 to 16384: longer ones share a config
DECODE_K_BUCKETS = (256, 16384)  # keys of short queries (decoding) tune in powers of 4 from 256 to 16384
BH_BUCKET_MAX = 4096  # (batch x heads) tunes in powers of 4 up to 4096 pairs; more share a config
SMEM_LIMIT = 227 * 1024  # shared memory one H100 (sm_90) block may use
SMEM_SCRATCH = 2048  # beyond the tiles: reductions and barriers (512 bytes seen in float32 with masks and dropout)


DKDV_DROPOUT_BYTES = 2  # per score: dK/dV transposes its query-major keep tile through shared memory (16 bits)
FWD_MASK_BYTES = 4  # per score: the forward with a dense mask converts a 32-bit score-sized tile through shared memory


def shared_bytes(name: str, config, block_d: int, itemsize: int, dropout: bool = False, mask: bool = False) -> int:
    """Shared memory a launch of kernel ``name`` with ``config`` needs at head-dim tile ``block_d`` for inputs of
    ``itemsize`` bytes: the tiles the loop streams, once per pipeline stage, plus the tiles held for the whole loop,
    plus (dK/dV with dropout) the keep tile transposed to key-major and (the forward with a dense ``mask``) a
    score-sized layout conversion (sm_90, triton 3.9: 32 KiB more at 128x64 through tensor descriptors). An upper
    bound of what Triton allocates (compiled for sm_90 with launch specialisation: checked against the compiler's own
    figures in benchmarks/results/kernel_*.json by tests/kernels, and by scripts/compile_kernels.py for every variant
    it compiles). The forward and dQ build their keep tile in the scores' own layout (kernels/_common.py keep_block):
    no shared memory."""
    m, n, stages = config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"], max(config.num_stages, 2)
    extra = 0
    if name in ("forward", "split"):  # K and V stream, Q stays
        tiles = stages * 2 * n + m
        extra = FWD_MASK_BYTES * m * n if mask else 0
    elif name == "dkdv":  # Q and dO stream, K and V stay
        tiles = stages * 2 * m + 2 * n
        extra = DKDV_DROPOUT_BYTES * m * n if dropout else 0
    else:  # dq: K and V stream, Q and dO stay
        tiles = stages * 2 * n + 2 * m
    return tiles * block_d * itemsize + extra + SMEM_SCRATCH


def fits(name: str, config, block_d: int, itemsize: int, dropout: bool = False, mask: bool = False) -> bool:
    """Whether ``config`` of kernel ``name`` fits an H100 block's shared memory at this head-dim tile, dtype, dropout
    and dense-mask switch."""
    return shared_bytes(name, config, block_d, itemsize, dropout, mask) <= SMEM_LIMIT


def fitting(name: str, configs, block_d: int, itemsize: int, dropout: bool = False, mask: bool = False) -> list:
    """The configs that fit (in their order); the last config if none does (it is the smallest)."""
    return [c for c in configs if fits(name, c, block_d, itemsize, dropout, mask)] or [configs[-1]]


def length_bucket(n: int, low: int = LENGTH_BUCKETS[0], high: int = LENGTH_BUCKETS[1], base: int = 2) -> int:
    """The power of ``base`` at or above ``n`` (counting from ``low``), clamped to [low, high]."""
    bucket = low
    while bucket < n and bucket < high:
        bucket *= base
    return min(bucket, high)


def bh_bucket(batch_heads: int) -> int:
    """The power of 4 at or above ``batch_heads``, at most BH_BUCKET_MAX: a config tuned for 8 (batch, head)
    pairs is not reused for 8000, where the grid is a thousand times larger."""
    bucket = 1
    while bucket < batch_heads and bucket < BH_BUCKET_MAX:
        bucket *= 4
    return bucket


FIRST = "first"  # pinned_configs' value for "the first config that fits"


def pinned_configs(value: str | None = None) -> dict:
    """{kernel name: the one triton.Config it uses} from ``TYPED_TRANSFORMER_KERNEL_CONFIGS`` (or ``value``):

    * ``first``: every kernel uses the first config of its list that fits the launch's head_dim and dtype in shared
      memory (no timing at all; the value is :data:`FIRST` for every kernel);
    * ``forward=128x64x8x3,dkdv=32x128x8x2``: BLOCK_M x BLOCK_N x num_warps x num_stages for the named kernels
      (forward, split, dkdv, dq); the others keep autotuning.

    A pinned kernel gives the same bits in every process. A malformed value raises ValueError naming the variable."""
    value = os.environ.get(CONFIGS_ENV, "") if value is None else value
    value = value.strip()
    if not value:
        return {}
    if value == "first":
        return dict.fromkeys(KERNEL_CONFIGS, FIRST)
    pinned = {}
    for part in value.split(","):
        match = re.fullmatch(r"\s*(\w+)\s*=\s*(\d+)x(\d+)x(\d+)x(\d+)\s*", part)
        if match is None or match.group(1) not in KERNEL_CONFIGS:
            raise ValueError(
                f"{CONFIGS_ENV} must be 'first' or comma-separated KERNEL=BLOCK_MxBLOCK_NxWARPSxSTAGES "
                f"with KERNEL in {sorted(KERNEL_CONFIGS)}, e.g. 'forward=128x64x8x3'; got {part!r}"
            )
        name, block_m, block_n, warps, stages = match.group(1), *map(int, match.groups()[1:])
        for label, size in (("BLOCK_M", block_m), ("BLOCK_N", block_n)):
            if size not in BLOCK_SIZES:
                raise ValueError(f"{CONFIGS_ENV}: {label} of {name} must be one of {BLOCK_SIZES}, got {size}")
        pinned[name] = triton.Config({"BLOCK_M": block_m, "BLOCK_N": block_n}, num_warps=warps, num_stages=stages)
    return pinned


ASSUMED_SMS = 132  # an H100's streaming multiprocessors: the split-KV rule's GPU when there is none (interpreter)
_sm_counts: dict = {}
_forced_splits: list = []  # tests: the split count to use instead of the rule's


def sm_count(device) -> int:
    """Streaming multiprocessors of ``device`` (cached), or ASSUMED_SMS off CUDA."""
    if device.type != "cuda":
        return ASSUMED_SMS
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _sm_counts:
        _sm_counts[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _sm_counts[index]


_tma_capable: dict = {}  # CUDA device index -> whether it has TMA (sm_90 and later)
_forced_tma: list = []  # tests and scripts: use tensor descriptors (True) or pointers (False) whatever the layouts


def tma_enabled(device) -> bool:
    """Whether the forward may read through tensor descriptors on ``device``: this Triton has
    ``tl.make_tensor_descriptor``, and on CUDA the GPU has a tensor memory accelerator (sm_90+), for which Triton's
    allocator is set (in-kernel descriptors need a global scratch buffer). Under the interpreter descriptors run on the
    CPU (Triton 3.6 and later), so both paths are tested there. :func:`tensor_descriptors` overrides it."""
    if _forced_tma:
        return _forced_tma[-1]
    if device.type != "cuda":
        return _INTERPRETED_DESCRIPTORS
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _tma_capable:
        _tma_capable[index] = _HAS_DESCRIPTORS and torch.cuda.get_device_capability(index)[0] >= 9
    if _tma_capable[index]:
        _ensure_allocator()
    return _tma_capable[index]


def _ensure_allocator() -> None:
    """Triton's allocator for in-kernel tensor descriptors: torch's (graph-capture safe), unless one is set."""
    from triton.runtime import _allocation

    current = getattr(_allocation, "_allocator", None)
    null = getattr(_allocation, "NullAllocator", None)  # (Triton 3.5 has no _NULL_ALLOCATOR: a fresh NullAllocator())
    if current is None or (null is not None and isinstance(current.get(), null)):
        triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))


@contextlib.contextmanager
def tensor_descriptors(enabled: bool):
    """Inside this block the forward uses tensor descriptors where the layouts allow (True) or pointers (False)."""
    _forced_tma.append(enabled)
    try:
        yield
    finally:
        _forced_tma.pop()


SPLIT_GRANULARITY = 128  # keys per split are a multiple of the largest key block any launch uses (CUDA or not)


def kv_splits(batch_heads: int, q_len: int, k_len: int, device) -> tuple[int, int]:
    """(splits, keys per split) of the forward: _grid.kv_splits's rule for ``device``'s SM count (or a forced
    count, see :func:`force_kv_splits`)."""
    if _forced_splits:
        return _grid.split_plan(k_len, _forced_splits[-1], SPLIT_GRANULARITY)
    return _grid.kv_splits(batch_heads, q_len, k_len, sm_count(device), SPLIT_GRANULARITY)


_forced_group_splits: list = []  # tests: the dK/dV group split to use instead of the rule's


def group_splits(batch: int, kv_heads: int, group: int, k_len: int, device) -> int:
    """Programs per (batch, kv head, key block) of the dK/dV kernel: _grid.group_splits's rule for ``device`` (or a
    forced count, see :func:`force_group_splits`)."""
    if _forced_group_splits:
        return _forced_group_splits[-1]
    if group == 1:
        return 1
    return _grid.group_splits(batch, kv_heads, group, k_len, sm_count(device), SPLIT_GRANULARITY)


@contextlib.contextmanager
def force_group_splits(splits: int):
    """Tests: inside this block the dK/dV kernel splits each GQA group in ``splits`` shares (a divisor of the
    group) whatever the rule says."""
    _forced_group_splits.append(splits)
    try:
        yield
    finally:
        _forced_group_splits.pop()


@contextlib.contextmanager
def force_kv_splits(splits: int):
    """Tests: inside this block the forward splits the keys in (at most) ``splits`` parts of a multiple of
    SPLIT_GRANULARITY keys whatever the rule says; 1 = never split."""
    _forced_splits.append(splits)
    try:
        yield
    finally:
        _forced_splits.pop()


_tuned: set = set()  # kernels whose autotuner may time configs at a new key (not pinned, not interpreting)
_ready: set = set()  # launch keys already seen outside capture (so tuned, or pinned)


def _prune(name: str, keep, configs, named_args, **kwargs) -> list:
    """The autotuner's ``early_config_prune``: the configs that fit this launch's head_dim, dtype and dropout in shared
    memory (the first ``keep`` of them when pinned to the first that fits)."""
    block_d = kwargs["BLOCK_D"] + kwargs.get("BLOCK_D2", 0)  # the head-dim columns: one tile or two pieces
    dropout, mask = kwargs.get("DROPOUT", False), kwargs.get("HAS_MASK", False)
    return fitting(name, configs, block_d, named_args["Q"].element_size(), dropout, mask)[:keep]


def build(jit_fn, name: str):
    """The kernel to launch: the plain jit function when interpreting, else an autotuner over the configs of
    KERNEL_CONFIGS[name] that fit the launch in shared memory (only the pinned one when
    ``TYPED_TRANSFORMER_KERNEL_CONFIGS`` names it, only the first that fits for ``first``), whose tuned choices
    persist in Triton's cache directory where this Triton can (``cache_results``, Triton >= 3.2)."""
    _tuned.discard(name)
    if interpreting():
        return jit_fn
    pinned = pinned_configs().get(name)
    configs, keep = ([pinned], None) if isinstance(pinned, triton.Config) else (KERNEL_CONFIGS[name], None)
    if pinned is FIRST:
        keep = 1
    elif pinned is None and len(configs) > 1:
        _tuned.add(name)
    persist = {"cache_results": True} if "cache_results" in inspect.signature(triton.autotune).parameters else {}
    prune = {"early_config_prune": functools.partial(_prune, name, keep)}
    # the forward: descriptors or pointers; every kernel: the head-dim tile (padded or in pieces, kernels/_head_dim.py)
    key = TUNE_KEY + [name for name in ("TMA", "BLOCK_D2") if name in jit_fn.arg_names]
    return triton.autotune(configs=configs, key=key, prune_configs_by=prune, **persist)(jit_fn)


def capturing(device) -> bool:
    """Whether the current CUDA stream of ``device`` is capturing a graph (torch.cuda.graph, or torch.compile's
    mode="reduce-overhead")."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def check_ready(names, key: tuple, device) -> None:
    """Before a launch with tuning key ``key`` (the launcher's values of TUNE_KEY and the input dtypes): raise a
    RuntimeError while a CUDA graph is being captured if any kernel of ``names`` has not been tuned at this key (timing
    configs synchronises, which capture forbids). Tune ahead with :func:`transformer.kernels.tune`."""
    if key in _ready:
        return
    untuned = [name for name in names if name in _tuned]
    if untuned and capturing(device):
        raise RuntimeError(
            f"flash_attention: the kernels {untuned} have not been autotuned for these inputs' key (length and "
            "batch x heads buckets, head_dim, dtype, masks, causal, dropout, GQA group) and are "
            "called during CUDA graph capture, where timing configs is not allowed. Call "
            "transformer.kernels.tune(q, k, v, ...) with the same shapes, dtype, masks, causal and dropout before "
            f"capturing (or pin configs with {CONFIGS_ENV})."
        )
    if torch._C._len_torch_dispatch_stack() == 0:  # a real launch (not fake tensors being traced)
        _ready.add(key)


@functools.lru_cache(maxsize=4096)
def buckets(q_len: int, k_len: int, batch_heads: int) -> tuple[int, int, int]:
    """The launch arguments the tuning key reads: (Q_BUCKET, K_BUCKET, BH_BUCKET). Lengths go in powers of two,
    except the keys of short queries (decoding, q_len <= 64): powers of 4 from 256, so a decoding loop whose k_len
    grows one by one tunes 4 times up to 16k keys (256, 1k, 4k, 16k), not 11."""
    if q_len <= _grid.SPLIT_MAX_Q_LEN:
        k_bucket = length_bucket(k_len, *DECODE_K_BUCKETS, base=4)
    else:
        k_bucket = length_bucket(k_len)
    return length_bucket(q_len), k_bucket, bh_bucket(batch_heads)


def block_kwargs() -> dict:
    """BLOCK_M and BLOCK_N for an interpreted launch ({} on CUDA, where the autotuner passes its config's)."""
    return dict(_interpret_blocks) if interpreting() else {}


def launch_kwargs(q_len: int, k_len: int, batch_heads: int) -> dict:
    """The tuning buckets by name, plus the current interpreter blocks when interpreting."""
    names = ("Q_BUCKET", "K_BUCKET", "BH_BUCKET")
    return dict(zip(names, buckets(q_len, k_len, batch_heads), strict=True), **block_kwargs())
