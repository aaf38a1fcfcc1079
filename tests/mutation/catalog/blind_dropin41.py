"""Blind review of the drop-in for F.scaled_dot_product_attention and its "same as torch" promise (2026-12-02), by a
reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-s41-lower-right-diagonal-flipped",
        "transformer/backends/sdpa_rules.py",
        (
            (
                "        return ones.tril(diagonal=k_len - q_len), False\n",
                "        return ones.tril(diagonal=q_len - k_len), False\n",
            ),
        ),
        "causal_lower_right(L, S) with L != S is read with the diagonal's offset negated: query i sees keys "
        "j <= i + L - S instead of docs/integrations.md's j <= i + S - L (torch's bottom-right alignment). With L < S "
        "the queries lose the S - L extra keys torch gives them (the outputs differ from F.scaled_dot_product_attention "
        "on every backend); with L > S rows torch leaves at 0 attend keys.",
    ),
    Mutant(
        "blind-s41-causal-bias-with-causal-wrong-type",
        "transformer/backends/sdpa_rules.py",
        (
            (
                '        raise ValueError("CausalBias should not be used with causal=True")\n',
                '        raise RuntimeError("CausalBias should not be used with causal=True")\n',
            ),
        ),
        "A causal bias object together with is_causal=True raises RuntimeError instead of torch's "
        "'ValueError: CausalBias should not be used with causal=True' (docs/integrations.md, sdpa_rules docstring): "
        "a caller catching torch's ValueError no longer catches the drop-in's refusal.",
    ),
    Mutant(
        "blind-s41-broadcast-left-aligned",
        "transformer/backends/sdpa_rules.py",
        (("        for i, size in enumerate(shape, n - len(shape)):\n", "        for i, size in enumerate(shape):\n"),),
        "broadcast_shapes aligns shapes of different ranks on the left instead of the right (torch.matmul's "
        "rule): query (2, 3, L, E) with key/value (3, S, E) (leading dims (2, 3) vs (3,)) is refused with "
        "RuntimeError 'do not broadcast' although torch computes it, and (1, 3) vs (4,) gives a wrong batch shape "
        "(4, 3) that then refuses masks torch takes.",
    ),
    Mutant(
        "blind-s41-float32-mask-refused-for-half",
        "transformer/backends/sdpa_rules.py",
        (
            (
                "    if mask.dtype not in (torch.bool, torch.float32, query.dtype):\n",
                "    if mask.dtype not in (torch.bool, query.dtype):\n",
            ),
        ),
        "A float32 attn_mask with a float16/bfloat16 (or float64) query is refused with RuntimeError 'Expected "
        "attn_mask dtype to be bool or float or to match query dtype', though the module docstring and "
        "docs/integrations.md promise float masks of float32 or the query's dtype, and torch accepts it.",
    ),
    Mutant(
        "blind-s41-dropout-one-refused",
        "transformer/backends/sdpa_rules.py",
        (("    if not 0.0 <= dropout_p <= 1.0:\n", "    if not 0.0 <= dropout_p < 1.0:\n"),),
        "Off by one at the top of the range: dropout_p=1.0, which torch accepts (every probability dropped: the "
        "output is 0), is refused with 'RuntimeError: dropout probability has to be between 0 and 1, but got 1.0'; "
        "torch's refusals are the only ones the drop-in promises.",
    ),
    Mutant(
        "blind-s41-int-flags-accepted",
        "transformer/backends/sdpa_rules.py",
        (("        if type(flag) is not bool:\n", "        if not isinstance(flag, int):\n"),),
        "is_causal / enable_gqa given as an int pass the drop-in's check (bool is an int), where torch refuses them "
        "with TypeError: enable_gqa=1 now computes on the default CPU path (auto -> torch backend, which passes "
        "enable_gqa=True on) and is_causal=1 computes on backend='eager', instead of torch's 'TypeError: ... argument "
        "'enable_gqa' must be bool, not int' (docs/integrations.md: inputs torch refuses get torch's exception type).",
    ),
    Mutant(
        "blind-s41-eager-causal-bottom-right",
        "transformer/backends/sdpa_reference.py",
        (
            (
                "        attn_mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()\n",
                "        attn_mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril(\n"
                "            diagonal=k.size(-2) - q.size(-2)\n"
                "        )\n",
            ),
        ),
        "The eager backend's is_causal is aligned bottom-right when L != S (query i sees keys j <= i + S - L) "
        "instead of top-left as torch (query i sees keys 0..i; module docstring): backend='eager' with is_causal=True "
        "and L != S differs from F.scaled_dot_product_attention (and from the torch backend); L == S unchanged.",
    ),
    Mutant(
        "blind-s41-eager-gqa-tiled",
        "transformer/backends/sdpa_reference.py",
        (
            (
                "        k = k.repeat_interleave(q.size(-3) // k.size(-3), dim=-3)\n"
                "        v = v.repeat_interleave(q.size(-3) // v.size(-3), dim=-3)\n",
                "        k = torch.cat([k] * (q.size(-3) // k.size(-3)), dim=-3)\n"
                "        v = torch.cat([v] * (q.size(-3) // v.size(-3)), dim=-3)\n",
            ),
        ),
        "The eager backend's enable_gqa tiles the key/value heads (query head h reads kv head h % kv_heads) "
        "instead of torch's repeat_interleave (h // (heads / kv_heads), module docstring): with more than one "
        "key/value head, backend='eager' gives other outputs than torch's function; with one kv head no change.",
    ),
    Mutant(
        "blind-s41-eager-default-scale-value-width",
        "transformer/backends/sdpa_reference.py",
        (
            (
                "        scores = scores * (1.0 / math.sqrt(q.size(-1)) if scale is None else scale)\n",
                "        scores = scores * (1.0 / math.sqrt(v.size(-1)) if scale is None else scale)\n",
            ),
        ),
        "The eager backend's default scale is 1/sqrt(Ev) (the value's width) instead of 1/sqrt(E) (the query's, "
        "module docstring 'scale (default 1/sqrt(E))'): backend='eager' with scale=None and value width != key width "
        "differs from torch's function; equal widths unchanged.",
    ),
    Mutant(
        "blind-s41-torch-1d-mask-as-column",
        "transformer/backends/torch_backend.py",
        (
            (
                "        mask = mask.reshape(1, -1) if mask.dim() == 1 else mask.reshape(1, 1)\n",
                "        mask = mask.reshape(-1, 1) if mask.dim() == 1 else mask.reshape(1, 1)\n",
            ),
        ),
        "A 1-D attn_mask (S,) given to the torch backend (what auto runs on the CPU) is reshaped to a column (S, 1) "
        "instead of a row (1, S): it no longer broadcasts over the keys as torch reads it (one entry per key). "
        "With L == S the mask is applied per query instead of per key (wrong outputs); with L != S torch raises "
        "RuntimeError on a mask torch itself accepts.",
    ),
]

# Run against the drop-in's suites, the differential fuzzer against torch's function included (before/after rates in
# tests/mutation/blind_runs/blind_dropin41_*.json and docs/guarantees.md)
_TESTS = (
    "tests/test_sdpa_differential.py",
    "tests/test_sdpa_torch_parity.py",
    "tests/test_sdpa_dropin.py",
    "tests/test_huggingface_attention_boundaries.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
