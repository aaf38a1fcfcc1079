"""LMConfig: a frozen, validated description of a decoder-only language model (the proof-carrying config).

Two formulations share one model (:mod:`transformer.lm`):

* the usual one (section 3 of the paper, as GPT-style models use it): token embeddings scaled by sqrt(d_model),
  sinusoidal or learned positions, LayerNorm, multi-head attention with an output projection W^O;
* the functional-transformer's (awf/functional-transformer, about 20 lines of JAX): embeddings scaled by
  ``lambda_e``, learned positions initialised to zeros and scaled by ``lambda_pe``, the normalisation
  ``(x - mean) / (std + eps)`` with a gain and a bias, scores multiplied by a temperature ``tau``, and each head's
  value projected straight to d_model, the heads summed (no W^O). :meth:`LMConfig.functional` sets all of them.

Every option is its own field, so the two can be mixed. As for :class:`~transformer.config.TransformerConfig`,
construction refuses an impossible model naming the field, and ``attention_backend`` is a run-time field
(``RUNTIME_FIELDS``): checkpoints neither store nor compare it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, get_args

from ..common.arguments import is_int, is_number
from ..config import AttentionBackend, ConfigRecord, NormPlacement, _divisors, check_kv_heads
from .config_checks import check_blocks, check_olmo
from .moe.checks import check_experts, check_gpt_oss

__all__ = ["LMConfig"]

NormKind = Literal["layer", "std", "rms"]
LMPositional = Literal["sinusoidal", "learned", "rotary", "none"]
LMActivation = Literal["relu", "gelu", "gelu_tanh", "silu", "gelu_new"]
RopeScaling = Literal["none", "linear", "llama3", "yarn"]
PositionalInit = Literal["normal", "zeros"]
ValueProjection = Literal["output", "per_head"]
Initialisation = Literal["xavier", "functional"]

_CHOICES: dict[str, tuple[str, ...]] = {
    "norm": get_args(NormKind),
    "norm_placement": get_args(NormPlacement),
    "positional_encoding": get_args(LMPositional),
    "positional_init": get_args(PositionalInit),
    "value_projection": get_args(ValueProjection),
    "activation": get_args(LMActivation),
    "rope_scaling": get_args(RopeScaling),
    "init": get_args(Initialisation),
    "attention_backend": get_args(AttentionBackend),
}
_POSITIVE_INTS = ("vocab", "n_layers", "d_model", "d_ff", "n_heads", "max_len")
_OPTIONAL_POSITIVE_FLOATS = ("embedding_scale", "attention_scale")


@dataclass(frozen=True, kw_only=True)
class LMConfig(ConfigRecord):
    """Every hyper-parameter of the decoder-only Transformer language model.

    Attributes:
        vocab: vocabulary size (the tokenizer's).
        n_layers: decoder layers (masked self-attention and a feed-forward network each).
        d_model, d_ff, n_heads: widths as in the paper; d_k = d_model / n_heads.
        n_kv_heads: key/value heads for grouped-query attention (GQA; 1 is multi-query attention): each serves
            n_heads / n_kv_heads query heads, and the key/value cache holds n_kv_heads heads. None (the default)
            means n_heads (the paper's attention). Needs ``value_projection="output"``.
        dropout, attention_dropout: P_drop on sub-layer outputs and embeddings (with any positional scheme), and
            on attention probabilities.
        max_len: the longest sequence (prompt plus generated tokens) the positions cover.
        norm: ``"layer"`` (LayerNorm: biased variance plus eps inside the square root) or ``"std"``
            (``(x - mean) / (std + eps)``, the functional transformer's ``standardize``); both with gain and bias;
            or ``"rms"`` (RMSNorm, a gain only).
        norm_placement: ``"pre"`` (x + Sublayer(Norm(x)), as the functional transformer) or ``"post"``.
            Either way the stack ends in a normalisation before the output projection.
        layer_norm_eps: the eps of ``norm``.
        positional_encoding: ``"sinusoidal"`` (section 3.5), ``"learned"``, ``"rotary"`` or ``"none"``.
        positional_init: learned positions start as ``"normal"`` (std 0.02) or ``"zeros"`` (the functional
            transformer's).
        embedding_scale: lambda_e, the factor on token embeddings; None is sqrt(d_model) (section 3.4).
        positional_scale: lambda_pe, the factor on positional encodings (1.0 in the paper).
        attention_scale: tau, the factor on the scores Q K^T inside the softmax; None is 1/sqrt(d_k) (3.2.1).
        value_projection: ``"output"`` (per-head values of width d_k, concatenated, then W^O: section 3.2.2) or
            ``"per_head"`` (each head's value maps d_model -> d_model; the heads are summed, no W^O).
        activation: ``"relu"``, ``"gelu"``, ``"gelu_tanh"``, ``"silu"`` or ``"gelu_new"`` (the tanh form
            written out as GPT-2's, :data:`~transformer.layers.ACTIVATIONS`) inside the feed-forward network.
        ffn_hidden_dropout: dropout (P_drop = ``dropout``) also on the feed-forward network's hidden activations,
            between its two linear maps, as the Annotated Transformer's ``PositionwiseFeedForward`` (True, the
            default, the placement this model has always had); False leaves only the dropout on each sub-layer's
            output, as GPT-2's MLP does (section 5.4 names only sub-layer outputs and the embedding sums).
        tie_weights: share the token embedding with the output projection (section 3.4).
        init: ``"xavier"`` (Glorot-uniform matrices, token embeddings included, as
            :func:`~transformer.model.build_model`; learned positions start as ``positional_init`` says) or
            ``"functional"`` (the functional transformer's: N(0, 1) embeddings, U(+-1/sqrt(fan_in)) weights, zero
            biases).
        pad_id: the padding token id (masked out of losses and attention), or None.
        attention_backend: the default attention backend; a run-time field (``RUNTIME_FIELDS``).

    The blocks of today's checkpoints (each described with its paper in docs/lm_blocks.md; checked by
    :mod:`~transformer.lm.config_checks`; the defaults are the model above):

        positional_encoding: also ``"rotary"`` (RoPE: queries and keys rotated, no table) and ``"none"``.
        rope_theta, rope_fraction: RoPE's base and the rotated fraction of each head's d_k (int(d_k * fraction)
            dimensions, even and > 0; Hugging Face's ``partial_rotary_factor``).
        rope_scaling: ``"none"``, ``"linear"``, ``"llama3"`` or ``"yarn"``, the frequency rule, with its
            ``rope_factor``, ``rope_original_max_len`` (llama3/yarn), ``rope_low_freq_factor``,
            ``rope_high_freq_factor`` (llama3), ``rope_beta_fast``, ``rope_beta_slow`` and
            ``rope_attention_factor`` (yarn; None: 0.1 ln(factor) + 1).
        head_dim: d_k when it is not d_model / n_heads (the projections map d_model to n_heads * head_dim).
        norm: also ``"rms"`` (RMSNorm); activation: also ``"gelu_tanh"`` and ``"silu"``.
        ffn_gated: the gated feed-forward network ``w_2(act(w_1 x) * w_3 x)`` (SwiGLU with silu).
        qkv_bias, out_bias, ffn_bias, lm_head_bias: biases of the q/k/v projections, of W^O, of the feed-forward
            network's maps and of the output projection.
        qk_norm: RMSNorm over d_k on each head's queries and keys, before RoPE (Qwen3).
        sliding_window: query i attends key j only if i - sliding_window < j <= i (Mistral), or None.
        window_layers: which layers the window applies to, one bool per layer (Gemma's ``layer_types``: True =
            ``sliding_attention``, False = ``full_attention``); None: every layer (needs ``sliding_window``).
        rope_local_theta: the RoPE base of the windowed layers (Gemma 3's local base), which rotate with the default
            rule while the others keep ``rope_theta`` and ``rope_scaling``; None: every layer rotates alike.
        norm_unit_offset: RMSNorm's gain is ``1 + weight`` (the weight starts at zero), in float32 (Gemma); it applies
            to every RMSNorm of the model, QK-norm's too.
        post_sublayer_norm: a normalisation of each sub-layer's output before the residual sum, besides the one
            before it: ``x + Norm'(Sublayer(Norm(x)))`` (Gemma's sandwich norms).
        embedding_scale_rounded: lambda_e rounded to the weights' dtype before it multiplies (Gemma's
            ``embed_scale``, a tensor cast to the embedding's dtype).
        attention_softcap: c, the scaled scores become ``c * tanh(s / c)`` before the mask (Gemma 2), or None.
        logit_softcap: c, the output logits become ``c * tanh(z / c)`` (Gemma 2's final-logit soft-capping), or None.
        parallel_residual: attention and the feed-forward network both read the layer's input, each through its own
            norm, and are added to it together: ``x + Attn(Norm_1(x)) + FFN(Norm_2(x))`` (GPT-J, GPT-NeoX; needs
            ``norm_placement="pre"``).
        rope_layers: which layers rotate their queries and keys, one bool per layer (SmolLM3's ``no_rope_layers``:
            1 = RoPE, 0 = none, "NoPE"); None: every layer (needs ``positional_encoding="rotary"``).
        residual_scale: r, each sub-layer's output is multiplied by it before the residual sum,
            ``x + r * Sublayer(Norm(x))`` (Granite's ``residual_multiplier``; 1.0: the paper's).
        logit_divisor: s, the output logits are ``z / s`` (Granite's ``logits_scaling``; 1.0: none).

    Mixtures of experts (docs/moe.md; :mod:`~transformer.lm.moe`): ``n_experts`` gated experts (None: dense) of
    width ``expert_d_ff`` (None: d_ff), ``experts_per_token`` of them per token chosen by a router scoring with
    ``router_score`` (``"softmax"`` or ``"sigmoid"``), the chosen weights renormalised when ``router_norm_topk``,
    with a bias when ``router_bias``; ``shared_expert_d_ff``: Qwen2-MoE's shared expert (None: none);
    ``dense_layers``: the layers that keep the dense network (d_ff); ``router_aux_loss_coef``: the load-balancing
    loss's weight in training; ``router_weights_rounded``: the top-k weights (computed in float32) rounded to the
    model's dtype before they weight the experts' outputs (Qwen-MoE's ``router_top_value.to(router_logits.dtype)``;
    False: they weight in float32, Mixtral's way): the same numbers in float32 and float64, Qwen-MoE's rounding in
    bfloat16 and float16.

    OLMo 2 and OLMoE (docs/lm_blocks.md, "OLMo's blocks"; checked by :mod:`~transformer.lm.config_checks`):
    ``pre_sublayer_norm`` False drops the norm before each sub-layer; with ``post_sublayer_norm`` the layer is
    OLMo 2's ``x + Norm'(Sublayer(x))`` (Team OLMo 2024, "2 OLMo 2 Furious", the reordered norm).
    ``qk_norm_scope``: ``"head"`` (QK-norm over each head's d_k, Qwen3) or ``"projection"`` (one RMSNorm over the
    whole query projection, n_heads * d_k wide, and one over the whole key projection, n_kv_heads * d_k, before the
    heads are split: OLMo 2; OLMoE, Muennighoff et al. 2024). ``float32_gain_and_rotation``: every RMSNorm
    multiplies its gain before the cast back, ``(w * x / rms(x)).to(dtype)`` with the statistics in float32 (OLMo 2's
    ``Olmo2RMSNorm``; Llama's casts first), and RoPE rotates the queries and keys in float32 at least, cast back
    after (OLMo 2's ``apply_rotary_pos_emb``): the same numbers in float32 and float64, OLMo 2's rounding in
    bfloat16.
    gpt-oss (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card"; docs/moe.md, "gpt-oss"): ``attention_sinks``, one
    learned logit per query head in every layer's softmax denominator (docs/attention.md, "Attention sinks");
    ``expert_swiglu_limit`` L (None: the plain gated experts), experts that compute
    ``down(clamp(up, -L, L) + 1) * g * sigmoid(alpha g)`` with ``g = min(gate, L)``, ``alpha`` =
    ``expert_swiglu_alpha``, biases on both projections and gate and up interleaved in one matrix;
    ``router_softmax_topk``: the router's weights are the softmax of its top-k logits (not of every expert's);
    ``rope_yarn_truncate``: yarn's correction range floored and ceiled (True, transformers' default) or kept real
    (False: gpt-oss's ``truncate: false``).
    """

    vocab: int
    n_layers: int = 6
    d_model: int = 512
    d_ff: int = 2048
    n_heads: int = 8
    n_kv_heads: int | None = None
    dropout: float = 0.1
    attention_dropout: float = 0.1
    max_len: int = 1024
    norm: NormKind = "layer"
    norm_placement: NormPlacement = "pre"
    layer_norm_eps: float = 1e-6
    positional_encoding: LMPositional = "sinusoidal"
    positional_init: PositionalInit = "normal"
    embedding_scale: float | None = None
    positional_scale: float = 1.0
    attention_scale: float | None = None
    value_projection: ValueProjection = "output"
    activation: LMActivation = "relu"
    ffn_hidden_dropout: bool = True
    tie_weights: bool = False
    init: Initialisation = "xavier"
    pad_id: int | None = 0
    attention_backend: AttentionBackend = "auto"
    # The blocks of today's checkpoints (docs/lm_blocks.md); the defaults keep the model above exactly.
    rope_theta: float = 10000.0
    rope_fraction: float = 1.0
    rope_scaling: RopeScaling = "none"
    rope_factor: float = 1.0
    rope_original_max_len: int | None = None
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_beta_fast: float = 32.0
    rope_beta_slow: float = 1.0
    rope_attention_factor: float | None = None
    head_dim: int | None = None
    ffn_gated: bool = False
    qkv_bias: bool = True
    out_bias: bool = True
    ffn_bias: bool = True
    qk_norm: bool = False
    lm_head_bias: bool = True
    sliding_window: int | None = None
    window_layers: tuple[bool, ...] | None = None
    rope_local_theta: float | None = None
    norm_unit_offset: bool = False
    post_sublayer_norm: bool = False
    embedding_scale_rounded: bool = False
    attention_softcap: float | None = None
    logit_softcap: float | None = None
    parallel_residual: bool = False
    rope_layers: tuple[bool, ...] | None = None
    residual_scale: float = 1.0
    logit_divisor: float = 1.0
    # Mixtures of experts (docs/moe.md; checked by transformer.lm.moe.checks): None, every layer dense
    n_experts: int | None = None
    experts_per_token: int = 2
    expert_d_ff: int | None = None
    router_score: Literal["softmax", "sigmoid"] = "softmax"
    router_norm_topk: bool = True
    router_bias: bool = False
    shared_expert_d_ff: int | None = None
    dense_layers: tuple[int, ...] = ()
    router_aux_loss_coef: float = 0.0
    router_weights_rounded: bool = False
    # OLMo 2 and OLMoE (docs/lm_blocks.md, "OLMo's blocks"; checked by config_checks.check_olmo)
    pre_sublayer_norm: bool = True
    qk_norm_scope: Literal["head", "projection"] = "head"
    float32_gain_and_rotation: bool = False
    # gpt-oss (docs/moe.md, "gpt-oss"; checked by transformer.lm.moe.checks.check_gpt_oss): attention sinks in every
    # layer, clamped SwiGLU experts with biases, the router's softmax over its top-k logits, yarn's truncate
    attention_sinks: bool = False
    expert_swiglu_limit: float | None = None
    expert_swiglu_alpha: float = 1.702
    router_softmax_topk: bool = False
    rope_yarn_truncate: bool = True

    def __post_init__(self) -> None:
        for name in ("window_layers", "rope_layers"):
            if isinstance(getattr(self, name), list):  # as JSON gives it back
                object.__setattr__(self, name, tuple(getattr(self, name)))
        self._check_ints_and_choices(_POSITIVE_INTS, _CHOICES, prefix="LMConfig: ")
        for name in ("dropout", "attention_dropout"):
            value = getattr(self, name)
            if not is_number(value, finite=True) or not 0.0 <= value < 1.0:
                raise ValueError(f"LMConfig: {name} must be a float in [0, 1), got {name}={value!r}")
        for name in _OPTIONAL_POSITIVE_FLOATS + ("positional_scale", "layer_norm_eps"):
            value = getattr(self, name)
            if value is None and name in _OPTIONAL_POSITIVE_FLOATS:
                continue
            if not is_number(value, finite=True) or value <= 0:
                raise ValueError(f"LMConfig: {name} must be a positive float, got {name}={value!r}")
        for name in ("tie_weights", "ffn_hidden_dropout"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"LMConfig: {name} must be a bool, got {getattr(self, name)!r}")
        check_blocks(self)
        check_experts(self)
        check_olmo(self)
        check_gpt_oss(self)
        if (self.head_dim is None or self.value_projection == "per_head") and self.d_model % self.n_heads != 0:
            raise ValueError(
                f"LMConfig: n_heads={self.n_heads} does not divide d_model={self.d_model} "
                f"(d_k = d_model / n_heads must be an integer); head counts that would: "
                f"{_divisors(self.d_model)}; or set head_dim"
            )
        check_kv_heads(self.n_kv_heads, self.n_heads, "n_kv_heads", "n_heads", prefix="LMConfig: ")
        if self.n_kv_heads not in (None, self.n_heads) and self.value_projection != "output":
            raise ValueError(
                f"LMConfig: n_kv_heads={self.n_kv_heads} (grouped-query attention) needs "
                f"value_projection='output', got value_projection={self.value_projection!r}"
            )
        if self.positional_encoding == "sinusoidal" and self.d_model % 2 != 0:
            raise ValueError(
                f"LMConfig: d_model={self.d_model} is odd: sinusoidal positional encoding needs an even "
                "d_model (or use positional_encoding='learned')"
            )
        if self.positional_init == "zeros" and self.positional_encoding != "learned":
            raise ValueError(
                "LMConfig: positional_init='zeros' needs positional_encoding='learned' "
                f"(sinusoids are fixed), got positional_encoding={self.positional_encoding!r}"
            )
        if self.pad_id is not None and not is_int(self.pad_id, at_least=0, below=self.vocab):
            raise ValueError(f"LMConfig: pad_id={self.pad_id!r} must be a token id in [0, {self.vocab}) or None")

    # ------------------------------------------------------------------ the two formulations
    @classmethod
    def functional(cls, vocab: int, **fields: Any) -> LMConfig:
        """The functional transformer's formulation (awf/functional-transformer ``transformer_init``):
        lambda_e = d_model^-0.5, lambda_pe = 1, tau = 1/sqrt(d_k), ``standardize`` with eps 1e-5, zero-initialised
        learned positions, per-head values to d_model, no dropout, pre-norm, ReLU, its initialisation.
        ``fields`` change any of these or set the sizes."""
        d_model = fields.get("d_model", cls.d_model)
        base = dict(
            norm="std",
            layer_norm_eps=1e-5,
            positional_encoding="learned",
            positional_init="zeros",
            embedding_scale=d_model**-0.5,
            positional_scale=1.0,
            value_projection="per_head",
            dropout=0.0,
            attention_dropout=0.0,
            norm_placement="pre",
            activation="relu",
            init="functional",
        )
        base.update(fields)
        return cls(vocab=vocab, **base)

    # ------------------------------------------------------------------ derived values
    @property
    def d_k(self) -> int:
        """Width of one head's queries, keys and values: ``head_dim``, or d_model / n_heads."""
        return self.d_model // self.n_heads if self.head_dim is None else self.head_dim

    @property
    def rotary_dim(self) -> int:
        """How many of each head's d_k dimensions RoPE rotates: int(d_k * rope_fraction)."""
        return int(self.d_k * self.rope_fraction)

    @property
    def kv_heads(self) -> int:
        """Key/value heads: ``n_kv_heads``, or ``n_heads`` when it is None."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def lambda_e(self) -> float:
        """The factor on token embeddings: ``embedding_scale``, or sqrt(d_model) (section 3.4)."""
        return math.sqrt(self.d_model) if self.embedding_scale is None else float(self.embedding_scale)

    @property
    def tau(self) -> float:
        """The factor on attention scores: ``attention_scale``, or 1/sqrt(d_k) (section 3.2.1)."""
        return 1.0 / math.sqrt(self.d_k) if self.attention_scale is None else float(self.attention_scale)
