"""Mutants of issue 29's kernel parts: documents, sliding windows, softcap and ALiBi (kernels/_structure.py and the
loops' block ranges in kernels/_common.py); they run the issue's kernel tests."""

from .base import Mutant

STRUCTURE_TESTS = (
    "tests/kernels/test_kernel_structure_errors.py",
    "tests/kernels/test_block_skipping.py",
    "tests/kernels/test_kernel_structure.py",
)  # the shorter files first


def KD(id: str, file: str, old: str, new: str, what: str) -> Mutant:
    return Mutant(id, file, ((old, new),), what, STRUCTURE_TESTS)


MUTANTS = [
    KD(
        "kernel-softcap-no-derivative-dq",
        "kernels/_dq.py",
        "ds = p * (dp - delta[:, None]) * dcap",
        "ds = p * (dp - delta[:, None])",
        "dQ: the softcap's derivative 1 - tanh^2 is left out",
    ),
    KD(
        "kernel-softcap-no-derivative-dkdv",
        "kernels/_dkdv.py",
        "ds_t = p_t * (dp_t - delta[None, :]) * dcap_t",
        "ds_t = p_t * (dp_t - delta[None, :])",
        "dK: the softcap's derivative 1 - tanh^2 is left out",
    ),
    KD(
        "kernel-softcap-linear",
        "kernels/_structure.py",
        "t = _tanh(s / softcap)",
        "t = s / softcap",
        "softcap without the tanh (the scores pass unchanged)",
    ),
    KD(
        "kernel-alibi-sign",
        "kernels/_structure.py",
        "s = s - slope * tl.abs(",
        "s = s + slope * tl.abs(",
        "ALiBi adds the distance instead of subtracting it",
    ),
    KD(
        "kernel-alibi-top-left",
        "kernels/_structure.py",
        "tl.abs(qi + (k_len - q_len) - kj)",
        "tl.abs(qi - kj)",
        "ALiBi's distance from query index i instead of its position p(i) (wrong when q_len != k_len)",
    ),
    KD(
        "kernel-window-sides-swapped",
        "kernels/_structure.py",
        "lo = tl.maximum(lo, pos - window_left)",
        "lo = tl.maximum(lo, pos - window_right)",
        "the left window bound takes window_right",
    ),
    KD(
        "kernel-window-right-excludes-edge",
        "kernels/_structure.py",
        "hi = tl.minimum(hi, pos + window_right + 1)",
        "hi = tl.minimum(hi, pos + window_right)",
        "the key exactly window_right after the query is excluded",
    ),
    KD(
        "kernel-query-block-keys-first-row-end",
        "kernels/_structure.py",
        "_, hi = row_range(spans, head, last, FLAGS)",
        "_, hi = row_range(spans, head, start_m, FLAGS)",
        "a query block's key range ends at its first row's end: later rows' keys are skipped",
    ),
    KD(
        "kernel-key-block-queries-first-key-end",
        "kernels/_structure.py",
        "p_hi = tl.load(base + k_len + last)",
        "p_hi = tl.load(base + k_len + start_n)",
        "dK/dV: a key block's query range ends with its first key's document",
    ),
    KD(
        "kernel-key-block-queries-window-sides",
        "kernels/_structure.py",
        "p_lo = tl.maximum(p_lo, start_n - window_right)",
        "p_lo = tl.maximum(p_lo, start_n - window_left)",
        "dK/dV: the queries a key block serves start window_left before it, not window_right",
    ),
    KD(
        "kernel-key-range-off-block-boundary",
        "kernels/_structure.py",
        "return (tl.maximum(lo, 0) // BLOCK_N) * BLOCK_N, hi",
        "return tl.maximum(lo, 0), hi",
        "the key loop starts mid-block (dropout's keep tiles and block loads assume block starts)",
    ),
    KD(
        "kernel-ranged-blocks-unmasked-forward",
        "kernels/_common.py",
        "        hi = tl.minimum(hi, range_hi)\n        full_end = lo\n",
        "        hi = tl.minimum(hi, range_hi)\n        full_end = tl.maximum(full_end, lo)\n",
        "forward/dQ: blocks inside the document range run without the per-element mask",
    ),
    KD(
        "kernel-ranged-blocks-unmasked-dkdv",
        "kernels/_common.py",
        "        hi = tl.minimum(hi, range_hi)\n        mask_end = hi\n",
        "        hi = tl.minimum(hi, range_hi)\n",
        "dK/dV: query blocks inside the document range run without the per-element mask",
    ),
    KD(
        "kernel-documents-equal-neighbours-refused",
        "kernels/_validate.py",
        "falls = documents[:, 1:] < documents[:, :-1]",
        "falls = documents[:, 1:] <= documents[:, :-1]",
        "validation refuses equal neighbouring ids (every document longer than one token)",
    ),
]
