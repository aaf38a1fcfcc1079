"""Distributed training without a launch: the torchrun environment, shards of a batch, a shard-aware batch factory,
the CLI's usage errors for ``--strategy`` and ``--batch-size``, the kind of checkpoint ``consolidate`` and ``decode``
take, and the progress bar drawn by rank 0 only."""

from __future__ import annotations

import json

import pytest
import torch
from distributed_job import padded_batches
from torchrun_launch import restore_threads  # noqa: F401  (an autouse fixture: active where imported)

import transformer as T


# ---------------------------------------------------------------------------- without a launch
def test_torchrun_environment_is_read_and_bad_values_are_named():
    from transformer.distributed import DistributedSetupError, World, torchrun_world

    assert torchrun_world({}) is None
    world = torchrun_world(
        {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RESTART_COUNT": "2"}
    )
    assert world == World(rank=3, world_size=4, local_rank=1, local_world_size=2, restart_count=2) and not world.is_main
    with pytest.raises(DistributedSetupError, match="LOCAL_RANK missing"):
        torchrun_world({"RANK": "0", "WORLD_SIZE": "2"})
    with pytest.raises(DistributedSetupError, match=r"RANK=2 must be in \[0, WORLD_SIZE=2\)"):
        torchrun_world({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"})
    with pytest.raises(DistributedSetupError, match="WORLD_SIZE='two' is not an integer"):
        torchrun_world({"RANK": "0", "WORLD_SIZE": "two", "LOCAL_RANK": "0"})


def test_shards_of_a_batch_are_disjoint_and_make_the_batch():
    from transformer.distributed import DistributedSetupError, Shard, shard_batch

    batch = next(padded_batches(torch.Generator().manual_seed(0), 6))
    parts = [shard_batch(batch, Shard(r, 3)) for r in range(3)]
    assert torch.equal(torch.cat([p.src for p in parts]), batch.src)
    assert torch.equal(torch.cat([p.tgt for p in parts]), batch.tgt)
    assert torch.equal(torch.cat([p.tgt_y for p in parts]), batch.tgt_y)
    assert sum(p.ntokens for p in parts) == batch.ntokens
    assert torch.equal(torch.cat([p.src_mask.to_dense(1, 7) for p in parts]), batch.src_mask.to_dense(1, 7))
    with pytest.raises(DistributedSetupError, match="a global batch of 6 is not divisible by the world size 4"):
        shard_batch(batch, Shard(0, 4))
    with pytest.raises(TypeError, match="cannot split a tuple"):
        shard_batch((1, 2), Shard(0, 2))


def test_a_factory_that_takes_a_shard_gets_this_ranks_shard():
    from transformer.distributed import Shard, SingleProcess, World

    calls = []

    def factory(generator, *, shard):
        calls.append(shard)
        return iter(())

    SingleProcess().batches(factory, torch.Generator())
    SingleProcess(World(rank=1, world_size=2)).batches(factory, torch.Generator())
    assert calls == [Shard(0, 1), Shard(1, 2)]


def test_strategy_without_torchrun_is_a_usage_error(capsys, monkeypatch):
    from transformer.cli import main

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert main(["train", "copy", "--strategy", "fsdp", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "--strategy fsdp needs processes started by torchrun" in err and "torchrun --nproc_per_node=N" in err


def test_batch_size_not_divisible_by_the_world_size_is_a_usage_error(capsys, monkeypatch, tmp_path):
    from transformer.cli import main

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert main(["train", "copy", "--batch-size", "16", "--out", str(tmp_path / "x")]) == 2
    assert "--batch-size 16 is not divisible by the world size 3" in capsys.readouterr().err
    assert main(["train", "copy", "--out", str(tmp_path / "x")]) == 2  # the copy task's 80
    assert "the copy task's batch size 80 is not divisible by the world size 3" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_consolidate_and_decode_name_the_wrong_kind_of_checkpoint(capsys, tmp_path):
    from transformer.checkpoint import save_checkpoint
    from transformer.cli import main
    from transformer.distributed import SHARDED_FORMAT

    save_checkpoint(tmp_path / "single", T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=2))
    assert main(["consolidate", str(tmp_path / "single"), str(tmp_path / "out")]) == 2
    assert "is not sharded" in capsys.readouterr().err
    (tmp_path / "sharded").mkdir()
    (tmp_path / "sharded" / "meta.json").write_text(json.dumps({"format": SHARDED_FORMAT, "world_size": 2}))
    assert main(["decode", "--checkpoint", str(tmp_path / "sharded"), "1 2 3"]) == 2
    assert (
        "is sharded (saved by --strategy fsdp); gather it first: typed-transformer consolidate"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize("rank", [0, 1])
def test_only_rank_0_draws_the_progress_bar(rank, capsys):
    """Under torchrun every rank runs the same loop; the bar (and the eval lines written through it) is rank 0's."""
    from transformer.distributed.world import World
    from transformer.tasks import CopyTask, make_trainer

    trainer = make_trainer(
        CopyTask(),
        steps=2,
        batch_size=4,
        n_encoder_layers=1,
        n_decoder_layers=1,
        d_model=16,
        d_ff=32,
        n_heads=2,
        eval_every=0,
    )
    trainer.config.progress = True
    trainer.strategy.world = World(rank=rank, world_size=1)  # is_main from the rank; one process, no collectives
    trainer.train()
    err = capsys.readouterr().err
    assert ("train" in err and "2/2" in err) if rank == 0 else err == "", err[-500:]


def _stream_reader(reads: list):
    """Factories of every signature that accepts a shard, over one global stream of 6 rows per batch: each records
    the rows it reads (``reads``) and yields them."""

    def read(generator, shard):
        rank, world = (0, 1) if shard is None else shard
        for step in range(2):
            rows = [6 * step + i for i in range(6)][rank * 6 // world : (rank + 1) * 6 // world]
            reads.extend(rows)
            yield rows

    def named(generator, shard):
        return read(generator, shard)

    def keyword_only(generator, *, shard):
        return read(generator, shard)

    def optional(generator, shard=None):
        return read(generator, shard)

    def any_keywords(generator, **kwargs):
        return read(generator, kwargs.get("shard"))

    def positional_and_keywords(*args, **kwargs):
        return read(args[0], kwargs.get("shard"))

    return {f.__name__: f for f in (named, keyword_only, optional, any_keywords, positional_and_keywords)}


@pytest.mark.parametrize("name", list(_stream_reader([])))
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_every_factory_that_accepts_a_shard_is_given_it_and_each_rank_reads_only_its_part(name, world_size):
    """A factory that names ``shard`` or takes ``**kwargs`` gets ``Shard(rank, world_size)``: every rank reads its
    own rows only, the ranks' rows are disjoint and together the whole stream."""
    from transformer.distributed import SingleProcess, World

    per_rank = []
    for rank in range(world_size):
        reads: list[int] = []
        strategy = SingleProcess(World(rank=rank, world_size=world_size))
        got = [row for batch in strategy.batches(_stream_reader(reads)[name], torch.Generator()) for row in batch]
        assert got == reads, f"rank {rank} was given rows it did not read itself"
        per_rank.append(reads)
    rows = [row for reads in per_rank for row in reads]
    assert sorted(rows) == list(range(12)) and len(rows) == 12, per_rank
