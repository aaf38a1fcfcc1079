"""The random configs of the seeded differential fuzzer (tests/differential_models.py): for each supported
architecture, a tiny config drawn from a seed with transformers' own config class (layers, heads and key/value
heads that need not be powers of two, head dims, vocabulary, the RoPE rules the architecture implements, tied or
untied head, biases, sliding windows, and each architecture's own blocks). Architectures are appended to
:data:`ARCHITECTURES`, never inserted, so that every earlier one's cases keep their seeds."""

from __future__ import annotations

import random

ARCHITECTURES = ("gpt2", "llama", "qwen2", "qwen3", "mistral", "starcoder2", "phi3", "gemma2", "gemma3", "gpt_neox")
CLASSES = {
    "gpt2": "GPT2Config",
    "llama": "LlamaConfig",
    "qwen2": "Qwen2Config",
    "qwen3": "Qwen3Config",
    "mistral": "MistralConfig",
    "starcoder2": "Starcoder2Config",
    "phi3": "Phi3Config",
    "gemma2": "Gemma2Config",
    "gemma3": "Gemma3TextConfig",
    "gpt_neox": "GPTNeoXConfig",
}
ROPE_RULES = {"llama": 4, "qwen2": 4, "qwen3": 4, "mistral": 4, "starcoder2": 4, "phi3": 1, "gemma2": 4, "gemma3": 4,
              "gpt_neox": 2}  # fmt: skip
RULES = ("default", "linear", "llama3", "yarn")
# OLMo 2 and OLMoE (issue 44): appended, so that every earlier architecture's cases keep their seeds
ARCHITECTURES += ("olmo2", "olmoe")
CLASSES.update(olmo2="Olmo2Config", olmoe="OlmoeConfig")
ROPE_RULES.update(olmo2=4, olmoe=4)
# SmolLM3 and Granite (issue 44): appended, as OLMo's
ARCHITECTURES += ("smollm3", "granite")
CLASSES.update(smollm3="SmolLM3Config", granite="GraniteConfig")
ROPE_RULES.update(smollm3=4, granite=4)
MAX_POSITIONS = 64


def _rope(rng: random.Random, kind: str, head_dim: int) -> dict:
    rule = rng.choice(RULES[: ROPE_RULES[kind]])
    rope = {"rope_type": rule, "rope_theta": rng.choice([100.0, 1000.0, 10000.0])}
    if rule == "linear":
        rope["factor"] = rng.choice([2.0, 4.0])
    if rule == "llama3":
        rope.update(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=16)
    if rule == "yarn":
        rope.update(factor=rng.choice([2.0, 4.0]), original_max_position_embeddings=16)
        if rng.random() < 0.5:
            rope.update(beta_fast=rng.choice([8.0, 32.0]), beta_slow=rng.choice([1.0, 2.0]))
    if kind == "phi3" and head_dim % 4 == 0 and rng.random() < 0.7:
        rope["partial_rotary_factor"] = 0.5
    return rope


def random_config(transformers, kind: str, rng: random.Random):
    """A tiny random config of ``kind`` drawn from ``rng``; its description (for the report) as a dict too."""
    n_heads = rng.choice([1, 2, 3, 4, 6])
    n_kv = rng.choice([d for d in range(1, n_heads + 1) if n_heads % d == 0])
    head_dim = rng.choice([4, 6, 8, 12, 16]) if kind != "phi3" else rng.choice([4, 8, 12, 16])
    d_model = n_heads * head_dim
    if kind in ("llama", "qwen3", "mistral") and rng.random() < 0.4:
        # head_dim is its own field: d_model need not be n_heads * head_dim (transformers 5.24 wants a multiple of it)
        d_model = n_heads * rng.choice([h for h in (4, 6, 8, 12) if h != head_dim])
    vocab, layers, tied = rng.randint(40, 160), rng.randint(1, 3), rng.random() < 0.5
    ffn = rng.choice([16, 40, 56])
    scale = rng.choice([0.02, 0.1, 0.3])  # transformers' initializer_range: larger logits, fewer ties
    eps = rng.choice([1e-6, 1e-5, 0.02])
    ids = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0)
    if kind == "gpt2":
        fields = dict(
            vocab_size=vocab, n_positions=MAX_POSITIONS, n_embd=d_model, n_layer=layers, n_head=n_heads,
            n_inner=rng.choice([None, ffn]), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            layer_norm_epsilon=eps, tie_word_embeddings=tied, initializer_range=scale,
            activation_function=rng.choice(["gelu_new", "gelu", "relu", "gelu_pytorch_tanh"]),
            scale_attn_weights=rng.random() < 0.8, **ids,
        )  # fmt: skip
    elif kind == "gpt_neox":
        rope = _rope(rng, kind, head_dim)
        rope["partial_rotary_factor"] = rng.choice([p for p in (0.25, 0.5, 1.0) if int(head_dim * p) % 2 == 0])
        fields = dict(
            vocab_size=vocab, hidden_size=n_heads * head_dim, intermediate_size=ffn, num_hidden_layers=layers,
            num_attention_heads=n_heads, max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=tied,
            initializer_range=scale, rope_parameters=rope, layer_norm_eps=eps,
            use_parallel_residual=rng.random() < 0.7, attention_bias=rng.random() < 0.7,
            hidden_act=rng.choice(["gelu", "gelu_pytorch_tanh", "relu"]), **ids,
        )  # fmt: skip
    else:
        fields = dict(
            vocab_size=vocab, hidden_size=d_model, intermediate_size=ffn, num_hidden_layers=layers,
            num_attention_heads=n_heads, num_key_value_heads=n_kv, max_position_embeddings=MAX_POSITIONS,
            tie_word_embeddings=tied, initializer_range=scale, rope_parameters=_rope(rng, kind, head_dim), **ids,
        )  # fmt: skip
        fields["norm_epsilon" if kind == "starcoder2" else "rms_norm_eps"] = eps
        if kind in ("llama", "qwen3", "mistral", "gemma2", "gemma3"):
            fields["head_dim"] = head_dim
        if kind in ("llama", "qwen3", "smollm3", "granite"):
            fields["attention_bias"] = rng.random() < 0.5
        if kind in ("llama", "smollm3", "granite"):
            fields["mlp_bias"] = rng.random() < 0.3
        if kind == "llama":
            fields["hidden_act"] = rng.choice(["silu", "gelu", "gelu_pytorch_tanh"])
        window = rng.choice([None, None, 3, 4, 6])
        if kind in ("qwen2", "qwen3"):
            fields.update(use_sliding_window=window is not None, sliding_window=window or 4096, max_window_layers=0)
        if kind in ("mistral", "starcoder2", "phi3"):
            fields["sliding_window"] = window
        if kind == "starcoder2":
            fields.update(use_bias=rng.random() < 0.6, residual_dropout=0.0, embedding_dropout=0.0)
            fields["hidden_act"] = rng.choice(["gelu_pytorch_tanh", "gelu"])
        if kind in ("gemma2", "gemma3"):
            fields.update(_gemma(rng, kind, layers, fields["rope_parameters"]))
        if kind in ("olmo2", "olmoe"):
            fields.update(_olmo(rng, kind, head_dim))
        if kind == "smollm3":
            fields.update(_smollm3(rng, layers, window))
        if kind == "granite":
            fields.update(
                embedding_multiplier=rng.choice([1.0, 3.0, 12.0]), attention_multiplier=rng.choice([0.05, 0.3, 1.0]),
                residual_multiplier=rng.choice([0.2, 0.5, 1.0]), logits_scaling=rng.choice([1.0, 2.5, 8.0]),
            )  # fmt: skip
    config = getattr(transformers, CLASSES[kind])(**fields)
    described = {k: v for k, v in fields.items() if k not in ids}
    return config, described


def _gemma(rng: random.Random, kind: str, layers: int, rope: dict) -> dict:
    """Gemma's own fields: windows on random layers, the score scale, biases, the soft caps (small enough to be
    reached), and Gemma 3's two RoPE bases."""
    fields = dict(
        sliding_window=rng.choice([3, 4, 6]), attention_bias=rng.random() < 0.3,
        layer_types=[rng.choice(["sliding_attention", "full_attention"]) for _ in range(layers)],
        query_pre_attn_scalar=rng.choice([8, 16, 64]), hidden_activation=rng.choice(["gelu_pytorch_tanh", "gelu"]),
        final_logit_softcapping=rng.choice([None, 0.5, 2.0]),
    )  # fmt: skip
    if kind == "gemma2":
        fields["attn_logit_softcapping"] = rng.choice([None, 0.05, 0.5, 50.0])
    else:
        local = {"rope_type": "default", "rope_theta": rng.choice([10.0, 100.0, 10000.0])}
        fields["rope_parameters"] = {"full_attention": rope, "sliding_attention": local}
    return fields


def _olmo(rng: random.Random, kind: str, head_dim: int) -> dict:
    """OLMo 2's and OLMoE's own fields: biases on the attention, OLMo 2's head_dim (read when given), OLMoE's
    experts (2 to 6, top 1 to 3, renormalised or not)."""
    fields: dict = {"attention_bias": rng.random() < 0.4}
    if kind == "olmo2" and rng.random() < 0.5:
        fields["head_dim"] = head_dim
    if kind == "olmoe":
        experts = rng.randint(2, 6)
        fields.update(num_experts=experts, num_experts_per_tok=rng.randint(1, min(3, experts)),
                      norm_topk_prob=rng.random() < 0.5)  # fmt: skip
    return fields


def _smollm3(rng: random.Random, layers: int, window: int | None) -> dict:
    """SmolLM3's own fields: the layers without RoPE (``no_rope_layers`` drawn, or every fourth by default), the
    window on the layers ``layer_types`` marks (drawn where there is a window, or by default the layers without
    RoPE)."""
    fields: dict = {"use_sliding_window": window is not None, "sliding_window": window}
    if rng.random() < 0.7:
        fields["no_rope_layers"] = [rng.choice([0, 1, 1]) for _ in range(layers)]
    if window is not None and rng.random() < 0.5:  # sliding layers without a window: transformers' cache fails
        fields["layer_types"] = [rng.choice(["sliding_attention", "full_attention"]) for _ in range(layers)]
    return fields
