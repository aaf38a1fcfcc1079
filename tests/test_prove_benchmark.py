"""benchmarks/prove.py runs and records what docs/proved-shapes.md, "Cost", reports (one quick round: the figures come
from the full run, committed as benchmarks/results/prove.json)."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_prove_benchmark_records_both_models_proved_with_their_times(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_prove", ROOT / "benchmarks" / "prove.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "prove.json"
    result = module.main(["--quick", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    rows = {row["model"]: row for row in result["rows"]}
    assert set(rows) == {"encoder-decoder", "language model"}
    for row in rows.values():
        assert row["proved"] and row["checked_calls"] > 5
        assert 0 < row["export_s_median"] <= row["prove_s_median"]


def test_the_committed_figures_are_within_the_target():
    result = json.loads((ROOT / "benchmarks" / "results" / "prove.json").read_text())
    assert result["command"] == "python benchmarks/prove.py" and result["rounds"] >= 3
    for row in result["rows"]:
        assert row["proved"] and row["prove_s_median"] <= 60, row
