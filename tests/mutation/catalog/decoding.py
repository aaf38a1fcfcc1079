"""Mutants of decoding: greedy, the key/value cache, beam search."""

from .base import M, Mutant

MUTANTS = [
    # --- decoding (transformer/decoding/greedy.py, beam.py, requests.py)
    M(
        "greedy-argmin",
        "transformer/decoding/greedy.py",
        "    return encode_and_search(model, src, src_mask, request, lambda log_probs: log_probs.argmax(dim=-1), use_cache)\n",
        "    return encode_and_search(model, src, src_mask, request, lambda log_probs: log_probs.argmin(dim=-1), use_cache)\n",
        "greedy decoding picks the least probable token",
    ),
    M(
        "greedy-step-argmin",
        "transformer/decoding/greedy.py",
        "    next_word = model.next_token_log_probs(memory, src_mask, ys, cache).argmax(dim=-1)\n",
        "    next_word = model.next_token_log_probs(memory, src_mask, ys, cache).argmin(dim=-1)\n",
        "greedy_step appends the least probable token",
    ),
    M(
        "greedy-one-step-too-many",
        "transformer/decoding/greedy.py",
        "    while ys.size(1) < max_len:\n",
        "    while ys.size(1) <= max_len:\n",
        "greedy decoding loop runs one step too many",
    ),
    M(
        "cache-drops-oldest-position",
        "transformer/cache.py",
        "                self._keys, self._values = torch.cat([held, k], dim=2), torch.cat([self.values, v], dim=2)\n",
        "                self._keys, self._values = torch.cat([held[:, :, 1:], k], dim=2), "
        "torch.cat([self.values[:, :, 1:], v], dim=2)\n",
        "the key/value cache loses its oldest position",
    ),
]

# --- beam search and the end of a row: killed by tests/test_decoding.py's reference beam search, GNMT
# score recomputation, exhaustive optimum and padding tests (all through the public API)
MUTANTS += [
    M(
        "beam-lp-counts-start-symbol",
        "transformer/decoding/beam.py",
        "    return ((5.0 + length) / 6.0) ** alpha\n",
        "    return ((5.0 + length + 1) / 6.0) ** alpha\n",
        "GNMT length penalty with |Y| counting the start symbol",
    ),
    M(
        "beam-lp-alpha-multiplies",
        "transformer/decoding/beam.py",
        "    return ((5.0 + length) / 6.0) ** alpha\n",
        "    return ((5.0 + length) / 6.0) * alpha\n",
        "length penalty ((5 + |Y|) / 6) * alpha instead of ** alpha",
    ),
    M(
        "beam-keeps-one-fewer",
        "transformer/decoding/beam.py",
        "            if len(keep_rows) == beam_size:\n",
        "            if len(keep_rows) == max(beam_size - 1, 1):\n",
        "the beam keeps beam_size - 1 live hypotheses",
    ),
    Mutant(
        "beam-keeps-twice-as-many",
        "transformer/decoding/beam.py",
        (
            (
                "        top_scores, top_index = candidates.topk(min(2 * beam_size, candidates.numel()))\n",
                "        top_scores, top_index = candidates.topk(min(4 * beam_size, candidates.numel()))\n",
            ),
            ("            if len(keep_rows) == beam_size:\n", "            if len(keep_rows) == 2 * beam_size:\n"),
        ),
        "the beam keeps 2 * beam_size live hypotheses",
    ),
    M(
        "beam-finished-do-not-compete-at-max-len",
        "transformer/decoding/beam.py",
        ("    else:\n        for row in range(ys.size(0)):\n"),
        ("    else:\n        finished.clear()\n        for row in range(ys.size(0)):\n"),
        "at max_len only the live hypotheses compete; finished ones are forgotten",
    ),
    M(
        "beam-live-unnormalised-at-max-len",
        "transformer/decoding/beam.py",
        (
            "            finished.append(\n"
            "                (float(live[row]) / length_penalty_factor(len(tokens) - 1 - prefix, length_penalty), tokens)\n"
            "            )\n"
        ),
        "            finished.append((float(live[row]), tokens))\n",
        "live hypotheses at max_len compete with their raw log-probability",
    ),
    M(
        "beam-finished-unnormalised",
        "transformer/decoding/beam.py",
        "                finished.append((s / length_penalty_factor(len(tokens) - 1 - prefix, length_penalty), tokens))\n",
        "                finished.append((s, tokens))\n",
        "finished hypotheses are scored without the length penalty",
    ),
    M(
        "beam-never-stops-early",
        "transformer/decoding/beam.py",
        "        if not keep_rows or (len(finished) >= beam_size and ys.size(1) + 1 < max_len):\n",
        "        if not keep_rows:\n",
        "the search goes on after beam_size hypotheses have finished",
    ),
    M(
        "beam-drops-live-at-max-len",
        "transformer/decoding/beam.py",
        "        if not keep_rows or (len(finished) >= beam_size and ys.size(1) + 1 < max_len):\n",
        "        if not keep_rows or len(finished) >= beam_size:\n",
        "live hypotheses reaching max_len on the step beam_size finish are dropped (the bug a review found)",
    ),
    M(
        "beam-forgets-prefix-scores",
        "transformer/decoding/beam.py",
        "        live = torch.tensor(keep_scores, dtype=torch.float32, device=ys.device)\n",
        "        live = torch.zeros(len(keep_scores), dtype=torch.float32, device=ys.device)\n",
        "live hypotheses lose their accumulated log-probability each step",
    ),
    M(
        "beam-no-pad-after-end",
        "transformer/decoding/beam.py",
        "    out = torch.full((batch, max_len), request.pad, dtype=src.dtype, device=src.device)\n",
        "    out = torch.full((batch, max_len), 0, dtype=src.dtype, device=src.device)\n",
        "beam search fills after the end symbol with 0, not pad_symbol",
    ),
    M(
        "beam-end-symbol-ignored",
        "transformer/decoding/beam.py",
        "            if end_symbol is not None and token == end_symbol:\n",
        "            if False:\n",
        "beam search never finishes a hypothesis on the end symbol",
    ),
    M(
        "greedy-finished-rows-not-masked",
        "transformer/decoding/greedy.py",
        "            ys[:, -1] = torch.where(finished, torch.full_like(ys[:, -1], pad_symbol), ys[:, -1])\n",
        "            ys[:, -1] = ys[:, -1]\n",
        "greedy keeps decoding rows that already emitted the end symbol",
    ),
    M(
        "greedy-rest-filled-with-end",
        "transformer/decoding/greedy.py",
        "            rest = torch.full((batch, max_len - ys.size(1)), pad_symbol, dtype=ys.dtype, device=ys.device)\n",
        "            rest = torch.full((batch, max_len - ys.size(1)), end_symbol, dtype=ys.dtype, device=ys.device)\n",
        "once every row has ended, the rest is filled with the end symbol, not pad_symbol",
    ),
    M(
        "greedy-stops-when-any-row-ends",
        "transformer/decoding/greedy.py",
        "        if ends and bool(finished.all()):\n",
        "        if ends and bool(finished.any()):\n",
        "greedy stops (and pads every row) as soon as one row has ended",
    ),
]


# --- issue 20: search options that have no meaning, and generate's sampling options without sample=True
_GEN = "transformer/lm/generation.py"
MUTANTS += [
    Mutant(
        "beam-nan-length-penalty-accepted",
        "transformer/decoding/requests.py",
        (
            (
                "    if not (is_real(length_penalty) and math.isfinite(length_penalty) and length_penalty >= 0):\n",
                "    if not (is_real(length_penalty) and length_penalty >= 0):\n",
            ),
        ),
        "a NaN or infinite length penalty is accepted (NaN scores without a word)",
        ("tests/test_decoding.py",),
    ),
    Mutant(
        "beam-bool-beam-size-accepted",
        "transformer/decoding/requests.py",
        (
            (
                "    if not is_integral(beam_size, at_least=1):\n",
                "    if not isinstance(beam_size, int) or beam_size < 1:\n",
            ),
        ),
        "beam_size=True is taken as 1",
        ("tests/test_decoding.py",),
    ),
    Mutant(
        "generate-sampling-options-ignored",
        _GEN,
        (
            (
                "            if value != default\n        ]\n        if given:\n",
                "            if value != default\n        ]\n        if False:\n",
            ),
        ),
        "generate(temperature=0.7) without sample=True decodes greedily without a word",
        ("tests/test_sampling.py",),
    ),
    Mutant(
        "generate-options-unvalidated-when-greedy",
        _GEN,
        (('    validate_sampling("generate", temperature, top_k, top_p)\n', ""),),
        "a NaN temperature passes when sample=False",
        ("tests/test_sampling.py",),
    ),
    Mutant(
        "beam-generate-penalty-counts-the-prompt",
        "transformer/decoding/beam.py",
        (("    prefix = ys.size(1) - 1  # the start symbol is not a generated token\n", "    prefix = 0\n"),),
        "the GNMT penalty counts the prompt (or the start symbol) as generated tokens",
        ("tests/test_lm_generate.py", "tests/test_decoding.py"),
    ),
]
