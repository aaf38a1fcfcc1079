"""The GPT-2-like configuration of docs/lm.md computes Hugging Face GPT-2's function.

GPT-2 (built from a config in code, never downloaded) with random weights; the weights are copied into our LM built
from the documented config. With ``activation_function="gelu"`` the documented config (erf GELU), whose output bias
(GPT-2's head has none) is set to zero; with GPT-2's default ``gelu_new`` the same config with
``activation="gelu_tanh", lm_head_bias=False`` (docs/lm_blocks.md): no bias at all. Same log-probabilities in float64.
"""

import pytest
import torch

from transformer.lm import build_lm
from transformer.lm.config import LMConfig

transformers = pytest.importorskip("transformers")


def gpt2_like(vocab=50257, n_layers=12, d_model=768, n_heads=12, max_len=1024, **fields):
    """As written in docs/lm.md, "A GPT-2-like configuration"."""
    return LMConfig(
        vocab=vocab,
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        d_ff=4 * d_model,
        max_len=max_len,
        positional_encoding="learned",
        embedding_scale=1.0,
        activation="gelu",
        layer_norm_eps=1e-5,
        ffn_hidden_dropout=False,
        tie_weights=True,
        **fields,
    )


def _copy_gpt2_into(ours, gpt2):
    t = gpt2.transformer
    with torch.no_grad():
        ours.embed[0].lut.weight.copy_(t.wte.weight)
        ours.embed[1].pe.copy_(t.wpe.weight[None, : ours.embed[1].pe.size(1)])
        for layer, block in zip(ours.layers, t.h, strict=True):
            attn, d = layer.self_attn, block.attn.c_attn.weight.size(0)
            for proj, k in zip((attn.q_proj, attn.k_proj, attn.v_proj), range(3), strict=True):  # Conv1D: (in, out)
                proj.weight.copy_(block.attn.c_attn.weight[:, k * d : (k + 1) * d].T)
                proj.bias.copy_(block.attn.c_attn.bias[k * d : (k + 1) * d])
            attn.out_proj.weight.copy_(block.attn.c_proj.weight.T)
            attn.out_proj.bias.copy_(block.attn.c_proj.bias)
            for norm, theirs in ((layer.sublayer[0].norm, block.ln_1), (layer.sublayer[1].norm, block.ln_2)):
                norm.weight.copy_(theirs.weight)
                norm.bias.copy_(theirs.bias)
            ff = layer.feed_forward
            ff.w_1.weight.copy_(block.mlp.c_fc.weight.T)
            ff.w_1.bias.copy_(block.mlp.c_fc.bias)
            ff.w_2.weight.copy_(block.mlp.c_proj.weight.T)
            ff.w_2.bias.copy_(block.mlp.c_proj.bias)
        ours.norm.weight.copy_(t.ln_f.weight)
        ours.norm.bias.copy_(t.ln_f.bias)
        if ours.generator.proj.bias is not None:
            ours.generator.proj.bias.zero_()


@pytest.mark.parametrize(
    "theirs, fields", [("gelu", {}), ("gelu_new", {"activation": "gelu_tanh", "lm_head_bias": False})]
)
def test_the_gpt2_like_config_computes_gpt2(theirs, fields):
    config = gpt2_like(vocab=97, n_layers=2, d_model=32, n_heads=4, max_len=40).replace(**fields)
    gpt2_config = transformers.GPT2Config(
        vocab_size=97,
        n_positions=40,
        n_embd=32,
        n_layer=2,
        n_head=4,
        activation_function=theirs,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(gpt2_config).double().eval()
    with torch.no_grad():  # GPT-2 starts its biases and norms at 0 and 1: randomise them, so that each one matters
        for name, p in gpt2.named_parameters():
            if p.dim() == 1:
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.3)
    ours = build_lm(config).double().eval()
    _copy_gpt2_into(ours, gpt2)
    assert ours.generator.proj.weight is ours.embed[0].lut.weight  # tied, as GPT-2's head
    tokens = torch.randint(0, 97, (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = gpt2(tokens).logits.log_softmax(-1)
        got = ours.generator(ours(tokens))
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)
    head_bias = 0 if fields else 97  # our bias, unless lm_head_bias=False
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in gpt2.parameters()) + head_bias
