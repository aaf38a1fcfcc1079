"""An independent reference of the language model's function, written from LMConfig's documented fields (its
docstring, docs/lm.md and docs/lm_blocks.md), for the tests that sweep the config's options
(tests/test_lm_config_sweep.py): every number it computes comes from the model's parameters (read by name) and the
config's fields as the docs define them, never from the model's modules. RoPE's frequencies come from Hugging Face's
``ROPE_INIT_FUNCTIONS`` (an outside implementation of the same rules); everything else is written out here.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from transformer.lm import LMConfig

ACTIVATIONS = {
    "relu": lambda x: x.clamp_min(0),
    "gelu": lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "silu": lambda x: x * torch.sigmoid(x),
}


def sinusoids(length: int, d_model: int) -> torch.Tensor:
    """Section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(the same)."""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    i = torch.arange(0, d_model, 2, dtype=torch.float64)
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos / 10000 ** (i / d_model))
    table[:, 1::2] = torch.cos(pos / 10000 ** (i / d_model))
    return table


def rope_cos_sin(cfg: LMConfig, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (length, rotary_dim) of Hugging Face's rule for the config's rope fields (Llama's layout: the
    frequencies duplicated over both halves, times the attention factor)."""
    rope = {"rope_type": "default" if cfg.rope_scaling == "none" else cfg.rope_scaling, "rope_theta": cfg.rope_theta}
    rope["partial_rotary_factor"] = cfg.rope_fraction
    if cfg.rope_scaling != "none":
        rope["factor"] = cfg.rope_factor
    if cfg.rope_scaling in ("llama3", "yarn"):
        rope["original_max_position_embeddings"] = cfg.rope_original_max_len
    if cfg.rope_scaling == "llama3":
        rope.update(low_freq_factor=cfg.rope_low_freq_factor, high_freq_factor=cfg.rope_high_freq_factor)
    if cfg.rope_scaling == "yarn":
        rope.update(beta_fast=cfg.rope_beta_fast, beta_slow=cfg.rope_beta_slow)
        if cfg.rope_attention_factor is not None:
            rope["attention_factor"] = cfg.rope_attention_factor
    hf = LlamaConfig(
        hidden_size=cfg.d_model,
        num_attention_heads=cfg.n_heads,
        head_dim=cfg.d_k,
        max_position_embeddings=4096,
        rope_parameters=rope,
    )
    inv_freq, factor = ROPE_INIT_FUNCTIONS.get(rope["rope_type"], _default_rope)(hf)
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq.double()[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos() * factor, angles.sin() * factor


def _default_rope(hf: LlamaConfig):
    """RoFormer's frequencies theta^(-2i/dim) over the rotated width dim = int(d_k * partial_rotary_factor)."""
    rope = hf.rope_parameters
    dim = int(hf.head_dim * rope["partial_rotary_factor"])
    return rope["rope_theta"] ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim), 1.0


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    rot = cos.size(-1)
    turned, passed = x[..., :rot], x[..., rot:]
    half = rot // 2
    rotated_half = torch.cat([-turned[..., half:], turned[..., :half]], dim=-1)
    return torch.cat([turned * cos + rotated_half * sin, passed], dim=-1)


class Reference:
    """``Reference(model, cfg).logits(tokens)``: the model's scores before the softmax, eval mode (no dropout)."""

    def __init__(self, model: torch.nn.Module, cfg: LMConfig) -> None:
        self.cfg = cfg
        self.p = {name: t.detach().double() for name, t in model.state_dict().items()}

    def linear(self, x: torch.Tensor, name: str, bias: bool) -> torch.Tensor:
        """``x W^T (+ b)``: the bias used when the config says it exists, and required absent otherwise."""
        y = x @ self.p[f"{name}.weight"].T
        if bias:
            return y + self.p[f"{name}.bias"]
        assert f"{name}.bias" not in self.p, f"{name} has a bias the config switched off"
        return y

    def norm(self, x: torch.Tensor, name: str) -> torch.Tensor:
        cfg, w = self.cfg, self.p[f"{name}.weight"]
        if cfg.norm == "rms":
            assert f"{name}.bias" not in self.p
            return self.rms(x, w)
        centred = x - x.mean(-1, keepdim=True)
        if cfg.norm == "layer":  # biased variance, eps inside the square root
            scaled = centred / torch.sqrt((centred * centred).mean(-1, keepdim=True) + cfg.layer_norm_eps)
        else:  # "std": biased std, eps outside
            scaled = centred / (torch.sqrt((centred * centred).mean(-1, keepdim=True)) + cfg.layer_norm_eps)
        return w * scaled + self.p[f"{name}.bias"]

    def rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """RMSNorm: the gain ``w``, or ``1 + w`` with ``norm_unit_offset`` (Gemma)."""
        gain = 1 + w if self.cfg.norm_unit_offset else w
        return gain * x / torch.sqrt((x * x).mean(-1, keepdim=True) + self.cfg.layer_norm_eps)

    def attention(self, x: torch.Tensor, name: str, layer: int = 0) -> torch.Tensor:
        cfg = self.cfg
        windowed = cfg.sliding_window is not None and (cfg.window_layers is None or cfg.window_layers[layer])
        batch, seq, _ = x.shape
        h, kv, d_k = cfg.n_heads, cfg.n_kv_heads or cfg.n_heads, cfg.d_k
        q, k = self.linear(x, f"{name}.q_proj", cfg.qkv_bias), self.linear(x, f"{name}.k_proj", cfg.qkv_bias)
        if cfg.qk_norm and cfg.qk_norm_scope == "projection":  # OLMo: one norm over all the heads, before the split
            q, k = self.rms(q, self.p[f"{name}.q_norm.weight"]), self.rms(k, self.p[f"{name}.k_norm.weight"])
        q = q.view(batch, seq, h, d_k).transpose(1, 2)
        k = k.view(batch, seq, kv, d_k).transpose(1, 2)
        if cfg.qk_norm and cfg.qk_norm_scope == "head":
            q, k = self.rms(q, self.p[f"{name}.q_norm.weight"]), self.rms(k, self.p[f"{name}.k_norm.weight"])
        if cfg.positional_encoding == "rotary" and (cfg.rope_layers is None or cfg.rope_layers[layer]):
            rope = cfg
            if windowed and cfg.rope_local_theta is not None:  # the windowed layers: the default rule, their base
                rope = dataclasses.replace(cfg, rope_theta=cfg.rope_local_theta, rope_scaling="none", rope_factor=1.0)
            cos, sin = rope_cos_sin(rope, seq)
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        k = k.repeat_interleave(h // kv, dim=1)  # query head i reads key/value head i // (h / kv)
        tau = 1 / math.sqrt(d_k) if cfg.attention_scale is None else cfg.attention_scale
        scores = tau * q @ k.transpose(-1, -2)
        if cfg.attention_softcap is not None:
            scores = cfg.attention_softcap * torch.tanh(scores / cfg.attention_softcap)
        i, j = torch.arange(seq)[:, None], torch.arange(seq)[None, :]
        allowed = j <= i
        if windowed:
            allowed &= j > i - cfg.sliding_window
        probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
        if cfg.value_projection == "per_head":  # sum_i A_i (X W_i + b_i)
            values = torch.einsum("bsd,ide->bise", x, self.p[f"{name}.value_weight"])
            values = values + self.p[f"{name}.value_bias"][None, :, None, :]
            return (probs @ values).sum(1)
        v = self.linear(x, f"{name}.v_proj", cfg.qkv_bias).view(batch, seq, kv, d_k).transpose(1, 2)
        heads = probs @ v.repeat_interleave(h // kv, dim=1)
        return self.linear(heads.transpose(1, 2).reshape(batch, seq, h * d_k), f"{name}.out_proj", cfg.out_bias)

    def feed_forward(self, x: torch.Tensor, name: str) -> torch.Tensor:
        cfg = self.cfg
        act = ACTIVATIONS[cfg.activation]
        hidden = act(self.linear(x, f"{name}.w_1", cfg.ffn_bias))
        if cfg.ffn_gated:
            hidden = hidden * self.linear(x, f"{name}.w_3", cfg.ffn_bias)
        else:
            assert f"{name}.w_3.weight" not in self.p
        return self.linear(hidden, f"{name}.w_2", cfg.ffn_bias)

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        seq = tokens.size(1)
        lambda_e = math.sqrt(cfg.d_model) if cfg.embedding_scale is None else cfg.embedding_scale
        x = self.p["embed.0.lut.weight"][tokens] * lambda_e
        if cfg.positional_encoding == "sinusoidal":
            x = x + cfg.positional_scale * sinusoids(seq, cfg.d_model)
        elif cfg.positional_encoding == "learned":
            x = x + cfg.positional_scale * self.p["embed.1.pe"][0, :seq]
        for layer in range(cfg.n_layers):
            name = f"layers.{layer}"
            sublayers = [
                (lambda y, n=name, i=layer: self.attention(y, f"{n}.self_attn", i)),
                (lambda y, n=name: self.feed_forward(y, f"{n}.feed_forward")),
            ]
            if cfg.parallel_residual:  # x + Attn(Norm_1(x)) + FFN(Norm_2(x))
                x = x + sum(f(self.norm(x, f"{name}.sublayer.{s}.norm")) for s, f in enumerate(sublayers))
                continue
            for s, sublayer in enumerate(sublayers):
                norm = f"{name}.sublayer.{s}.norm"
                if cfg.residual_scale != 1.0:  # x + r * Sublayer(Norm(x))
                    sublayer = lambda y, f=sublayer: cfg.residual_scale * f(y)  # noqa: E731
                if cfg.post_sublayer_norm:  # x + Norm'(Sublayer(Norm(x)))
                    sublayer = lambda y, f=sublayer, post=f"{name}.post_norms.{s}": self.norm(f(y), post)  # noqa: E731
                if cfg.norm_placement == "post":
                    x = self.norm(x + sublayer(x), norm)
                elif cfg.pre_sublayer_norm:
                    x = x + sublayer(self.norm(x, norm))
                else:  # OLMo 2: no norm before the sub-layer, x + Norm'(Sublayer(x))
                    assert f"{norm}.weight" not in self.p, f"{norm} exists with pre_sublayer_norm=False"
                    x = x + sublayer(x)
        x = self.norm(x, "norm")
        out = self.p["embed.0.lut.weight"] if cfg.tie_weights else self.p["generator.proj.weight"]
        logits = x @ out.T
        if cfg.lm_head_bias:
            logits = logits + self.p["generator.proj.bias"]
        else:
            assert "generator.proj.bias" not in self.p
        logits = logits / cfg.logit_divisor
        if cfg.logit_softcap is not None:
            logits = cfg.logit_softcap * torch.tanh(logits / cfg.logit_softcap)
        return logits


def log_probs(logits: torch.Tensor) -> torch.Tensor:
    return F.log_softmax(logits, dim=-1)
