"""Mutants of the Triton kernels (kernels/, shipped as transformer.kernels); they run the kernel suite."""

from .base import KERNEL_TESTS, K, Mutant

MUTANTS = [
    # --- the Triton kernels (kernels/, shipped as transformer.kernels)
    K(
        "kernel-causal-diagonal",
        "kernels/_common.py",
        "allowed = allowed & (kj <= qi)",
        "allowed = allowed & (kj < qi)",
        "causal mask hides the diagonal",
    ),
    K(
        "kernel-causal-skips-diagonal-block",
        "kernels/_common.py",
        "hi = tl.minimum(hi, (pid_m + 1) * BLOCK_M)",
        "hi = tl.minimum(hi, pid_m * BLOCK_M)",
        "causal block skipping also skips the diagonal block",
    ),
    K(
        "kernel-no-online-rescale",
        "kernels/_online_softmax.py",
        "acc = add_dots(times(acc, alpha[:, None]),",
        "acc = add_dots(acc,",
        "online softmax forgets to rescale the accumulator when the row max grows",
    ),
    K(
        "kernel-lse-base-2",
        "kernels/_forward.py",
        " * 0.6931471805599453)",
        ")",
        "logsumexp stored in base 2 instead of natural log",
    ),
    K("kernel-dk-unscaled", "kernels/_dkdv.py", "dk = times(dk, sm_scale)", "dk = dk", "dK misses the softmax scale"),
    K("kernel-dq-unscaled", "kernels/_dq.py", "dq = times(dq, sm_scale)", "dq = dq", "dQ misses the softmax scale"),
    K(
        "kernel-dv-ignores-dropout",
        "kernels/_dkdv.py",
        "p_drop_t = tl.where(keep_t, p_t * inv_keep, 0.0)",
        "p_drop_t = p_t * inv_keep",
        "dV uses the probabilities without the dropout mask",
    ),
    K(
        "kernel-lse-grad-dropped",
        "kernels/_backward.py",
        "delta -= grad_lse  #",
        "delta -= 0 * grad_lse  #",
        "the logsumexp output's gradient is ignored",
    ),
    K(
        "kernel-key-padding-ignored",
        "kernels/_common.py",
        "allowed = allowed & (key_ok != 0)",
        "allowed = allowed",
        "the (batch, k_len) key-padding mask is ignored",
    ),
    K(
        "kernel-empty-row-nan",
        "kernels/_forward.py",
        "acc = over(acc, tl.where(empty, 1.0, l_i)[:, None])",
        "acc = over(acc, l_i[:, None])",
        "a row with no allowed key divides 0 by 0",
    ),
    K(
        "kernel-head-dim-padding-not-zero",
        "kernels/_common.py",
        "mask=ok, other=0.0)",
        "mask=ok, other=1.0)",
        "padded head-dim columns (head_dim 40, 80) read as 1 instead of 0",
    ),
    K(
        "kernel-partial-block-unmasked",
        "kernels/_common.py",
        "full_end = (kv_end // BLOCK_N) * BLOCK_N",
        "full_end = tl.cdiv(kv_end, BLOCK_N) * BLOCK_N",
        "forward and dQ: the last, partly valid key block runs without a mask",
    ),
    K(
        "kernel-diagonal-unmasked",
        "kernels/_common.py",
        "(pid_m * BLOCK_M // BLOCK_N) * BLOCK_N)",
        "((pid_m + 1) * BLOCK_M // BLOCK_N) * BLOCK_N)",
        "forward and dQ: the causal diagonal block runs without a mask",
    ),
    K(
        "kernel-dkdv-padding-unmasked",
        "kernels/_common.py",
        "tl.where((pid_n + 1) * BLOCK_N <= kv_end, mask_end, hi)",
        "mask_end",
        "dK/dV: a key block holding padding keys runs without a mask",
    ),
    K(
        "kernel-dkdv-diagonal-unmasked",
        "kernels/_common.py",
        "tl.cdiv((pid_n + 1) * BLOCK_N, BLOCK_M) * BLOCK_M",
        "tl.cdiv(pid_n * BLOCK_N, BLOCK_M) * BLOCK_M",
        "dK/dV: query blocks crossing the causal diagonal run without a mask",
    ),
    K(
        "kernel-dropout-keeps-p",
        "kernels/_common.py",
        "(BLOCK_M, BLOCK_N)) >= tl.cast(dropout_p",
        "(BLOCK_M, BLOCK_N)) < tl.cast(dropout_p",
        "dropout keeps a fraction p instead of 1 - p",
    ),
]

# --- strides: each tensor read (or written) with its own strides. Killed by test_strided_inputs, whose q, k, v
# and grad_out are four different non-contiguous layouts (two of them with a non-unit head_dim stride).
MUTANTS += [
    K(
        "kernel-fwd-v-read-with-k-strides",
        "kernels/_forward.py",
        "strides_qkv = (*q.stride(), *k.stride(), *v.stride())",
        "strides_qkv = (*q.stride(), *k.stride(), *k.stride())",
        "forward: v is read with k's strides",
    ),
    K(
        "kernel-bwd-k-read-with-v-strides",
        "kernels/_backward.py",
        "strides_in = (*q.stride(), *k.stride(), *v.stride(), *do.stride())",
        "strides_in = (*q.stride(), *v.stride(), *v.stride(), *do.stride())",
        "backward (dK/dV and dQ): k is read with v's strides",
    ),
    K(
        "kernel-fwd-k-head-dim-stride-ignored",
        "kernels/_online_softmax.py",
        "k = load_tile(k_src, start_n, offs_n, cols, s_kn, s_kd, kv_end, TMA)",
        "k = load_tile(k_src, start_n, offs_n, cols, s_kn, 1, kv_end, TMA)",
        "forward: k's head_dim stride taken as 1",
    ),
    K(
        "kernel-dq-v-read-with-k-row-stride",
        "kernels/_dq.py",
        "v = load_tile(v_base, start_n, offs_n, cols, s_vn, s_vd, kv_end, False)",
        "v = load_tile(v_base, start_n, offs_n, cols, s_kn, s_vd, kv_end, False)",
        "dQ kernel: v's rows stepped with k's row stride (s_kn for s_vn)",
    ),
    K(
        "kernel-delta-reads-do-with-out-strides",
        "kernels/_backward.py",
        "out, do, delta, *out.stride(), *do.stride(), heads",
        "out, do, delta, *out.stride(), *out.stride(), heads",
        "delta = rowsum(dO * O) reads grad_out with out's strides",
    ),
    K(
        "kernel-dk-stored-with-dv-strides",
        "kernels/_backward.py",
        "*dk.stride(), *dv.stride(), *scalars, shares)",
        "*dv.stride(), *dv.stride(), *scalars, shares)",
        "dK is written with dV's strides (k and v laid out differently)",
    ),
]

# --- tensor descriptors (TMA) or pointers, chosen at launch (kernels/_args.py tma_ok). Killed by
# test_tensor_descriptors.py.
MUTANTS += [
    K(
        "kernel-tma-ignores-row-stride-alignment",
        "kernels/_args.py",
        "or (s_row * size) % 16:",
        "or (s_row * size) % 4:",
        "tensor descriptors are chosen for rows not 16 bytes apart (TMA would fault on a GPU)",
    ),
    K(
        "kernel-tma-value-rows-past-the-length-read",
        "kernels/_forward.py",
        "v_src = rows_source(head_ptr(V, b, h // group, s_vb, s_vh), kv_end,",
        "v_src = rows_source(head_ptr(V, b, h // group, s_vb, s_vh), k_len,",
        "the descriptor path reads values past key_lengths (0 * NaN there makes the output NaN)",
    ),
]

# --- dropout: the Philox counter, key and output layout. Killed by test_dropout.py's model of the Philox stream,
# its independence tests (heads, batch rows, query rows, keys), the seed=None test (seed and offset drawn by
# torch's generator) and the forward/backward test with the model's mask.
MUTANTS += [
    K(
        "kernel-dropout-offset-forgets-batch-and-head",
        "kernels/_common.py",
        "rows = offset + (bh.to(tl.int64) * q_len + offs_m)",
        "rows = offset + offs_m.to(tl.int64)",
        "the dropout counter forgets (batch, head): every head and batch row draws the same mask",
    ),
    K(
        "kernel-dropout-batch-not-head",
        "kernels/_online_softmax.py",
        "keep_block(seed, offset, bh, offs_m, start_n",
        "keep_block(seed, offset, b, offs_m, start_n",
        "forward: dropout counter uses the batch index instead of (batch, head): the heads share a mask",
    ),
    K(
        "kernel-dq-dropout-k_len-for-q_len",
        "kernels/_dq.py",
        "keep = keep_block(seed, offset, bh, offs_m, start_n, q_len,",
        "keep = keep_block(seed, offset, bh, offs_m, start_n, k_len,",
        "dQ kernel: the dropout counter's rows counted with k_len: not the forward's mask when q_len != k_len",
    ),
    K(
        "kernel-dropout-key-group-not-divided",
        "kernels/_common.py",
        "groups = ((start_n // 32) * 4 + tl.arange(0, GROUPS))",
        "groups = ((start_n // 32) + tl.arange(0, GROUPS))",
        "the group counter advances by 1, not 4, per 32-key chunk: neighbouring chunks repeat each other's draws",
    ),
    K(
        "kernel-dropout-outputs-misassigned",
        "kernels/_common.py",
        "bits = tl.join(tl.join(h0, h1), tl.join(h2, h3))",
        "bits = tl.join(tl.join(h0, h2), tl.join(h1, h3))",
        "Philox outputs 1 and 2 go to each other's keys (not the documented layout)",
    ),
    K(
        "kernel-dropout-one-output-reused",
        "kernels/_common.py",
        "bits = tl.join(tl.join(h0, h1), tl.join(h2, h3))",
        "bits = tl.join(tl.join(h0, h0), tl.join(h0, h0))",
        "one Philox output decides all 8 keys of its group (4 of them repeat)",
    ),
    K(
        "kernel-dropout-16-key-block-ignores-its-half-chunk",
        "kernels/_common.py",
        "second = (start_n // 16) % 2 == 1",
        "second = start_n < 0",
        "a 16-key block always takes outputs 0 and 1: the second half of each 32-key chunk repeats the first's draws",
    ),
    K(
        "kernel-dropout-seed-narrowed-to-32-bits",
        "kernels/_common.py",
        "seed = tl.load(SEED)",
        "seed = tl.load(SEED).to(tl.int32)",
        "the 64-bit seed is narrowed to 32 bits: its high half is lost",
    ),
    K(
        "kernel-dropout-offset-ignored",
        "kernels/_common.py",
        "offset = tl.load(SEED + 1)",
        "offset = 0",
        "the drawn Philox offset is ignored (seed=None masks are not the model's for the drawn pair)",
    ),
    K(
        "kernel-dropout-counter-high-half-dropped",
        "kernels/_common.py",
        "(rows >> 32).to(tl.uint32)[:, None] + zero,",
        "zero,",
        "the high 32 bits of the row counter (offset + row) are dropped",
    ),
    K(
        "kernel-dkdv-dropout-reshaped-not-transposed",
        "kernels/_dkdv.py",
        "keep_t = tl.trans(keep_block(seed, offset, bh, offs_m, start_n, q_len, dropout_p, BLOCK_M, BLOCK_N))",
        "keep_t = tl.reshape(keep_block(seed, offset, bh, offs_m, start_n, q_len, dropout_p, BLOCK_M, BLOCK_N), "
        "(BLOCK_N, BLOCK_M))",
        "dK/dV kernel reshapes its query-major mask instead of transposing it: not the forward's mask",
    ),
]

# --- key_lengths: clamped to [0, k_len]. Killed by test_key_lengths_past_k_len_mean_k_len and
# test_key_lengths_huge_negative_and_zero. (Dropping the clamp at 0 is an equivalent mutant: a negative end
# visits no block, exactly like 0.)
MUTANTS += [
    K(
        "kernel-key-lengths-not-clamped-to-k_len",
        "kernels/_common.py",
        "kv_end = tl.maximum(tl.minimum(length, k_len), 0).to(tl.int32)",
        "kv_end = tl.maximum(length, 0).to(tl.int32)",
        "key_lengths > k_len are not clamped: the kernels read keys past k_len",
    ),
    K(
        "kernel-key-lengths-narrowed-before-clamp",
        "kernels/_common.py",
        "length = tl.load(KLEN + b.to(tl.int64) * s_klb).to(tl.int64)",
        "length = tl.load(KLEN + b.to(tl.int64) * s_klb).to(tl.int32)",
        "key_lengths narrowed to int32 before the clamp: 2**32 + 3 means 3, int64 max means 0",
    ),
]

# --- block shapes: BLOCK_M and BLOCK_N confused. Equal under 32 x 32; killed by the kernel suite's runs under
# 16 x 64, 64 x 16 and 32 x 64 blocks (tests/kernels/conftest.py), mostly by test_block_edges.
MUTANTS += [
    K(
        "kernel-key-blocks-interior-end-block-n",
        "kernels/_common.py",
        "(pid_m * BLOCK_M // BLOCK_N) * BLOCK_N)",
        "(pid_m * BLOCK_N // BLOCK_N) * BLOCK_N)",
        "forward and dQ: the interior key blocks end at pid_m * BLOCK_N (diagonal unmasked when BLOCK_M < BLOCK_N)",
    ),
    K(
        "kernel-key-blocks-causal-end-block-n",
        "kernels/_common.py",
        "hi = tl.minimum(hi, (pid_m + 1) * BLOCK_M)",
        "hi = tl.minimum(hi, (pid_m + 1) * BLOCK_N)",
        "forward and dQ: causal skipping past (pid_m + 1) * BLOCK_N (skips needed keys when BLOCK_M > BLOCK_N)",
    ),
    K(
        "kernel-dkdv-lo-block-m-multiple",
        "kernels/_common.py",
        "lo = (pid_n * BLOCK_N // BLOCK_M) * BLOCK_M",
        "lo = pid_n * BLOCK_M",
        "dK/dV: causal start at pid_n * BLOCK_M (skips queries when BLOCK_M > BLOCK_N)",
    ),
    K(
        "kernel-dkdv-mask-end-block-m",
        "kernels/_common.py",
        "mask_end = tl.cdiv((pid_n + 1) * BLOCK_N, BLOCK_M) * BLOCK_M",
        "mask_end = (pid_n + 1) * BLOCK_M",
        "dK/dV: masked query blocks end at (pid_n + 1) * BLOCK_M (diagonal unmasked when BLOCK_M < BLOCK_N)",
    ),
    K(
        "kernel-dkdv-hi-block-m",
        "kernels/_common.py",
        "hi = tl.where(pid_n * BLOCK_N < kv_end, q_len, 0)",
        "hi = tl.where(pid_n * BLOCK_M < kv_end, q_len, 0)",
        "dK/dV: a key block counts as past the key length from pid_n * BLOCK_M",
    ),
    K(
        "kernel-dkdv-padding-check-block-m",
        "kernels/_common.py",
        "tl.where((pid_n + 1) * BLOCK_N <= kv_end, mask_end, hi)",
        "tl.where((pid_n + 1) * BLOCK_M <= kv_end, mask_end, hi)",
        "dK/dV: a key block with padding keys counts as full when (pid_n + 1) * BLOCK_M <= kv_end",
    ),
    K(
        "kernel-dkdv-grid-block-m",
        "kernels/_backward.py",
        'blocks_grid(k_len, meta["BLOCK_N"]',
        'blocks_grid(k_len, meta["BLOCK_M"]',
        "dK/dV grid counts key blocks of BLOCK_M (too few programs when BLOCK_M > BLOCK_N)",
    ),
    K(
        "kernel-dq-grid-block-n",
        "kernels/_backward.py",
        'blocks_grid(q_len, meta["BLOCK_M"]',
        'blocks_grid(q_len, meta["BLOCK_N"]',
        "dQ grid counts query blocks of BLOCK_N (too few programs when BLOCK_M < BLOCK_N)",
    ),
    K(
        "kernel-fwd-grid-block-n",
        "kernels/_forward.py",
        '_grid.blocks_grid(q_len, meta["BLOCK_M"], pairs)  # noqa',
        '_grid.blocks_grid(q_len, meta["BLOCK_N"], pairs)  # noqa',
        "forward grid counts query blocks of BLOCK_N (too few programs when BLOCK_M < BLOCK_N)",
    ),
    K(
        "kernel-delta-grid-too-small",
        "kernels/_backward.py",
        "wrap(delta_kernel)[_grid.blocks_grid(q_len, 32, pairs)]",
        "wrap(delta_kernel)[_grid.blocks_grid(q_len, 64, pairs)]",
        "the delta kernel's grid (fixed 32-row blocks) covers only the first half of the query rows",
    ),
]

# --- the interpreter's block-shape setting itself (kernels/_tuning.py): if launches ignored it, every test would
# silently run 32 x 32 again. Killed by test_block_shape_reaches_every_launch.
MUTANTS += [
    K(
        "kernel-interpret-blocks-ignored",
        "kernels/_tuning.py",
        "return dict(_interpret_blocks) if interpreting() else {}",
        "return dict(INTERPRET_BLOCKS) if interpreting() else {}",
        "interpreted launches ignore the block-shape setting (always the default 32 x 32)",
    ),
]

# --- side inputs read through their own strides (issue 20). Killed by test_side_inputs_in_any_layout, whose
# key_lengths, key_mask and mask are sliced, transposed or expanded views with the opposite values where a
# contiguous read would land.
MUTANTS += [
    K(
        "kernel-key-lengths-read-contiguous",
        "kernels/_common.py",
        "length = tl.load(KLEN + b.to(tl.int64) * s_klb)",
        "length = tl.load(KLEN + b)",
        "key_lengths read as if contiguous (lengths[:, 0] or an expanded tensor gives other rows' values)",
    ),
    K(
        "kernel-key-mask-key-stride-ignored",
        "kernels/_common.py",
        "+ kj.to(tl.int64) * s_kn, mask=kj < kv_end",
        "+ kj.to(tl.int64), mask=kj < kv_end",
        "key_mask's key stride taken as 1 (a transposed or sliced key_mask is misread)",
    ),
    K(
        "kernel-mask-key-stride-ignored",
        "kernels/_common.py",
        "qi.to(tl.int64) * s_mm + kj.to(tl.int64) * s_mn",
        "qi.to(tl.int64) * s_mm + kj.to(tl.int64)",
        "the dense mask's key stride taken as 1 (a transposed or sliced mask is misread)",
    ),
    K(
        "kernel-delta-takes-grad-lse-layout",
        "kernels/_backward.py",
        "delta -= grad_lse  #",
        "delta = -grad_lse + delta  #",
        "delta takes the layout of the logsumexp's gradient, which the kernels then read as contiguous",
    ),
]

# --- 64-bit offsets inside a (batch, head) slice. Killed by test_row_offsets_past_2_31 and
# test_dense_mask_offsets_past_2_31 (views whose rows lie 2**30 + 64 elements apart).
MUTANTS += [
    K(
        "kernel-row-offsets-32-bit",
        "kernels/_common.py",
        "return offs.to(tl.int64)[:, None] * s_row",
        "return offs[:, None] * s_row",
        "row index x row stride computed in 32 bits (wraps past 2**31: long or (batch, seq, heads, dim) layouts)",
    ),
    K(
        "kernel-mask-offsets-32-bit",
        "kernels/_common.py",
        "+ qi.to(tl.int64) * s_mm +",
        "+ qi * s_mm +",
        "the dense mask's query row offset computed in 32 bits (q_len x k_len passes 2**31 at 46341)",
    ),
]

# --- the split-KV (FlashDecoding) forward and its rule. Killed by tests/kernels/test_split_kv.py (added to the
# kernel suite for these mutants).
SPLIT_KV_TESTS = ("tests/kernels/test_split_kv.py", *KERNEL_TESTS)


def KS(id: str, file: str, old: str, new: str, what: str) -> Mutant:
    return Mutant(id, file, ((old, new),), what, SPLIT_KV_TESTS)


MUTANTS += [
    KS(
        "kernel-split-keys-not-bounded",
        "kernels/_forward.py",
        "hi = tl.minimum(hi, split * split_keys + split_keys)",
        "hi = hi",
        "a split attends every key from its start on: the splits overlap",
    ),
    KS(
        "kernel-split-interior-below-start",
        "kernels/_forward.py",
        "full_end = tl.maximum(tl.minimum(full_end, hi), lo)",
        "full_end = tl.minimum(full_end, hi)",
        "a split whose interior blocks end before its start re-attends earlier keys in its masked loop",
    ),
    KS(
        "kernel-combine-base-2-weights",
        "kernels/_combine.py",
        "weight = tl.exp(tl.load(lse_base",
        "weight = tl.exp2(tl.load(lse_base",
        "the combination weighs the splits with exp2 of natural-log logsumexps",
    ),
    KS(
        "kernel-combine-empty-rows-nan",
        "kernels/_combine.py",
        'm_safe = tl.where(m == float("-inf"), 0.0, m)',
        "m_safe = m",
        "a row no split saw a key of combines -inf - -inf into NaN",
    ),
    KS(
        "kernel-split-lse-index-ignores-split",
        "kernels/_forward.py",
        "tl.store(LSE + (bh.to(tl.int64) * n_splits + split) * q_len + offs_m",
        "tl.store(LSE + (bh.to(tl.int64) * n_splits) * q_len + offs_m",
        "every split writes its logsumexp to the first split's slot",
    ),
    KS(
        "kernel-split-rule-splits-full-gpu",
        "kernels/_grid.py",
        "programs >= 0.8 * sm_count",
        "programs >= 8 * sm_count",
        "the split rule splits launches that already fill the GPU",
    ),
]

# --- autotuning (kernels/_tuning.py). Killed by tests/kernels/test_tuning.py.
TUNING_TESTS = ("tests/kernels/test_tuning.py",)
MUTANTS += [
    Mutant(
        "kernel-tune-key-without-batch-heads",
        "kernels/_tuning.py",
        (('"K_BUCKET",\n    "BH_BUCKET",\n    "HEAD_DIM",', '"K_BUCKET",\n    "HEAD_DIM",'),),
        "the tuning key ignores batch x heads: a config tuned on a small grid is reused on a huge one",
        TUNING_TESTS,
    ),
    Mutant(
        "kernel-bh-bucket-powers-of-two",
        "kernels/_tuning.py",
        (("bucket *= 4", "bucket *= 2"),),
        "batch x heads bucketed in powers of 2 (not the documented powers of 4)",
        TUNING_TESTS,
    ),
    Mutant(
        "kernel-pinned-config-ignored",
        "kernels/_tuning.py",
        (
            (
                "configs, keep = ([pinned], None) if isinstance(pinned, triton.Config) else (KERNEL_CONFIGS[name], None)",
                "configs, keep = (KERNEL_CONFIGS[name], None)",
            ),
        ),
        "TYPED_TRANSFORMER_KERNEL_CONFIGS is parsed but the kernel still autotunes",
        TUNING_TESTS,
    ),
    Mutant(
        "kernel-length-bucket-not-clamped",
        "kernels/_tuning.py",
        (("while bucket < n and bucket < high:", "while bucket < n:"), ("return min(bucket, high)", "return bucket")),
        "lengths past 16384 get their own tuning buckets",
        TUNING_TESTS,
    ),
]

# --- the eager path (kernels/_op.py attention): plain calls skip torch.library's dispatch. Killed by
# tests/kernels/test_api.py (fake tensors, double backward, eager vs registered op bitwise).
API_TESTS = ("tests/kernels/test_api.py",)
MUTANTS += [
    Mutant(
        "kernel-eager-path-under-dispatch-modes",
        "kernels/_op.py",
        (
            (
                "torch.compiler.is_compiling()\n        or torch._C._len_torch_dispatch_stack() > 0",
                "torch.compiler.is_compiling()",
            ),
        ),
        "a call under FakeTensorMode (a dispatch mode) runs the kernels instead of the op's fake implementation",
        API_TESTS,
    ),
    Mutant(
        "kernel-eager-backward-not-once-differentiable",
        "kernels/_op.py",
        (
            ("return _eager_backward_once(ctx, grad_out, grad_lse)", "return _eager_backward(ctx, grad_out, grad_lse)"),
            ("return _eager_backward_once(ctx, grad_out, None)", "return _eager_backward(ctx, grad_out, None)"),
        ),
        "the eager backward accepts create_graph=True and returns gradients with no second derivative",
        API_TESTS,
    ),
    Mutant(
        "kernel-eager-never-records-autograd",
        "kernels/_op.py",
        (
            (
                "    if torch.is_grad_enabled() and (\n        q.requires_grad or k.requires_grad or v.requires_grad or (sinks is not None and sinks.requires_grad)\n    ):\n        function = _Eager",
                "    if False and (\n        q.requires_grad or k.requires_grad or v.requires_grad or (sinks is not None and sinks.requires_grad)\n    ):\n        function = _Eager",
            ),
        ),
        "eager calls never record the autograd node: inputs requiring grad get no gradient",
        API_TESTS,
    ),
]

# --- grouped-query attention. Killed by tests/kernels/test_kernel_gqa.py (ratios 1/2/4/8, torch's enable_gqa).
GQA_TESTS = ("tests/kernels/test_kernel_gqa.py", *KERNEL_TESTS)
MUTANTS += [
    Mutant(
        "kernel-gqa-forward-kv-head-modulo",
        "kernels/_forward.py",
        (
            (
                "k_src = rows_source(head_ptr(K, b, h // group, s_kb, s_kh)",
                "k_src = rows_source(head_ptr(K, b, h % (heads // group), s_kb, s_kh)",
            ),
        ),
        "forward: query head h reads kv head h % kv_heads (repeat, not torch's repeat_interleave)",
        GQA_TESTS,
    ),
    Mutant(
        "kernel-gqa-dq-v-head-modulo",
        "kernels/_dq.py",
        (
            (
                "v_base = head_ptr(V, b, h // group, s_vb, s_vh)",
                "v_base = head_ptr(V, b, h % (heads // group), s_vb, s_vh)",
            ),
        ),
        "dQ kernel: v of the wrong kv head",
        GQA_TESTS,
    ),
    Mutant(
        "kernel-gqa-dkdv-first-query-head-only",
        "kernels/_dkdv.py",
        (("for g in range(g_lo, g_lo + share):", "for g in range(g_lo, g_lo + 1):"),),
        "dK/dV sums only the first query head of each group",
        GQA_TESTS,
    ),
    Mutant(
        "kernel-gqa-dkdv-strided-group",
        "kernels/_dkdv.py",
        (("h = kvh * group + g  #", "h = kvh + g * (heads // group)  #"),),
        "dK/dV takes the group's query heads strided (repeat) instead of adjacent (repeat_interleave)",
        GQA_TESTS,
    ),
]

# A second copy of kernels/_op.py (a reload, or the repository folder imported as `kernels` by transformers' probe)
MUTANTS += [
    Mutant(
        "kernel-ops-defined-again",
        "kernels/_op.py",
        (("    if defined is not None:\n        return defined\n", ""),),
        "a second import of the module defines the ops again, destroying the first definition that earlier "
        "callers hold: torch's dispatcher reads freed memory (segfault or std::bad_alloc later)",
        API_TESTS,
    ),
]
