"""docs/pretrained.md's loading bound on every architecture (issue 44): the peak resident memory while
``TransformerLM.from_pretrained`` loads a folder rises at most 1.3x the checkpoint above the baseline, measured as
benchmarks/load_memory.py measures it (VmHWM before and after the load), in a child forked for each folder from one
interpreter that imported torch and transformer once (``ForkedMeasurements``: stricter than a fresh interpreter,
which tests/test_pretrained_memory.py and the OLMo tests start, and 15 imports cheaper). Each folder is the
architecture's tiny config of tests/architecture_models.py widened to d_model 512 and a vocabulary of 32000 (75 to
190 MiB: the bound leaves 22 to 57 MiB, far less than a second copy of the weights), saved by our
``save_pretrained`` as that architecture (random weights). Llama's is the benchmark's own folder."""

from __future__ import annotations

import json
import sys

import pytest
from architecture_models import EVERY, architecture_config, model_class_name
from olmo_helpers import load_memory_benchmark, load_memory_rise

from transformer.lm.pretrained.config_fields import ConfigFields
from transformer.lm.pretrained.files import read_json
from transformer.lm.pretrained.supported import architecture_of

transformers = pytest.importorskip("transformers")

WIDE = dict(hidden_size=512, intermediate_size=1024, num_attention_heads=8, num_key_value_heads=2, vocab_size=32000)
#: the fields each architecture names otherwise, or that its tiny config sets to a width of its own
FIELDS = {
    "gpt2": dict(n_embd=512, n_head=8, vocab_size=32000),
    "qwen3": dict(head_dim=64),
    "gemma2": dict(head_dim=64),
    "gemma3": dict(head_dim=64),
    "gpt_neox": dict(num_key_value_heads=None),
    "qwen2_moe": dict(moe_intermediate_size=512, shared_expert_intermediate_size=512),
    "qwen3_moe": dict(head_dim=64, moe_intermediate_size=512),
}
#: gpt-oss (its tiny config is tests/test_pretrained_gpt_oss.py's), widened
GPT_OSS = dict(
    vocab_size=32000, hidden_size=512, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
    num_key_value_heads=2, head_dim=64, max_position_embeddings=64, num_local_experts=5, num_experts_per_tok=2,
    sliding_window=4, rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
)  # fmt: skip


def _wide_config(kind: str):
    if kind == "gpt_oss":
        return transformers.GptOssConfig(**GPT_OSS)
    fields = FIELDS.get(kind, WIDE) if kind == "gpt2" else {**WIDE, **FIELDS.get(kind, {})}
    if fields.get("num_key_value_heads", 0) is None:
        del fields["num_key_value_heads"]
    return architecture_config(transformers, kind, **fields)


@pytest.fixture(scope="module")
def measure():
    with load_memory_benchmark().ForkedMeasurements() as measurements:
        yield measurements.measure


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmHWM from /proc/self/status")
@pytest.mark.parametrize("kind", [k for k in EVERY if k != "llama"] + ["gpt_oss"])
def test_loading_a_folder_of_every_architecture_keeps_the_memory_bound(kind, tmp_path, measure):
    theirs = _wide_config(kind)
    model_class = "GptOssForCausalLM" if kind == "gpt_oss" else model_class_name(kind)
    theirs.architectures = [model_class]
    theirs.save_pretrained(tmp_path / "config")
    fields = ConfigFields(read_json(tmp_path / "config" / "config.json"), tmp_path / "config" / "config.json")
    config = architecture_of(fields).lm_config(fields)
    assert config.d_model == 512 and config.vocab == 32000
    ratio, _ = load_memory_rise(config, tmp_path / kind, model_class, measure)
    assert json.loads((tmp_path / kind / "config.json").read_text())["architectures"] == [model_class]
    size = (tmp_path / kind / "model.safetensors").stat().st_size
    assert size > 64 * 2**20, f"{size / 2**20:.1f} MiB: too small a folder for the bound to mean something"
    assert ratio <= 1.3, f"{kind}: peak rise {ratio:.3f}x the checkpoint ({size / 2**20:.1f} MiB)"
