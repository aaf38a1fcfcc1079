"""One tiny random transformers model of every supported architecture (GPT-2, Llama, Qwen2, Qwen3, Mistral,
StarCoder2, Phi-3, Gemma 2, Gemma 3 text, GPT-NeoX, SmolLM3, Granite, Mixtral, Qwen2-MoE, Qwen3-MoE), built from
its own config class with random weights (never downloaded), for the comparisons that run on every architecture
(half-precision generation, fine-tuning, loading memory).

The matrices keep transformers' initialisation (std 0.02), the 1-D parameters are spread out as in
``pretrained_helpers``: the models' next-token logits lie within a few hundredths of each other, so near-tied
candidates are everywhere (what makes a decision in the model's dtype differ from one in float32). Each model uses
the blocks its architecture adds: Gemma's windows on some layers and soft caps, GPT-NeoX's parallel residual and
partial rotary, SmolLM3's layer without rotary positions and a window, Granite's four multipliers, the mixtures'
routing (Qwen2-MoE's shared expert and dense layer, Qwen3-MoE's sparse step).
"""

from __future__ import annotations

import copy

import torch
from moe_helpers import CONFIGS as MOE_CONFIGS
from moe_helpers import moe_config
from pretrained_helpers import MODEL_CLASSES, VOCAB, hf_config

ORIGINAL = tuple(MODEL_CLASSES)  # gpt2, llama, qwen2, qwen3, mistral, starcoder2, phi3
NEW_DENSE = ("gemma2", "gemma3", "gpt_neox", "smollm3", "granite")
MOE = tuple(MOE_CONFIGS)  # mixtral, qwen2_moe, qwen3_moe
EVERY = ORIGINAL + NEW_DENSE + MOE

_LLAMA_LIKE = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=56, num_hidden_layers=3, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=0.02, bos_token_id=1, eos_token_id=2,
    pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
)  # fmt: skip
_LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention"]
NEW_CONFIGS = {  # class, model class, fields beyond _LLAMA_LIKE
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(
        head_dim=12, sliding_window=4, query_pre_attn_scalar=20, final_logit_softcapping=1.5,
        attn_logit_softcapping=1.0, layer_types=_LAYER_TYPES)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        head_dim=12, sliding_window=4, query_pre_attn_scalar=20, final_logit_softcapping=1.5,
        layer_types=_LAYER_TYPES, rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 300.0}})),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(
        num_key_value_heads=None, rms_norm_eps=None, layer_norm_eps=0.02, use_parallel_residual=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 0.5})),
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", dict(
        num_hidden_layers=4, use_sliding_window=True, sliding_window=4)),
    "granite": ("GraniteConfig", "GraniteForCausalLM", dict(
        embedding_multiplier=3.0, attention_multiplier=0.7, residual_multiplier=0.4, logits_scaling=2.5)),
}  # fmt: skip
#: the attention their tiny models are built with (sdpa where transformers has one; Gemma 2 has none)
ATTENTION = {"gemma2": "eager"}
#: the mixtures' fields for half precision: transformers' grouped_mm wants rows of a multiple of 16 bytes
HALF_MOE = {"qwen2_moe": dict(moe_intermediate_size=16), "qwen3_moe": dict(moe_intermediate_size=16)}


def architecture_config(transformers, kind: str, **overrides):
    """The tiny config of ``kind`` (any of :data:`EVERY`)."""
    if kind in ORIGINAL:
        return hf_config(transformers, kind, **overrides)
    if kind in MOE:
        return moe_config(transformers, kind, **overrides)
    config_class, _, fields = NEW_CONFIGS[kind]
    fields = {k: v for k, v in {**_LLAMA_LIKE, **fields}.items() if v is not None}
    return getattr(transformers, config_class)(**{**fields, **overrides})


def model_class_name(kind: str) -> str:
    """The transformers class of ``kind`` (any of :data:`EVERY`), as ``architectures`` names it."""
    if kind in ORIGINAL:
        return MODEL_CLASSES[kind]
    return MOE_CONFIGS[kind][1] if kind in MOE else NEW_CONFIGS[kind][1]


def architecture_model(transformers, kind: str, seed: int = 0, **overrides):
    """A random tiny float32 model of ``kind`` in eval mode (module docstring)."""
    config = architecture_config(transformers, kind, **overrides)
    model_class = model_class_name(kind)
    torch.manual_seed(seed)
    attention = ATTENTION.get(kind, "sdpa")
    model = getattr(transformers, model_class)._from_config(copy.deepcopy(config), attn_implementation=attention)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.normal_(1.0 if "norm" in name or "ln_" in name else 0.0, 0.3)
            elif kind in MOE:
                p.normal_(0.0, 0.02 if "embed" in name or "lm_head" in name else 0.3)  # routing that varies
    return model.eval()


def saved(transformers, kind: str, folder, dtype=torch.float32, seed: int = 0, **overrides):
    """``kind``'s tiny model saved in ``dtype`` into ``folder`` (returned)."""
    if dtype in (torch.bfloat16, torch.float16):
        overrides = {**HALF_MOE.get(kind, {}), **overrides}
    architecture_model(transformers, kind, seed, **overrides).to(dtype).save_pretrained(folder)
    return folder


def load_theirs(transformers, folder):
    """transformers' own model of ``folder`` as a user loads it: its config.json's dtype, transformers' default
    attention for the architecture (sdpa; eager for Gemma 2), eval mode."""
    return transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
