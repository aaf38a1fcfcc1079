"""Blind review of issue 29s mask structures and score modifiers (2026-11-27), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-m29-documents-top-left",
        "transformer/masks.py",
        (
            (
                "slots = self.documents[:, k_len - q_len :] if q_len <= k_len else None",
                "slots = self.documents[:, :q_len] if q_len <= k_len else None",
            ),
        ),
        "With fewer queries than keys (decoding with a cache), to_dense places query i at position i instead of "
        "k_len - q_len + i, so the last query attends the first document's keys instead of its own document's.",
    ),
    Mutant(
        "blind-m29-window-left-off-by-one",
        "transformer/masks.py",
        (("allowed &= offset >= -self.window_left", "allowed &= offset > -self.window_left"),),
        "The sliding window keeps one key too few on the left: window_left=W allows only p(i) - W + 1 .. p(i), so "
        "Mistral's window (causal, window_left=W - 1) sees W - 1 keys and window_left=0 masks a query's own key.",
    ),
    Mutant(
        "blind-m29-cu-seqlens-short-length",
        "transformer/masks.py",
        (("if length is not None and ends[-1] != length:", "if length is not None and ends[-1] > length:"),),
        "AttentionMask.from_cu_seqlens(cu_seqlens, length) accepts cu_seqlens whose total is smaller than the row's "
        "length (the documents then cover only part of the row) instead of raising ValueError.",
    ),
    Mutant(
        "blind-m29-position-ids-not-causal",
        "transformer/masks.py",
        (
            (
                'position_ids: Int[Tensor, "batch seq"],\n        *,\n        causal: bool = True,',
                'position_ids: Int[Tensor, "batch seq"],\n        *,\n        causal: bool = False,',
            ),
        ),
        "AttentionMask.from_position_ids is no longer causal by default: a packed language-model row lets each "
        "token attend the later tokens of its document.",
    ),
    Mutant(
        "blind-m29-is-empty-ignores-window",
        "transformer/masks.py",
        (
            (
                "return not self.causal and not self.tensors() and not self.has_window()",
                "return not self.causal and not self.tensors()",
            ),
        ),
        "A mask given only as a sliding window (AttentionMask(window_left=W)) counts as empty, so the torch backend "
        "runs it with no mask at all and every query attends every key.",
    ),
    Mutant(
        "blind-m29-alibi-slopes-base-n-heads",
        "transformer/backends/score_mods.py",
        (("base = 2.0 ** (-8.0 / power)", "base = 2.0 ** (-8.0 / n_heads)"),),
        "alibi_slopes(n) for n not a power of two (e.g. 12, 6) starts its geometric sequence at 2^(-8/n) instead "
        "of 2^(-8/power below n), so the first slopes differ from BLOOM's build_alibi_tensor.",
    ),
    Mutant(
        "blind-m29-alibi-bias-top-left",
        "transformer/backends/score_mods.py",
        (
            (
                "distance = (torch.arange(k_len - q_len, k_len, device=device)[:, None] - torch.arange(k_len, device=device)).abs()",
                "distance = (torch.arange(q_len, device=device)[:, None] - torch.arange(k_len, device=device)).abs()",
            ),
        ),
        "With q_len < k_len (decoding with a cache) the ALiBi distance is measured from position i instead of "
        "k_len - q_len + i, so a decoded token penalises its nearest keys the most and its first keys the least.",
    ),
    Mutant(
        "blind-m29-softcap-after-mask",
        "transformer/backends/reference.py",
        (
            (
                "    scores = modify_scores(scores, softcap, alibi_slopes)\n"
                "    if mask is not None:\n"
                "        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)\n",
                "    if mask is not None:\n"
                "        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)\n"
                "    scores = modify_scores(scores, softcap, alibi_slopes)\n",
            ),
        ),
        "The reference caps the scores after masking them: masked scores become -softcap, keep softmax weight, and "
        "the probabilities of a masked row no longer sum to 1 (the output shrinks).",
    ),
    Mutant(
        "blind-m29-kernel-masks-drop-window-right",
        "transformer/backends/dispatch.py",
        (('for name in ("documents", "window_left", "window_right"):', 'for name in ("documents", "window_left"):'),),
        "kernel_masks no longer passes window_right to the fused kernel, so a window with a right bound "
        "(e.g. a non-causal local window) lets each query attend every later key on the triton backend.",
    ),
    Mutant(
        "blind-m29-eager-drops-alibi",
        "transformer/backends/dispatch.py",
        (
            (
                '    modifiers = {"softcap": softcap, "alibi_slopes": alibi_slopes, "sinks": sinks}\n    return attention.unchecked(',
                '    modifiers = {"softcap": softcap, "sinks": sinks}\n    return attention.unchecked(',
            ),
        ),
        "run_backend's eager path ignores alibi_slopes: multi-head attention with ALiBi on the eager backend "
        "computes plain attention (no distance penalty), silently.",
    ),
]

# Run against the test files of the code reviewed (the before rate, 8/10: on commit 5ff5998, before the tests the
# review prompted).
_TESTS = (
    "tests/test_mask_documents.py",
    "tests/test_structured_masks.py",
    "tests/test_backends.py",
    "tests/test_attention.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
