"""Blind review of issue 29 kernel structures (2026-11-27), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-k29-last-query-block-unclamped",
        "kernels/_structure.py",
        (("last = tl.minimum(start_m + BLOCK_M, q_len) - 1", "last = start_m + BLOCK_M - 1"),),
        "With documents and q_len not a multiple of the query block, the last query block's key range is read at a "
        "padded row past k_len (an empty document range), so its real queries attend nothing: zero outputs, -inf lse.",
    ),
    Mutant(
        "blind-k29-dkdv-window-sides-swapped",
        "kernels/_structure.py",
        (
            (
                "p_lo = tl.maximum(p_lo, start_n - window_right)\n        p_hi = tl.minimum(p_hi, last + window_left + 1)",
                "p_lo = tl.maximum(p_lo, start_n - window_left)\n        p_hi = tl.minimum(p_hi, last + window_right + 1)",
            ),
        ),
        "The dK/dV kernel's query range for a key block swaps window_left and window_right, so with an asymmetric "
        "window some query blocks that see the key block are skipped: dk and dv are wrong (forward and dq are fine).",
    ),
    Mutant(
        "blind-k29-alibi-distance-unaligned",
        "kernels/_structure.py",
        (
            (
                "s = s - slope * tl.abs(qi + (k_len - q_len) - kj).to(s.dtype)",
                "s = s - slope * tl.abs(qi - kj).to(s.dtype)",
            ),
        ),
        "ALiBi's bias uses |i - j| instead of |p(i) - j| with p(i) = k_len - q_len + i, so with fewer queries than keys "
        "(decoding, chunked prefill) the bias is computed at the wrong alignment: outputs and lse differ from the reference.",
    ),
    Mutant(
        "blind-k29-dkdv-softcap-derivative-dropped",
        "kernels/_dkdv.py",
        (
            (
                "ds_t = p_t * (dp_t - delta[None, :]) * dcap_t  # dcap_t",
                "ds_t = p_t * (dp_t - delta[None, :])  # dcap_t",
            ),
        ),
        "With softcap the dK gradient omits the cap's derivative 1 - tanh^2 (dq keeps it), so dk is wrong for Gemma 2 "
        "style soft-capped attention while outputs, dq and dv are right.",
    ),
    Mutant(
        "blind-k29-slope-strides-swapped",
        "kernels/_args.py",
        (
            (
                "slopes, slope_strides = alibi_slopes, (0, alibi_slopes.stride(0))",
                "slopes, slope_strides = alibi_slopes, (alibi_slopes.stride(0), 0)",
            ),
        ),
        "alibi_slopes of shape (heads,) are read with the batch stride instead of the head stride, so every head of "
        "batch row b gets slope[b] (head 0's slope for batch 1): per-head ALiBi is wrong; (batch, heads) slopes work.",
    ),
    Mutant(
        "blind-k29-window-right-alone-ignored",
        "kernels/_args.py",
        (
            (
                '("HAS_WINDOW", window_left is not None or window_right is not None),',
                '("HAS_WINDOW", window_left is not None),',
            ),
        ),
        "A window given only as window_right (window_left=None) switches the kernel's window off, so queries attend "
        "keys beyond p(i) + window_right.",
    ),
    Mutant(
        "blind-k29-interior-blocks-ignore-ranges",
        "kernels/_common.py",
        (
            (
                "        hi = tl.minimum(hi, range_hi)\n        full_end = lo\n",
                "        hi = tl.minimum(hi, range_hi)\n        full_end = tl.maximum(full_end, lo)\n",
            ),
        ),
        "With documents or a window the forward and dQ loops treat the full key blocks inside [lo, hi) as interior "
        "(unmasked), so queries attend keys of other documents or outside their window there: wrong outputs, lse and "
        "dq (and dk/dv through the wrong lse).",
    ),
    Mutant(
        "blind-k29-softcap-zero-accepted",
        "kernels/_validate.py",
        (("not math.isfinite(softcap) or softcap <= 0", "not math.isfinite(softcap) or softcap < 0"),),
        "softcap=0 passes validation (documented: a float > 0) and unsupported_reason returns None for it; the kernel "
        "then caps every score to 0 * tanh(+-inf) = 0 and silently returns uniform attention (the mean of v) instead "
        "of raising a ValueError naming softcap.",
    ),
    Mutant(
        "blind-k29-visits-inclusive-end",
        "kernels/_visits.py",
        (("tiles = (starts >= lo) & (starts < hi)", "tiles = (starts >= lo) & (starts <= hi)"),),
        "visited() counts the block starting exactly at a loop's end hi as visited, so the block-skipping report "
        "over-counts tiles (e.g. a query block whose document ends on a key-block boundary shows one block too many).",
    ),
    Mutant(
        "blind-k29-split-end-from-range-start",
        "kernels/_forward.py",
        (("hi = tl.minimum(hi, split * split_keys + split_keys)", "hi = tl.minimum(hi, lo + split_keys)"),),
        "In split-KV (FlashDecoding) with documents or a window, a split whose first visited block lies past its own "
        "start runs split_keys keys from there, into the next split's keys, which are then counted twice: wrong outputs "
        "and lse for short queries over long keys.",
    ),
]

# Run against the test files of the code reviewed (the before rate, 9/10: on commit fbcc25c, before the tests the
# review prompted).
_TESTS = (
    "tests/kernels/test_kernel_structure.py",
    "tests/kernels/test_block_skipping.py",
    "tests/kernels/test_kernel_structure_errors.py",
    "tests/kernels/test_split_kv.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
