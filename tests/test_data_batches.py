"""Token-budget batching with length buckets: no batch exceeds the budget, every example appears exactly once per
epoch, ranks' shares are disjoint and cover the epoch, the same (seed, epoch) gives the same plan, the iterator resumes
from the Trainer's generator; token ids live in one memory-mapped array on disk."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer.data.corpora import PairDataset, TextWindows
from transformer.data.lm_batch import LMBatch
from transformer.data.token_batches import ResumableBatches, TokenBudgetPlan, position_of
from transformer.data.token_store import TokenStore, write_token_store

lengths_strategy = st.lists(st.integers(1, 40), min_size=1, max_size=120)


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_strategy, budget=st.integers(40, 200), seed=st.integers(0, 10), epoch=st.integers(0, 5))
def test_no_batch_exceeds_the_budget_and_every_example_appears_once_per_epoch(lengths, budget, seed, epoch):
    plan = TokenBudgetPlan(lengths, budget, seed=seed)
    batches = plan.epoch(epoch)
    lengths = np.asarray(lengths)
    assert all(len(b) * lengths[b].max() <= budget for b in batches)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))
    assert len(batches) == plan.n_batches == plan.batches_per_epoch
    # greedy: adding the next example of the length order to a batch would have broken the budget
    order = np.concatenate(TokenBudgetPlan(lengths.tolist(), budget, shuffle=False).epoch(0))
    cut = TokenBudgetPlan(lengths.tolist(), budget, shuffle=False).epoch(0)
    for batch, following in zip(cut, cut[1:], strict=False):
        grown = np.concatenate([batch, following[:1]])
        assert len(grown) * lengths[grown].max() > budget
    assert np.all(np.diff(lengths[order]) >= 0)  # the length buckets: sorted by length
    spans = sorted((int(lengths[b].min()), int(lengths[b].max())) for b in batches)
    assert all(
        a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False)
    )  # shuffled batches still hold disjoint length ranges


def test_a_budget_that_examples_fill_exactly_is_filled():
    """Equal lengths (the language model's windows): max_tokens // length examples a batch, the budget reached."""
    plan = TokenBudgetPlan([4] * 12, 16, shuffle=False)
    assert [len(b) for b in plan.epoch(0)] == [4, 4, 4]
    assert [len(b) for b in TokenBudgetPlan([128] * 40, 2048, seed=1).epoch(3)] == [16, 16, 8]
    assert [len(b) for b in TokenBudgetPlan([2, 2, 3, 3, 6], 6, shuffle=False).epoch(0)] == [2, 2, 1]  # 2x2, 2x3, 1x6


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 20), min_size=8, max_size=100),
    world_size=st.integers(1, 4),
    epoch=st.integers(0, 3),
)
def test_rank_shares_are_disjoint_and_cover_the_epoch(lengths, world_size, epoch):
    budget = 40
    whole = TokenBudgetPlan(lengths, budget, seed=5)
    if whole.n_batches < world_size:
        with pytest.raises(ValueError, match="cannot be shared by"):
            TokenBudgetPlan(lengths, budget, seed=5, world_size=world_size)
        return
    shares = [
        TokenBudgetPlan(lengths, budget, seed=5, rank=r, world_size=world_size).epoch(epoch) for r in range(world_size)
    ]
    seen = [i for share in shares for batch in share for i in batch.tolist()]
    assert sorted(seen) == list(range(len(lengths)))  # covering, each exactly once: disjoint
    counts = [len(share) for share in shares]
    assert max(counts) - min(counts) <= 1 and sum(counts) == whole.n_batches
    union = sorted(tuple(sorted(b.tolist())) for share in shares for b in share)
    assert union == sorted(tuple(sorted(b.tolist())) for b in whole.epoch(epoch))  # the same batches, dealt out


def test_the_plan_is_a_function_of_seed_and_epoch_and_epochs_differ():
    lengths = [3, 9, 4, 4, 7, 1, 2, 8, 5, 5, 6, 3] * 10
    a = TokenBudgetPlan(lengths, 30, seed=1)
    same = [b.tolist() for b in TokenBudgetPlan(lengths, 30, seed=1).epoch(2)]
    assert [b.tolist() for b in a.epoch(2)] == same
    assert [b.tolist() for b in a.epoch(3)] != same
    assert [b.tolist() for b in TokenBudgetPlan(lengths, 30, seed=2).epoch(2)] != same


def test_impossible_budgets_and_ranks_are_refused_naming_the_example():
    with pytest.raises(ValueError, match="example 2 has 50 tokens, more than the batch budget max_tokens=40"):
        TokenBudgetPlan([3, 4, 50, 60], 40)
    with pytest.raises(ValueError, match=r"rank must be an int in \[0, world_size=2\)"):
        TokenBudgetPlan([3], 40, rank=2, world_size=2)


def _windows(tmp_path, n=300, block=8):
    store = write_token_store(tmp_path / "store", [list(range(1, n + 1))], vocab_size=n + 1)
    return TextWindows(store, block)


def test_the_iterator_resumes_from_the_trainer_generator(tmp_path):
    windows = _windows(tmp_path)
    factory = ResumableBatches(windows.lengths, 32, windows.make_batch, seed=3)
    g = torch.Generator().manual_seed(0)
    stream = factory(g)
    straight = [next(stream).tokens for _ in range(25)]  # 9 batches per epoch: nearly three epochs
    g = torch.Generator().manual_seed(0)
    stream = factory(g)
    first = [next(stream).tokens for _ in range(11)]
    saved = g.get_state()
    assert position_of(g) == 11
    resumed_generator = torch.Generator()
    resumed_generator.set_state(saved)
    stream = factory(resumed_generator)
    rest = [next(stream).tokens for _ in range(14)]
    assert all(torch.equal(a, b) for a, b in zip(first + rest, straight, strict=True))
    per_epoch = TokenBudgetPlan(windows.lengths, 32, seed=3).batches_per_epoch
    epoch = torch.cat([b.flatten() for b in straight[:per_epoch]])
    assert sorted(epoch.tolist()) == sorted(
        torch.cat([torch.from_numpy(windows.window(i))[:-1] for i in range(len(windows))]).tolist()
    )


def test_a_shard_keyword_gives_each_rank_its_share(tmp_path):
    windows = _windows(tmp_path)
    factory = ResumableBatches(windows.lengths, 16, windows.make_batch, seed=3)

    class Shard:
        def __init__(self, rank, world_size):
            self.rank, self.world_size = rank, world_size

    shares = []
    for rank in range(2):
        per_rank = TokenBudgetPlan(windows.lengths, 16, seed=3, rank=rank, world_size=2).batches_per_epoch
        stream = factory(torch.Generator().manual_seed(0), shard=Shard(rank, 2))
        shares.append([tuple(row.tolist()) for _ in range(per_rank) for row in next(stream).tokens])
    assert len(shares[0]) + len(shares[1]) == len(windows)  # 37 windows in 19 batches: 10 for rank 0, 9 for rank 1
    assert not set(shares[0]) & set(shares[1]) and len(set(shares[0]) | set(shares[1])) == len(windows)


def test_windows_overlap_by_one_so_every_token_is_a_label_once(tmp_path):
    windows = _windows(tmp_path, n=50, block=8)
    assert len(windows) == (50 - 1) // 8
    batch = windows.make_batch([0, 1])
    assert batch.tokens.tolist() == [list(range(1, 9)), list(range(9, 17))]
    assert batch.labels.tolist() == [list(range(2, 10)), list(range(10, 18))]
    assert windows.labels().tolist() == list(range(2, 2 + len(windows) * 8))
    assert batch.ntokens == 16 and batch.mask.causal and not batch.mask.tensors()


def test_the_token_store_is_one_memory_mapped_array(tmp_path):
    rows = [[1, 2, 3], [], [70000, 5]]
    store = write_token_store(tmp_path / "s", rows, vocab_size=70001, info={"made_by": "test"})
    assert isinstance(store.tokens, np.memmap) and store.tokens.dtype == np.uint32
    assert store.lengths.tolist() == [3, 0, 2] and [store[i].tolist() for i in range(3)] == rows
    assert store.info == {"made_by": "test"} and store.window(2, 3).tolist() == [3, 70000, 5]
    small = write_token_store(tmp_path / "u16", [[1, 2]], vocab_size=100)
    assert small.tokens.dtype == np.uint16
    reopened = TokenStore.open(tmp_path / "s")
    assert reopened[2].tolist() == [70000, 5]
    (tmp_path / "s" / "tokens.bin").write_bytes(b"\x00" * 6)
    with pytest.raises(ValueError, match="holds 6 bytes of uint32 but offsets.npy says 5 ids"):
        TokenStore.open(tmp_path / "s")
    with pytest.raises(ValueError, match=r"token id 100 is outside \[0, 100\)"):
        write_token_store(tmp_path / "bad", [[1, 100]], vocab_size=100)
    assert not (tmp_path / "bad").exists()


def test_pair_batches_wrap_targets_and_pad(tmp_path):
    src = write_token_store(tmp_path / "src", [[5, 6, 7], [8]], vocab_size=20)
    tgt = write_token_store(tmp_path / "tgt", [[9], [10, 11, 12]], vocab_size=20)
    data = PairDataset(src, tgt, pad=0, bos=1, eos=2)
    assert data.lengths.tolist() == [3, 4]  # max(source, target + 1)
    batch = data.make_batch([0, 1])
    assert batch.src.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch.tgt.tolist() == [[1, 9, 2, 0], [1, 10, 11, 12]] and batch.tgt_y.tolist() == [
        [9, 2, 0, 0],
        [10, 11, 12, 2],
    ]
    assert batch.ntokens == 6


def test_a_padded_lm_batch_masks_padding_and_counts_real_labels():
    batch = LMBatch(torch.tensor([[5, 6, 7, 8], [5, 6, 0, 0]]), pad=0)
    assert batch.ntokens == 4 and batch.mask.causal and batch.mask.key_lengths.tolist() == [3, 2]
    with pytest.raises(ValueError, match=r"tokens must be \(batch, seq \+ 1\) with seq >= 1"):
        LMBatch(torch.tensor([[5]]))
