"""benchmarks/train_roofline.py (issue 45): its FLOP count, its matmul peak and its dry run's record."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("bench_train_roofline", ROOT / "benchmarks" / "train_roofline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_linear_shapes_are_the_matrix_products_of_transformers_llama():
    """The peak's shapes are the model's: the weights of every nn.Linear of a LlamaForCausalLM of the same size
    (attention, MLP, head; not the embedding), counted by transformers itself."""
    transformers = pytest.importorskip("transformers")
    script = _script()
    size = dict(hidden=64, layers=3, heads=4, kv_heads=2, ffn=96, vocab=300)
    config = transformers.LlamaConfig(
        vocab_size=size["vocab"],
        hidden_size=size["hidden"],
        intermediate_size=size["ffn"],
        num_hidden_layers=size["layers"],
        num_attention_heads=size["heads"],
        num_key_value_heads=size["kv_heads"],
        tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(config)
    linears = sorted((m.in_features, m.out_features) for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert sorted(script.linear_shapes(size)) == linears


def test_matmul_peak_counts_three_products_per_linear_and_divides_by_their_time():
    script = _script()
    size = dict(hidden=32, layers=2, heads=4, kv_heads=2, ffn=48, vocab=100)
    peak = script.matmul_peak(size, tokens=16, repeats=2)
    expected = sum(6 * 16 * i * o for i, o in script.linear_shapes(size))
    assert peak["flops_per_step"] == expected
    assert peak["seconds_per_step"] > 0
    assert peak["flop_per_s"] == pytest.approx(expected / peak["seconds_per_step"])


def test_dry_run_records_prefill_steps_mfu_and_equal_first_losses(tmp_path):
    """Same weights on both sides: the first training step's losses agree; every training row has its MFU from the
    recorded peak and parameter count; prefill's log-probabilities match."""
    pytest.importorskip("transformers")
    out = tmp_path / "train_roofline.json"
    result = _script().main(["--quick", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    losses = result["notes"]["first_step_loss"]
    assert losses["ours"] == pytest.approx(losses["theirs"], rel=1e-5)
    rows = {(r["case"], r["variant"]): r for r in result["rows"]}
    assert rows["prefill", "ours"]["max_log_prob_difference"] < 1e-4
    expected = {
        "ours, AdamW fused",
        "ours, AdamW default",
        "ours, AdamW foreach",
        "ours, AdamW fused, checks off",
        "theirs, AdamW fused",
        "theirs, AdamW default",
    }
    assert {v for c, v in rows if c == "training step"} == expected
    tokens = result["setup"]["batch"] * result["setup"]["length"]
    for (case, _), row in rows.items():
        if case == "training step":
            per_s = tokens / (row["ours_ms"] / 1e3)
            mfu = 6 * result["parameters"] * per_s / result["matmul_peak"]["flop_per_s"]
            assert row["mfu"] == pytest.approx(mfu, abs=2e-3)
            assert row["mfu_matmul_parameters"] < row["mfu"]  # the embedding is not a matrix product
