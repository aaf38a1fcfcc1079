"""Mutants of the attention interface: structured masks, what each backend receives, the backend choice, the
key/value caches the modules own, and sampling."""

from .base import M, Mutant

_MASKS, _CACHE = "transformer/masks.py", "transformer/cache.py"

MUTANTS: list[Mutant] = [
    # --- AttentionMask and its dense form
    M(
        "mask-key-lengths-off-by-one",
        _MASKS,
        "parts.append(torch.arange(k_len, device=device) < self.key_lengths[:, None, None])",
        "parts.append(torch.arange(k_len, device=device) <= self.key_lengths[:, None, None])",
        "key j < key_lengths becomes j <= key_lengths: the first padding key is visible",
    ),
    M(
        "mask-query-lengths-ignored",
        _MASKS,
        "parts.append(torch.arange(q_len, device=device)[:, None] < self.query_lengths[:, None, None])",
        "pass",
        "padded query rows attend in the dense form of a structured mask",
    ),
    M(
        "mask-causal-dense-shifted",
        _MASKS,
        "parts.append(torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril().unsqueeze(0))",
        "parts.append(torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(1).unsqueeze(0))",
        "the structured causal flag lets a position see the next one",
    ),
    M(
        "mask-padding-always-trailing",
        "transformer/mask_inputs.py",
        "trailing = bool(torch.equal(real, torch.arange(tokens.size(-1), device=tokens.device) < lengths[:, None]))",
        "trailing = True",
        "padding inside a row is described by lengths, as if it were at the end",
    ),
    M(
        "mask-target-without-query-lengths",
        _MASKS,
        "return cls(causal=True, key_lengths=lengths, query_lengths=lengths)",
        "return cls(causal=True, key_lengths=lengths)",
        "the structured target mask lets padded query rows attend (unlike target_mask)",
    ),
    M(
        "mask-check-fits-ignores-broadcast",
        _MASKS,
        'got == sizes[d.lstrip("#")] or (d.startswith("#") and got == 1)',
        "True",
        "a structured mask part of the wrong size is not reported",
    ),
    # --- what each backend receives
    M(
        "kernel-gets-no-causal-flag",
        "transformer/backends/dispatch.py",
        '    parts = {"mask": dense, "key_mask": mask.key_mask, "key_lengths": mask.key_lengths, "causal": mask.causal}\n',
        '    parts = {"mask": dense, "key_mask": mask.key_mask, "key_lengths": mask.key_lengths, "causal": False}\n',
        "the kernel is not told the mask is causal",
    ),
    M(
        "kernel-padded-queries-not-zeroed",
        "transformer/backends/dispatch.py",
        "        return out * valid[:, None, :, None].to(out.dtype)\n",
        "        return out\n",
        "padded query rows keep the kernel's output instead of 0",
    ),
    M(
        "sdpa-causal-with-padding",
        "transformer/backends/torch_backend.py",
        "    if mask.causal and not mask.tensors() and not mask.has_window():\n",
        "    if mask.causal:\n",
        "SDPA gets is_causal alone although the mask also pads keys",
    ),
    Mutant(
        "sdpa-key-only-ignores-causal",
        "transformer/masks.py",
        (
            (
                "            not self.causal\n            and self.query_lengths is None\n",
                "            self.query_lengths is None\n",
            ),
        ),
        "a causal mask with key padding is sent to SDPA as one key row (no causal)",
    ),
    # --- the backend choice
    M(
        "backend-module-beats-context",
        "transformer/attention.py",
        "            requested = current_backend() or self.backend\n",
        "            requested = self.backend or current_backend()\n",
        "the module's default overrides the use_backend block",
    ),
    M(
        "backend-auto-fused-for-float64",
        "transformer/backends/choice.py",
        "    if q.dtype == torch.float64:  # verification (gradcheck, double backward, forward-mode AD): only the reference\n",
        "    if False:  # verification (gradcheck, double backward, forward-mode AD): only the reference\n",
        "auto sends float64 (gradcheck, double backward) to SDPA, which has no double backward",
    ),
    M(
        "backend-validated-twice",
        "transformer/backends/dispatch.py",
        "            q, k, v, dropout_p=dropout_p, scale=scale, validate=False, **kernel_masks(mask), **modifiers\n",
        "            q, k, v, dropout_p=dropout_p, scale=scale, **kernel_masks(mask), **modifiers\n",
        "the kernel's inputs are validated twice per call",
    ),
    M(
        "backend-scale-ignored-by-eager",
        "transformer/backends/dispatch.py",
        "    return attention.unchecked(q, k, v, dense, dropout, scale, **modifiers)[0]\n",
        "    return attention.unchecked(q, k, v, dense, dropout, None, **modifiers)[0]\n",
        "the eager backend ignores a given score scale",
    ),
    # --- caches owned by the modules
    M(
        "cache-offset-ignored",
        "transformer/model.py",
        "offset = 0 if cache is None else cache.length",
        "offset = 0",
        "incremental decoding encodes every new position as position 0",
    ),
    M(
        "cache-prompt-not-causal",
        "transformer/cache.py",
        "        return AttentionMask(causal=True) if new > 1 else None\n",
        "        return None\n",
        "a prompt filling an empty cache attends to its own future",
    ),
    M(
        "cache-static-recomputed",
        "transformer/attention.py",
        "        if cache is not None and cache.filled:\n",
        "        if False:\n",
        "cross-attention projects the memory again at every step (and appends it)",
    ),
    M(
        "cache-reorder-forgets-values",
        _CACHE,
        "            self._values = self._values.index_select(0, index.to(self._values.device))\n",
        "",
        "beam reordering moves the keys but not the values",
    ),
    M(
        "steps-reorder-forgets-mask",
        "transformer/model.py",
        "            self.src_mask = self.src_mask.index_select(index)\n",
        "            pass\n",
        "a structured source mask does not follow beam search's rows",
    ),
    # --- sampling
    M(
        "sample-temperature-multiplies",
        "transformer/decoding/sampling.py",
        "    logits = (logits - logits.amax(-1, keepdim=True)) / temperature  # the row's best token at 0, the rest <= 0\n",
        "    logits = (logits - logits.amax(-1, keepdim=True)) * temperature  # the row's best token at 0, the rest <= 0\n",
        "temperature multiplies the logits instead of dividing them",
    ),
    M(
        "sample-top-k-keeps-one-more",
        "transformer/decoding/sampling.py",
        "        kth = logits.topk(top_k, dim=-1).values[:, -1:]\n",
        "        kth = logits.topk(min(top_k + 1, logits.size(-1)), dim=-1).values[:, -1:]\n",
        "top-k keeps k + 1 tokens",
    ),
    M(
        "sample-top-p-inclusive",
        "transformer/decoding/sampling.py",
        "        drop_sorted = before >= top_p - TOP_P_SLACK  # keep the smallest prefix whose mass reaches top_p\n",
        "        drop_sorted = before + sorted_probs > top_p  # keep the smallest prefix whose mass reaches top_p\n",
        "top-p drops the token that crosses p (the nucleus falls short of p)",
    ),
    M(
        "sample-seed-ignored",
        "transformer/decoding/sampling.py",
        "        generator.manual_seed(seed)\n",
        "        pass\n",
        "an int seed does not seed the generator",
    ),
]


# --- issue 20 (never silently wrong): the backend choice under torch.compile, sampling at its edges, mask lengths,
# dtype/device guards, caches after a reorder. Each runs the test files that state the promise (the new ones are not
# in TEST_FILES), so a run with -k costs one small baseline.
_BACKEND_TESTS = ("tests/test_backends.py",)
_SAMPLING_TESTS = ("tests/test_sampling.py",)
_MASK_TESTS = ("tests/test_structured_masks.py",)
_ENTRY_TESTS = ("tests/test_entry_guards.py",)
_CACHE_TESTS = ("tests/test_cache.py",)


def I20(id: str, file: str, old: str, new: str, what: str, tests: tuple[str, ...]) -> Mutant:
    return Mutant(id, file, ((old, new),), what, tests)


MUTANTS += [
    I20(
        "backend-choice-read-with-contextvar-get",
        "transformer/common/switches.py",
        "        value = self.reader.value\n",
        "        value = self.variable.get(self.reader)\n",
        "the choice read with ContextVar.get (the same in eager mode; Dynamo cannot trace it: no guard, a graph break)",
        _BACKEND_TESTS,
    ),
    I20(
        "backend-trace-block-ignored",
        "transformer/common/switches.py",
        "        if self.trace_stack:\n",
        "        if False:\n",
        "a use_backend block inside a compiled function is not seen by current_backend",
        _BACKEND_TESTS,
    ),
    I20(
        "backend-refusal-raised-while-tracing",
        "transformer/backends/dispatch.py",
        "    if torch.compiler.is_compiling():\n",
        "    if False:\n",
        "a backend that cannot run raises while Dynamo traces (Unsupported under fullgraph, not eager's ValueError)",
        _BACKEND_TESTS,
    ),
    I20(
        "backend-auto-kernel-for-float32",
        "transformer/backends/choice.py",
        "        if q.dtype == torch.float32:  # issue 18: until a GPU measures otherwise, SDPA for float32\n",
        "        if False:  # issue 18: until a GPU measures otherwise, SDPA for float32\n",
        "auto sends float32 on CUDA to the kernel (no tensor cores) instead of SDPA",
        _BACKEND_TESTS,
    ),
    I20(
        "backend-auto-float32-log-at-info",
        "transformer/backends/choice.py",
        "                logging.DEBUG,\n",
        "                logging.INFO,\n",
        "auto's float32 choice is logged at INFO (every call) instead of DEBUG",
        _BACKEND_TESTS,
    ),
    I20(
        "sample-max-not-subtracted",
        "transformer/decoding/sampling.py",
        "    logits = (logits - logits.amax(-1, keepdim=True)) / temperature  # the row's best token at 0, the rest <= 0\n",
        "    logits = logits / temperature  # the row's best token at 0, the rest <= 0\n",
        "tempered logits not taken from the row's best token: a tiny temperature overflows to inf/nan",
        _SAMPLING_TESTS,
    ),
    I20(
        "sample-in-float32",
        "transformer/decoding/sampling.py",
        "    logits = log_probs.detach().to(torch.float64)\n",
        "    logits = log_probs.detach().float()\n",
        "the tempered logits in float32: a temperature below float32's range divides 0 by 0",
        _SAMPLING_TESTS,
    ),
    I20(
        "sample-top-p-slack-wrong-side",
        "transformer/decoding/sampling.py",
        "        drop_sorted = before >= top_p - TOP_P_SLACK  # keep the smallest prefix whose mass reaches top_p\n",
        "        drop_sorted = before >= top_p + TOP_P_SLACK  # keep the smallest prefix whose mass reaches top_p\n",
        "a nucleus exactly at top_p keeps one token too many",
        _SAMPLING_TESTS,
    ),
    I20(
        "sample-top-p-not-scattered-back",
        "transformer/decoding/sampling.py",
        "        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)\n",
        "        drop = drop_sorted\n",
        "the nucleus cut in sorted order is applied in vocabulary order",
        _SAMPLING_TESTS,
    ),
    I20(
        "sample-top-p-on-untempered",
        "transformer/decoding/sampling.py",
        "        sorted_probs, order = logits.softmax(-1).sort(dim=-1, descending=True)\n",
        "        sorted_probs, order = (logits * temperature).softmax(-1).sort(dim=-1, descending=True)\n",
        "the nucleus is taken over the untempered probabilities",
        _SAMPLING_TESTS,
    ),
    I20(
        "sample-nan-not-refused",
        "transformer/decoding/sampling.py",
        "        if bool(broken.any()):\n",
        "        if False:\n",
        "NaN log-probabilities reach torch.multinomial (its inf/nan error, no row named)",
        _SAMPLING_TESTS,
    ),
    I20(
        "sample-infinite-temperature-accepted",
        "transformer/decoding/requests.py",
        "    if not (is_real(temperature) and math.isfinite(temperature) and temperature > 0):\n",
        "    if not (is_real(temperature) and temperature > 0):\n",
        "temperature=inf is accepted",
        _SAMPLING_TESTS,
    ),
    I20(
        "sample-bool-top-p-accepted",
        "transformer/decoding/requests.py",
        "    if top_p is not None and not (is_real(top_p) and 0.0 < top_p <= 1.0):\n",
        "    if top_p is not None and not (0.0 < top_p <= 1.0):\n",
        "top_p=True is taken as 1.0",
        _SAMPLING_TESTS,
    ),
    I20(
        "mask-negative-length-accepted",
        _MASKS,
        "        if low < 0:",
        "        if False:",
        "AttentionMask(key_lengths=tensor([-3])) is accepted",
        _MASK_TESTS,
    ),
    I20(
        "mask-complex-lengths-accepted",
        _MASKS,
        "                or value.is_complex()\n                or value.dtype == torch.bool\n",
        "                or value.dtype == torch.bool\n",
        "complex lengths are accepted",
        _MASK_TESTS,
    ),
    I20(
        "mask-length-bound-exclusive",
        _MASKS,
        "if longest is not None and longest > size:",
        "if longest is not None and longest >= size:",
        "a length equal to the attention's size is refused",
        _MASK_TESTS,
    ),
    I20(
        "mask-length-bounds-swapped",
        _MASKS,
        'for name, size, dim in (("key_lengths", k_len, "k_len"), ("query_lengths", q_len, "q_len")):',
        'for name, size, dim in (("key_lengths", q_len, "q_len"), ("query_lengths", k_len, "k_len")):',
        "key lengths are bounded by q_len and query lengths by k_len",
        _MASK_TESTS,
    ),
    I20(
        "mask-length-bound-behind-the-switch",
        _MASKS,
        '        for name, size, dim in (("key_lengths"',
        '        for name, size, dim in () if not checks_enabled() else (("key_lengths"',
        "the length bound is a contract (off with checks) instead of a guard",
        _MASK_TESTS,
    ),
    I20(
        "cache-layer-reorder-forgets-cross-attention",
        _CACHE,
        "        self.src_attn.reorder(index)\n",
        "",
        "a reorder leaves every layer's cross-attention cache on the old rows",
        _CACHE_TESTS,
    ),
    I20(
        "steps-reorder-forgets-memory",
        "transformer/model.py",
        "        self.memory = self.memory.index_select(0, index)\n",
        "",
        "a reorder leaves the memory on the old rows (the cache and mask follow)",
        _CACHE_TESTS,
    ),
    I20(
        "entry-dtype-unchecked",
        "transformer/contracts/guards.py",
        "            if tensor.is_floating_point() and tensor.dtype != dtype and not torch.is_autocast_enabled(device.type):\n",
        "            if False:\n",
        "a floating tensor of another dtype reaches torch's own error",
        _ENTRY_TESTS,
    ),
    I20(
        "entry-autocast-refused",
        "transformer/contracts/guards.py",
        "            if tensor.is_floating_point() and tensor.dtype != dtype and not torch.is_autocast_enabled(device.type):\n",
        "            if tensor.is_floating_point() and tensor.dtype != dtype:\n",
        "autocast's mixed dtypes are refused",
        _ENTRY_TESTS,
    ),
    I20(
        "entry-decode-memory-unchecked",
        "transformer/model.py",
        "            memory=memory,\n",
        "",
        "model.decode given float64 memory reaches torch's error (the issue's case)",
        _ENTRY_TESTS,
    ),
    I20(
        "entry-cache-extend-unchecked",
        _CACHE,
        '            validate_dtype_device("KVCache.extend", held, "the cached keys", k=k, v=v)\n',
        "",
        "a cache extended with float64 keys is promoted silently by torch.cat",
        _ENTRY_TESTS,
    ),
]
