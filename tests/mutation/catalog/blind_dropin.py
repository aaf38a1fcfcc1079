"""Blind review of the drop-in attention and integrations (sdpa, Hugging Face, SDPA registry, grouped-query attention)
(2026-11-24), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-dropin-eager-causal-bottom-right",
        "transformer/backends/sdpa_reference.py",
        (
            (
                "        attn_mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()\n",
                "        attn_mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril(k.size(-2) - q.size(-2))\n",
            ),
        ),
        "backend='eager' (and auto on float64) with is_causal=True and L != S aligns the causal mask bottom-right "
        "(flash-attn style) instead of torch's top-left: query i sees keys 0..i+S-L, a different output than torch",
    ),
    Mutant(
        "blind-dropin-float32-mask-refused-for-half",
        "transformer/backends/sdpa_rules.py",
        (
            (
                "    if mask.dtype not in (torch.bool, torch.float32, query.dtype):\n",
                "    if mask.dtype not in (torch.bool, query.dtype):\n",
            ),
        ),
        "a float32 additive mask with float16/bfloat16 queries (which torch takes) raises RuntimeError "
        "'Expected attn_mask dtype to be bool or float or to match query dtype'",
    ),
    Mutant(
        "blind-dropin-broadcast-left-aligned",
        "transformer/backends/sdpa_rules.py",
        (("        for i, size in enumerate(shape, n - len(shape)):\n", "        for i, size in enumerate(shape):\n"),),
        "leading dims of inputs of different ranks are aligned from the left, not the right as torch.matmul: "
        "query (2, 3, L, E) with key/value (3, S, E) is refused ('do not broadcast') although torch accepts it, "
        "and masks are checked against a wrong weights shape",
    ),
    Mutant(
        "blind-dropin-gqa-torch-drops-scale",
        "transformer/backends/grouped.py",
        (
            (
                "        return torch_sdpa(q, k, v, mask, dropout_p, scale, enable_gqa=True, **modifiers)\n",
                "        return torch_sdpa(q, k, v, mask, dropout_p, None, enable_gqa=True, **modifiers)\n",
            ),
        ),
        "grouped-query attention on the torch backend (auto on CPU) ignores the module's score scale: an LM with "
        "n_kv_heads < n_heads and attention_scale (tau) set attends with 1/sqrt(d_k) instead, unlike eager or "
        "the full-head path",
    ),
    Mutant(
        "blind-dropin-hf-causal-on-single-query",
        "transformer/integrations/huggingface.py",
        (
            (
                "    is_causal = q_len > 1 and attention_mask is None and causal_model\n",
                "    is_causal = attention_mask is None and causal_model\n",
            ),
        ),
        "decoding one token with a cache and no mask passes is_causal=True with q_len=1: torch's top-left causal "
        "mask lets the new token see only the first cached key, so generate() diverges from eager's tokens",
    ),
    Mutant(
        "blind-dropin-hf-register-ignores-name",
        "transformer/integrations/huggingface.py",
        (
            (
                "    AttentionInterface.register(name, attention_forward)\n",
                "    AttentionInterface.register(NAME, attention_forward)\n",
            ),
        ),
        "register('custom') registers the mask function under 'custom' but the attention function only under "
        "'typed_transformer': attn_implementation='custom' is unknown to AttentionInterface",
    ),
    Mutant(
        "blind-dropin-registry-seed-wrong-slot",
        "transformer/integrations/sdpa_registry.py",
        (
            (
                "        state[0] = torch.randint(0, 2**62, (1,), dtype=torch.int64)\n",
                "        state[1] = torch.randint(0, 2**62, (1,), dtype=torch.int64)\n",
            ),
        ),
        "the forward stores its fresh dropout seed in rng_state's second slot while the kernel (forward and "
        "backward) reads the first, which stays 0: every flash call with dropout draws the same dropout mask "
        "(two calls give identical outputs) and rng_state[0] never holds the seed",
    ),
    Mutant(
        "blind-dropin-registry-inplace-not-written",
        "transformer/integrations/sdpa_registry.py",
        (("    out.copy_(result)\n", "    out = result\n"),),
        "aten::_flash_attention_forward_no_dropout_inplace returns the logsumexp but never writes the output "
        "buffer it was given: the caller's `out` keeps its old contents",
    ),
    Mutant(
        "blind-dropin-kv-heads-split-interleaved",
        "transformer/attention.py",
        (
            (
                "        return x.unflatten(-1, (self.kv_heads, -1)).transpose(1, 2)\n",
                "        return x.unflatten(-1, (-1, self.kv_heads)).permute(0, 3, 1, 2)\n",
            ),
        ),
        "the projected keys/values are split into kv_heads heads by interleaving features instead of contiguous "
        "d_k-wide chunks (unlike split_heads for the queries): key/value head g is not k_proj's rows "
        "g*d_k..(g+1)*d_k, so a GQA module differs from the full module with repeated key/value projections "
        "(when kv_heads > 1)",
    ),
    Mutant(
        "blind-dropin-lmconfig-kv-error-names",
        "transformer/lm/config.py",
        (
            (
                'check_kv_heads(self.n_kv_heads, self.n_heads, "n_kv_heads", "n_heads", prefix="LMConfig: ")',
                'check_kv_heads(self.n_kv_heads, self.n_heads, prefix="LMConfig: ")',
            ),
        ),
        "LMConfig(n_kv_heads=3, n_heads=8) raises 'LMConfig: kv_heads=3 does not divide h=8', naming the module's "
        "arguments instead of the config's fields n_kv_heads and n_heads",
    ),
]

# The tests that kill them (the two survivors of the first run get tests in test_gqa.py (a module's scale under GQA on every
# backend) and test_huggingface.py (register under another name)).
SUITE = ("tests/test_sdpa_dropin.py", "tests/test_gqa.py", "tests/test_huggingface.py", "tests/test_sdpa_registry.py")
MUTANTS = [dataclasses.replace(m, tests=SUITE) for m in MUTANTS]
