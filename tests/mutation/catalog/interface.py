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
        _MASKS,
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
        '    return {"mask": dense, "key_mask": mask.key_mask, "key_lengths": mask.key_lengths, "causal": mask.causal}\n',
        '    return {"mask": dense, "key_mask": mask.key_mask, "key_lengths": mask.key_lengths, "causal": False}\n',
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
        "    if mask.causal and not mask.tensors():\n",
        "    if mask.causal:\n",
        "SDPA gets is_causal alone although the mask also pads keys",
    ),
    Mutant(
        "sdpa-key-only-ignores-causal",
        "transformer/masks.py",
        (
            (
                "return not self.causal and self.query_lengths is None and self.dense is None",
                "return self.query_lengths is None and self.dense is None",
            ),
        ),
        "a causal mask with key padding is sent to SDPA as one key row (no causal)",
    ),
    # --- the backend choice
    M(
        "backend-module-beats-context",
        "transformer/attention.py",
        "resolve_backend(current_backend() or self.backend,",
        "resolve_backend(self.backend or current_backend(),",
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
        "        out = kernels.flash_attention(q, k, v, dropout_p=dropout_p, scale=scale, validate=False, **kernel_masks(mask))\n",
        "        out = kernels.flash_attention(q, k, v, dropout_p=dropout_p, scale=scale, **kernel_masks(mask))\n",
        "the kernel's inputs are validated twice per call",
    ),
    M(
        "backend-scale-ignored-by-eager",
        "transformer/backends/dispatch.py",
        "    return attention.unchecked(q, k, v, dense_heads_mask(mask, q.size(-2), k.size(-2)), dropout, scale)[0]\n",
        "    return attention.unchecked(q, k, v, dense_heads_mask(mask, q.size(-2), k.size(-2)), dropout)[0]\n",
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
        "if cache is not None and cache.filled:",
        "if False:",
        "cross-attention projects the memory again at every step (and appends it)",
    ),
    M(
        "cache-reorder-forgets-values",
        _CACHE,
        "            self.values = self.values.index_select(0, index.to(self.values.device))\n",
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
        "        logits = (logits - logits.amax(-1, keepdim=True)) / temperature  # the row's best token at 0, the rest <= 0\n",
        "        logits = (logits - logits.amax(-1, keepdim=True)) * temperature  # the row's best token at 0, the rest <= 0\n",
        "temperature multiplies the logits instead of dividing them",
    ),
    M(
        "sample-top-k-keeps-one-more",
        "transformer/decoding/sampling.py",
        "            kth = logits.topk(top_k, dim=-1).values[:, -1:]\n",
        "            kth = logits.topk(min(top_k + 1, logits.size(-1)), dim=-1).values[:, -1:]\n",
        "top-k keeps k + 1 tokens",
    ),
    M(
        "sample-top-p-inclusive",
        "transformer/decoding/sampling.py",
        "            drop_sorted = before >= top_p - TOP_P_SLACK  # keep the smallest prefix whose mass reaches top_p\n",
        "            drop_sorted = before + sorted_probs > top_p  # keep the smallest prefix whose mass reaches top_p\n",
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

# --- the drop-in for F.scaled_dot_product_attention (transformer/backends/sdpa.py) and grouped-query attention
_SDPA, _DROPIN_TESTS, _GQA_TESTS = (
    "transformer/backends/sdpa.py",
    ("tests/test_sdpa_dropin.py",),
    ("tests/test_gqa.py",),
)
_TORCH_BACKEND, _GROUPED = "transformer/backends/torch_backend.py", "transformer/backends/grouped.py"


def _dropin(
    id: str, old: str, new: str, what: str, tests: tuple[str, ...] = _DROPIN_TESTS, file: str = _SDPA
) -> Mutant:
    return Mutant(id, file, ((old, new),), what, tests)


MUTANTS += [
    _dropin(
        "dropin-empty-rows-uniform",
        "    probs = scores.masked_fill(empty, 0.0).softmax(dim=-1).masked_fill(empty, 0.0)\n",
        "    probs = scores.masked_fill(empty, 0.0).softmax(dim=-1)\n",
        "the reference averages a fully masked row uniformly instead of returning 0",
    ),
    _dropin(
        "dropin-float-mask-as-bool",
        "            scores = scores + attn_mask.to(acc)\n",
        '            scores = scores.masked_fill(attn_mask == 0, float("-inf"))\n',
        "a float (additive) mask is read as a boolean one (nonzero = attend)",
    ),
    _dropin(
        "dropin-causal-bottom-right",
        "        attn_mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()\n",
        "        attn_mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril(k.size(-2) - q.size(-2))\n",
        "is_causal aligned bottom-right (FlashAttention 2.1+) instead of torch's top-left",
    ),
    _dropin(
        "dropin-gqa-tiles-heads",
        "        k = k.repeat_interleave(q.size(-3) // k.size(-3), dim=-3)\n",
        "        k = k.repeat(*([1] * (k.dim() - 3)), q.size(-3) // k.size(-3), 1, 1)\n",
        "GQA tiles the key heads (head i reads i % kv_heads) instead of grouping them (i // group)",
    ),
    _dropin(
        "dropin-scale-ignored",
        "        scores = scores * (1.0 / math.sqrt(q.size(-1)) if scale is None else scale)\n",
        "        scores = scores * (1.0 / math.sqrt(q.size(-1)))\n",
        "the reference ignores a given scale",
    ),
    _dropin(
        "dropin-dropout-ignored", "    if dropout_p > 0.0:\n", "    if dropout_p > 1.0:\n", "the reference never drops"
    ),
    _dropin(
        "dropin-mask-with-causal-accepted",
        "    if is_causal and attn_mask is not None:\n",
        "    if False:\n",
        "a mask together with is_causal is not refused (torch's fused CPU path ignores one of them)",
    ),
    _dropin(
        "dropin-value-length-unchecked",
        "    if value.size(-2) != key.size(-2):\n",
        "    if False:\n",
        "values of another length than the keys are not refused (torch's fused CPU path reads past them)",
    ),
    _dropin(
        "dropin-mask-grows-weights",
        "    if len(shape) > len(weights) or any(m not in (1, w) "
        "for m, w in zip(shape[::-1], weights[::-1], strict=False)):\n",
        "    if any(m not in (1, w) for m, w in zip(shape[::-1], weights[::-1], strict=False)):\n",
        "a mask with more dims than the attention weights is not refused",
    ),
    _dropin(
        "dropin-kernel-gets-repeated-heads",
        "        h = t.size(-3) if enable_gqa and not own_heads else heads\n",
        "        h = heads\n",
        "the kernel gets key/value heads expanded to the query heads instead of in place",
    ),
    _dropin(
        "dropin-kernel-mask-padded-wrong-side",
        "        return mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))\n",
        "        return mask.reshape(tuple(mask.shape[:-2]) + (1,) * (4 - mask.dim()) + tuple(mask.shape[-2:]))\n",
        "a low-rank mask reaches the kernel with its ones inserted before L instead of in front",
    ),
    _dropin(
        "dropin-structured-key-only-drops-causal",
        "    if mask.key_only():\n",
        "    if mask.key_only() or mask.causal:\n",
        "a causal AttentionMask with key lengths reaches torch as one key row (causality lost)",
        file=_TORCH_BACKEND,
    ),
    _dropin(
        "dropin-old-torch-tiles-heads",
        "        key = key.repeat_interleave(query.size(-3) // key.size(-3), dim=-3)\n",
        "        key = key.repeat(1, query.size(-3) // key.size(-3), 1, 1)\n",
        "torch < 2.5 (no enable_gqa) gets tiled key heads",
        file=_TORCH_BACKEND,
    ),
    _dropin(
        "dropin-logging-breaks-the-graph",
        "    if not torch.compiler.is_compiling() and logger.isEnabledFor(logging.DEBUG):  # a Logger call is a graph break\n",
        "    if logger.isEnabledFor(logging.DEBUG) and not torch.compiler.is_compiling():  # a Logger call is a graph break\n",
        "the Logger is asked before is_compiling: a graph break, torch.compile(fullgraph=True) of a model "
        "calling the drop-in fails",
    ),
    _dropin(
        "dropin-context-ignored",
        'else (current_backend() or "auto")',
        'else "auto"',
        "a use_backend block does not choose the drop-in's backend",
    ),
    _dropin(
        "gqa-module-repeat-tiles",
        "    return k.repeat_interleave(heads // k.size(1), dim=1), v.repeat_interleave(heads // v.size(1), dim=1)\n",
        "    return k.repeat(1, heads // k.size(1), 1, 1), v.repeat_interleave(heads // v.size(1), dim=1)\n",
        "the modules' reference path tiles the shared key heads",
        _GQA_TESTS,
        _GROUPED,
    ),
    _dropin(
        "gqa-module-torch-without-gqa",
        "        return torch_sdpa(q, k, v, mask, dropout_p, scale, enable_gqa=True)\n",
        "        return torch_sdpa(q, k, v, mask, dropout_p, scale, enable_gqa=False)\n",
        "the modules' torch path forgets enable_gqa",
        _GQA_TESTS,
        _GROUPED,
    ),
    _dropin(
        "gqa-config-unchecked",
        'check_kv_heads(self.n_kv_heads, self.n_heads, "n_kv_heads", "n_heads", prefix="LMConfig: ")',
        "pass",
        "LMConfig accepts a kv head count that does not divide n_heads",
        _GQA_TESTS,
        "transformer/lm/config.py",
    ),
    _dropin(
        "gqa-lm-builds-full-heads",
        'grouped = {} if kind is PerHeadValueAttention else {"kv_heads": config.kv_heads}',
        "grouped = {}",
        "build_lm ignores n_kv_heads (full key/value heads, a cache per query head)",
        _GQA_TESTS,
        "transformer/lm/model.py",
    ),
]

# --- Hugging Face transformers (transformer/integrations/huggingface.py)
_HF, _HF_TESTS = "transformer/integrations/huggingface.py", ("tests/test_huggingface.py",)
MUTANTS += [
    _dropin(
        "hf-no-mask-function",
        "    AttentionMaskInterface.register(name, sdpa_mask)\n",
        "",
        "only the attention function is registered: the model builds no mask (padding lost)",
        _HF_TESTS,
        _HF,
    ),
    _dropin(
        "hf-causal-for-one-query",
        "is_causal = bool(q_len > 1 and attention_mask is None and is_causal)",
        "is_causal = bool(attention_mask is None and is_causal)",
        "one new token with a cache is run causally (top-left: it sees only the first key)",
        _HF_TESTS,
        _HF,
    ),
    _dropin(
        "hf-module-causality-ignored",
        'is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)',
        "is_causal = True if is_causal is None else is_causal",
        "an encoder (BERT) without a mask is run causally",
        _HF_TESTS,
        _HF,
    ),
    _dropin(
        "hf-gqa-not-enabled",
        "enable_gqa=grouped)",
        "enable_gqa=False)",
        "grouped-query models reach the drop-in without enable_gqa",
        _HF_TESTS,
        _HF,
    ),
    _dropin(
        "hf-position-bias-ignored",
        "    if position_bias is not None:  # an additive bias",
        "    if False:  # an additive bias",
        "T5's relative position bias is dropped",
        _HF_TESTS,
        _HF,
    ),
    _dropin(
        "hf-dropout-ignored",
        "dropout_p=float(dropout),",
        "dropout_p=0.0,",
        "the attention dropout transformers passes while training is dropped",
        _HF_TESTS,
        _HF,
    ),
]
MUTANTS += [
    _dropin(
        "hf-imports-transformers-eagerly",
        "from ..backends.sdpa import scaled_dot_product_attention\n",
        "import transformers  # noqa: F401\n\nfrom ..backends.sdpa import scaled_dot_product_attention\n",
        "importing the integration imports transformers (seconds, and a hard dependency)",
        _HF_TESTS,
        _HF,
    ),
]

# --- torch's flash-attention provider registry (transformer/integrations/sdpa_registry.py)
_REG, _REG_TESTS = "transformer/integrations/sdpa_registry.py", ("tests/test_sdpa_registry.py",)
MUTANTS += [
    _dropin(
        "registry-lse-transposed",
        "return out, lse, None, None, query.size(2)",
        "return out, lse.transpose(1, 2).contiguous(), None, None, query.size(2)",
        "the logsumexp comes back as (batch, q_len, heads) instead of aten's (batch, heads, q_len)",
        _REG_TESTS,
        _REG,
    ),
    _dropin(
        "registry-backward-fresh-seed",
        "lse, None, None, None, _seed(rng_state, dropout_p)",
        "lse, None, None, None, _seed(_rng_state(dropout_p, q.device)[0], dropout_p)",
        "the backward drops with a new seed instead of the forward's (rng_state ignored)",
        _REG_TESTS,
        _REG,
    ),
    _dropin(
        "registry-output-left-bhsd",
        "return out.transpose(1, 2), lse, rng_state, offset, debug",
        "return out, lse, rng_state, offset, debug",
        "_flash_attention_forward returns (batch, heads, seq, dim) instead of aten's (batch, seq, heads, dim)",
        _REG_TESTS,
        _REG,
    ),
    _dropin(
        "registry-default-scale",
        "return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)",
        "return 1.0 / head_dim if scale is None else float(scale)",
        "scale=None is 1/d, not 1/sqrt(d)",
        _REG_TESTS,
        _REG,
    ),
    _dropin(
        "registry-refusals-ignored",
        "if value is not None and value is not False and not (",
        "if False and not (",
        "varlen, windows, ALiBi, a debug mask are ignored instead of refused",
        _REG_TESTS,
        _REG,
    ),
    _dropin(
        "registry-causal-dropped",
        "out, lse = fwd(q, k, v, None, None, None, _seed(rng_state, dropout_p), bool(is_causal),",
        "out, lse = fwd(q, k, v, None, None, None, _seed(rng_state, dropout_p), False,",
        "the forward adapter ignores is_causal",
        _REG_TESTS,
        _REG,
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
        "        logits = (logits - logits.amax(-1, keepdim=True)) / temperature  # the row's best token at 0, the rest <= 0\n",
        "        logits = logits / temperature  # the row's best token at 0, the rest <= 0\n",
        "tempered logits not taken from the row's best token: a tiny temperature overflows to inf/nan",
        _SAMPLING_TESTS,
    ),
    I20(
        "sample-in-float32",
        "transformer/decoding/sampling.py",
        "        logits = log_probs.detach().to(torch.float64)\n",
        "        logits = log_probs.detach().float()\n",
        "the tempered logits in float32: a temperature below float32's range divides 0 by 0",
        _SAMPLING_TESTS,
    ),
    I20(
        "sample-top-p-slack-wrong-side",
        "transformer/decoding/sampling.py",
        "            drop_sorted = before >= top_p - TOP_P_SLACK  # keep the smallest prefix whose mass reaches top_p\n",
        "            drop_sorted = before >= top_p + TOP_P_SLACK  # keep the smallest prefix whose mass reaches top_p\n",
        "a nucleus exactly at top_p keeps one token too many",
        _SAMPLING_TESTS,
    ),
    I20(
        "sample-top-p-not-scattered-back",
        "transformer/decoding/sampling.py",
        "            drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)\n",
        "            drop = drop_sorted\n",
        "the nucleus cut in sorted order is applied in vocabulary order",
        _SAMPLING_TESTS,
    ),
    I20(
        "sample-top-p-on-untempered",
        "transformer/decoding/sampling.py",
        "            sorted_probs, order = logits.softmax(-1).sort(dim=-1, descending=True)\n",
        "            sorted_probs, order = (logits * temperature).softmax(-1).sort(dim=-1, descending=True)\n",
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
        '            validate_dtype_device("KVCache.extend", self.keys, "the cached keys", k=k, v=v)\n',
        "",
        "a cache extended with float64 keys is promoted silently by torch.cat",
        _ENTRY_TESTS,
    ),
]
