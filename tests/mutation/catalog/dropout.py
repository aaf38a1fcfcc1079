"""Mutants of dropout placement: where each dropout sits, with which p, and that it runs in training only.

They run tests/test_dropout_placement.py first (it replays every dropout mask and checks the paper's
formulas; -x stops at its first failure), then the files every mutant runs.
"""

from .base import TEST_FILES, K, M, Mutant  # noqa: F401

_OWN = "tests/test_dropout_placement.py"
DROPOUT_TESTS = (_OWN, *(t for t in TEST_FILES if t != _OWN))  # its own file first: it fails in seconds


def D(id: str, file: str, old: str, new: str, what: str) -> Mutant:
    """A one-edit dropout mutant, run against DROPOUT_TESTS."""
    return Mutant(id, file, ((old, new),), what, DROPOUT_TESTS)


_ATTN_DROPOUT_LINE = "        p_attn = dropout(p_attn)\n"  # the reference's dropout on the probabilities

MUTANTS: list[Mutant] = [
    # --- the sub-layer connection (transformer/layers.py)
    D(
        "dropout-after-residual-add",
        "transformer/layers.py",
        "return residual(x, self.dropout(sublayer(self.norm(x))))",
        "return self.dropout(residual(x, sublayer(self.norm(x))))",
        "pre-norm: dropout on x + Sublayer(LayerNorm(x)) instead of on the sub-layer's output",
    ),
    D(
        "dropout-post-norm-after-add",
        "transformer/layers.py",
        "return self.norm(residual(x, self.dropout(sublayer(x))))",
        "return self.norm(self.dropout(residual(x, sublayer(x))))",
        "post-norm: dropout on the residual sum, inside the LayerNorm",
    ),
    D(
        "dropout-on-residual-input",
        "transformer/layers.py",
        "return residual(x, self.dropout(sublayer(self.norm(x))))",
        "return residual(self.dropout(x), self.dropout(sublayer(self.norm(x))))",
        "pre-norm: the residual input x is dropped too",
    ),
    D(
        "dropout-on-sublayer-input",
        "transformer/layers.py",
        "return residual(x, self.dropout(sublayer(self.norm(x))))",
        "return residual(x, sublayer(self.dropout(self.norm(x))))",
        "pre-norm: dropout on the sub-layer's input instead of its output",
    ),
    D(
        "dropout-sublayer-in-eval",
        "transformer/layers.py",
        "return self.norm(residual(x, self.dropout(sublayer(x))))",
        "return self.norm(residual(x, F.dropout(sublayer(x), self.dropout.p)))",
        "post-norm: F.dropout without training=self.training drops in evaluation too",
    ),
    # --- the feed-forward network (transformer/layers.py)
    D(
        "dropout-ffn-before-activation",
        "transformer/layers.py",
        "self.w_2(self.dropout(act(self.w_1(x))))",
        "self.w_2(act(self.dropout(self.w_1(x))))",
        "FFN: dropout before the activation (same numbers for relu, not for gelu)",
    ),
    D(
        "dropout-ffn-after-w2",
        "transformer/layers.py",
        "self.w_2(self.dropout(act(self.w_1(x))))",
        "self.dropout(self.w_2(act(self.w_1(x))))",
        "FFN: dropout after W_2 instead of before it",
    ),
    D(
        "dropout-ffn-on-input",
        "transformer/layers.py",
        "self.w_2(self.dropout(act(self.w_1(x))))",
        "self.w_2(act(self.w_1(self.dropout(x))))",
        "FFN: dropout on its input instead of the hidden activations",
    ),
    D(
        "dropout-ffn-in-eval",
        "transformer/layers.py",
        "self.w_2(self.dropout(act(self.w_1(x))))",
        "self.w_2(F.dropout(act(self.w_1(x)), self.dropout.p))",
        "FFN: F.dropout without training=self.training drops in evaluation too",
    ),
    # --- the embeddings (transformer/embeddings.py: one forward for sinusoidal and learned positions)
    D(
        "dropout-embedding-before-pe",
        "transformer/embeddings.py",
        "return self.dropout(x + added.to(x.dtype))",
        "return self.dropout(x) + added.to(x.dtype)",
        "dropout on the token embedding only, the positional encoding added after",
    ),
    D(
        "dropout-pe-alone",
        "transformer/embeddings.py",
        "return self.dropout(x + added.to(x.dtype))",
        "return x + self.dropout(added.to(x.dtype))",
        "dropout on the positional encoding only, the token embedding added after",
    ),
    D(
        "dropout-embedding-in-eval",
        "transformer/embeddings.py",
        "return self.dropout(x + added.to(x.dtype))",
        "return nn.functional.dropout(x + added.to(x.dtype), self.dropout.p)",
        "embeddings: F.dropout without training=self.training drops in evaluation too",
    ),
    # --- the attention reference (transformer/backends/__init__.py; eager backend and record_attention)
    Mutant(
        "dropout-attn-on-scores",
        "transformer/backends/reference.py",
        (
            (
                "p_attn = scores.softmax(dim=-1)",
                "p_attn = (scores if dropout is None else dropout(scores)).softmax(dim=-1)",
            ),
            (_ATTN_DROPOUT_LINE, "        pass\n"),
        ),
        "attention dropout on the masked scores, before the softmax",
        DROPOUT_TESTS,
    ),
    Mutant(
        "dropout-attn-before-mask",
        "transformer/backends/reference.py",
        (
            (
                "    if mask is not None:\n        scores = scores.masked_fill",
                "    if dropout is not None:\n        scores = dropout(scores)\n"
                "    if mask is not None:\n        scores = scores.masked_fill",
            ),
            (_ATTN_DROPOUT_LINE, "        pass\n"),
        ),
        "attention dropout on the raw scores, before the mask and the softmax",
        DROPOUT_TESTS,
    ),
    # --- the record_attention path and the dispatch (transformer/attention.py)
    D(
        "dropout-record-path-never-drops",
        "transformer/attention.py",
        (
            "            x, self.attn = attention.unchecked(\n"
            "                q, k, v, dense_heads_mask(mask, q.size(2), k.size(2)), dropout, self.scale, **modifiers\n"
            "            )\n"
        ),
        "            x, self.attn = attention.unchecked(\n"
        "                q, k, v, dense_heads_mask(mask, q.size(2), k.size(2)), None, self.scale, **modifiers\n"
        "            )\n",
        "record_attention=True never drops the attention probabilities",
    ),
    D(
        "dropout-record-path-in-eval",
        "transformer/attention.py",
        "            dropout = nn.Dropout(dropout_p) if dropout_p > 0 else None\n",
        "            dropout = nn.Dropout(self.dropout_p) if self.dropout_p > 0 else None\n",
        "record_attention=True drops in evaluation too (a fresh nn.Dropout is in training mode)",
    ),
    D(
        "dropout-backends-in-eval",
        "transformer/attention.py",
        "        return run_heads(backend, q, k, v, mask, dropout_p, self.scale, **modifiers)\n",
        "        return run_heads(backend, q, k, v, mask, self.dropout_p, self.scale, **modifiers)\n",
        "eager/torch/triton attention get the module's dropout_p in evaluation too",
    ),
    # --- each backend (transformer/backends/__init__.py)
    D(
        "dropout-eager-backend-ignored",
        "transformer/backends/dispatch.py",
        "    return attention.unchecked(q, k, v, dense, dropout, scale, **modifiers)[0]\n",
        "    return attention.unchecked(q, k, v, dense, None, scale, **modifiers)[0]\n",
        "the eager backend never drops the attention probabilities",
    ),
    D(
        "dropout-torch-backend-ignored",
        "transformer/backends/torch_backend.py",
        "    return _TORCH_SDPA(query, key, value, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)\n",
        "    return _TORCH_SDPA(\n"
        "        query, key, value, attn_mask=mask, dropout_p=0.0 if mask is not None else dropout_p, is_causal=is_causal, scale=scale\n"
        "    )\n",
        "the torch backend with a dense mask (or none) never passes dropout_p to F.scaled_dot_product_attention",
    ),
    D(
        "dropout-torch-causal-ignored",
        "transformer/backends/torch_backend.py",
        "    return _TORCH_SDPA(query, key, value, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)\n",
        "    return _TORCH_SDPA(query, key, value, attn_mask=mask, dropout_p=0.0 if is_causal else dropout_p, is_causal=is_causal, scale=scale)\n",
        "the torch backend with a causal-only AttentionMask (is_causal=True) never drops",
    ),
    D(
        "dropout-torch-empty-mask-ignored",
        "transformer/backends/torch_backend.py",
        "    return _TORCH_SDPA(query, key, value, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)\n",
        "    return _TORCH_SDPA(\n"
        "        query, key, value, attn_mask=mask, dropout_p=0.0 if mask is None and not is_causal else dropout_p, is_causal=is_causal, scale=scale\n"
        "    )\n",
        "the torch backend with an empty AttentionMask never drops",
    ),
    D(
        "dropout-triton-backend-ignored",
        "transformer/backends/dispatch.py",
        "            q, k, v, dropout_p=dropout_p, scale=scale, validate=False, **kernel_masks(mask), **modifiers\n",
        "            q, k, v, scale=scale, validate=False, **kernel_masks(mask), **modifiers\n",
        "the triton backend never passes dropout_p to the kernel",
    ),
    D(
        "dropout-triton-fixed-seed",
        "transformer/backends/dispatch.py",
        "            q, k, v, dropout_p=dropout_p, scale=scale, validate=False, **kernel_masks(mask), **modifiers\n",
        "            q, k, v, seed=0, dropout_p=dropout_p, scale=scale, validate=False, **kernel_masks(mask), **modifiers\n",
        "the triton backend drops with one fixed seed: the same mask at every call, whatever torch's seed",
    ),
    # --- which p each site gets (transformer/model.py)
    D(
        "dropout-attention-p-from-dropout",
        "transformer/model.py",
        (
            "    attn = MultiHeadedAttention(\n"
            "        config.n_heads, config.d_model, config.attention_dropout, backend=config.attention_backend\n"
            "    )\n"
        ),
        "    attn = MultiHeadedAttention(config.n_heads, config.d_model, config.dropout, backend=config.attention_backend)\n",
        "build_model gives the attention probabilities config.dropout instead of attention_dropout",
    ),
    D(
        "dropout-ffn-p-from-attention",
        "transformer/model.py",
        "PositionwiseFeedForward(config.d_model, config.d_ff, config.dropout, config.activation)",
        "PositionwiseFeedForward(config.d_model, config.d_ff, config.attention_dropout, config.activation)",
        "build_model gives the FFN attention_dropout",
    ),
    D(
        "dropout-encoder-sublayer-p-from-attention",
        "transformer/model.py",
        "EncoderLayer(config.d_model, c(attn), c(ff), config.dropout, placement, eps)",
        "EncoderLayer(config.d_model, c(attn), c(ff), config.attention_dropout, placement, eps)",
        "build_model gives the encoder's sub-layer connections attention_dropout",
    ),
    D(
        "dropout-decoder-sublayer-p-from-attention",
        "transformer/model.py",
        "c(attn), c(attn), c(ff), config.dropout, placement, eps)",
        "c(attn), c(attn), c(ff), config.attention_dropout, placement, eps)",
        "build_model gives the decoder's sub-layer connections attention_dropout",
    ),
    D(
        "dropout-positional-p-from-attention",
        "transformer/model.py",
        "return kind(config.d_model, config.dropout, config.max_len)",
        "return kind(config.d_model, config.attention_dropout, config.max_len)",
        "build_model gives the embeddings' dropout attention_dropout",
    ),
    D(
        "dropout-make-model-attention-default",
        "transformer/model.py",
        'more.setdefault("attention_dropout", dropout)',
        'more.setdefault("attention_dropout", 0.1)',
        "make_model(dropout=p) leaves the attention dropout at 0.1 instead of p",
    ),
]
