"""Blind review of dispatch and search guards (2026-11-24), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-guards-trace-backend-outermost",
        "transformer/common/switches.py",
        (("            return self.trace_stack[-1]\n", "            return self.trace_stack[0]\n"),),
        "inside a compiled function, nested use_backend blocks resolve to the OUTERMOST block's backend: "
        "use_backend('eager') around use_backend('torch') (or 'triton') runs eager for the inner calls, "
        "while eager mode (the context variable) runs the innermost one",
    ),
    Mutant(
        "blind-guards-auto-cuda-bf16-to-sdpa",
        "transformer/backends/choice.py",
        (
            (
                "        if q.dtype == torch.float32:  # issue 18: until a GPU measures otherwise, SDPA for float32\n",
                "        if q.dtype != torch.float16:  # issue 18: until a GPU measures otherwise, SDPA for float32\n",
            ),
        ),
        "auto on CUDA sends bfloat16 inputs to torch's SDPA (with the float32 DEBUG message) although the kernel "
        "takes them: only float16 reaches the fused kernel under auto",
    ),
    Mutant(
        "blind-guards-sampler-float32-logits",
        "transformer/decoding/sampling.py",
        (("    logits = log_probs.detach().to(torch.float64)\n", "    logits = log_probs.detach().float()\n"),),
        "the tempered logits are computed in float32: a temperature below float32's range (e.g. 1e-50, 1e-300) "
        "turns the best token's 0/temperature into NaN and sampling raises 'log-probabilities ... are NaN' "
        "instead of being greedy decoding",
    ),
    Mutant(
        "blind-guards-top-p-slack-sign",
        "transformer/decoding/sampling.py",
        (
            (
                "        drop_sorted = before >= top_p - TOP_P_SLACK  # keep the smallest prefix whose mass reaches top_p\n",
                "        drop_sorted = before >= top_p + TOP_P_SLACK  # keep the smallest prefix whose mass reaches top_p\n",
            ),
        ),
        "the top-p slack is applied the wrong way: a prefix whose mass reaches top_p up to float32 rounding "
        "(0.5, 0.25, ... with top_p=0.75) keeps one token too many",
    ),
    Mutant(
        "blind-guards-length-penalty-inf",
        "transformer/decoding/requests.py",
        (
            (
                "    if not (is_real(length_penalty) and math.isfinite(length_penalty) and length_penalty >= 0):\n",
                "    if not (is_real(length_penalty) and length_penalty >= 0):\n",
            ),
        ),
        "beam_search/beam_generate accept length_penalty=inf: every score becomes -0.0 and the first "
        "hypothesis found wins, silently, instead of a ValueError naming length_penalty",
    ),
    Mutant(
        "blind-guards-generate-top-p-ignored",
        "transformer/lm/generation.py",
        (
            (
                (
                    "            for name, value, default in (\n"
                    '                ("temperature", temperature, 1.0),\n'
                    '                ("top_k", top_k, None),\n'
                    '                ("top_p", top_p, None),\n'
                    "            )\n"
                ),
                '            for name, value, default in (("temperature", temperature, 1.0), ("top_k", top_k, None))\n',
            ),
        ),
        "generate(..., top_p=0.9) without sample=True silently decodes greedily (top_p ignored) instead of "
        "raising 'top_p=0.9 only applies to sampling'",
    ),
    Mutant(
        "blind-guards-mask-length-guard-needs-checks",
        "transformer/masks.py",
        (
            (
                '        for name, size, dim in (("key_lengths", k_len, "k_len"), ("query_lengths", q_len, "q_len")):\n',
                "        if not checks_enabled():\n"
                "            return\n"
                '        for name, size, dim in (("key_lengths", k_len, "k_len"), ("query_lengths", q_len, "q_len")):\n',
            ),
        ),
        "with contracts switched off, an AttentionMask length above the attention's size (key_lengths 9 for "
        "k_len=5) is accepted silently instead of raising the documented ValueError (a guard: checks on or off)",
    ),
    Mutant(
        "blind-guards-dtype-autocast-cuda-only",
        "transformer/contracts/guards.py",
        (
            (
                "            if tensor.is_floating_point() and tensor.dtype != dtype and not torch.is_autocast_enabled(device.type):\n",
                "            if tensor.is_floating_point() and tensor.dtype != dtype and not torch.is_autocast_enabled():\n",
            ),
        ),
        "the autocast exemption reads only CUDA's autocast state: under torch.autocast('cpu', bfloat16) a model "
        "whose activations are bfloat16 and parameters float32 is refused with 'argument x is torch.bfloat16, "
        "the module's parameters torch.float32'",
    ),
    Mutant(
        "blind-guards-perhead-dropout-falls-back",
        "transformer/lm/attention.py",
        (
            (
                '                if (current_backend() or self.backend) != "auto":',
                '                if self.backend != "auto":',
            ),
        ),
        "PerHeadValueAttention with attention dropout under use_backend('triton') (module default 'auto') "
        "silently runs torch instead of refusing: a backend asked for by name falls back",
    ),
    Mutant(
        "blind-guards-kvcache-values-unchecked",
        "transformer/cache.py",
        (
            (
                'validate_dtype_device("KVCache.extend", held, "the cached keys", k=k, v=v)',
                'validate_dtype_device("KVCache.extend", held, "the cached keys", k=k)',
            ),
        ),
        "KVCache.extend no longer checks the new values: float64 values appended to a float32 cache are "
        "silently promoted by torch.cat (the cache's values become float64) instead of a ValueError naming 'v'",
    ),
]

# The files run for this review (its first run and after).
SUITE = (
    "tests/test_sampling.py",
    "tests/test_decoding.py",
    "tests/test_backends.py",
    "tests/test_structured_masks.py",
    "tests/test_entry_guards.py",
    "tests/test_lm_generate.py",
    "tests/test_lm.py",
    "tests/test_cache.py",
    "tests/test_compiled_contracts_of_modules.py",
    "tests/test_attention.py",
)
MUTANTS = [dataclasses.replace(m, tests=SUITE) for m in MUTANTS]
