"""Tiles of rows in head-dim pieces: where they are read from, loads, stores, accumulators and the products into the
head dim (issue 27: head_dim 80 and 96 without padding to 128).

Triton's tensors have power-of-two shapes, so a head_dim of 80 or 96 ran in a 128-wide tile, 37.5 % / 25 % of every
product on zero padding. With ``BLOCK_D2 > 0`` a tile of q, k, v, o, dO or a gradient is two column pieces,
``(x0, x1)``: columns [0, BLOCK_D) and [BLOCK_D, BLOCK_D + BLOCK_D2) (80 = 64 + 16, 96 = 64 + 32); with
``BLOCK_D2 == 0`` it is the one padded piece ``(x,)``, and Triton, which flattens tuples when it compiles, makes of
it the code of a plain tensor. A product over the head dim (q k^T, dO v^T) is the sum of one dot per piece
(kernels/_common.py ``dot_rows``); a product into the head dim (P V, dS K, P^T dO, dS^T Q) is one dot per piece
(:func:`add_dots`). ``cols`` is kernels/_common.py ``columns``'s ((offs_d, d_ok), ...), one pair per piece.

Imported lazily, as kernels/_common.py (its jit functions read TRITON_INTERPRET when decorated).
"""

import triton
import triton.language as tl

from ._common import load_rows, tile_offsets


@triton.jit
def rows_source(BASE, n_rows, s_row, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, cols, TMA: tl.constexpr):
    """Where tiles of rows of one (batch, head) slice are read from (or written to): with ``TMA`` one tensor
    descriptor per head-dim piece of ``cols`` over its (n_rows, HEAD_DIM) rows (Hopper's tensor memory accelerator
    copies whole [BLOCK, piece] tiles, rows and columns outside it read as 0), else the slice's pointer itself (for
    load_rows). The launcher chooses ``TMA`` only when the strides and the data allow it (kernels/_args.py
    ``tma_ok``)."""
    if TMA:
        shape = [tl.maximum(n_rows, 1), HEAD_DIM]
        first = tl.make_tensor_descriptor(BASE, shape, [s_row, 1], [BLOCK, cols[0][0].shape[0]])
        if len(cols) == 1:
            src = (first,)
        else:
            src = (first, tl.make_tensor_descriptor(BASE, shape, [s_row, 1], [BLOCK, cols[1][0].shape[0]]))
        return src
    else:
        return BASE


@triton.jit
def load_tile(src, start, offs, cols, s_row, s_d, n_rows, TMA: tl.constexpr):
    """The tile of rows ``offs`` (= start + arange), one [len(offs), piece] tensor per head-dim piece, from
    rows_source's ``src``: rows at or past ``n_rows`` and head-dim columns past HEAD_DIM read as 0 on both paths."""
    if TMA:
        first = src[0].load([start, 0])
        if len(cols) == 1:
            tile = (first,)
        else:
            tile = (first, src[1].load([start, cols[0][0].shape[0]]))
    else:
        first = load_rows(src, offs, cols[0][0], s_row, s_d, n_rows, cols[0][1])
        if len(cols) == 1:
            tile = (first,)
        else:
            tile = (first, load_rows(src, offs, cols[1][0], s_row, s_d, n_rows, cols[1][1]))
    return tile


@triton.jit
def store_tile(dst, start, offs, cols, s_row, s_d, n_rows, tile, DTYPE: tl.constexpr, TMA: tl.constexpr):
    """Write ``tile`` (one tensor per piece), converted to DTYPE, to rows ``offs`` (= start + arange) of rows_source's
    ``dst``: rows at or past ``n_rows`` and head-dim columns past HEAD_DIM are not written."""
    for i in tl.static_range(len(cols)):
        offs_d, d_ok = cols[i]
        if TMA:
            dst[i].store([start, i * cols[0][0].shape[0]], tile[i].to(DTYPE))
        else:
            ok = (offs[:, None] < n_rows) & d_ok[None, :]
            tl.store(dst + tile_offsets(offs, offs_d, s_row, s_d), tile[i].to(DTYPE), mask=ok)


@triton.jit
def zeros(cols, ROWS: tl.constexpr, DTYPE: tl.constexpr):
    """An accumulator of ROWS rows in the head-dim pieces of ``cols``, all zero."""
    first = tl.zeros([ROWS, cols[0][0].shape[0]], DTYPE)
    if len(cols) == 1:
        acc = (first,)
    else:
        acc = (first, tl.zeros([ROWS, cols[1][0].shape[0]], DTYPE))
    return acc


@triton.jit
def add_dots(acc, x, b, PRECISION: tl.constexpr):
    """acc + x @ b, piece by piece: ``x`` [R, K] times the tile ``b`` [K, piece] into the accumulator ``acc``
    [R, piece] of the same pieces (P V, dS K, P^T dO, dS^T Q)."""
    first = acc[0] + tl.dot(x, b[0], input_precision=PRECISION)
    if len(acc) == 1:
        out = (first,)
    else:
        out = (first, acc[1] + tl.dot(x, b[1], input_precision=PRECISION))
    return out


@triton.jit
def times(tile, factor):
    """Every piece of ``tile`` times ``factor`` (a scalar or a tensor broadcasting against a piece)."""
    if len(tile) == 1:
        out = (tile[0] * factor,)
    else:
        out = (tile[0] * factor, tile[1] * factor)
    return out


@triton.jit
def over(tile, divisor):
    """Every piece of ``tile`` divided by ``divisor`` (a scalar or a tensor broadcasting against a piece)."""
    if len(tile) == 1:
        out = (tile[0] / divisor,)
    else:
        out = (tile[0] / divisor, tile[1] / divisor)
    return out
