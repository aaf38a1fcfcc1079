"""Triton helpers shared by the forward and backward kernels: the scores of a tile and which are allowed, dropout,
tile loads, the head-dim columns in power-of-two pieces, the blocks each program visits.

The helpers take what the three kernels share as tuples (Triton passes tuples to jit functions; constexprs inside
stay constexprs, so the compiled code is the same as with the values one by one):

* ``head = (b, h, q_len, k_len, kv_end)``: the batch row and query head of the tile, the query and key lengths and
  one past the last valid key of batch row b (``key_end``);
* ``scaling = (qk_scale, sm_scale, softcap, slope)``: log2(e) * scale, the scale, the softcap, ALiBi's slope;
* ``masks = (MASK, s_mb, s_mh, s_mm, s_mn, KMASK, s_kmb, s_kmn)``: the boolean mask and the key mask, with strides;
* ``spans = (DOCB, window_left, window_right)``: the documents' bounds and the window (kernels/_structure.py);
* ``rng = (seed, offset, dropout_p, inv_keep)``: dropout's Philox pair, its probability and 1 / (1 - dropout_p);
* ``FLAGS = (HAS_MASK, HAS_KMASK, CAUSAL, HAS_DOCS, HAS_WINDOW, HAS_SOFTCAP, HAS_ALIBI, DROPOUT)``: constexprs.

Imported lazily (at the first kernel launch), so ``TRITON_INTERPRET`` only has to be set before that.
"""

import triton
import triton.language as tl

from ._structure import key_block_queries, modified_scores, query_block_keys


@triton.jit
def allowed_block(head, qi, kj, masks, row_lo, row_hi, FLAGS):
    """Bool tile: query ``qi`` may attend key ``kj`` (True = may attend). With documents or a window, only keys in
    the query's row range [row_lo, row_hi) (kernels/_structure.py ``row_range``, shaped like ``qi``).

    ``qi`` and ``kj`` are the query and key indices as broadcastable 2-D tiles: ``offs_m[:, None]`` and
    ``offs_n[None, :]`` give a query-major [BLOCK_M, BLOCK_N] tile, ``offs_m[None, :]`` and ``offs_n[:, None]``
    the key-major [BLOCK_N, BLOCK_M] tile of the dK/dV kernel.
    """
    b, h, q_len, _, kv_end = head
    MASK, s_mb, s_mh, s_mm, s_mn, KMASK, s_kb, s_kn = masks
    HAS_MASK: tl.constexpr = FLAGS[0]
    HAS_KMASK: tl.constexpr = FLAGS[1]
    CAUSAL: tl.constexpr = FLAGS[2]
    HAS_DOCS: tl.constexpr = FLAGS[3]
    HAS_WINDOW: tl.constexpr = FLAGS[4]
    allowed = (qi < q_len) & (kj < kv_end)
    if CAUSAL:  # top-left aligned, as F.scaled_dot_product_attention(is_causal=True)
        allowed = allowed & (kj <= qi)
    if HAS_DOCS or HAS_WINDOW:
        allowed = allowed & (kj >= row_lo) & (kj < row_hi)
    if HAS_KMASK:
        key_ok = tl.load(KMASK + b.to(tl.int64) * s_kb + kj.to(tl.int64) * s_kn, mask=kj < kv_end, other=0)
        allowed = allowed & (key_ok != 0)
    if HAS_MASK:
        ptrs = (
            MASK + b.to(tl.int64) * s_mb + h.to(tl.int64) * s_mh + qi.to(tl.int64) * s_mm + kj.to(tl.int64) * s_mn
        )  # q_len x k_len may pass 2**31
        allowed = allowed & (tl.load(ptrs, mask=allowed, other=0) != 0)
    return allowed


@triton.jit
def columns(HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_D2: tl.constexpr):
    """The head-dim columns of a tile, one (offs_d, d_ok) pair per piece: column indices and which are real
    (< HEAD_DIM). ``BLOCK_D2 == 0``: one piece of BLOCK_D columns, the power of two at or above HEAD_DIM (the padded
    tile). Else two power-of-two pieces, [0, BLOCK_D) and [BLOCK_D, BLOCK_D + BLOCK_D2) (head_dim 80 = 64 + 16,
    96 = 64 + 32: Triton's tensors have power-of-two shapes, and a 128-wide tile would spend 37.5 % / 25 % of every
    product on zero padding). A tile of rows is then a tuple with one tensor per piece (kernels/_pieces.py); Triton
    flattens tuples when it compiles, so the one-piece tile is the code of a plain tensor."""
    offs_d = tl.arange(0, BLOCK_D)
    if BLOCK_D2 == 0:
        cols = ((offs_d, offs_d < HEAD_DIM),)
    else:
        offs_d2 = BLOCK_D + tl.arange(0, BLOCK_D2)
        cols = ((offs_d, offs_d < HEAD_DIM), (offs_d2, offs_d2 < HEAD_DIM))
    return cols


@triton.jit
def dot_rows(a, b, PRECISION: tl.constexpr):
    """a @ b^T over the head dim of two tiles in head-dim pieces (q k^T, dO v^T and their key-major transposes):
    one dot per piece, the second accumulating onto the first."""
    s = tl.dot(a[0], tl.trans(b[0]), input_precision=PRECISION)
    if len(a) == 2:
        s = tl.dot(a[1], tl.trans(b[1]), s, input_precision=PRECISION)
    return s


@triton.jit
def scores(rows, cols, qi, kj, head, scaling, FLAGS, PRECISION: tl.constexpr):
    """(s, dcap) of one tile, the one score computation of the forward, dQ and dK/dV kernels (allowed_block says
    which of them count). ``s``: with softcap or ALiBi the base-2 scores (kernels/_structure.py
    ``modified_scores``), else the raw dot products rows . cols (the caller folds log2(e) * scale into one
    multiply-add per score). ``dcap``: the softcap's derivative (1.0 without one). Query-major (forward, dQ):
    rows = q, cols = k, qi / kj shaped [BLOCK_M, 1] / [1, BLOCK_N]; key-major (dK/dV): rows = k, cols = q,
    transposed. ``rows`` and ``cols`` are tiles in head-dim pieces (see :func:`columns`)."""
    _, _, q_len, k_len, _ = head
    _, sm_scale, softcap, slope = scaling
    HAS_SOFTCAP: tl.constexpr = FLAGS[5]
    HAS_ALIBI: tl.constexpr = FLAGS[6]
    s = dot_rows(rows, cols, PRECISION)
    dcap = 1.0
    if HAS_SOFTCAP or HAS_ALIBI:
        s, dcap = modified_scores(s, sm_scale, softcap, slope, qi, kj, q_len, k_len, HAS_SOFTCAP, HAS_ALIBI)
    return s, dcap


PHILOX_KEYS = 8  # keep decisions per Philox call: 8 keys of one query row, 16 bits each


@triton.jit
def _halves(r):
    """The low and high 16 bits of a uint32 tile, joined on a new last axis."""
    return tl.join((r & 0xFFFF).to(tl.uint16), (r >> 16).to(tl.uint16))


@triton.jit
def keep_block(seed, offset, bh, offs_m, start_n, q_len, dropout_p, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Bool tile [BLOCK_M, BLOCK_N] (query-major): dropout keeps the probability of query ``offs_m`` and key
    ``start_n + j`` (``start_n`` a multiple of BLOCK_N). A pure function of (seed, offset, batch, head, query, key):

    one 10-round Philox-4x32 call (``tl.philox``, key = the 64-bit ``seed``) per query row and group of 8 keys, with
    counter (low and high 32 bits of ``offset + (batch * heads + head) * q_len + query``, g, 0). Key n belongs to
    group g = 4 * (n // 32) + (n % 8) // 2 and is decided by output w = (n % 32) // 8, its low 16 bits for an even
    key and its high 16 bits for an odd one: so the 8 keys of one call are 32J + 8w + 2c + b (w = 0..3, b = 0, 1),
    two adjacent keys in each of four 8-key column groups. A key is kept when its 16 bits, as an integer, are at
    least ``floor(dropout_p * 65536)``. (One call per element, as ``tl.rand`` does, costs 8 times as much.)

    Why that grouping: in the accumulator layout of Hopper's and Ampere's MMAs a thread holds, in every 8 columns
    of a row, two adjacent columns 8j + 2c, 8j + 2c + 1 (c = lane % 4). One call's 8 decisions are exactly what one
    thread holds of its row in four such column groups, so the tile can be built where the scores are (the joins
    add in-thread axes only) instead of being shuffled through shared memory into the dot's layout. 8 consecutive
    keys per call spread over 4 threads and needed that shuffle."""
    rows = offset + (bh.to(tl.int64) * q_len + offs_m)
    GROUPS: tl.constexpr = BLOCK_N // 8 if BLOCK_N >= 32 else 4  # calls per row (16 keys: half of a 32-key chunk)
    groups = ((start_n // 32) * 4 + tl.arange(0, GROUPS)).to(tl.uint32)
    zero = tl.zeros([BLOCK_M, GROUPS], tl.uint32)
    r0, r1, r2, r3 = tl.philox(
        seed,
        rows.to(tl.uint32)[:, None] + zero,
        (rows >> 32).to(tl.uint32)[:, None] + zero,
        groups[None, :] + zero,
        zero,
    )
    if BLOCK_N >= 32:  # [M, J, c] per output; joins append in-thread axes: [M, J, c, b, w % 2, w // 2]
        CHUNKS: tl.constexpr = BLOCK_N // 32
        h0 = tl.reshape(_halves(r0), (BLOCK_M, CHUNKS, 4, 2))
        h1 = tl.reshape(_halves(r1), (BLOCK_M, CHUNKS, 4, 2))
        h2 = tl.reshape(_halves(r2), (BLOCK_M, CHUNKS, 4, 2))
        h3 = tl.reshape(_halves(r3), (BLOCK_M, CHUNKS, 4, 2))
        bits = tl.join(tl.join(h0, h1), tl.join(h2, h3))
        bits = tl.permute(bits, (0, 1, 5, 4, 2, 3))  # [M, J, w // 2, w % 2, c, b]: key 32J + 8w + 2c + b
    else:  # BLOCK_N == 16: the outputs w = 0, 1 (first half of the 32-key chunk) or 2, 3 (second half)
        second = (start_n // 16) % 2 == 1
        low, high = tl.where(second, r2, r0), tl.where(second, r3, r1)
        bits = tl.permute(tl.join(_halves(low), _halves(high)), (0, 3, 1, 2))  # [M, w % 2, c, b]
    return tl.reshape(bits, (BLOCK_M, BLOCK_N)) >= tl.cast(dropout_p * 65536.0, tl.uint16)


# program orders (program_tile's ORDER); constexpr, so jit functions may read them
HEAD_MAJOR = tl.constexpr(0)
BLOCKS_ASCENDING = tl.constexpr(1)
BLOCKS_DESCENDING = tl.constexpr(2)


@triton.jit
def program_tile(
    length,
    heads,
    splits,
    HEAD_DIM: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_D2: tl.constexpr,
    ORDER: tl.constexpr,
):
    """This program's place on the 1-D grid of _grid.blocks_grid, as (bh, b, h, block, offs, cols): the
    (batch x heads) index and its batch and head (of ``heads`` heads), the block index among the blocks of
    ``length`` rows, the block's row indices, and the head-dim columns per piece (:func:`columns`).

    The ``splits`` programs of one block are adjacent (the split is ``program_id % splits``). ``ORDER`` orders the
    blocks: HEAD_MAJOR, the blocks of one (batch, head) adjacent; BLOCKS_ASCENDING / BLOCKS_DESCENDING, block-major
    (the same block of every (batch, head), then the next), first block first / last block first. A causal kernel
    takes the order that starts the longest programs first (the GPU runs programs roughly in id order, so the
    long ones no longer trail in a last, mostly idle wave)."""
    pid = tl.program_id(0) // splits
    blocks = tl.cdiv(length, BLOCK)
    if ORDER == HEAD_MAJOR:
        bh = pid // blocks
        block = pid % blocks
    else:
        pairs = tl.num_programs(0) // splits // blocks
        bh = pid % pairs
        block = pid // pairs
        if ORDER == BLOCKS_DESCENDING:
            block = blocks - 1 - block
    cols = columns(HEAD_DIM, BLOCK_D, BLOCK_D2)
    return bh, bh // heads, bh % heads, block, block * BLOCK + tl.arange(0, BLOCK), cols


@triton.jit
def head_ptr(PTR, b, h, s_b, s_h):
    """Pointer to the (batch b, head h) slice of a (batch, heads, len, head_dim) tensor; int64 offsets."""
    return PTR + b.to(tl.int64) * s_b + h.to(tl.int64) * s_h


@triton.jit
def tile_offsets(offs, offs_d, s_row, s_d):
    """Element offsets of the tile [len(offs), BLOCK_D] (rows ``offs``, head-dim columns ``offs_d``) inside one
    (batch, head) slice, in 64 bits: a row index times a row stride passes 2**31 in long or strided layouts (a
    (batch, seq, heads, head_dim) view has row stride heads * head_dim)."""
    return offs.to(tl.int64)[:, None] * s_row + offs_d.to(tl.int64)[None, :] * s_d


@triton.jit
def load_rows(base, offs, offs_d, s_row, s_d, n_rows, d_ok):
    """Tile [len(offs), BLOCK_D] of rows ``offs < n_rows``; padded rows and head-dim columns read as 0."""
    ok = (offs[:, None] < n_rows) & d_ok[None, :]
    return tl.load(base + tile_offsets(offs, offs_d, s_row, s_d), mask=ok, other=0.0)


@triton.jit
def key_end(KLEN, s_klb, b, k_len, HAS_KLEN: tl.constexpr):
    """One past the last valid key of batch row b: its key length (clamped to [0, k_len]) or k_len. The lengths are
    read through their stride ``s_klb`` (a sliced or expanded tensor is not contiguous). The length is clamped in
    64 bits before narrowing, so a huge int64 length (e.g. 2**32 + 3, or int64 max as "no limit") means k_len,
    not its low 32 bits."""
    kv_end = k_len
    if HAS_KLEN:
        length = tl.load(KLEN + b.to(tl.int64) * s_klb).to(tl.int64)
        kv_end = tl.maximum(tl.minimum(length, k_len), 0).to(tl.int32)
    return kv_end


@triton.jit
def key_blocks(head, pid_m, spans, FLAGS, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The keys query block ``pid_m`` visits, as (lo, full_end, hi). Key blocks in [lo, full_end) are interior: every
    key valid, the whole block below the causal diagonal, no mask tensor, so they need no per-element mask.
    Blocks in [full_end, hi) need it. Keys before lo (outside every query's document or window) and from hi on
    (past the key length, or, causal, after the block's last query, or outside the documents and windows) are never
    allowed, so those blocks are skipped. With documents or a window every visited block is masked."""
    HAS_MASK: tl.constexpr = FLAGS[0]
    HAS_KMASK: tl.constexpr = FLAGS[1]
    CAUSAL: tl.constexpr = FLAGS[2]
    HAS_DOCS: tl.constexpr = FLAGS[3]
    HAS_WINDOW: tl.constexpr = FLAGS[4]
    kv_end = head[4]
    lo = 0
    hi = kv_end
    full_end = (kv_end // BLOCK_N) * BLOCK_N
    if CAUSAL:
        hi = tl.minimum(hi, (pid_m + 1) * BLOCK_M)
        full_end = tl.minimum(full_end, (pid_m * BLOCK_M // BLOCK_N) * BLOCK_N)
    if HAS_MASK or HAS_KMASK:
        full_end = 0
    if HAS_DOCS or HAS_WINDOW:
        lo, range_hi = query_block_keys(spans, head, pid_m * BLOCK_M, FLAGS, BLOCK_M, BLOCK_N)
        hi = tl.minimum(hi, range_hi)
        full_end = lo
    return lo, full_end, hi


@triton.jit
def query_blocks(head, pid_n, spans, FLAGS, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The queries key block ``pid_n`` (dK/dV) visits, as (lo, mask_end, hi). Query blocks in [lo, mask_end) need a
    per-element mask: they cross the causal diagonal, or this key block holds padding keys, or there is a mask
    tensor, or documents or a window. The query blocks in [mask_end, hi) are interior. Queries before lo (causal:
    they come before these keys; outside the documents and windows of these keys) and from hi on are skipped; a key
    block past the valid length visits none (zero gradients)."""
    HAS_MASK: tl.constexpr = FLAGS[0]
    HAS_KMASK: tl.constexpr = FLAGS[1]
    CAUSAL: tl.constexpr = FLAGS[2]
    HAS_DOCS: tl.constexpr = FLAGS[3]
    HAS_WINDOW: tl.constexpr = FLAGS[4]
    _, _, q_len, _, kv_end = head
    lo = 0
    if CAUSAL:  # queries before this key block never see it
        lo = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M
    hi = tl.where(pid_n * BLOCK_N < kv_end, q_len, 0)
    mask_end = lo
    if CAUSAL:  # the first query block that starts at or after this key block's last key
        mask_end = tl.cdiv((pid_n + 1) * BLOCK_N, BLOCK_M) * BLOCK_M
    if HAS_MASK or HAS_KMASK:
        mask_end = hi
    mask_end = tl.minimum(tl.where((pid_n + 1) * BLOCK_N <= kv_end, mask_end, hi), hi)
    if HAS_DOCS or HAS_WINDOW:  # only the queries whose documents and windows reach these keys, all masked
        range_lo, range_hi = key_block_queries(spans, head, pid_n * BLOCK_N, FLAGS, BLOCK_M, BLOCK_N)
        lo = tl.maximum(lo, range_lo)
        hi = tl.minimum(hi, range_hi)
        mask_end = hi
    return lo, mask_end, hi


@triton.jit
def load_seed(SEED, DROPOUT: tl.constexpr):
    """The Philox (seed, offset) pair, read from device memory (so a new pair never recompiles, and a CUDA graph
    replays the pair its RNG draw left there), or (0, 0) without dropout."""
    seed = 0
    offset = 0
    if DROPOUT:
        seed = tl.load(SEED)
        offset = tl.load(SEED + 1)
    return seed, offset


@triton.jit
def load_row_stats(LSE, DELTA, bh, offs_m, q_len):
    """Per-query logsumexp in base 2 (+inf for rows with no allowed key, so P = 0) and delta = rowsum(dO * O)."""
    row_ok = offs_m < q_len
    lse = tl.load(LSE + bh.to(tl.int64) * q_len + offs_m, mask=row_ok, other=float("inf"))
    lse2 = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
    delta = tl.load(DELTA + bh.to(tl.int64) * q_len + offs_m, mask=row_ok, other=0.0)
    return lse2, delta


@triton.jit
def probs(rows, cols, lse2, qi, kj, head, scaling, masks, row_lo, row_hi, FLAGS, PRECISION: tl.constexpr, MASKED):
    """Recompute (P, dcap) for one block of the backward: P = exp2(s2 - lse2), 0 where not allowed (``MASKED=False``:
    an interior block, where every score is allowed), s2 the base-2 scores and dcap the softcap's derivative
    (``scores``; ``row_lo`` / ``row_hi`` shaped like ``qi``). A padded query row has lse2 = +inf, so its P is 0 in
    both layouts."""
    s, dcap = scores(rows, cols, qi, kj, head, scaling, FLAGS, PRECISION)
    HAS_SOFTCAP: tl.constexpr = FLAGS[5]
    HAS_ALIBI: tl.constexpr = FLAGS[6]
    if HAS_SOFTCAP or HAS_ALIBI:
        p = tl.exp2(s - lse2)
    else:
        p = tl.exp2(s * scaling[0] - lse2)  # one multiply-add (scaling[0]: qk_scale)
    if MASKED:
        p = tl.where(allowed_block(head, qi, kj, masks, row_lo, row_hi, FLAGS), p, 0.0)
    return p, dcap
