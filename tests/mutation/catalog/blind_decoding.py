"""Blind review of decoding and generation (2026-11-24), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-decoding-end-token-padded-over",
        "transformer/decoding/greedy.py",
        (
            (
                "            ys[:, -1] = torch.where(finished, torch.full_like(ys[:, -1], pad_symbol), ys[:, -1])\n",
                "            ys[:, -1] = torch.where(finished | (ys[:, -1] == end_symbol), torch.full_like(ys[:, -1], pad_symbol), ys[:, -1])\n",
            ),
        ),
        "greedy/sample decoding (and LM generate) overwrite the end symbol itself with pad_symbol: a row that "
        "ends shows no end token, only padding (visible whenever pad_symbol != end_symbol)",
    ),
    Mutant(
        "blind-decoding-top-p-gather",
        "transformer/decoding/sampling.py",
        (
            (
                "        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)\n",
                "        drop = drop_sorted.gather(-1, order)\n",
            ),
        ),
        "top-p sampling maps the sorted drop decisions back with the wrong permutation (gather instead of "
        "scatter): the nucleus keeps the wrong tokens whenever the sort order is not its own inverse",
    ),
    Mutant(
        "blind-decoding-seed-none-unreproducible",
        "transformer/decoding/sampling.py",
        (("        generator.manual_seed(int(torch.randint(0, 2**62, (1,))))\n", "        generator.seed()\n"),),
        "seed=None no longer draws its seed from torch's default generator: torch.manual_seed(s) before "
        "sample_decode/generate(seed=None) no longer reproduces the output",
    ),
    Mutant(
        "blind-decoding-beam-finished-length",
        "transformer/decoding/beam.py",
        (
            (
                "                finished.append((s / length_penalty_factor(len(tokens) - 1 - prefix, length_penalty), tokens))\n",
                "                finished.append((s / length_penalty_factor(len(tokens) - prefix, length_penalty), tokens))\n",
            ),
        ),
        "beam search's GNMT penalty counts the start symbol (or last prompt token) in |Y| for finished "
        "hypotheses: scores with length_penalty > 0 are wrong, and finished and live hypotheses are "
        "normalised differently",
    ),
    Mutant(
        "blind-decoding-beam-dense-mask-row0",
        "transformer/decoding/beam.py",
        (
            (
                (
                    "                else (\n"
                    "                    src_mask.index_select(row) if isinstance(src_mask, AttentionMask) else src_mask.index_select(0, row)\n"
                    "                )\n"
                ),
                "                else (src_mask.index_select(row) if isinstance(src_mask, AttentionMask) else src_mask[:1])\n",
            ),
        ),
        "beam_search with a dense (batch, 1, src_len) source mask searches every source under the first "
        "source's padding mask: rows padded differently from row 0 attend to padding or miss real tokens "
        "(the AttentionMask path stays correct)",
    ),
    Mutant(
        "blind-decoding-kv-reorder-skipped-same-size",
        "transformer/cache.py",
        (
            (
                (
                    '        """Keep batch rows ``index`` (beam search follows its surviving hypotheses; rows may repeat)."""\n'
                    "        if self._keys is not None:\n"
                    "            self._keys = self._keys.index_select(0, index.to(self._keys.device))\n"
                ),
                (
                    '        """Keep batch rows ``index`` (beam search follows its surviving hypotheses; rows may repeat)."""\n'
                    "        if self._keys is not None and index.numel() != self._keys.size(0):\n"
                    "            self._keys = self._keys.index_select(0, index.to(self._keys.device))\n"
                ),
            ),
        ),
        "KVCache.reorder only acts when the number of rows changes (taken for identity otherwise): after the "
        "first beam step a permutation or repetition of hypotheses leaves the cache's rows behind, so cached "
        "beam search follows the wrong prefixes and disagrees with the uncached search",
    ),
    Mutant(
        "blind-decoding-uncached-no-causal-mask",
        "transformer/model.py",
        (
            (
                "out = self.decode(memory, src_mask, ys, subsequent_mask(ys.size(1), device=ys.device))",
                "out = self.decode(memory, src_mask, ys, None)",
            ),
        ),
        "EncoderDecoder.next_token_log_probs without a cache decodes the prefix with no causal mask (only "
        "the last position is read, but with 2+ layers earlier positions saw later tokens): use_cache=False "
        "decoding differs from the cached one",
    ),
    Mutant(
        "blind-decoding-lm-prompt-not-causal",
        "transformer/cache.py",
        (("        return AttentionMask(causal=True) if new > 1 else None\n", "        return None\n"),),
        "a multi-token prompt fed into an empty LMCache is attended bidirectionally: cached generation "
        "from a prompt of 2+ tokens differs from the uncached (and from the full model's argmax)",
    ),
    Mutant(
        "blind-decoding-stop-in-prompt",
        "transformer/lm/generation.py",
        (
            (
                "            if ys.size(1) > self.prompt_len and ys.size(1) >= n:  # ends with a generated token\n",
                "            if ys.size(1) >= self.prompt_len and ys.size(1) >= n:  # ends with a generated token\n",
            ),
        ),
        "generate with stop_sequences stops a row immediately when the prompt itself ends with a stop "
        "sequence (documented: a stop sequence must end with a generated token)",
    ),
    Mutant(
        "blind-decoding-lm-max-len-off-by-one",
        "transformer/decoding/requests.py",
        (("    if total > config.max_len:\n", "    if total >= config.max_len:\n"),),
        "generate/beam_generate reject a request whose prompt plus max_new_tokens exactly fills the model's "
        "max_len (and the message then suggests a count that is itself rejected)",
    ),
]

# The tests that kill them (the two survivors of the first run: test_sampling.py's top-p boundary test, written for
# issue 20, and its seed=None test, written for this review).
SUITE = ("tests/test_sampling.py", "tests/test_decoding.py", "tests/test_lm_generate.py", "tests/test_cache.py")
MUTANTS = [dataclasses.replace(m, tests=SUITE) for m in MUTANTS]
