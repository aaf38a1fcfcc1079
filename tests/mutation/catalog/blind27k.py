"""Blind review of the kernel's head_dim split and shared score code (2026-11-27, evening), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-27k-unset-tiles-padded",
        "kernels/_head_dim.py",
        (('mode = (value or "auto").strip()', 'mode = (value or "padded").strip()'),),
        "With TYPED_TRANSFORMER_HEAD_DIM_TILES unset (or empty) the kernels run the padded tile instead of the documented "
        "'auto' default, so head_dim 80/96 never split: tile('forward', 80) gives BLOCK_D 128, BLOCK_D2 0.",
    ),
    Mutant(
        "blind-27k-auto-splits-split-kv",
        "kernels/_head_dim.py",
        (
            (
                "default = kernel in SPLIT_BY_DEFAULT and head_dim in SPLIT_HEAD_DIMS",
                "default = head_dim in SPLIT_HEAD_DIMS",
            ),
        ),
        "In 'auto' mode the split-KV forward ('split') also runs head-dim pieces at 80/96, though the docs say it stays "
        "padded: tile('split', 80) gives (64, 16) instead of (128, 0).",
    ),
    Mutant(
        "blind-27k-pieces-112",
        "kernels/_head_dim.py",
        (
            (
                "return (first, second) if first + second < block_d(head_dim) else None",
                "return (first, second) if first + second <= block_d(head_dim) else None",
            ),
        ),
        "pieces(112) returns (64, 64) instead of None (no saving over the 128 tile), so a forced split at 112/224 "
        "runs two pieces as wide as the padded tile.",
    ),
    Mutant(
        "blind-27k-forced-leaks-on-error",
        "kernels/_head_dim.py",
        (("    try:\n        yield\n    finally:\n        _forced.pop()", "    yield\n    _forced.pop()"),),
        "An exception raised inside a forced(mode) block leaves the mode pushed: every later launch keeps using the "
        "forced tile instead of the environment's mode.",
    ),
    Mutant(
        "blind-27k-dropout-one-accepted",
        "kernels/_validate.py",
        (("not 0.0 <= dropout_p < 1.0:", "not 0.0 <= dropout_p <= 1.0:"),),
        "dropout_p=1.0 is no longer rejected with the documented ValueError (dropout_p in [0, 1)): the launch divides by "
        "1 - dropout_p = 0 (an interpreter ZeroDivisionError, inf/NaN outputs on a GPU).",
    ),
    Mutant(
        "blind-27k-key-length-low-bits",
        "kernels/_common.py",
        (
            (
                "length = tl.load(KLEN + b.to(tl.int64) * s_klb).to(tl.int64)",
                "length = tl.load(KLEN + b.to(tl.int64) * s_klb).to(tl.int32)",
            ),
        ),
        "A key length above int32 (e.g. 2**32 + 3, or int64 max as 'no limit') is narrowed before the clamp, so the row "
        "attends only its low 32 bits' worth of keys (3, or none) instead of all k_len keys.",
    ),
    Mutant(
        "blind-27k-kmask-interior-forward",
        "kernels/_common.py",
        (
            (
                "    if HAS_MASK or HAS_KMASK:\n        full_end = 0",
                "    if HAS_MASK:\n        full_end = 0",
            ),
        ),
        "The forward skips the key mask on interior key blocks (non-causal, whole blocks of valid keys): with k_len of "
        "at least one key block, masked-out keys in the first blocks still get attention.",
    ),
    Mutant(
        "blind-27k-kmask-interior-dkdv",
        "kernels/_common.py",
        (
            (
                "    if HAS_MASK or HAS_KMASK:\n        mask_end = hi",
                "    if HAS_MASK:\n        mask_end = hi",
            ),
        ),
        "The dK/dV kernel ignores key_mask on its interior query blocks: dK and dV of masked-out keys are not zero and "
        "the others are off (the forward output stays right).",
    ),
    Mutant(
        "blind-27k-alibi-top-left",
        "kernels/_structure.py",
        (
            (
                "s = s - slope * tl.abs(qi + (k_len - q_len) - kj).to(s.dtype)",
                "s = s - slope * tl.abs(qi - kj).to(s.dtype)",
            ),
        ),
        "ALiBi's distance is measured top-left instead of bottom-right aligned: with q_len < k_len (decoding with a cache, "
        "chunked prefill) the bias is wrong; equal lengths are unaffected.",
    ),
    Mutant(
        "blind-27k-window-minus-one",
        "kernels/_validate.py",
        (
            (
                "not isinstance(window, int) or window < 0):",
                "not isinstance(window, int) or window < -1):",
            ),
        ),
        "window_left / window_right = -1 is accepted instead of raising ValueError (the docs: an int >= 0 or None), and "
        "the kernel runs with a negative window instead of refusing it.",
    ),
]

# The before rate ran at cd38273 on the kernel suites (tests/mutation/blind_runs/blind27k_before.json; the files that
# read benchmarks/ or the top-level kernels/ folder, which run_mutants.py's copies do not hold, left out).
_TESTS = (
    "tests/kernels/test_split_head_dim.py",
    "tests/kernels/test_api.py",
    "tests/kernels/test_kernel_structure_errors.py",
    "tests/kernels/test_flash_attention.py",
    "tests/kernels/test_kernel_structure.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
