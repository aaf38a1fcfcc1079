"""Blind review of the fused Triton attention kernel and its launchers (2026-11-24), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-kernels-scale-zero-means-default",
        "kernels/_api.py",
        (
            (
                "    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)",
                "    scale = 1.0 / math.sqrt(q.shape[-1]) if not scale else float(scale)",
            ),
        ),
        "an explicit scale=0.0 (or 0) is treated as 'not given': the kernel uses 1/sqrt(head_dim) instead of "
        "scale 0, so the output is the softmax-weighted average instead of the uniform mean of the allowed values "
        "(and the logsumexp is not log(number of allowed keys))",
    ),
    Mutant(
        "blind-kernels-eager-ignores-v-requires-grad",
        "kernels/_op.py",
        (
            (
                "        q.requires_grad or k.requires_grad or v.requires_grad or (sinks is not None and sinks.requires_grad)\n    ):\n        function = _Eager",
                "        q.requires_grad or k.requires_grad or (sinks is not None and sinks.requires_grad)\n    ):\n        function = _Eager",
            ),
        ),
        "the cheap eager path decides whether a gradient may be asked for from q and k only: when only v requires "
        "grad (e.g. frozen q/k projections, or a test differentiating w.r.t. v alone) the forward launcher runs "
        "without autograd, the output does not require grad and backward raises / v.grad stays None",
    ),
    Mutant(
        "blind-kernels-key-mask-copied-old-strides",
        "kernels/_args.py",
        (
            (
                "        kmask_ptr, kmask_strides = key_mask.view(torch.uint8), key_mask.stride()",
                "        kmask_ptr, kmask_strides = key_mask.contiguous().view(torch.uint8), key_mask.stride()",
            ),
        ),
        "a non-contiguous key_mask (a slice of a wider mask, a transposed one) is copied to a contiguous buffer "
        "but read with the ORIGINAL view's strides: batch rows past the first read the wrong keys' padding flags, "
        "so padding keys are attended (or real keys masked) in the forward and the gradients",
    ),
    Mutant(
        "blind-kernels-split-edge-loop-before-split",
        "kernels/_forward.py",
        (
            (
                "        full_end = tl.maximum(tl.minimum(full_end, hi), lo)",
                "        full_end = tl.minimum(full_end, hi)",
            ),
        ),
        "split-KV forward: when a split's interior end falls before the split's first key (always with a mask or "
        "key_mask, where full_end is 0; or key_lengths ending before the split), the masked loop starts at key "
        "0 instead of the split's start, so later splits re-count earlier splits' keys: with mask/key_mask and "
        "a split forward (short queries over > 128 keys) the output and logsumexp are wrong",
    ),
    Mutant(
        "blind-kernels-dropout-in-softmax-denominator",
        "kernels/_online_softmax.py",
        (
            (
                "    l_i = l_i * alpha + tl.sum(p, 1)\n    if DROPOUT:\n        seed, offset, dropout_p, _ = rng\n"
                "        p = tl.where(keep_block(seed, offset, bh, offs_m, start_n, q_len, dropout_p, BLOCK_M, BLOCK_N), p, 0.0)\n",
                "    if DROPOUT:\n        seed, offset, dropout_p, _ = rng\n"
                "        p = tl.where(keep_block(seed, offset, bh, offs_m, start_n, q_len, dropout_p, BLOCK_M, BLOCK_N), p, 0.0)\n"
                "    l_i = l_i * alpha + tl.sum(p, 1)\n",
            ),
        ),
        "the forward applies the dropout mask before adding the block's probabilities to the softmax "
        "denominator: the output is renormalised over the kept keys (then scaled by 1/(1-p) again), and the "
        "logsumexp sees dropout (documented: it does not); the backward, which uses the true probabilities, no "
        "longer matches the forward",
    ),
    Mutant(
        "blind-kernels-gqa-dkdv-group-order",
        "kernels/_dkdv.py",
        (
            (
                "        h = kvh * group + g  # the query heads of kv head kvh (repeat_interleave order, torch's enable_gqa)",
                "        h = g * (heads // group) + kvh  # the query heads of kv head kvh",
            ),
        ),
        "grouped-query attention with kv_heads > 1 and group > 1: the dK/dV kernel sums the query heads "
        "kvh, kvh + kv_heads, ... (repeat order) while the forward and dQ use h // group (repeat_interleave): "
        "dK and dV get the gradients of the wrong query heads (forward and dQ stay right)",
    ),
    Mutant(
        "blind-kernels-pinned-warps-stages-swapped",
        "kernels/_tuning.py",
        (
            (
                "        name, block_m, block_n, warps, stages = match.group(1), *map(int, match.groups()[1:])",
                "        name, block_m, block_n, stages, warps = match.group(1), *map(int, match.groups()[1:])",
            ),
        ),
        "TYPED_TRANSFORMER_KERNEL_CONFIGS='forward=128x64x8x3' pins num_warps=3, num_stages=8 instead of "
        "num_warps=8, num_stages=3 (BLOCK_MxBLOCK_NxWARPSxSTAGES read as ...xSTAGESxWARPS)",
    ),
    Mutant(
        "blind-kernels-split-q-len-64-excluded",
        "kernels/_grid.py",
        (
            (
                "    if q_len > SPLIT_MAX_Q_LEN or programs >= 0.8 * sm_count:",
                "    if q_len >= SPLIT_MAX_Q_LEN or programs >= 0.8 * sm_count:",
            ),
        ),
        "kv_splits never splits the keys at q_len == 64, though the rule (and docs/kernels.md: q_len <= 64) "
        "includes it: e.g. kv_splits(1, 64, 32768, 132, 128) gives (1, 32768) instead of a split plan",
    ),
    Mutant(
        "blind-kernels-head-dim-256-rejected",
        "kernels/_validate.py",
        (
            (
                "    if not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM:",
                "    if not MIN_HEAD_DIM <= head_dim < MAX_HEAD_DIM:",
            ),
        ),
        "head_dim 256, documented as supported ([16, 256]), raises ValueError in flash_attention and "
        "unsupported_reason declines it (the dispatcher falls back), with a message that claims 256 is allowed",
    ),
    Mutant(
        "blind-kernels-philox-offset-high-word-dropped",
        "kernels/_common.py",
        (
            (
                "rows.to(tl.uint32)[:, None] + zero,\n        (rows >> 32).to(tl.uint32)[:, None] + zero,",
                "rows.to(tl.uint32)[:, None] + zero,\n        zero,",
            ),
        ),
        "the dropout counter's second word is always 0 instead of the high 32 bits of offset + row: offsets that "
        "differ only above bit 32 (seed=None draws a random 64-bit offset) give the same mask, and the mask is "
        "not the documented Philox stream for any offset >= 2**32",
    ),
]

# The files run for this review (its first run and after).
SUITE = (
    "tests/kernels/test_api.py",
    "tests/kernels/test_launch.py",
    "tests/kernels/test_tuning.py",
    "tests/kernels/test_dropout.py",
    "tests/kernels/test_kernel_gqa.py",
    "tests/kernels/test_split_kv.py",
    "tests/kernels/test_flash_attention.py",
    "tests/kernels/test_kernel_layouts.py",
    "tests/test_triton_backend.py",
    "tests/test_sdpa_dropin.py",
    "tests/test_gqa.py",
)
MUTANTS = [dataclasses.replace(m, tests=SUITE) for m in MUTANTS]
