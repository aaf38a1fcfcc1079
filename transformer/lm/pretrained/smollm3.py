"""SmolLM3 (``SmolLM3ForCausalLM``; Hugging Face 2025, "SmolLM3: smol, multilingual, long-context reasoner") as
:class:`LMConfig`: the Llama family's model (RMSNorm, SwiGLU, grouped-query attention, ``attention_bias``,
``mlp_bias``, a tied head by default) whose layers rotate their queries and keys only where ``no_rope_layers``
says 1 (``rope_layers``; absent: every layer but each ``no_rope_layer_interval``-th, 4), the others attending without
positions ("NoPE", Kazemnejad et al. 2023). With ``use_sliding_window`` the layers ``layer_types`` marks
``sliding_attention`` (absent: the NoPE layers) attend through ``sliding_window`` (``window_layers``), as
``modeling_smollm3.py`` reads them; ``head_dim`` is d_model / n_heads unless the file gives it.
"""

from __future__ import annotations

from typing import Any

from ..config import LMConfig
from .config_fields import ConfigFields
from .llama import Llama
from .written_fields import LAYER_KINDS

__all__ = ["SmolLM3"]


class SmolLM3(Llama):
    name = "SmolLM3ForCausalLM"
    model_type = "smollm3"
    needs = "as Llama, with layers without rotary positions (rope_layers) and windows on some layers (window_layers)"
    max_len_default = 32768
    tie_default = True

    def layer_fields(self, config: ConfigFields, n_layers: int) -> dict[str, Any]:
        rope = config.values.get("no_rope_layers")
        if rope is None:
            interval = config.integer("no_rope_layer_interval", 4)
            rope = [int((i + 1) % interval != 0) for i in range(n_layers)]
        if not isinstance(rope, list) or len(rope) != n_layers or not set(rope) <= {0, 1}:
            config.refuse("no_rope_layers", rope, f"expected {n_layers} entries (num_hidden_layers), each 0 or 1")
        window = config.integer("sliding_window", None, optional=True)
        slides = config.flag("use_sliding_window", False) and window is not None
        types = config.values.get("layer_types")
        if types is None:
            types = ["sliding_attention" if slides and not r else "full_attention" for r in rope]
        if not isinstance(types, list) or len(types) != n_layers or not set(types) <= set(LAYER_KINDS):
            config.refuse(
                "layer_types", types, f"expected {n_layers} entries (num_hidden_layers), each one of {LAYER_KINDS}"
            )
        windowed = tuple(slides and kind == "sliding_attention" for kind in types)
        return {
            "rope_layers": None if all(rope) else tuple(bool(r) for r in rope),
            "sliding_window": window if any(windowed) else None,
            "window_layers": None if all(windowed) or not any(windowed) else windowed,
        }

    def written_window(self, config: LMConfig) -> dict[str, Any]:
        rope = config.rope_layers or (True,) * config.n_layers
        window = config.sliding_window
        windowed = config.window_layers or (window is not None,) * config.n_layers
        return {
            "no_rope_layers": [int(r) for r in rope],
            "use_sliding_window": window is not None,
            "sliding_window": window,
            "layer_types": [LAYER_KINDS[int(w)] for w in windowed],
        }
