"""Launch grids. Every kernel runs on a 1-D grid: CUDA allows 2**31 - 1 programs on axis 0 but only 65535 on
axes 1 and 2, so (batch x heads) on axis 1 would stop large-batch decoding (2048 x 32 heads = 65536) from
launching. Each program finds its (batch x head, block) from its one id (``program_tile`` in _common.py): the
blocks of one (batch, head) adjacent, as a 2-D grid would order them, or (causal) block-major, longest programs first.

Pure Python, so the grids are tested as functions and the support check can decline what no launch can take.
"""

import functools

MAX_PROGRAMS = 2**31 - 1  # CUDA's limit on grid axis 0 (axes 1 and 2: 65535)
MAX_AXIS_YZ = 65535
MIN_BLOCK = 16  # the smallest block any launch uses (tl.dot needs 16 rows), so the most programs a launch needs
MAX_LENGTH = 2**31 - 1 - 256  # query and key indices are 32-bit inside the kernels, with a block of headroom


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def blocks_grid(length: int, block: int, batch_heads: int, splits: int = 1) -> tuple[int, int, int]:
    """The grid of a launch with one program per ``block`` rows of ``length`` (query or key blocks), per
    (batch, head) pair and per key split: everything on axis 0."""
    return (cdiv(length, block) * batch_heads * splits, 1, 1)


def launch_reason(batch: int, heads: int, kv_heads: int, q_len: int, k_len: int) -> str | None:
    """Why no launch can take these sizes (a sentence), or None. Checked with the smallest block any launch
    uses, so that no autotune config can exceed the limit either."""
    if max(q_len, k_len) > MAX_LENGTH:
        return (
            f"q_len and k_len must be at most {MAX_LENGTH} (the kernels index rows with 32-bit integers), "
            f"got q_len={q_len}, k_len={k_len}"
        )
    most = max(cdiv(q_len, MIN_BLOCK) * batch * heads, cdiv(k_len, MIN_BLOCK) * batch * kv_heads)
    if most > MAX_PROGRAMS:
        return (
            f"a launch would need up to {most} programs (batch {batch} x heads {heads} x blocks of "
            f"{MIN_BLOCK} rows), more than CUDA's grid limit of {MAX_PROGRAMS}"
        )
    return None


# --- split-KV (FlashDecoding): short queries over long keys with few (batch, head) pairs launch too few programs
# to fill the GPU, one program per query block streaming every key. The forward then splits the keys.
SPLIT_MAX_Q_LEN = 64  # longer queries have enough query blocks to work on (and use the big-block configs)
MAX_SPLITS = 128


def split_plan(k_len: int, splits: int, granularity: int) -> tuple[int, int]:
    """(splits, keys per split) for at most ``splits`` splits of ``k_len`` keys, each a multiple of
    ``granularity`` keys (the largest key block a launch may use), so every split starts on a block boundary."""
    split_keys = cdiv(cdiv(k_len, max(splits, 1)), granularity) * granularity
    return cdiv(k_len, split_keys), split_keys


def kv_splits(batch_heads: int, q_len: int, k_len: int, sm_count: int, granularity: int) -> tuple[int, int]:
    """(splits, keys per split) the forward uses; (1, k_len) is the ordinary one-pass kernel.

    FlashAttention-2's rule (``num_splits_heuristic``): no split when the query blocks already give 80 % of a
    wave (``sm_count`` programs); else the fewest splits whose wave efficiency (waves / whole waves) is at least
    85 % of the best any split count reaches, counting only split counts that change the split size. The search
    depends on the key blocks, not the exact length, and is cached: a decoding loop, whose k_len grows by one each
    step, searches once per 128 keys (the search itself takes tens of microseconds)."""
    programs = cdiv(q_len, MIN_BLOCK) * batch_heads
    if q_len > SPLIT_MAX_Q_LEN or programs >= 0.8 * sm_count:
        return 1, k_len
    splits = _split_count(programs, cdiv(k_len, granularity), sm_count)
    return (1, k_len) if splits == 1 else split_plan(k_len, splits, granularity)


@functools.lru_cache(maxsize=4096)
def _split_count(programs: int, key_blocks: int, sm_count: int) -> int:
    candidates = [
        s
        for s in range(1, min(MAX_SPLITS, sm_count, key_blocks) + 1)
        if s == 1 or cdiv(key_blocks, s) != cdiv(key_blocks, s - 1)
    ]

    def efficiency(splits: int) -> float:
        waves = programs * splits / sm_count
        return waves / cdiv(programs * splits, sm_count)

    best = max(efficiency(s) for s in candidates)
    return next(s for s in candidates if efficiency(s) >= 0.85 * best)


def group_splits(batch: int, kv_heads: int, group: int, k_len: int, sm_count: int, granularity: int) -> int:
    """How many programs share one (batch, kv head, key block) of the dK/dV kernel under grouped-query attention:
    1 when the grid already has ``sm_count`` programs (one per key block of ``granularity`` keys, the largest key
    block), else the smallest divisor of ``group`` that fills it (or ``group``). MQA at batch 1, 32 heads, 4k keys
    has 32 key blocks for 132 SMs: 8 shares of 4 query heads each give 256 programs."""
    programs = cdiv(k_len, granularity) * batch * kv_heads
    if group == 1 or programs >= sm_count:
        return 1
    return next(d for d in range(1, group + 1) if group % d == 0 and (programs * d >= sm_count or d == group))
