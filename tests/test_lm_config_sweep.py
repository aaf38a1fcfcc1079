"""Every option of LMConfig changes the model exactly as documented (LMConfig's docstring, docs/lm.md,
docs/lm_blocks.md): each field set away from its default, the model's logits equal an independent reference written
from the docs' formulas (tests/lm_reference.py) on data built so the option matters (a sequence longer than the
window, random non-zero weights and biases, large eps, scales far from 1). The fields with no effect on the function
(dropout, init, pad_id, max_len, vocab, attention_backend) are checked by value where they act: in training mode, at
initialisation, in generation, at the length limit."""

from __future__ import annotations

import math
from dataclasses import fields

import pytest
import torch
from lm_reference import Reference
from torch import nn

import transformer as T
from transformer.lm import LMConfig, build_lm

BASE = dict(vocab=13, n_layers=2, d_model=16, d_ff=20, n_heads=4, dropout=0.0, attention_dropout=0.0, max_len=24)
ROTARY = dict(positional_encoding="rotary")
#: One or more cases per field, each away from the default (the fields of LMConfig, in order).
CASES = {
    "defaults": {},
    "n_layers": dict(n_layers=3),
    "d_model": dict(d_model=24),
    "d_ff": dict(d_ff=7),
    "n_heads": dict(n_heads=2),
    "n_kv_heads=2": dict(n_kv_heads=2),
    "n_kv_heads=1": dict(n_kv_heads=1),
    "norm=std": dict(norm="std"),
    "norm=rms": dict(norm="rms"),
    "norm_placement": dict(norm_placement="post"),
    "layer_norm_eps": dict(layer_norm_eps=0.7),
    "layer_norm_eps+std": dict(layer_norm_eps=0.7, norm="std"),
    "positional_encoding=learned": dict(positional_encoding="learned"),
    "positional_encoding=rotary": ROTARY,
    "positional_encoding=none": dict(positional_encoding="none"),
    "embedding_scale": dict(embedding_scale=0.3),
    "positional_scale+sinusoidal": dict(positional_scale=2.5),
    "positional_scale+learned": dict(positional_scale=2.5, positional_encoding="learned"),
    "attention_scale": dict(attention_scale=0.9),
    "value_projection": dict(value_projection="per_head"),
    "value_projection+attention_scale": dict(value_projection="per_head", attention_scale=0.9),
    "activation=gelu": dict(activation="gelu"),
    "activation=gelu_tanh": dict(activation="gelu_tanh"),
    "activation=silu": dict(activation="silu"),
    "tie_weights": dict(tie_weights=True),
    "rope_theta": dict(ROTARY, rope_theta=50.0),
    "rope_fraction": dict(ROTARY, rope_fraction=0.5),
    "rope_scaling=linear": dict(ROTARY, rope_scaling="linear", rope_factor=3.0),
    "rope_scaling=llama3": dict(
        ROTARY,
        rope_theta=500.0,
        rope_scaling="llama3",
        rope_factor=8.0,
        rope_original_max_len=8,
        rope_low_freq_factor=1.5,
        rope_high_freq_factor=3.0,
    ),
    "rope_scaling=yarn": dict(
        ROTARY, rope_scaling="yarn", rope_factor=4.0, rope_original_max_len=8, rope_beta_fast=16.0, rope_beta_slow=2.0
    ),
    "rope_attention_factor": dict(
        ROTARY, rope_scaling="yarn", rope_factor=4.0, rope_original_max_len=8, rope_attention_factor=1.3
    ),
    "head_dim": dict(head_dim=6),
    "head_dim+rotary+gqa": dict(ROTARY, head_dim=6, n_kv_heads=2),
    "ffn_gated": dict(ffn_gated=True, activation="silu"),
    "qkv_bias": dict(qkv_bias=False),
    "out_bias": dict(out_bias=False),
    "ffn_bias": dict(ffn_bias=False, ffn_gated=True),
    "qk_norm": dict(ROTARY, qk_norm=True),
    "lm_head_bias": dict(lm_head_bias=False, tie_weights=True),
    "sliding_window": dict(sliding_window=3),
    "sliding_window=1": dict(sliding_window=1, positional_encoding="learned"),
    "norm_unit_offset": dict(ROTARY, norm="rms", norm_unit_offset=True, qk_norm=True),
    "post_sublayer_norm": dict(post_sublayer_norm=True),
    "post_sublayer_norm+rms+offset": dict(post_sublayer_norm=True, norm="rms", norm_unit_offset=True),
    "attention_softcap": dict(attention_softcap=0.8),
    "logit_softcap": dict(logit_softcap=1.5),
    "window_layers": dict(sliding_window=3, window_layers=(False, True)),
    "rope_local_theta": dict(
        ROTARY,
        sliding_window=3,
        window_layers=(True, False),
        rope_local_theta=50.0,
        rope_scaling="linear",
        rope_factor=2.0,
    ),
    "parallel_residual": dict(parallel_residual=True),
    "parallel_residual+rotary": dict(ROTARY, parallel_residual=True, rope_fraction=0.5),
    "rope_layers": dict(ROTARY, rope_layers=(False, True)),
    "residual_scale": dict(residual_scale=0.4),
    "residual_scale+post": dict(residual_scale=0.4, norm_placement="post"),
    "logit_divisor": dict(logit_divisor=2.5),
    "pre_sublayer_norm": dict(norm="rms", pre_sublayer_norm=False, post_sublayer_norm=True),
    "qk_norm_scope": dict(ROTARY, n_kv_heads=2, qk_norm=True, qk_norm_scope="projection"),
    "pre_sublayer_norm+qk_norm_scope": dict(
        ROTARY, norm="rms", qk_norm=True, qk_norm_scope="projection", pre_sublayer_norm=False, post_sublayer_norm=True
    ),
    "functional": "functional",
}
#: Fields whose effect is not the function of an eval-mode model: checked by the tests named beside them.
ELSEWHERE = {
    "vocab": "test_vocab_and_max_len_bound_the_inputs",
    "max_len": "test_vocab_and_max_len_bound_the_inputs",
    "dropout": "test_each_dropout_field_acts_exactly_where_documented",
    "attention_dropout": "test_each_dropout_field_acts_exactly_where_documented",
    "ffn_hidden_dropout": "test_each_dropout_field_acts_exactly_where_documented",
    "positional_init": "test_init_initialises_exactly_the_documented_parameters",
    "init": "test_init_initialises_exactly_the_documented_parameters",
    "pad_id": "tests/test_lm_generate_options.py",
    "attention_backend": "test_the_attention_backend_field_reaches_every_attention",
    # a no-op in float64 (sqrt(d_model) rounded to float64): checked in bfloat16 against Gemma's embedding
    "embedding_scale_rounded": "tests/test_pretrained_gemma.py::test_the_norms_and_the_embedding_scale_are_gemmas",
    # the mixture-of-experts block against its definition token by token, and against transformers' checkpoints
    "n_experts": "tests/test_moe.py::test_the_block_is_the_loop_over_tokens",
    "experts_per_token": "tests/test_moe.py::test_the_block_is_the_loop_over_tokens",
    "expert_d_ff": "tests/test_moe.py::test_dense_layers_keep_the_dense_network_and_the_config_survives_json",
    "router_score": "tests/test_moe.py::test_the_block_is_the_loop_over_tokens",
    "router_norm_topk": "tests/test_moe.py::test_the_block_is_the_loop_over_tokens",
    "router_bias": "tests/test_moe.py::test_the_block_is_the_loop_over_tokens",
    "shared_expert_d_ff": "tests/test_moe.py::test_the_block_is_the_loop_over_tokens",
    "dense_layers": "tests/test_pretrained_moe.py::test_logits_equal_transformers",
    "router_aux_loss_coef": "tests/test_moe_training.py::test_the_training_loss_and_its_gradients_are_transformers",
    # a no-op in float32 and float64 (float32 weights rounded to float32): Qwen-MoE's rounding in bfloat16
    "router_weights_rounded": (
        "tests/test_pretrained_low_precision.py::test_the_qwen_routers_round_their_weights_as_transformers"
    ),
    # gpt-oss's block: its formulas row by row, and transformers' gpt-oss checkpoints
    "attention_sinks": "tests/test_moe_gpt_oss_blocks.py::test_the_attention_modules_learned_sinks_reach_every_backend",
    "expert_swiglu_limit": "tests/test_moe_gpt_oss_blocks.py::test_clamped_experts_are_their_formula_row_by_row",
    "expert_swiglu_alpha": "tests/test_moe_gpt_oss_blocks.py::test_clamped_experts_are_their_formula_row_by_row",
    "router_softmax_topk": "tests/test_moe_gpt_oss_blocks.py::test_the_router_takes_the_softmax_of_its_top_k_logits",
    "rope_yarn_truncate": "tests/test_pretrained_gpt_oss.py::test_logits_equal_transformers",
    # a no-op in float64 (the gain multiplied before or after a cast to float64): OLMo 2's rounding in bfloat16
    "float32_gain_and_rotation": "tests/test_pretrained_olmo2.py::test_each_block_of_olmo2_matters_here",
}


def _config(case) -> LMConfig:
    if case == "functional":
        return LMConfig.functional(**{k: v for k, v in BASE.items() if "dropout" not in k})
    return LMConfig(**{**BASE, **case})


def _model(cfg: LMConfig, seed: int = 0) -> nn.Module:
    """The config's model in float64, every parameter redrawn N(0, 0.5^2) (so zero-initialised biases, positions
    and gains all matter), eval mode."""
    torch.manual_seed(seed)
    model = build_lm(cfg).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model


def test_every_field_of_the_config_is_swept():
    swept = set()
    for case in CASES.values():
        swept |= set(case) if isinstance(case, dict) else set()
    assert {f.name for f in fields(LMConfig)} == swept | set(ELSEWHERE)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("backend", ["eager", "torch"])
def test_each_option_computes_its_documented_formula(name, backend):
    cfg = _config(CASES[name])
    model = _model(cfg)
    tokens = torch.randint(0, cfg.vocab, (2, 9), generator=torch.Generator().manual_seed(1))
    with T.use_backend(backend):
        got = model.logits(tokens)
    expected = Reference(model, cfg).logits(tokens)
    tolerance = 1e-10 if cfg.positional_encoding in ("learned", "none") else 1e-5  # tables and angles: float32
    torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("name", list(CASES))
def test_each_option_gives_the_same_logits_one_position_at_a_time(name):
    """With the key/value cache (a prompt of 4, then one position at a time past the window) every option gives the
    full forward's logits: each option acts on the cached path as on the full one."""
    cfg = _config(CASES[name])
    model = _model(cfg)
    tokens = torch.randint(0, cfg.vocab, (2, 9), generator=torch.Generator().manual_seed(7))
    cache = model.new_cache()
    steps = [model.logits(tokens[:, :4], cache=cache)]
    steps += [model.logits(tokens[:, t : t + 1], cache=cache) for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), model.logits(tokens), rtol=1e-10, atol=1e-10)


def test_the_recorded_attention_is_the_one_the_output_used_with_the_temperature():
    """``record_attention=True`` runs the eager reference, scaled by tau (``attention_scale``) exactly as without
    recording: the same output, and recorded weights equal softmax(tau Q K^T + causal) computed here."""
    for value_projection in ("output", "per_head"):
        cfg = _config(dict(attention_scale=2.3, value_projection=value_projection, n_layers=1))
        attn = _model(cfg).layers[0].self_attn
        x = torch.randn(2, 7, cfg.d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
        mask = T.masks.AttentionMask(causal=True)
        with T.use_backend("torch"):
            plain = attn(x, mask)
            attn.record_attention = True
            recorded = attn(x, mask)
        torch.testing.assert_close(recorded, plain, rtol=1e-12, atol=1e-12)
        q = (x @ attn.q_proj.weight.T + attn.q_proj.bias).view(2, 7, 4, 4).transpose(1, 2)
        k = (x @ attn.k_proj.weight.T + attn.k_proj.bias).view(2, 7, 4, 4).transpose(1, 2)
        causal = torch.ones(7, 7, dtype=torch.bool).tril()
        weights = (2.3 * q @ k.transpose(-1, -2)).masked_fill(~causal, float("-inf")).softmax(-1)
        torch.testing.assert_close(attn.attn.expand_as(weights), weights, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", ["eager", "torch"])
def test_recording_attention_changes_nothing_in_the_model(backend):
    """The whole model with every attention recording equals the model without, and each layer's recorded weights
    are softmax(tau Q K^T) of that layer's input (tau far from 1/sqrt(d_k))."""
    cfg = _config(dict(attention_scale=1.7, sliding_window=4, positional_encoding="learned"))
    model = _model(cfg)
    tokens = torch.randint(0, cfg.vocab, (2, 9), generator=torch.Generator().manual_seed(3))
    with T.use_backend(backend):
        plain = model.logits(tokens)
        for layer in model.layers:
            layer.self_attn.record_attention = True
        recorded = model.logits(tokens)
    torch.testing.assert_close(recorded, plain, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(recorded, Reference(model, cfg).logits(tokens), rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------- the fields that act outside eval mode
@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rotary", "none"])
@pytest.mark.parametrize("ffn_hidden_dropout", [True, False])
@pytest.mark.parametrize("form", [dict(), dict(value_projection="per_head"), dict(ffn_gated=True)])
def test_each_dropout_field_acts_exactly_where_documented(positional, ffn_hidden_dropout, form):
    """``dropout``: P_drop on the embeddings (token plus position, whatever the positional scheme), on each
    sub-layer's output and, with ``ffn_hidden_dropout``, on the feed-forward network's hidden activations;
    ``attention_dropout``: on the attention probabilities. Checked on the modules and by value: the embeddings in
    training mode are the eval ones with entries dropped and the rest scaled by 1 / (1 - p), and the recorded
    attention probabilities are the eval ones dropped and scaled the same way."""
    cfg = LMConfig(
        **{**BASE, "dropout": 0.3, "attention_dropout": 0.4},
        positional_encoding=positional,
        ffn_hidden_dropout=ffn_hidden_dropout,
        **form,
    )
    model = _model(cfg)
    drops = [m.p for m in model.modules() if isinstance(m, nn.Dropout) and m.p > 0]
    expected = 1 + cfg.n_layers * (2 + ffn_hidden_dropout)  # embeddings, two sub-layers, the hidden activations
    assert drops == [0.3] * expected
    attentions = [layer.self_attn for layer in model.layers]
    assert [a.dropout_p for a in attentions] == [0.4] * cfg.n_layers
    tokens = torch.randint(0, cfg.vocab, (2, 9), generator=torch.Generator().manual_seed(4))
    for module, keep in ((model.embed, 0.7), (attentions[0], 0.6)):
        x = model.embed(tokens) if module is attentions[0] else tokens
        if module is attentions[0]:
            module.record_attention = True
            mask = T.masks.AttentionMask(causal=True)
            module.eval()
            module(x, mask)
            clean = module.attn.detach().clone()
            module.train()
            module(x, mask)
            dropped = module.attn.detach()
        else:
            module.eval()
            clean = module(x)
            module.train()
            dropped = module(x)
        kept = dropped != 0
        torch.testing.assert_close(dropped[kept], clean[kept] / keep, rtol=1e-12, atol=1e-12)
        live = clean != 0
        fraction = float((~kept & live).sum() / live.sum())
        assert abs(fraction - (1 - keep)) < 0.15, fraction


def test_no_dropout_in_training_mode_is_the_eval_model():
    cfg = _config(dict(positional_encoding="rotary", ffn_gated=True))
    model = _model(cfg).train()
    tokens = torch.randint(0, cfg.vocab, (2, 9), generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(model.logits(tokens), Reference(model, cfg).logits(tokens), rtol=1e-5, atol=1e-5)


def _uniform(t: torch.Tensor, bound: float, name: str) -> None:
    """``t`` looks drawn from U(-bound, bound): within the bound, reaching near it, the uniform's std."""
    largest, std = float(t.abs().max()), float(t.std())
    assert 0.8 * bound < largest <= bound, f"{name}: max |w| {largest} for U(+-{bound})"
    assert abs(std - bound / math.sqrt(3)) < 0.15 * bound / math.sqrt(3), f"{name}: std {std} for U(+-{bound})"


def _normal(t: torch.Tensor, std: float, name: str) -> None:
    got = float(t.std())
    assert abs(got - std) < 0.15 * std and float(t.abs().max()) > 2 * std, f"{name}: std {got} for N(0, {std}^2)"


@pytest.mark.parametrize("init", ["xavier", "functional"])
@pytest.mark.parametrize("positional_init", ["normal", "zeros"])
@pytest.mark.parametrize("value_projection", ["output", "per_head"])
@pytest.mark.parametrize("tie_weights", [False, True])
@pytest.mark.parametrize("blocks", [{}, dict(ffn_gated=True, qk_norm=True, norm="rms")], ids=["paper", "blocks"])
def test_init_initialises_exactly_the_documented_parameters(
    init, positional_init, value_projection, tie_weights, blocks
):
    """``init="xavier"``: Glorot-uniform matrices, token embeddings included (the Annotated Transformer's
    ``xavier_uniform_`` on every matrix, as ``build_model``), each head's value map on its own; ``"functional"``:
    N(0, 1) token embeddings, U(+-1/sqrt(fan_in)) weights, zero biases. Either way learned positions start as
    ``positional_init`` says (N(0, 0.02^2) or zeros: never touched by ``init``), norms at gain 1 and bias 0, and a
    tied output projection is the token embedding."""
    vocab, d_model, d_ff = 60, 32, 96
    torch.manual_seed(0)
    cfg = LMConfig(
        vocab=vocab, n_layers=1, d_model=d_model, d_ff=d_ff, n_heads=2, max_len=64, positional_encoding="learned",
        init=init, positional_init=positional_init, value_projection=value_projection, tie_weights=tie_weights,
        **blocks,
    )  # fmt: skip
    model = build_lm(cfg)
    seen = set()
    for name, p in model.named_parameters():
        seen.add(name)
        p = p.detach()
        if name == "embed.0.lut.weight":
            if init == "xavier":
                _uniform(p, math.sqrt(6 / (vocab + d_model)), name)
            else:
                _normal(p, 1.0, name)
        elif name == "embed.1.pe":
            if positional_init == "zeros":
                assert torch.count_nonzero(p) == 0
            else:
                _normal(p, 0.02, name)
        elif name.endswith("value_weight"):
            for w in p:
                _uniform(w, math.sqrt(6 / (2 * d_model)) if init == "xavier" else 1 / math.sqrt(d_model), name)
        elif name.endswith("value_bias"):
            assert torch.count_nonzero(p) == 0, name
        elif name.rsplit(".", 2)[-2].endswith("norm"):  # the norms, QK-norm's included
            assert torch.equal(p, torch.ones_like(p) if name.endswith("weight") else torch.zeros_like(p)), name
        elif name.endswith(".weight"):
            fan_out, fan_in = p.shape
            _uniform(p, math.sqrt(6 / (fan_in + fan_out)) if init == "xavier" else 1 / math.sqrt(fan_in), name)
        elif name.endswith(".bias") and init == "functional":
            assert torch.count_nonzero(p) == 0, name
    assert ("generator.proj.weight" in seen) != tie_weights and ("w_3" in str(seen)) == bool(blocks)
    assert (model.generator.proj.weight is model.embed[0].lut.weight) == tie_weights


def test_vocab_and_max_len_bound_the_inputs():
    cfg = _config(dict(positional_encoding="learned", max_len=11))
    model = _model(cfg)
    assert model.logits(torch.zeros(1, 11, dtype=torch.long)).shape == (1, 11, cfg.vocab)
    assert model.embed[1].pe.shape == (1, 11, cfg.d_model)
    with pytest.raises(ValueError, match="11"):
        model(torch.zeros(1, 12, dtype=torch.long))
    with pytest.raises(ValueError, match="13"):
        model(torch.full((1, 3), cfg.vocab, dtype=torch.long))


@pytest.mark.parametrize("backend", ["eager", "torch"])
def test_the_attention_backend_field_reaches_every_attention(backend, monkeypatch):
    """``attention_backend`` is each attention's default backend (a run-time field: the same function)."""
    import transformer.attention as attention_module

    cfg = _config(dict(attention_backend=backend, positional_encoding="learned"))
    model = _model(cfg)
    ran = []
    real = attention_module.run_heads
    monkeypatch.setattr(attention_module, "run_heads", lambda name, *a, **k: ran.append(name) or real(name, *a, **k))
    tokens = torch.randint(0, cfg.vocab, (2, 9), generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(model.logits(tokens), Reference(model, cfg).logits(tokens), rtol=1e-10, atol=1e-10)
    assert ran == [backend] * cfg.n_layers
