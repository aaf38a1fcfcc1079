"""The CPU speed benchmarks of issue 22 run and record what docs/benchmarks.md reports: one round each, small
sizes (the figures themselves come from full runs on an idle machine, never from tests)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _script(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lm_vs_gpt2_records_every_variant_and_both_check_policies(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "lm.json"
    result = _script("lm_vs_gpt2").main(
        ["--rounds", "1", "--batch", "2", "--length", "16", "--new-tokens", "3", "--json", str(out)]
    )
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    rows = {(r["task"], r["variant"]): r for r in result["rows"]}
    for task in ("training step", "generation, batch 1", "generation, batch 8"):
        for variant in ("ours, checks on", "ours, checks off", "GPT-2 (sdpa)"):
            assert rows[(task, variant)]["median_ms"] > 0
        assert 0 < rows[(task, "checks on vs off (ours)")]["contract_probes"]
    for task in ("generation, batch 1", "generation, batch 8"):
        first = rows[(task, "checks on vs off (ours)")]["contract_probes"]
        always = rows[(task, "checks always vs off (ours)")]["contract_probes"]
        assert first < always  # checks="first" checks two steps of three, "always" all three
    assert ("training step", "checks always vs off (ours)") not in rows
    assert result["load_average_before"] and result["date"]


def test_generate_vs_transformers_dry_run_records_every_case_on_the_same_tokens(tmp_path):
    """--quick: tiny sizes, one round; every case recorded with both timings, greedy generation gives transformers'
    tokens, the prefill the same log-probabilities, and the JSON names the command, device, versions and date."""
    pytest.importorskip("transformers")
    out = tmp_path / "gen.json"
    result = _script("generate_vs_transformers").main(["--quick", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    rows = {r["case"]: r for r in result["rows"]}
    assert set(rows) == {"generation, batch 1", "generation, batch 8", "prefill 32", "training step"}
    for row in rows.values():
        assert row["ours_ms"] > 0 and row["theirs_ms"] > 0 and row["speed_ours_vs_theirs"] > 0
    assert rows["generation, batch 1"]["tokens_equal"] and rows["generation, batch 8"]["tokens_equal"]
    assert rows["generation, batch 8"]["ours_tokens_per_s"] > 0
    assert rows["prefill 32"]["max_relative_logit_difference"] < 1e-5
    assert "--quick" in result["command"] and result["transformers"] and result["device"] and result["date"]


def test_train_step_records_ours_on_and_off_against_torch(tmp_path):
    out = tmp_path / "ts.json"
    result = _script("train_step").main(["--rounds", "1", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    variants = {r["variant"]: r for r in result["rows"]}
    assert set(variants) == {"torch.nn.Transformer", "ours, checks on", "ours, checks off"}
    assert variants["torch.nn.Transformer"]["speed_vs_torch_nn_transformer"] == 1.0
    assert result["contract_probes_per_forward"] > 0


def test_contracts_compile_counts_one_switch_read_per_checked_call():
    """The benchmark counts checked calls by the switch reads they make: one per call, none from the backend choice."""
    import torch

    import transformer as T

    count = _script("contracts_compile")._checked_calls_per_forward
    norm, x = T.LayerNorm(8), torch.randn(2, 3, 8)
    assert count(norm, (x,)) == 1
    ffn = T.PositionwiseFeedForward(8, 16, dropout=0.0)
    assert count(ffn, (x,)) == 1
    mha = T.MultiHeadedAttention(2, 8, dropout=0.0)
    assert count(mha, (x, x, x)) == 3  # forward, attend inside it, and the checked attention the backend runs


def test_structured_attention_records_each_backend_and_flex_against_the_reference(tmp_path, monkeypatch):
    """Issue 29's question (dense or flex_attention for the torch backend): every variant checked against the
    reference first, forward and forward+backward recorded, flex's missing CPU backward said so."""
    out = tmp_path / "structured.json"
    args = ["--length", "16", "--window", "4", "--heads", "2", "--head-dim", "8", "--rounds", "1", "--out", str(out)]
    script = _script("structured_attention")
    monkeypatch.setitem(sys.modules, script.__name__, script)  # flex_attention's tracing imports its score_mod's module
    result = script.main(args)
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    rows = {(r["modifiers"], r["variant"]): r for r in result["rows"]}
    for modifiers in ("none", "softcap", "alibi_slopes"):
        for variant in ("eager", "torch"):
            assert rows[(modifiers, variant)]["forward_ms"] > 0
            assert rows[(modifiers, variant)]["forward_backward_ms"] > 0
        if (modifiers, "flex_attention") in rows:
            assert rows[(modifiers, "flex_attention")]["forward_backward_ms"].startswith("no backward: ")
    assert result["machine"]["load_average_1_5_15_before"] and result["date"]


def test_packed_training_dry_run_trains_the_same_labels_both_ways_with_equal_losses(tmp_path):
    """--quick: the packed and padded runs see the same labels each step, and their losses agree to rounding (the
    same documents, the same model; the padded run is the packed run's reference)."""
    out = tmp_path / "packed.json"
    result = _script("packed_training").main(["--quick", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert "--quick" in result["command"] and result["device"] and result["date"] and result["load_average_after"]
    assert len(result["losses"]["packed"]) == len(result["losses"]["padded"]) == 3
    assert result["loss_max_abs_difference"] < 1e-5
    assert result["positions_run"]["packed"] < result["positions_run"]["padded"]
    assert set(result["tokens_per_second"]) == {"packed", "padded"}


def test_packed_training_rows_hold_each_document_once_and_labels_stay_within_documents():
    bench = _script("packed_training")
    documents = bench.make_corpus(50, 16, 20, seed=1)
    groups = bench.step_groups(documents, rows=3, row_len=16, steps=2)
    flat = [doc for group in groups for row in group for doc in row]
    assert all(a is b for a, b in zip(flat, documents, strict=False))  # in order, none skipped or repeated
    assert all(sum(len(d) for d in row) <= 16 for group in groups for row in group)
    tokens, mask, labels = bench.packed_batch(groups[0], 16)
    same = mask.documents[:, 1:] == mask.documents[:, :-1]
    kept = labels[:, :-1] != bench.IGNORE
    assert torch.equal(kept, same & (mask.documents[:, :-1] < torch.tensor([len(r) for r in groups[0]])[:, None]))
    assert torch.equal(labels[:, :-1][kept], tokens[:, 1:][kept])


def test_generate_roofline_dry_run_records_every_variant_with_its_roofline_and_the_same_tokens(tmp_path):
    """--quick: the tiny size, one round; every variant at batch 1 and 8 with a positive rate, the roofline the
    bandwidth over the weights' bytes (every weight but the token embeddings, one row of them), compile times for
    the compiled variants only, and greedy tokens equal across the four."""
    pytest.importorskip("transformers")
    out = tmp_path / "roof.json"
    script = _script("generate_roofline")
    result = script.main(["--quick", "--batches", "1,8", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    rows = {(r["batch"], r["variant"]): r for r in result["rows"]}
    assert set(rows) == {(b, v) for b in (1, 8) for v in script.VARIANTS}
    size = script.SIZES["tiny"]
    ffn, hidden, kv = size["ffn"], size["hidden"], size["hidden"] * size["kv_heads"] // size["heads"]
    per_layer = 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * ffn + 2 * hidden  # q, o; k, v; FFN; 2 norms
    weights = size["layers"] * per_layer + hidden + size["vocab"] * hidden + hidden  # final norm, head, one row
    for (batch, variant), row in rows.items():
        assert row["decode_tokens_per_s"] > 0 and row["tokens_equal_ours_eager"], (batch, variant)
        assert row["streamed_bytes"] == 4 * weights
        assert row["roofline_tokens_per_s"] == pytest.approx(
            batch * row["matvec_gb_per_s"] * 1e9 / row["streamed_bytes"], rel=0.01
        )
        assert (row["compile_s"] is not None) == ("compile" in variant)
    assert "--quick" in result["command"] and result["transformers"] and result["load_average_before"]
