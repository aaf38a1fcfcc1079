"""Blind review of the model's building blocks and configs (2026-11-24), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-model-post-norm-no-dropout",
        "transformer/layers.py",
        (
            (
                "        return self.norm(residual(x, self.dropout(sublayer(x))))",
                "        return self.norm(residual(x, sublayer(x)))",
            ),
        ),
        "SublayerConnection with norm_placement='post' no longer applies residual dropout: the paper's "
        "LayerNorm(x + Dropout(Sublayer(x))) becomes LayerNorm(x + Sublayer(x)); a post-norm model in training "
        "mode is deterministic and unregularised (pre-norm still drops out)",
    ),
    Mutant(
        "blind-model-learned-pe-ignores-offset",
        "transformer/embeddings.py",
        (
            (
                "x = module(x, offset=offset, positions=positions) if isinstance(module, _PositionTable) else module(x)",
                "x = module(x, offset=offset, positions=positions) if isinstance(module, PositionalEncoding) else module(x)",
            ),
        ),
        "EmbeddingStack hands the position offset only to sinusoidal encodings: learned positions (and the LM's "
        "scaled learned positions) always add row 0.. during cached decoding, so each new token gets position 0's "
        "embedding and cached decoding differs from recomputing the prefix",
    ),
    Mutant(
        "blind-model-encoder-final-norm-eps",
        "transformer/encoder.py",
        (("        self.norm = LayerNorm(layer.size, layer.eps)\n", "        self.norm = LayerNorm(layer.size)\n"),),
        "the encoder's final LayerNorm ignores TransformerConfig.layer_norm_eps (always 1e-6), while every "
        "sub-layer norm and the decoder's final norm honour it: encoder outputs change whenever a non-default eps "
        "is configured (e.g. 1e-5 to match torch.nn.Transformer)",
    ),
    Mutant(
        "blind-model-decoder-cache-bound",
        "transformer/cache.py",
        (
            (
                "        if new > 1 and self.length > 0:\n",
                "        if new > 1 and self.length > 1:\n",
            ),
        ),
        "Decoder accepts several new positions after exactly one cached position instead of raising ValueError; "
        "it then attends them with a causal mask that does not line up with the cache and silently returns "
        "wrong hidden states",
    ),
    Mutant(
        "blind-model-make-model-attn-dropout",
        "transformer/model.py",
        (('    more.setdefault("attention_dropout", dropout)\n', ""),),
        "make_model(..., dropout=p) no longer passes p on as attention_dropout: the attention probabilities keep "
        "the config default 0.1 (make_model(..., dropout=0.0) still drops out attention weights in training)",
    ),
    Mutant(
        "blind-model-lm-init-fan-out",
        "transformer/lm/blocks.py",
        (
            (
                "                bound = 1.0 / math.sqrt(module.in_features)",
                "                bound = 1.0 / math.sqrt(module.out_features)",
            ),
        ),
        "init='functional' draws Linear weights from U(+-1/sqrt(fan_out)) instead of U(+-1/sqrt(fan_in)): the FFN's "
        "first layer (d_model -> d_ff) is initialised too small and its second (d_ff -> d_model) and the generator "
        "(d_model -> vocab) at the wrong scale",
    ),
    Mutant(
        "blind-model-lm-ffn-norm-kind",
        "transformer/lm/layers.py",
        (
            (
                "        self.sublayer = clones(SublayerConnection(size, dropout, norm_placement, eps, norm=before), 2)\n",
                "        self.sublayer = nn.ModuleList([SublayerConnection(size, dropout, norm_placement, eps, norm=before), SublayerConnection(size, dropout, norm_placement, eps) if pre_norm else SublayerConnection(size, dropout, norm_placement, eps, norm=before)])\n",
            ),
        ),
        "DecoderOnlyLayer applies norm='std' (the functional transformer's standardize) only in the attention "
        "sub-layer: the feed-forward sub-layer keeps LayerNorm, so LMConfig.functional no longer reproduces the "
        "functional transformer",
    ),
    Mutant(
        "blind-model-perhead-bias-ones",
        "transformer/lm/attention.py",
        (
            (
                '        return out + torch.einsum("bis,ie->bse", u[..., self.d_model], self.value_bias)',
                "        return out + self.value_bias.sum(0)",
            ),
        ),
        "PerHeadValueAttention adds every head's value bias b_i as if each attention row summed to 1, instead of "
        "A_i 1: fully padded query rows output sum_i b_i instead of zeros, and under attention dropout the bias is "
        "not scaled by the kept mass",
    ),
    Mutant(
        "blind-model-config-pad-bound-max",
        "transformer/config.py",
        (
            (
                "            smallest = min(self.src_vocab, self.tgt_vocab)\n",
                "            smallest = max(self.src_vocab, self.tgt_vocab)\n",
            ),
        ),
        "TransformerConfig accepts a pad_id that is valid only in the larger vocabulary (e.g. src_vocab=5, "
        "tgt_vocab=10, pad_id=7) instead of raising ValueError: padding masks then refer to a token the smaller "
        "vocabulary does not have, and the error message quotes the wrong bound",
    ),
    Mutant(
        "blind-model-functional-lambda-default-dmodel",
        "transformer/lm/config.py",
        (("            embedding_scale=d_model**-0.5,\n", "            embedding_scale=cls.d_model**-0.5,\n"),),
        "LMConfig.functional(vocab, d_model=D) sets lambda_e from the default d_model 512 instead of D "
        "(d_model=128 gives 512^-0.5 instead of 128^-0.5): token embeddings are scaled wrongly for every "
        "non-default width",
    ),
]

# The tests that kill them (the survivor of the first run, a fan_out bound in the functional initialisation, dies in test_lm.py's
# fan-in test).
SUITE = (
    "tests/test_lm.py",
    "tests/test_modules.py",
    "tests/test_config.py",
    "tests/test_config_plumbing.py",
    "tests/test_dropout_placement.py",
    "tests/test_dropout_in_evaluation.py",
    "tests/properties/test_concept_properties.py",
)
MUTANTS = [dataclasses.replace(m, tests=SUITE) for m in MUTANTS]
