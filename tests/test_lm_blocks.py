"""The blocks of today's checkpoints, each against its formula written out here and against transformers' own module
where one exists: RMSNorm, the gated feed-forward network, GELU's tanh approximation and SiLU, QK-norm, head_dim,
the bias switches, the output head's bias, and the per-head value form's refusals (docs/lm_blocks.md)."""

from __future__ import annotations

import math

import pytest
import torch
from transformers.activations import ACT2FN

import transformer as T
from transformer.layers import ACTIVATIONS, PositionwiseFeedForward
from transformer.lm import LMConfig, build_lm
from transformer.lm.attention import CausalSelfAttention, PerHeadValueAttention
from transformer.lm.gated_feed_forward import GatedFeedForward
from transformer.lm.rms_norm import RMSNorm
from transformer.lm.rotary import RotaryEmbedding

NO_DROPOUT = dict(dropout=0.0, attention_dropout=0.0)


# ---------------------------------------------------------------- RMSNorm
def test_rms_norm_is_its_formula_with_a_gain_and_no_bias():
    torch.manual_seed(0)
    norm = RMSNorm(6, eps=1e-5).double()
    with torch.no_grad():
        norm.weight.uniform_(0.5, 2.0)
    norm.compute_dtype = torch.float64
    x = torch.randn(2, 3, 6, dtype=torch.float64) * 3 + 1  # a mean far from 0: RMSNorm must not subtract it
    rms = torch.sqrt((x**2).sum(-1, keepdim=True) / 6 + 1e-5)
    torch.testing.assert_close(norm(x), norm.weight * x / rms, rtol=1e-12, atol=1e-12)
    assert [name for name, _ in norm.named_parameters()] == ["weight"]


def test_rms_norm_equals_llamas_in_float32_bfloat16_and_float64():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(1)
    ours, theirs = RMSNorm(8, eps=1e-6), LlamaRMSNorm(8, eps=1e-6)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 2.0)
        theirs.weight.copy_(ours.weight)
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        x = (torch.randn(3, 5, 8) * 4).to(dtype)
        a, b = ours.to(dtype)(x), theirs.to(dtype)(x)
        assert a.dtype == dtype
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # the same arithmetic: float32 statistics, cast, then gain


def test_rms_norm_computes_its_statistics_in_float32_for_half_inputs():
    x = torch.full((1, 4), 300.0, dtype=torch.float16)  # x^2 = 90000 overflows float16 (max 65504)
    out = RMSNorm(4)(x.float()).half()
    assert torch.isfinite(RMSNorm(4).half()(x)).all()
    torch.testing.assert_close(RMSNorm(4).half()(x), out)


def test_rms_norm_gradients_in_float64():
    norm = RMSNorm(5, eps=1e-3).double()
    norm.compute_dtype = torch.float64
    x = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(norm, (x,))


# ---------------------------------------------------------------- activations and the feed-forward networks
@pytest.mark.parametrize(
    "name, theirs",
    [("gelu_tanh", "gelu_new"), ("gelu_tanh", "gelu_pytorch_tanh"), ("gelu_new", "gelu_new"), ("silu", "silu")],
)
def test_activations_equal_transformers_and_their_formulas(name, theirs):
    x = torch.linspace(-6, 6, 101, dtype=torch.float64)
    torch.testing.assert_close(ACTIVATIONS[name](x), ACT2FN[theirs](x), rtol=1e-12, atol=1e-12)
    formula = {
        "gelu_tanh": 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
        "gelu_new": 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
        "silu": x / (1 + torch.exp(-x)),
    }[name]
    torch.testing.assert_close(ACTIVATIONS[name](x), formula, rtol=1e-12, atol=1e-12)
    assert (ACTIVATIONS["gelu_tanh"](x) - ACTIVATIONS["gelu"](x)).abs().max() > 1e-5  # not the erf form


@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh"])
def test_gated_feed_forward_is_w2_of_act_w1_times_w3(activation):
    torch.manual_seed(2)
    ff = GatedFeedForward(6, 10, activation=activation).double()
    x = torch.randn(2, 3, 6, dtype=torch.float64)
    w1, w2, w3 = ff.w_1, ff.w_2, ff.w_3
    act = {"silu": lambda v: v * torch.sigmoid(v), "gelu": lambda v: 0.5 * v * (1 + torch.erf(v / math.sqrt(2)))}
    act["gelu_tanh"] = lambda v: ACT2FN["gelu_new"](v)
    gate = act[activation](x @ w1.weight.T + w1.bias)
    expected = (gate * (x @ w3.weight.T + w3.bias)) @ w2.weight.T + w2.bias
    torch.testing.assert_close(ff(x), expected, rtol=1e-12, atol=1e-12)


def test_gated_feed_forward_equals_llamas_mlp_with_copied_weights():
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP

    torch.manual_seed(3)
    theirs = LlamaMLP(LlamaConfig(hidden_size=8, intermediate_size=12, num_attention_heads=2, mlp_bias=False)).double()
    ours = GatedFeedForward(8, 12, activation="silu", bias=False).double()
    with torch.no_grad():
        ours.w_1.weight.copy_(theirs.gate_proj.weight)
        ours.w_3.weight.copy_(theirs.up_proj.weight)
        ours.w_2.weight.copy_(theirs.down_proj.weight)
    x = torch.randn(2, 4, 8, dtype=torch.float64)
    torch.testing.assert_close(ours(x), theirs(x), rtol=1e-12, atol=1e-12)
    assert sorted(name for name, _ in ours.named_parameters()) == ["w_1.weight", "w_2.weight", "w_3.weight"]


def test_the_bias_switch_of_the_plain_feed_forward_network_and_an_unknown_activation():
    ff = PositionwiseFeedForward(4, 8, 0.0, "gelu_tanh", bias=False)
    assert ff.w_1.bias is None and ff.w_2.bias is None
    x = torch.randn(3, 4)
    torch.testing.assert_close(ff(x), ACT2FN["gelu_new"](x @ ff.w_1.weight.T) @ ff.w_2.weight.T)
    with pytest.raises(
        ValueError, match="activation must be one of 'relu', 'gelu', 'gelu_tanh', 'silu', 'gelu_new', got 'swish'"
    ):
        GatedFeedForward(4, 8, activation="swish")


# ---------------------------------------------------------------- the model's parameters under each switch
def _keys(**fields) -> set[str]:
    config = LMConfig(vocab=11, n_layers=1, d_model=8, d_ff=16, n_heads=2, **NO_DROPOUT, **fields)
    return set(build_lm(config).state_dict())


def test_each_switch_adds_or_removes_exactly_its_parameters():
    base = _keys()
    assert "layers.0.feed_forward.w_3.weight" in _keys(ffn_gated=True) - base
    assert {k for k in base if k.endswith("_proj.bias") and ".self_attn." in k and "out" not in k} == base - _keys(
        qkv_bias=False
    )
    assert base - _keys(out_bias=False) == {"layers.0.self_attn.out_proj.bias"}
    assert base - _keys(ffn_bias=False) == {"layers.0.feed_forward.w_1.bias", "layers.0.feed_forward.w_2.bias"}
    assert base - _keys(lm_head_bias=False) == {"generator.proj.bias"}
    assert _keys(qk_norm=True) - base == {"layers.0.self_attn.q_norm.weight", "layers.0.self_attn.k_norm.weight"}
    rms = _keys(norm="rms")
    assert base - rms == {"layers.0.sublayer.0.norm.bias", "layers.0.sublayer.1.norm.bias", "norm.bias"}
    assert "embed.1.pe" in _keys(positional_encoding="learned")
    assert not any(k.startswith("embed.1") for k in _keys(positional_encoding="rotary"))


def test_head_dim_decouples_the_heads_from_d_model():
    config = LMConfig(vocab=11, n_layers=1, d_model=12, d_ff=16, n_heads=4, n_kv_heads=2, head_dim=8, **NO_DROPOUT)
    attn = build_lm(config).layers[0].self_attn
    assert (attn.q_proj.out_features, attn.k_proj.out_features, attn.v_proj.out_features) == (32, 16, 16)
    assert (attn.out_proj.in_features, attn.out_proj.out_features) == (32, 12)
    assert attn.scale == pytest.approx(1 / math.sqrt(8))  # 1/sqrt(head_dim), not 1/sqrt(d_model / n_heads)


def _attention_by_hand(attn: CausalSelfAttention, x: torch.Tensor, rotary: RotaryEmbedding | None) -> torch.Tensor:
    """Grouped-query causal attention written out: QK-norm over each head's d_k, RoPE, softmax, W^O."""
    batch, seq, _ = x.shape
    h, g, d = attn.h, attn.kv_heads, attn.d_k
    q = attn.q_proj(x).view(batch, seq, h, d).transpose(1, 2)
    k = attn.k_proj(x).view(batch, seq, g, d).transpose(1, 2)
    v = attn.v_proj(x).view(batch, seq, g, d).transpose(1, 2)
    if attn.qk_norm:
        rms = lambda t, w: w * t / torch.sqrt((t**2).mean(-1, keepdim=True) + attn.q_norm.eps)  # noqa: E731
        q, k = rms(q, attn.q_norm.weight), rms(k, attn.k_norm.weight)
    if rotary is not None:
        half = rotary.dim // 2
        angles = torch.arange(seq, dtype=torch.float64)[:, None] * rotary.inv_freq.double()[None, :]
        cos, sin = torch.cos(angles), torch.sin(angles)

        def turn(t):  # pair (i, i + half) rotated by angle_i
            a, b, rest = t[..., :half], t[..., half : 2 * half], t[..., 2 * half :]
            return torch.cat([a * cos - b * sin, b * cos + a * sin, rest], dim=-1)

        q, k = turn(q), turn(k)
    k, v = k.repeat_interleave(h // g, dim=1), v.repeat_interleave(h // g, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    scores = scores.masked_fill(~torch.ones(seq, seq, dtype=torch.bool).tril(), float("-inf"))
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, h * d)
    return attn.out_proj(out)


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_attention_with_qk_norm_rope_and_head_dim_is_its_formula(kv_heads):
    torch.manual_seed(4)
    config = LMConfig(
        vocab=11, n_layers=1, d_model=12, d_ff=16, n_heads=4, n_kv_heads=kv_heads, head_dim=8, qk_norm=True,
        positional_encoding="rotary", rope_fraction=0.5, qkv_bias=False, **NO_DROPOUT,
    )  # fmt: skip
    model = build_lm(config).double()
    attn = model.layers[0].self_attn
    for norm in (attn.q_norm, attn.k_norm):
        norm.compute_dtype = torch.float64
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 7, 12, dtype=torch.float64)
    rotation = model.rotary(torch.arange(7)[None], torch.float64)
    got = attn(x, T.AttentionMask(causal=True), rotation=rotation)
    # RoPE's tables are float32, as Hugging Face's: the formula above in float64 differs by float32 rounding
    torch.testing.assert_close(got, _attention_by_hand(attn, x, model.rotary), rtol=1e-5, atol=1e-5)
    without = attn(x, T.AttentionMask(causal=True))
    assert (without - got).abs().max() > 1e-3  # the rotation matters on this data


def test_attention_equals_qwen3s_module_with_copied_weights():
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3RotaryEmbedding

    torch.manual_seed(5)
    hf = Qwen3Config(
        hidden_size=16, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=8, vocab_size=11,
        rms_norm_eps=1e-6, attention_bias=False, max_position_embeddings=32, rope_theta=10000.0,
    )  # fmt: skip
    hf._attn_implementation = "sdpa"  # eager takes its softmax in float32
    theirs = Qwen3Attention(hf, layer_idx=0).double().eval()
    config = LMConfig(
        vocab=11, n_layers=1, d_model=16, d_ff=8, n_heads=4, n_kv_heads=2, head_dim=8, qk_norm=True, qkv_bias=False,
        out_bias=False, positional_encoding="rotary", norm="rms", max_len=32, **NO_DROPOUT,
    )  # fmt: skip
    model = build_lm(config).double().eval()
    ours = model.layers[0].self_attn
    with torch.no_grad():
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(ours, "out_proj" if name == "o_proj" else name).weight.copy_(getattr(theirs, name).weight)
        theirs.q_norm.weight.uniform_(0.5, 1.5)
        theirs.k_norm.weight.uniform_(0.5, 1.5)
        ours.q_norm.weight.copy_(theirs.q_norm.weight)
        ours.k_norm.weight.copy_(theirs.k_norm.weight)
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    positions = torch.arange(9)[None].expand(2, -1)
    cos, sin = Qwen3RotaryEmbedding(hf)(x, positions)
    causal = torch.zeros(1, 1, 9, 9, dtype=torch.float64).masked_fill(~torch.ones(9, 9).bool().tril(), float("-inf"))
    expected = theirs(x, (cos, sin), causal)[0]
    got = ours(x, T.AttentionMask(causal=True), rotation=model.rotary(positions, torch.float64))
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- the output head, the per-head form
def test_lm_head_bias_false_makes_logits_the_tied_embedding_product():
    config = LMConfig(vocab=13, n_layers=1, d_model=8, d_ff=16, n_heads=2, tie_weights=True, lm_head_bias=False)
    model = build_lm(config.replace(**NO_DROPOUT)).eval()
    tokens = torch.randint(0, 13, (2, 5))
    hidden = model(tokens)
    torch.testing.assert_close(model.logits(tokens), hidden @ model.embed[0].lut.weight.T)
    torch.testing.assert_close(model.generator(hidden), torch.log_softmax(model.logits(tokens), -1))


def test_the_per_head_form_takes_rotary_and_qk_norm_and_refuses_what_it_has_no_place_for():
    config = LMConfig.functional(
        11, n_layers=1, d_model=16, d_ff=16, n_heads=2, positional_encoding="rotary", positional_init="normal"
    )
    model = build_lm(config.replace(qk_norm=True))
    assert isinstance(model.layers[0].self_attn, PerHeadValueAttention)
    tokens = torch.randint(0, 11, (2, 6))
    cache = model.new_cache()
    steps = [model(tokens[:, :4], cache=cache)] + [model(tokens[:, t : t + 1], cache=cache) for t in (4, 5)]
    torch.testing.assert_close(torch.cat(steps, 1), model(tokens), rtol=1e-5, atol=1e-5)
    for field, value in (("head_dim", 4), ("qkv_bias", False), ("out_bias", False)):
        with pytest.raises(ValueError, match=f"{field}={value!r} needs value_projection='output'.*'per_head'"):
            config.replace(**{field: value})


# ---------------------------------------------------------------- a misshaped adapter
class LowRankAdapter(torch.nn.Module):
    """A LoRA-style low-rank map a user puts in place of a projection: ``x @ down @ up``, ``down`` (in, rank) and
    ``up`` meant to be (rank, out). Built from the wrong side of the weight (``weight.T.shape``), ``up`` is
    (rank, in): torch multiplies happily and the output is ``in`` wide instead of ``out``."""

    def __init__(self, base: torch.nn.Linear, rank: int = 2, transposed: bool = False) -> None:
        super().__init__()
        out_features = base.weight.T.shape[0] if transposed else base.weight.shape[0]
        self.down = torch.nn.Parameter(torch.randn(base.in_features, rank))
        self.up = torch.nn.Parameter(torch.randn(rank, out_features))

    def forward(self, x):
        return x @ self.down @ self.up


def test_a_misshaped_adapter_in_a_projection_fails_with_the_contract_naming_the_dimension():
    config = LMConfig(vocab=11, n_layers=1, d_model=8, d_ff=16, n_heads=2, head_dim=8, norm="rms", ffn_gated=True)
    model = build_lm(config.replace(**NO_DROPOUT, activation="silu"))
    attn = model.layers[0].self_attn
    tokens = torch.randint(0, 11, (2, 5))
    base = attn.q_proj  # d_model 8 -> h * d_k = 16
    attn.q_proj = LowRankAdapter(base)  # the right shape: runs
    model(tokens)
    attn.q_proj = LowRankAdapter(base, transposed=True)  # up (rank, 8) instead of (rank, 16)
    message = r"CausalSelfAttention.attend: argument 'q' is f32\[2,2,5,4\].*self.d_k=8\)"
    with pytest.raises(T.TypeCheckError, match=message):
        model(tokens)


# ---------------------------------------------------------------- gradients in float64
def test_gradients_of_the_new_blocks_in_float64():
    torch.manual_seed(6)
    ff = GatedFeedForward(4, 6, activation="gelu_tanh").double()
    x = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ff, (x,))
    rotation = RotaryEmbedding(4, 100.0, max_len=8)(torch.arange(3)[None], torch.float64)
    q = torch.randn(1, 2, 3, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(rotation, (q,))
    config = LMConfig(vocab=11, n_layers=1, d_model=8, d_ff=8, n_heads=2, n_kv_heads=1, head_dim=4, qk_norm=True,
                      positional_encoding="rotary", sliding_window=2, **NO_DROPOUT)  # fmt: skip
    model = build_lm(config).double()
    attn = model.layers[0].self_attn
    attn.q_norm.compute_dtype = attn.k_norm.compute_dtype = torch.float64
    rot = model.rotary(torch.arange(4)[None], torch.float64)
    h = torch.randn(1, 4, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: attn(v, T.AttentionMask(causal=True), rotation=rot), (h,))


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"head_dim": 0}, "head_dim must be a positive int or None, got head_dim=0"),
        ({"head_dim": 8.0}, "head_dim must be a positive int or None, got head_dim=8.0"),
        ({"sliding_window": 0}, "sliding_window must be a positive int or None, got sliding_window=0"),
        ({"sliding_window": True}, "sliding_window must be a positive int or None, got sliding_window=True"),
        ({"norm": "rmsnorm"}, "norm must be one of 'layer', 'std', 'rms'; got 'rmsnorm'"),
        (
            {"activation": "swiglu"},
            "activation must be one of 'relu', 'gelu', 'gelu_tanh', 'silu', 'gelu_new'; got 'swiglu'",
        ),
        ({"ffn_gated": 1}, "ffn_gated must be a bool, got ffn_gated=1"),
        ({"qkv_bias": "no"}, "qkv_bias must be a bool, got qkv_bias='no'"),
        ({"out_bias": None}, "out_bias must be a bool, got out_bias=None"),
        ({"ffn_bias": 0}, "ffn_bias must be a bool, got ffn_bias=0"),
        ({"qk_norm": "yes"}, "qk_norm must be a bool, got qk_norm='yes'"),
        ({"lm_head_bias": None}, "lm_head_bias must be a bool, got lm_head_bias=None"),
        ({"n_heads": 3}, r"n_heads=3 does not divide d_model=8 .*; or set head_dim"),
    ],
)
def test_the_config_refuses_each_bad_block_field_naming_it(fields, message):
    with pytest.raises(ValueError, match=message):
        LMConfig(**{"vocab": 11, "n_layers": 1, "d_model": 8, "d_ff": 16, "n_heads": 2, **NO_DROPOUT, **fields})


def test_head_dim_lets_the_heads_not_divide_d_model():
    config = LMConfig(vocab=11, n_layers=1, d_model=10, d_ff=16, n_heads=3, head_dim=4, positional_encoding="rotary")
    model = build_lm(config.replace(**NO_DROPOUT))
    assert model(torch.randint(0, 11, (2, 3))).shape == (2, 3, 10)
