"""The one vocabulary of dimension names used in every annotation of the package: the paper's names."""

from __future__ import annotations

#: The one vocabulary of dimension names used in every annotation of the package (the paper's names).
#: ``#name`` in an annotation allows size 1 to broadcast, ``*name`` any number of leading axes, and
#: ``{self.d_model}`` the module's own configured size. ``tests/test_contracts_vocabulary.py`` keeps annotations to
#: this list.
DIMENSIONS: dict[str, str] = {
    "batch": "sentences in the batch (leading axes, possibly several, in '*batch')",
    "seq": "positions of a sequence when source and target do not matter",
    "size": "the side of a square mask (subsequent_mask)",
    "src_len": "source positions (encoder input, memory)",
    "tgt_len": "target positions (decoder input and output)",
    "q_len": "query positions of an attention",
    "k_len": "key (and value) positions of an attention",
    "room": "positions a static key/value cache holds room for (transformer.lm.static_decode)",
    "heads": "attention heads, h",
    "d_model": "model width, 512 in the base model",
    "d_k": "width of one head's queries and keys, d_model / h",
    "d_v": "width of one head's values, d_model / h",
    "d_ff": "inner width of the feed-forward network",
    "vocab": "vocabulary size",
    "beam": "hypotheses kept per sentence in beam search",
    "steps": "decoding steps taken so far",
    "prompt": "positions of a prompt that generation continues (the first columns of the steps)",
    "tokens": "positions of a batch flattened into one axis, as a mixture of experts routes them (batch x seq)",
    "k": "experts chosen per token by a mixture of experts' router (top-k)",
    "pairs": "(token, chosen expert) pairs of a mixture of experts, tokens x k, sorted by expert",
    "n_experts": "experts of a mixture-of-experts layer",
}
