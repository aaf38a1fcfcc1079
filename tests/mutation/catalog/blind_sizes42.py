"""Blind review of size-specific shape bugs in the models' code (2026-12-02), by a reviewer who did not read the
tests: each bug shows only at some sizes (batch 1, a query shorter than its keys, a length at max_len or past the
sliding window, grouped-query heads other than 1 and h) and passes at the usual ones."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-p42-window-top-left",
        "transformer/masks.py",
        (
            (
                "torch.arange(k_len - q_len, k_len, device=device)[:, None]",
                "torch.arange(q_len, device=device)[:, None]",
            ),
        ),
        "AttentionMask.window_dense places query i at position i instead of p(i) = k_len - q_len + i (the class "
        "docstring: the window aligns the queries with the last q_len keys). Identical when q_len == k_len; with "
        "queries shorter than the keys (a cache, or MultiHeadedAttention with q_len < k_len) to_dense's window "
        "hides the wrong keys: query i of a window_left=W-1 mask sees keys i-W+1..i, not its own last W, so the "
        "eager/torch backends differ from the recomputed-from-scratch result and from the kernel's window.",
    ),
    Mutant(
        "blind-p42-index-select-keeps-batch-1",
        "transformer/masks.py",
        (
            (
                "t if t.size(0) == 1 and t.dim() == 3 else t.index_select(0, index.to(t.device))",
                "t if t.size(0) == 1 else t.index_select(0, index.to(t.device))",
            ),
        ),
        "AttentionMask.index_select keeps every part of batch 1 as it is, not only a broadcast dense (#batch) "
        "tensor (its docstring: 'a broadcast dense batch of 1 stays'). key_lengths (batch,), key_mask and documents "
        "(batch, k_len) of a one-sentence source are not repeated when beam search reorders NextTokens to beam "
        "rows, so the cross-attention's check_fits refuses mask.key_lengths f(1) against batch=beam "
        "(TypeCheckError). Batches of 2 or more are reordered correctly.",
    ),
    Mutant(
        "blind-p42-gqa-repeat-tiles",
        "transformer/backends/grouped.py",
        (
            (
                "    return k.repeat_interleave(heads // k.size(1), dim=1), v.repeat_interleave(heads // v.size(1), dim=1)\n",
                "    return k.repeat(1, heads // k.size(1), 1, 1), v.repeat(1, heads // v.size(1), 1, 1)\n",
            ),
        ),
        "repeat_kv_heads tiles the key/value heads (0, 1, 0, 1) instead of repeating each for its query group "
        "(0, 0, 1, 1): query head i reads key/value head i % kv_heads, not i // (heads / kv_heads) as the module "
        "documents. The same at kv_heads == 1 (multi-query) and kv_heads == heads (no repeat); for 1 < kv_heads "
        "< heads the eager reference (and record_attention) disagrees with torch's enable_gqa and the kernel.",
    ),
    Mutant(
        "blind-p42-recorded-mask-square",
        "transformer/attention.py",
        (
            (
                "dense_heads_mask(mask, q.size(2), k.size(2))",
                "dense_heads_mask(mask, k.size(2), k.size(2))",
            ),
        ),
        "With record_attention, AttentionHeads.attend_heads densifies an AttentionMask as (k_len, k_len) instead "
        "of (q_len, k_len). Identical for self-attention without a cache; with queries shorter than the keys (a "
        "causal or windowed AttentionMask over cached keys, or cross-attention with a query-dependent mask) the "
        "dense mask has k_len query rows: the reference's mask contract '*#batch #q_len k_len' fails "
        "(TypeCheckError), or with checks off the probabilities broadcast to k_len rows.",
    ),
    Mutant(
        "blind-p42-cache-one-then-many",
        "transformer/cache.py",
        (("        if new > 1 and self.length > 0:\n", "        if new > 1 and self.length > 1:\n"),),
        "StackCache.self_attention_mask lets several new positions through after exactly one cached position "
        "(documented: after the first call a cache takes one position at a time, ValueError otherwise). With one "
        "cached position and 2+ new ones it returns the top-left causal mask over 1 + new keys, so new position i "
        "sees keys 0..i (not the cached one plus itself and earlier new ones): EncoderDecoder.decode silently "
        "computes other values than decoding from scratch. Two or more cached positions still raise.",
    ),
    Mutant(
        "blind-p42-position-table-max-len",
        "transformer/embeddings.py",
        (
            (
                'validate_length(end, self.max_len, "positional encoding input")',
                'validate_length(end, self.max_len - 1, "positional encoding input")',
            ),
        ),
        "Off by one at max_len: the positional tables (sinusoidal and learned, encoder-decoder and language "
        "model) refuse a sequence (or offset + seq) of exactly max_len ('sequence length 32 exceeds max_len=31'), "
        "although the table has max_len rows and every length 1..max_len is documented as accepted (TransformerLM "
        "itself lets it through). Any length below max_len is unaffected.",
    ),
    Mutant(
        "blind-p42-lm-last-position-squeeze",
        "transformer/lm/model.py",
        (
            (
                "        return decision_log_probs(self.generator, out[:, -1])\n",
                "        return decision_log_probs(self.generator, out[:, -1:].squeeze())\n",
            ),
        ),
        "TransformerLM.next_token_log_probs takes the last position with squeeze(), which at batch 1 also drops "
        "the batch axis: the generator returns (vocab,) and the documented 'batch vocab' result fails "
        "(TypeCheckError: the return value is f32[vocab]); generating from a single prompt breaks. Batches of 2 or "
        "more are unchanged.",
    ),
    Mutant(
        "blind-p42-trim-keeps-first-pads",
        "transformer/lm/positions.py",
        (
            (
                "            self.real_keys = self.real_keys[:, drop:]\n",
                "            self.real_keys = self.real_keys[:, : self.window - 1]\n",
            ),
        ),
        "LMCache.trim keeps the first window - 1 entries of real_keys instead of the last (the keys and values "
        "keep the last window - 1). Only when a padded prompt longer than the sliding window is trimmed: the pads "
        "recorded no longer line up with the held keys, so the next step's key_mask hides real tokens and shows "
        "pads (left padding), and cached generation differs from recomputation. No trim, no difference.",
    ),
    Mutant(
        "blind-p42-per-head-ones-query-length",
        "transformer/lm/attention.py",
        (("        batch, h, k_len, d_k = shared.shape\n", "        batch, h, k_len, d_k = q.shape\n"),),
        "PerHeadValueAttention.attend reads k_len from the queries: the ones column of [X, 1] gets q_len rows. "
        "Identical without a cache (q_len == k_len); with one (a step of one query over the cached keys, the "
        "functional formulation's generation) the value concatenation fails (RuntimeError: sizes of tensors must "
        "match) instead of the documented cached decoding equal to recomputation.",
    ),
    Mutant(
        "blind-p42-learned-rows-ignore-offset",
        "transformer/lm/layers.py",
        (
            (
                "        return self.scale * self.pe[:, offset:end]\n",
                "        return self.scale * self.pe[:, : end - offset]\n",
            ),
        ),
        "ScaledLearnedPositionalEncoding.rows takes the first seq rows instead of rows offset .. end - 1 (its "
        "docstring). Identical at offset 0 (a whole sequence); with a key/value cache the language model with "
        "learned positions adds position 0's row to every new token, so cached decoding of an unpadded prompt "
        "differs from recomputation.",
    ),
]

# Size-specific shape bugs, run against the proofs of the package's own models (tests/test_prove.py, the suite that
# proves every public model over its ranges) and, separately, against the rest of the suite without them: how many
# the proofs catch that the other tests miss (tests/mutation/blind_runs/blind_sizes42_*.json, docs/guarantees.md)
_TESTS = ("tests/test_prove.py", "tests/test_export.py")
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
