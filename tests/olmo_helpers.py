"""Tiny OLMo 2 and OLMoE models of transformers for the checkpoint tests (tests/test_pretrained_olmo2.py,
tests/test_pretrained_olmoe.py): built from its config classes with random weights (never downloaded), every
weight drawn wide (std 0.3, the norms' gains around 1) so that a norm read into the wrong place, or applied per
head instead of over the whole projection, changes the logits; saved with ``save_pretrained``. Float64 OLMoE runs
transformers' eager experts (its default ``grouped_mm`` refuses float64)."""

from __future__ import annotations

import copy

import torch
from pretrained_helpers import VOCAB

COMMON = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=48, rms_norm_eps=0.02, bos_token_id=1, eos_token_id=2,
    pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
)  # fmt: skip
CLASSES = {
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {}),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", dict(num_experts=5, num_experts_per_tok=2)),
}


def olmo_model(transformers, kind: str, dtype=torch.float32, seed: int = 0, **overrides):
    """A random tiny model of ``kind`` ("olmo2" or "olmoe") in eval mode, in ``dtype``."""
    config_class, model_class, fields = CLASSES[kind]
    skip_unless_transformers_builds(transformers, config_class)
    config = getattr(transformers, config_class)(**{**COMMON, **fields, **overrides})
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)._from_config(copy.deepcopy(config), attn_implementation="sdpa")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if p.dim() == 1 and "norm" in name else 0.0, 0.3)
    if dtype == torch.float64:
        model.config._experts_implementation = "eager"
    return model.eval().to(dtype)


def olmo_pair(transformers, folder, kind: str, dtype=torch.float32, **overrides):
    """Their model saved into ``folder`` and ours loaded from it. In bfloat16 theirs is loaded back from the folder
    (as a user has it: RoPE's inverse frequencies float32, not the bfloat16 copy ``.to`` makes)."""
    from transformer.lm import TransformerLM

    theirs = olmo_model(transformers, kind, torch.float32 if dtype == torch.bfloat16 else dtype, **overrides)
    if dtype == torch.bfloat16:
        theirs.to(dtype).save_pretrained(folder)
        theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()
    else:
        theirs.save_pretrained(folder)
    return theirs, TransformerLM.from_pretrained(folder)


def skip_unless_transformers_builds(transformers, config_class: str) -> None:
    """Skip where transformers cannot build the architecture at all: 5.4's ``Olmo2Config`` and ``OlmoeConfig``
    declare ``tie_word_embeddings`` an int, and its strict check refuses the bool of its own default (and of every
    file), so neither its config class nor ``from_pretrained`` works there (5.17 and 5.24 declare a bool)."""
    import pytest

    try:
        getattr(transformers, config_class)()
    except Exception as error:  # noqa: BLE001 - whatever it raises, there is no oracle to compare with
        pytest.skip(f"transformers {transformers.__version__} cannot build {config_class}(): {str(error)[:160]}")


def load_memory_benchmark():
    """benchmarks/load_memory.py as a module."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("bench_load_memory", root / "benchmarks" / "load_memory.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def load_memory_rise(config, folder, architecture: str | None = None, measure=None) -> tuple[float, dict]:
    """Our model of ``config`` (random weights) saved into ``folder`` with our ``save_pretrained`` (as
    ``architecture``, else the one its config chooses), then loaded by benchmarks/load_memory.py's measurement (in
    a fresh interpreter, or by ``measure``: a ``ForkedMeasurements``' one): the peak resident memory's rise over
    the baseline divided by the size of ``model.safetensors``, and the run."""
    from transformer.lm import build_lm

    torch.manual_seed(0)
    model = build_lm(config)
    model.save_pretrained(folder, architecture=architecture)
    del model
    size = (folder / "model.safetensors").stat().st_size
    run = (measure or load_memory_benchmark().measure)(folder)
    assert run["loaded"] - run["baseline"] >= run["parameter_bytes"] >= size - 2**20  # the weights were read
    return (run["loaded"] - run["baseline"]) / size, run
