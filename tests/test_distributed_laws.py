"""Distributed training under torchrun (gloo, 2 processes on the CPU): the laws of transformer.distributed.

A launch of the worker of ``distributed_job.py`` trains tiny models under DDP and FSDP2; the tests compare what each
rank saw and saved with one process here: the shares of every batch, the loss trajectory and the weights, reductions,
checkpoints and their exact resume, each rank's dropout stream, errors on one rank.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
import torch
from distributed_job import ACCUM, GLOBAL_BATCH, STEPS, WORKER, build, params, record_inputs
from safetensors.torch import load_file
from torchrun_launch import (
    check_ok,
    read_json,
    restore_threads,  # noqa: F401  (an autouse fixture: active where imported)
    torchrun,
)

import transformer as T


@pytest.fixture(scope="module")
def laws(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("laws")
    check_ok(torchrun(str(WORKER), "laws", str(out)))
    return out


@pytest.fixture(scope="module")
def reference() -> dict:
    """One process, the whole batch of 8: the run the 2-rank jobs must reproduce."""
    trainer = build()
    seen = record_inputs(trainer)
    trainer.train()
    return {
        "history": trainer.history.train_loss,
        "params": params(trainer.model),
        "seen": seen,
        "eval_loss": trainer.evaluate(),
        "tokens": trainer.tokens,
    }


def _close_params(a: dict, b: dict, atol: float = 2e-5) -> None:
    """Equal within float tolerance, except the key projections' biases: they add the same q.b to every score of
    a query, which the softmax ignores, so their true gradient is exactly 0 and Adam (m / sqrt(v)) turns the float
    noise of any two summation orders into full-size steps; they change no output."""
    assert a.keys() == b.keys()
    for name in a:
        if name.endswith("k_proj.bias"):
            continue
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")


def _losses(history) -> list[float]:
    return [loss for _, loss in history]


# ---------------------------------------------------------------------------- the laws
def test_each_rank_reads_its_own_half_of_every_global_batch(laws, reference):
    """Rank r runs rows [r*B/2, (r+1)*B/2) of the batch one process would run: disjoint, together the whole batch."""
    for strategy in ("A", "B"):
        ranks = [load_file(laws / f"{strategy}_seen_rank{r}.safetensors") for r in range(2)]
        assert len(ranks[0]) == len(ranks[1]) == len(reference["seen"]) == STEPS * ACCUM
        for i, whole in enumerate(reference["seen"]):
            halves = [ranks[r][str(i)] for r in range(2)]
            assert [h.size(0) for h in halves] == [GLOBAL_BATCH // 2] * 2
            assert torch.equal(torch.cat(halves), whole), (
                f"{strategy}: micro-batch {i} is not the global batch split in two"
            )


def test_ddp_two_ranks_of_half_the_batch_match_one_process_of_the_whole_batch(laws, reference):
    """Same seed: losses, token count and weights of 2 x B/2 under DDP equal 1 x B, although the ranks hold
    different numbers of tokens (padding) and each step accumulates two micro-batches and clips the gradient."""
    record = read_json(laws / "A_rank0.json")
    assert [s for s, _ in record["history"]] == list(range(1, STEPS + 1))
    assert _losses(record["history"]) == pytest.approx(_losses(reference["history"]), rel=1e-5)
    assert record["tokens"] == reference["tokens"]
    _close_params(load_file(laws / "A_rank0.safetensors"), reference["params"])


def test_parameters_are_identical_on_both_ranks_after_training(laws):
    ranks = [load_file(laws / f"A_rank{r}.safetensors") for r in range(2)]
    for name in ranks[0]:
        assert torch.equal(ranks[0][name], ranks[1][name]), name
    assert read_json(laws / "A_rank0.json")["history"] == read_json(laws / "A_rank1.json")["history"]


def test_gradient_accumulation_all_reduces_once_per_optimizer_step(laws):
    """DDP's gradient all-reduce (counted by a comm hook) runs in the last micro-batch's backward only."""
    record = read_json(laws / "A_rank0.json")
    counts = record["sync_counts"]  # all-reduces so far, read before each training forward
    assert len(counts) == STEPS * ACCUM
    for step in range(STEPS):
        first, second = counts[step * ACCUM], counts[step * ACCUM + 1]
        assert first == second, f"step {step + 1}: an all-reduce ran in the accumulation micro-batch's backward"
        following = counts[(step + 1) * ACCUM] if step + 1 < STEPS else record["final_sync_count"]
        assert following > second, f"step {step + 1}: no all-reduce at the end of the step"
    assert record["final_sync_count"] % STEPS == 0


def test_evaluation_is_reduced_across_ranks(laws, reference):
    """5 evaluation batches split between 2 ranks (3 + 2): every rank reports the loss of the whole set."""
    for record in (read_json(laws / "A_rank0.json"), read_json(laws / "A_rank1.json"), read_json(laws / "B.json")):
        assert record["eval_loss"] == pytest.approx(reference["eval_loss"], rel=1e-5)


def test_contracts_are_checked_on_each_rank_and_the_switch_works(laws):
    for rank in range(2):
        record = read_json(laws / f"A_rank{rank}.json")
        assert record["checks_enabled"] is True
        assert record["errors"]["True"] == "TypeCheckError"  # a wrong-shaped mask, checks on
        assert record["errors"]["False"] != "TypeCheckError"  # checks off: the contract is not checked


def test_fsdp_starts_every_rank_from_rank_0s_weights(laws):
    """Each rank built its model from another seed; the sharded model is rank 0's (seed 0), as under DDP."""
    expected = params(build(seed=0).model)
    got = load_file(laws / "F_initial.safetensors")
    assert got.keys() == expected.keys()
    for name in expected:
        assert torch.equal(got[name], expected[name]), name


def test_fsdp_gives_the_ddp_loss_trajectory_and_weights(laws):
    ddp, fsdp = read_json(laws / "A_rank0.json"), read_json(laws / "B.json")
    assert _losses(fsdp["history"]) == pytest.approx(_losses(ddp["history"]), rel=1e-5)
    assert fsdp["tokens"] == ddp["tokens"]
    _close_params(load_file(laws / "B_full.safetensors"), load_file(laws / "A_rank0.safetensors"))


def test_ddp_checkpoints_are_written_by_rank_0_only_and_resume_exactly(laws):
    """6 steps straight equal 3 steps, a checkpoint, a new trainer (another seed) resumed, 3 more: bit for bit,
    with dropout on (each rank resumes its own RNG stream)."""
    assert [read_json(laws / f"C_rank{r}.json")["writes"] for r in range(2)] == [2, 0]
    for rank in range(2):
        record = read_json(laws / f"C_rank{rank}.json")
        assert record["resumed"] == record["straight"]
        straight, resumed = (load_file(laws / f"C_{kind}_rank{rank}.safetensors") for kind in ("straight", "resumed"))
        for name in straight:
            assert torch.equal(straight[name], resumed[name]), name
    assert sorted(os.listdir(laws / "C_ck")) == [
        "config.json",
        "meta.json",
        "model.safetensors",
        "state.json",
        "state.safetensors",
    ]


def test_each_rank_has_its_own_dropout_stream_from_the_seed_and_the_rank(laws):
    """After wrapping, rank r reseeds with seed + r: the ranks' dropout masks differ (a same-seed mask on every rank
    would drop the same units of every rank's examples)."""
    ranks = [load_file(laws / f"C_dropout_rank{r}.safetensors") for r in range(2)]
    assert int(ranks[1]["seed"]) == int(ranks[0]["seed"]) + 1
    assert not torch.equal(ranks[0]["mask"], ranks[1]["mask"])


def test_every_rank_stops_at_the_same_step_when_one_diverges_or_is_interrupted(laws):
    """Rank 1 alone sees a NaN loss at step 3: both ranks stop there (the loss is reduced before it is checked),
    and the checkpoint written every step holds step 2. Rank 1 alone gets Ctrl-C during step 3: both ranks save
    step 3 and stop (the request travels with the step's loss reduction)."""
    from transformer.checkpoint import load_checkpoint

    assert [read_json(laws / f"H_rank{r}.json") for r in range(2)] == [{"diverged_at": 3, "interrupted_at": 3}] * 2
    assert load_checkpoint(laws / "H_diverged").trainer_state["step"] == 2
    assert load_checkpoint(laws / "H_interrupted").trainer_state["step"] == 3


def test_fsdp_sharded_checkpoint_resumes_exactly_on_the_same_world_size(laws):
    record = read_json(laws / "D.json")
    assert record["resumed"] == record["straight"]
    straight, resumed = load_file(laws / "D_straight.safetensors"), load_file(laws / "D_resumed.safetensors")
    for name in straight:
        assert torch.equal(straight[name], resumed[name]), name
    files = sorted(os.listdir(laws / "D_ck" / "dcp"))
    assert files == [".metadata", "__0_0.distcp", "__1_0.distcp"]  # every rank wrote its part
    assert not [name for name in os.listdir(laws) if ".tmp-" in name or ".old-" in name]


def test_consolidation_round_trip_gives_the_weights_decode_reads(laws, tmp_path):
    from transformer.checkpoint import load_checkpoint
    from transformer.distributed import consolidate_checkpoint

    consolidate_checkpoint(laws / "D_ck", tmp_path / "full")
    loaded = load_checkpoint(tmp_path / "full")
    expected = load_file(laws / "D_step3.safetensors")
    got = dict(loaded.model.named_parameters())
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert torch.equal(got[name].detach(), value), name
    assert (
        loaded.config.architecture()
        == T.TransformerConfig(
            src_vocab=11,
            tgt_vocab=11,
            n_encoder_layers=1,
            n_decoder_layers=1,
            d_model=16,
            d_ff=32,
            n_heads=2,
            dropout=0.3,
            attention_dropout=0.3,
            max_len=16,
        ).architecture()
    )


def test_a_corrupt_or_missing_shard_is_refused(laws, tmp_path):
    import shutil

    from transformer.checkpoint import CheckpointError
    from transformer.distributed import consolidate_checkpoint

    broken = tmp_path / "broken"
    shutil.copytree(laws / "D_ck", broken)
    shard = broken / "dcp" / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"corrupt: dcp/__1_0.distcp"):
        consolidate_checkpoint(broken, tmp_path / "out")
    shard.unlink()
    with pytest.raises(CheckpointError, match=r"incomplete: dcp/__1_0.distcp is missing"):
        consolidate_checkpoint(broken, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["config.json", "state.safetensors", "state.json"])
def test_every_file_of_a_sharded_checkpoint_is_checked_against_its_recorded_hash(laws, tmp_path, name):
    """The trainer state (RNG states, optimizer tensors) and the config are hashed like the shards: a damaged or
    missing one is refused by name before anything resumes from it."""
    import shutil

    from transformer.checkpoint import CheckpointError
    from transformer.distributed.sharded_checkpoint import verify_sharded

    broken = tmp_path / "broken"
    shutil.copytree(laws / "D_ck", broken)
    data = bytearray((broken / name).read_bytes())
    data[len(data) // 2] ^= 0x01
    (broken / name).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=rf"is corrupt: {re.escape(name)} does not match its recorded SHA-256"):
        verify_sharded(str(broken))
    (broken / name).unlink()
    with pytest.raises(CheckpointError, match=rf"is incomplete: {re.escape(name)} is missing"):
        verify_sharded(str(broken))


def test_on_another_world_size_each_rank_resumes_with_its_own_dropout_stream():
    """A one-process checkpoint (or one of another world size) has no stream per rank: each rank's is derived from
    the step and the rank, so ranks differ, a rank gets the same stream every time, and later steps get new ones."""
    from transformer.distributed.strategy import CollectiveStrategy
    from transformer.distributed.world import World

    def stream(rank, step, world_size=3):
        strategy = CollectiveStrategy(World(rank=rank, world_size=world_size), "cpu")
        state = {"step": step, "torch_rng": torch.Generator().manual_seed(7).get_state()}
        generator = torch.Generator()
        generator.set_state(strategy.own_rank_state(state)["torch_rng"])
        return torch.rand(8, generator=generator)

    at_5 = [stream(rank, 5) for rank in range(3)]
    assert not any(torch.equal(at_5[i], at_5[j]) for i in range(3) for j in range(i + 1, 3))
    assert torch.equal(stream(1, 5), at_5[1])
    assert not any(torch.equal(stream(rank, 6), at_5[rank]) for rank in range(3))


def test_a_shard_aware_factory_gets_each_ranks_share_of_a_file_corpus(laws):
    """The LM's token-budget batches (transformer.data) take ``shard=``: rank r trains on its own plan's batches."""
    ranks = [load_file(laws / f"G_rank{r}.safetensors") for r in range(2)]
    for tensors in ranks:
        for i in range(3):
            assert torch.equal(tensors[f"seen{i}"], tensors[f"expected{i}"]), f"step {i + 1}"
    assert not any(torch.equal(ranks[0][f"seen{i}"], ranks[1][f"seen{i}"]) for i in range(3))


def test_a_sharded_language_model_consolidates_with_its_tokenizer(laws, tmp_path):
    from transformer.checkpoint import load_checkpoint
    from transformer.distributed import consolidate_checkpoint

    consolidate_checkpoint(laws / "G_ck", tmp_path / "lm")
    loaded = load_checkpoint(tmp_path / "lm")
    assert loaded.kind == "lm" and "tokenizer.json" in loaded.assets
    assert (tmp_path / "lm" / "tokenizer.json").read_bytes() == (laws / "G_ck" / "tokenizer.json").read_bytes()
    expected = load_file(laws / "G_full.safetensors")
    got = dict(loaded.model.named_parameters())
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert torch.equal(got[name].detach(), value), name


@pytest.fixture(scope="module")
def resized(laws) -> Path:
    check_ok(torchrun(str(WORKER), "resize", str(laws), nproc=1))
    return laws


def test_fsdp_resumes_a_two_rank_checkpoint_on_one_rank(resized):
    """The data is the same global stream whatever the world size, so 1 x B continues 2 x B/2's trajectory."""
    record, full_run = read_json(resized / "E.json"), read_json(resized / "B.json")
    assert record["world_size"] == 1 and record["start"] == 2
    assert record["history"][:2] == full_run["history"][:2]  # restored from the checkpoint
    assert _losses(record["history"]) == pytest.approx(_losses(full_run["history"]), rel=1e-5)
    _close_params(load_file(resized / "E_full.safetensors"), load_file(resized / "B_full.safetensors"))


def test_a_rank_that_raises_brings_the_job_down_with_its_error(tmp_path):
    from transformer.checkpoint import load_checkpoint

    start = time.monotonic()
    result = torchrun(str(WORKER), "raise", str(tmp_path), timeout=120)
    assert result.returncode != 0
    assert "RuntimeError: planted failure on rank 1 at step 3" in result.stdout + result.stderr
    assert time.monotonic() - start < 120
    # the last complete checkpoint (step 2) is intact and nothing half-written is left
    assert load_checkpoint(tmp_path / "ck").trainer_state["step"] == 2
    assert sorted(os.listdir(tmp_path)) == ["ck"]
