"""Mutants of the model: attention, masks, layers, embeddings, the encoder, decoder and generator."""

from .base import M, Mutant

MUTANTS = [
    # --- attention
    M(
        "attn-no-scale",
        "transformer/backends/reference.py",
        "scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))",
        "scores = torch.matmul(query, key.transpose(-2, -1))",
        "drop the 1/sqrt(d_k) scale",
    ),
    M(
        "attn-scale-by-dk",
        "transformer/backends/reference.py",
        "key.transpose(-2, -1)) / math.sqrt(query.size(-1))",
        "key.transpose(-2, -1)) / query.size(-1)",
        "scale by 1/d_k instead of 1/sqrt(d_k)",
    ),
    M(
        "attn-softmax-wrong-axis",
        "transformer/backends/reference.py",
        "    p_attn = scores.softmax(dim=-1)\n",
        "    p_attn = scores.softmax(dim=-2)\n",
        "softmax over the query axis instead of the key axis",
    ),
    Mutant(
        "attn-mask-polarity",
        "transformer/backends/reference.py",
        (
            ("scores = scores.masked_fill(~mask,", "scores = scores.masked_fill(mask,"),
            ("p_attn = p_attn * mask", "p_attn = p_attn * ~mask"),
        ),
        "invert the mask polarity (True = masked)",
    ),
    M(
        "attn-fully-masked-uniform",
        "transformer/backends/reference.py",
        "        p_attn = p_attn * mask\n",
        "        p_attn = p_attn\n",
        "fully masked rows average uniformly (the tutorial's -1e9 behaviour)",
    ),
    M(
        "attn-split-heads-transposed",
        "transformer/attention.py",
        "        return x.unflatten(-1, (self.h, -1)).transpose(1, 2)\n",
        "        return x.unflatten(-1, (-1, self.h)).permute(0, 3, 1, 2)\n",
        "split d_model into heads in the wrong order",
    ),
    M(
        "attn-merge-heads-transposed",
        "transformer/attention.py",
        "        return self.out_proj(x.transpose(1, 2).flatten(2))\n",
        "        return self.out_proj(x.permute(0, 2, 3, 1).flatten(2))\n",
        "concatenate the heads in the wrong order",
    ),
    M(
        "attn-key-from-query",
        "transformer/attention.py",
        "        k, v = self.split_kv_heads(self.k_proj(key)), self.value_heads(value)\n",
        "        k, v = self.split_kv_heads(self.k_proj(query)), self.value_heads(value)\n",
        "project the keys from the query input",
    ),
    M(
        "attn-dropout-in-eval",
        "transformer/attention.py",
        "        dropout_p = self.dropout_p if self.training else 0.0\n",
        "        dropout_p = self.dropout_p\n",
        "attention dropout stays on in eval mode",
    ),
    # --- masks
    M(
        "mask-causal-shift-plus-one",
        "transformer/masks.py",
        "size, size, dtype=torch.bool, device=device).tril()",
        "size, size, dtype=torch.bool, device=device).tril(1)",
        "causal mask shifted by one: a position sees the next token",
    ),
    M(
        "mask-causal-shift-minus-one",
        "transformer/masks.py",
        "size, size, dtype=torch.bool, device=device).tril()",
        "size, size, dtype=torch.bool, device=device).tril(-1)",
        "causal mask shifted by one: a position cannot see itself",
    ),
    M(
        "mask-padding-polarity",
        "transformer/masks.py",
        "(tokens != pad_id).unsqueeze(-2)",
        "(tokens == pad_id).unsqueeze(-2)",
        "padding mask marks the padding as attendable",
    ),
    M(
        "mask-target-pad-rows-kept",
        "transformer/masks.py",
        "causal & real.unsqueeze(-2) & real.unsqueeze(-1)",
        "causal & real.unsqueeze(-2)",
        "padded target query rows still attend",
    ),
    # --- layers
    M(
        "residual-removed",
        "transformer/layers.py",
        "return x + sublayer_out",
        "return sublayer_out",
        "remove the residual connection",
    ),
    # (LayerNorm runs on F.layer_norm: these two replace it by a hand-written formula with the bug; the formula it
    # falls back to for mixed dtypes keeps its own mutant)
    M(
        "layernorm-fallback-unbiased-variance",
        "transformer/layers.py",
        "var = x.var(-1, unbiased=False, keepdim=True)",
        "var = x.var(-1, unbiased=True, keepdim=True)",
        "LayerNorm's written-out formula (mixed dtypes) with the unbiased variance",
    ),
    M(
        "layernorm-unbiased-variance",
        "transformer/layers.py",
        "return F.layer_norm(x, (self.features,), self.weight, self.bias, self.eps)",
        "return self.weight * (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=True, keepdim=True) "
        "+ self.eps) + self.bias",
        "LayerNorm with the unbiased variance (the tutorial's)",
    ),
    M(
        "layernorm-eps-outside-sqrt",
        "transformer/layers.py",
        "return F.layer_norm(x, (self.features,), self.weight, self.bias, self.eps)",
        "return self.weight * (x - x.mean(-1, keepdim=True)) / (x.std(-1, correction=0, keepdim=True) + self.eps) "
        "+ self.bias",
        "LayerNorm eps added to the std instead of the variance",
    ),
    M(
        "post-norm-behaves-as-pre",
        "transformer/layers.py",
        "return self.norm(residual(x, self.dropout(sublayer(x))))",
        "return residual(x, self.dropout(sublayer(self.norm(x))))",
        "post-norm placement silently computes pre-norm",
    ),
    M(
        "ffn-no-activation",
        "transformer/layers.py",
        "self.w_2(self.dropout(act(self.w_1(x))))",
        "self.w_2(self.dropout(self.w_1(x)))",
        "FFN without its ReLU",
    ),
    # --- embeddings
    M(
        "embeddings-unscaled",
        "transformer/embeddings.py",
        "self.lut(x) * math.sqrt(self.d_model)",
        "self.lut(x)",
        "forget to scale embeddings by sqrt(d_model)",
    ),
    Mutant(
        "pe-sin-cos-swapped",
        "transformer/embeddings.py",
        (
            ("pe[:, 0::2] = torch.sin(position * div_term)", "pe[:, 0::2] = torch.cos(position * div_term)"),
            ("pe[:, 1::2] = torch.cos(position * div_term)", "pe[:, 1::2] = torch.sin(position * div_term)"),
        ),
        "swap sin and cos in the positional encoding",
    ),
    M(
        "pe-frequency-sign",
        "transformer/embeddings.py",
        "* -(math.log(10000.0) / d_model))",
        "* (math.log(10000.0) / d_model))",
        "positional frequencies grow instead of shrink",
    ),
    M(
        "pe-not-added",
        "transformer/embeddings.py",
        "return self.dropout(x + added.to(x.dtype))",
        "return self.dropout(x)",
        "sinusoidal positional encoding never added",
    ),
    M(
        "max-len-off-by-one",
        "transformer/contracts/guards.py",
        "    if length > max_len:\n",
        "    if length >= max_len:\n",
        "refuse sequences of exactly max_len",
    ),
    # --- encoder / decoder / model
    M(
        "encoder-ignores-padding-mask",
        "transformer/encoder.py",
        "self.self_attn(x, x, x, mask)",
        "self.self_attn(x, x, x, None)",
        "encoder self-attention ignores the source mask",
    ),
    M(
        "encoder-stack-one-layer",
        "transformer/encoder.py",
        "for layer in self.layers:",
        "for layer in self.layers[:1]:",
        "the encoder stack runs only its first layer",
    ),
    M(
        "decoder-ignores-causal-mask",
        "transformer/decoder.py",
        "self.self_attn(x, x, x, tgt_mask, cache=self_cache)",
        "self.self_attn(x, x, x, None, cache=self_cache)",
        "decoder self-attention sees the future",
    ),
    M(
        "decoder-cross-ignores-src-mask",
        "transformer/decoder.py",
        "self.src_attn(x, m, m, src_mask, cache=src_cache)",
        "self.src_attn(x, m, m, None, cache=src_cache)",
        "cross-attention attends to source padding",
    ),
    M(
        "decoder-no-final-norm",
        "transformer/decoder.py",
        "return self.norm(x)",
        "return x",
        "decoder stack without its final LayerNorm",
    ),
    M(
        "generator-softmax-wrong-axis",
        "transformer/model.py",
        "F.log_softmax(self.proj(x), dim=-1)",
        "F.log_softmax(self.proj(x), dim=0)",
        "generator normalises over the wrong axis",
    ),
]
