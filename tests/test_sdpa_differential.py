"""The drop-in against torch's function as the oracle: the short fixed-seed budget of the differential fuzzer
(benchmarks/sdpa_differential.py; the long budget runs by hand and is committed under
benchmarks/results/differential/sdpa.json). Every argument and combination torch takes, on every CPU backend."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

import transformer.backends.sdpa as sdpa_module

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("sdpa_differential", ROOT / "benchmarks" / "sdpa_differential.py")
fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)


@pytest.mark.parametrize("backend", ["eager", "torch"])
def test_the_drop_in_agrees_with_torch_on_generated_inputs(backend):
    result = fuzz.run(seed=0, cases=300, triton_cases=0, backends=(backend,))
    unknown = {c: n for c, n in result["by_class"].items() if ": known: " not in c}
    assert unknown == {}, result["first_example_by_class"]
    assert result["cases"][backend] == 300


def test_the_kernel_agrees_with_torch_on_generated_inputs_of_its_domain():
    pytest.importorskip("triton")
    result = fuzz.run(seed=0, cases=0, triton_cases=12, backends=("triton",))
    assert result["by_class"] == {}, result["first_example_by_class"]


def test_the_generator_covers_every_argument_kind():
    cases = [fuzz.draw_case(0, i)["labels"] for i in range(300)]
    assert {c["mask"] for c in cases} == {"none", "bool", "float", "upper_left", "lower_right"}
    assert {c["dtype"] for c in cases} == {"float32", "float64", "float16", "bfloat16"}
    assert {c["rank"] for c in cases} == {2, 3, 4, 5}
    assert set(fuzz.INVALID) <= {c["invalid"] for c in cases}
    assert {c["mask_dims"] for c in cases if "mask_dims" in c} >= {0, 1, 2, 3, 4}
    for flag in ("gqa", "is_causal", "contiguous", "empty"):
        assert {c[flag] for c in cases} == {True, False}, flag


def test_the_fuzzer_finds_a_planted_bug(monkeypatch):
    # causal bias objects read as plain tensors again (the bug the outside check found): caught
    monkeypatch.setattr(sdpa_module, "causal_bias_form", lambda mask, is_causal, *tensors: (mask, is_causal))
    result = fuzz.run(seed=0, cases=60, triton_cases=0, backends=("eager",))
    assert result["disagreements"] > 0
    # a wrong scale: caught as an output difference
    monkeypatch.undo()
    real = sdpa_module.reference
    monkeypatch.setattr(sdpa_module, "reference", lambda *a, **k: real(*a, **k) * 1.001)
    result = fuzz.run(seed=0, cases=60, triton_cases=0, backends=("eager",))
    assert any(": output: " in c for c in result["by_class"])


@pytest.mark.parametrize("backend", ["eager", "torch", "triton"])
def test_dropout_keeps_each_probability_with_one_minus_p_and_rescales(backend):
    if backend == "triton":
        pytest.importorskip("triton")
    stats = fuzz.dropout_statistics(backend, p=0.3, rows=2048 if backend != "triton" else 256)
    oracle = fuzz.dropout_statistics("oracle", p=0.3, rows=2048)
    tolerance = 0.02 if backend != "triton" else 0.05
    assert abs(stats["keep_rate"] - 0.7) < tolerance and abs(oracle["keep_rate"] - 0.7) < 0.02
    assert abs(stats["mean_output"] - 1.0) < tolerance / 0.7
    assert stats["integral"]  # each output is (kept keys) / (keys * (1 - p)): the 1/(1-p) scaling


def test_the_long_run_is_committed_with_its_counts():
    import json

    record = json.loads((ROOT / "benchmarks" / "results" / "differential" / "sdpa.json").read_text())
    before, after = record["before"], record["after"]
    assert before["disagreements"] > 0 and after["disagreements"] == 0
    for run in (before, after):
        assert {"seed", "date", "versions", "cases", "by_class", "command"} <= set(run)
    assert after["cases"]["eager"] >= 1000
    assert torch.__version__  # the versions recorded are the run's, not this one's


def test_the_torch_test_harness_runs_a_test_file_with_the_drop_in_in_place(tmp_path):
    import subprocess
    import sys

    test_file = tmp_path / "test_torch_like.py"
    test_file.write_text(
        "import torch, torch.nn.functional as F\n"
        "import transformer as tt\n"
        "from torch.nn.attention.bias import causal_lower_right\n"
        "class TestSDPACPU:\n"
        "    def test_replaced(self):\n"
        "        assert F.scaled_dot_product_attention is tt.scaled_dot_product_attention\n"
        "    def test_lower_right(self):\n"
        "        q = torch.randn(1, 2, 3, 8); k = torch.randn(1, 2, 5, 8)\n"
        "        dense = torch.ones(3, 5, dtype=torch.bool).tril(2)\n"
        "        torch.testing.assert_close(F.scaled_dot_product_attention(q, k, k, causal_lower_right(3, 5)),\n"
        "                                   F.scaled_dot_product_attention(q, k, k, dense))\n"
        "    def test_fails(self):\n"
        "        assert tt.current_backend() == 'torch'\n"
    )
    out = tmp_path / "summary.json"
    script = ROOT / "benchmarks" / "torch_sdpa_tests.py"
    command = [sys.executable, str(script), str(test_file), "--backend", "eager", "--json", str(out)]
    subprocess.run(command, check=True, capture_output=True, cwd=tmp_path, env={**__import__("os").environ})
    summary = json.loads(out.read_text())
    assert summary["by_class"] == {"TestSDPACPU": {"passed": 2, "failed": 1}}
    assert list(summary["failures"]) == [f"{test_file.name}::TestSDPACPU::test_fails"]
