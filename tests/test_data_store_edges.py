"""Issue 31, data: a store or a cache either matches its sources exactly or is refused or rebuilt, and every public
reader of transformer.data takes its edge values (empty sequences, one token, exact multiples, -1) as a Python
sequence would. Each expected value is computed independently, from plain lists of the same ids."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from transformer.data import corpora
from transformer.data.corpora import TextWindows, build_pair_stores, build_text_store
from transformer.data.text_files import read_text
from transformer.data.token_store import TokenStore, write_token_store
from transformer.data.tokenizers import train_tokenizer

SEQUENCES = [[5, 6, 7], [], [9], [1, 2, 3, 4, 8]]  # an empty sequence and one of one token among others


@pytest.fixture
def store(tmp_path):
    return write_token_store(tmp_path / "s", SEQUENCES, vocab_size=10)


# ---------------------------------------------------------------------------- the store as a sequence
def test_every_index_negative_ones_included_is_the_sequence_a_list_gives(store):
    assert len(store) == len(SEQUENCES)
    for index in range(-len(SEQUENCES), len(SEQUENCES)):
        assert store[index].tolist() == SEQUENCES[index], index
        assert store[np.int64(index)].tolist() == SEQUENCES[index], index
    assert store[-1].tolist() == [1, 2, 3, 4, 8] and store[-3].tolist() == []


@pytest.mark.parametrize(
    "cut", [slice(None), slice(1, None), slice(None, None, -1), slice(-2, None), slice(1, 3, 2), slice(9, 20)]
)
def test_a_slice_is_the_list_of_sequences_a_list_slice_gives(store, cut):
    assert [row.tolist() for row in store[cut]] == SEQUENCES[cut]


@pytest.mark.parametrize("index", [4, -5, 100, -100])
def test_an_index_out_of_range_is_an_index_error_naming_the_index_and_the_length(store, index):
    with pytest.raises(IndexError, match=rf"^TokenStore: index {index} is out of range for 4 sequences \(valid: -4 "):
        store[index]


def test_an_empty_store_has_no_sequence_and_a_non_integer_index_is_refused(tmp_path, store):
    empty = write_token_store(tmp_path / "empty", [], vocab_size=10)
    assert len(empty) == 0 and empty[:] == [] and empty.lengths.tolist() == []
    for index in (0, -1):
        with pytest.raises(IndexError, match=rf"index {index} is out of range for 0 sequences"):
            empty[index]
    for index in ("1", 1.0, None):
        with pytest.raises(TypeError, match=f"integers or slices, not {type(index).__name__}"):
            store[index]


def test_a_window_of_the_flat_stream_is_the_list_slice_and_never_reads_past_the_end(store):
    flat = [i for row in SEQUENCES for i in row]
    for start in range(len(flat) + 1):
        for length in range(len(flat) - start + 1):
            assert store.window(start, length).tolist() == flat[start : start + length]
    for start, length in ((len(flat), 1), (len(flat) - 2, 3), (-1, 1), (0, -1), (0.0, 1)):
        with pytest.raises(IndexError, match=rf"start {start!r} and length {length!r} are not inside the 9 tokens"):
            store.window(start, length)


# ---------------------------------------------------------------------------- windows at and around multiples
def _windows_by_hand(stream: list[int], block: int, start: int, end: int) -> list[list[int]]:
    """Every window of block + 1 tokens from start, block apart, that fits in [start, end)."""
    out, first = [], start
    while first + block + 1 <= end:
        out.append(stream[first : first + block + 1])
        first += block
    return out


@pytest.mark.parametrize("block", [1, 3, 4])
@pytest.mark.parametrize("start", [0, 2])
def test_windows_are_exactly_the_windows_the_span_holds_at_and_around_multiples_of_the_block(tmp_path, block, start):
    stream = list(range(1, 61))  # more tokens after every span: a window past its end would read real ids
    store = write_token_store(tmp_path / "s", [stream[:25], stream[25:]], vocab_size=64)
    for k in (1, 2, 3, 5):
        for span in (k * block - 1, k * block, k * block + 1):
            end = start + span
            expected = _windows_by_hand(stream, block, start, end)
            if not expected:
                no_window = "0 tokens make no window" if span == 0 else f"{span} tokens make no window of {block + 1}"
                with pytest.raises(ValueError, match=no_window):
                    TextWindows(store, block, start, end)
                continue
            windows = TextWindows(store, block, start, end)
            assert len(windows) == len(expected), (block, start, span)
            assert [windows.window(i).tolist() for i in range(len(windows))] == expected
            assert windows.window(-1).tolist() == expected[-1]
            labels = windows.labels().tolist()
            assert labels == stream[start + 1 : start + 1 + len(expected) * block] and max(labels) <= end
            batch = windows.make_batch(range(len(windows)))
            assert batch.tokens.tolist() == [row[:-1] for row in expected]
            for index in (len(expected), -len(expected) - 1):
                with pytest.raises(IndexError, match=f"window {index} is out of range for {len(expected)} windows"):
                    windows.window(index)


def test_windows_refuse_spans_that_are_not_ints_and_batches_of_no_window(store):
    with pytest.raises(ValueError, match="start must be an int, got 0.5"):
        TextWindows(store, 2, 0.5)
    with pytest.raises(ValueError, match=r"span \[0, -1\) is not inside the 9 tokens"):
        TextWindows(store, 2, 0, -1)
    with pytest.raises(ValueError, match="no window indices given"):
        TextWindows(store, 2).make_batch([])


def test_packed_windows_give_each_token_its_own_document(store):
    """documents(i): the store sequence of each token, from the offsets; -1 is the last window."""
    windows = TextWindows(store, 2, pack=True, ignore_index=-100)
    owner = [d for d, row in enumerate(SEQUENCES) for _ in row]
    for i in range(-len(windows), len(windows)):
        first = (i % len(windows)) * 2
        assert windows.documents(i).tolist() == owner[first : first + 3], i


# ---------------------------------------------------------------------------- store files that disagree
def test_a_tokens_file_of_another_store_is_refused_naming_both_lengths(tmp_path, store):
    other = write_token_store(tmp_path / "other", [list(range(1, 10)), [1, 2, 3]], vocab_size=10)  # 12 ids
    shorter = write_token_store(tmp_path / "shorter", [[1, 2]], vocab_size=10)  # 2 ids
    for source, held in ((other, 12), (shorter, 2)):
        shutil.copy(os.path.join(source.path, "tokens.bin"), os.path.join(store.path, "tokens.bin"))
        with pytest.raises(ValueError) as info:
            TokenStore.open(store.path)
        message = str(info.value)
        assert "\n" not in message and message.startswith(f"{store.path}: tokens.bin holds {held} ids of uint16")
        assert "but offsets.npy says 9 ids" in message
    with open(os.path.join(store.path, "tokens.bin"), "ab") as f:
        f.write(b"\0")  # 5 bytes: not even whole ids
    with pytest.raises(ValueError, match=r"tokens.bin holds 5 bytes of uint16 but offsets.npy says 9 ids"):
        TokenStore.open(store.path)


@pytest.mark.parametrize("damage", ["no tokens", "no dtype", "offsets decrease", "offsets from 1"])
def test_a_store_whose_files_are_missing_or_inconsistent_is_not_a_token_store(store, damage):
    path = store.path
    if damage == "no tokens":
        os.remove(os.path.join(path, "tokens.bin"))
    elif damage == "no dtype":
        with open(os.path.join(path, "store.json"), "w") as f:
            f.write('{"vocab_size": 10}')
    else:
        offsets = [0, 3, 2, 9] if damage == "offsets decrease" else [1, 3, 3, 4, 9]
        np.save(os.path.join(path, "offsets.npy"), np.asarray(offsets, dtype=np.int64))
    with pytest.raises(ValueError, match=f"^{path}: not a token store"):
        TokenStore.open(path)


# ---------------------------------------------------------------------------- caches that match their sources
@pytest.fixture
def tokenizer():
    return train_tokenizer(["abcdefghijklmnopqrstuvwxyz \n"], "char", min_frequency=1)


@pytest.fixture
def builds(monkeypatch):
    """How many stores the data layer wrote (a reused cache writes none)."""
    count = []
    real = corpora.TokenStoreWriter

    class Counting(real):
        def __init__(self, *args, **kwargs):
            count.append(args[0])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(corpora, "TokenStoreWriter", Counting)
    return count


def _expected(files, tokenizer):
    return [tokenizer.encode(read_text(f)) + [tokenizer.eos_id] for f in files]


def _same_time(path, stat):
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


CHANGES = {
    "modification time only": lambda files, tok, opts: os.utime(
        files[0], ns=(0, os.stat(files[0]).st_mtime_ns + 10**9)
    ),
    "same size, same time, other bytes": lambda files, tok, opts: (
        (stat := os.stat(files[0])),
        open(files[0], "w").write("zyxw vut"),
        _same_time(files[0], stat),
    ),
    "another size": lambda files, tok, opts: open(files[0], "a").write("more"),
    "the files in another order": lambda files, tok, opts: files.reverse(),
    "another tokenizer": lambda files, tok, opts: opts.update(
        tokenizer=train_tokenizer(["zyxwvutsr abc \n"], "char", min_frequency=1)
    ),
    "another reading option": lambda files, tok, opts: opts.update(encoding_errors="replace"),
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_text_store_is_rebuilt_after_any_change_of_what_it_was_built_from(tmp_path, tokenizer, builds, change):
    files = [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]
    for name, text in zip(files, ("abcd efg", "hij"), strict=True):
        open(name, "w").write(text)
    options = {"tokenizer": tokenizer, "encoding_errors": "strict"}
    path = str(tmp_path / "store")

    def build():
        opts = dict(options)
        return build_text_store(path, files, opts.pop("tokenizer"), **opts)

    build()
    assert [row.tolist() for row in build()] == _expected(files, tokenizer) and len(builds) == 1  # reused
    CHANGES[change](files, tokenizer, options)
    store = build()
    assert len(builds) == 2, f"{change}: the store was reused"
    assert [row.tolist() for row in store] == _expected(files, options["tokenizer"])
    build()
    assert len(builds) == 2  # and the rebuilt one is reused in turn


def test_a_cached_store_whose_tokens_file_was_swapped_is_rebuilt(tmp_path, tokenizer, builds):
    text = tmp_path / "a.txt"
    text.write_text("abc def ghi")
    path = str(tmp_path / "store")
    build_text_store(path, [str(text)], tokenizer)
    write_token_store(tmp_path / "other", [[4, 5, 6, 7] * 9], vocab_size=tokenizer.vocab_size)
    shutil.copy(tmp_path / "other" / "tokens.bin", os.path.join(path, "tokens.bin"))
    store = build_text_store(path, [str(text)], tokenizer)
    assert len(builds) == 2 and [row.tolist() for row in store] == _expected([str(text)], tokenizer)


@pytest.mark.parametrize("option", [{"max_len": 7}, {"too_long": "skip"}, {"format": "tsv"}])
def test_pair_stores_are_rebuilt_when_a_reading_option_changes(tmp_path, tokenizer, builds, option):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("abc\tdef\nabcdefgh\tij\n")
    base = {"max_len": 20, "too_long": "truncate", "format": None}
    build_pair_stores(str(tmp_path / "d"), [str(pairs)], tokenizer, **base)
    build_pair_stores(str(tmp_path / "d"), [str(pairs)], tokenizer, **base)
    assert len(builds) == 2  # source and target, once
    src, tgt = build_pair_stores(str(tmp_path / "d"), [str(pairs)], tokenizer, **{**base, **option})
    assert len(builds) == 4
    limit = {**base, **option}["max_len"]
    kept = [("abc", "def"), ("abcdefgh", "ij")]
    if option.get("too_long") == "skip":
        kept = [(s, t) for s, t in kept if len(s) <= limit and len(t) + 2 <= limit]
    assert [row.tolist() for row in src] == [tokenizer.encode(s)[:limit] for s, _ in kept]
    assert [row.tolist() for row in tgt] == [tokenizer.encode(t)[: limit - 2] for _, t in kept]


def test_a_missing_source_file_is_named_before_anything_is_read(tmp_path, tokenizer):
    with pytest.raises(ValueError, match=f"^{tmp_path / 'nope.txt'}: no such file$"):
        build_text_store(str(tmp_path / "store"), [str(tmp_path / "nope.txt")], tokenizer)
    with pytest.raises(ValueError, match="is a directory, expected a text file"):
        build_text_store(str(tmp_path / "store"), [str(tmp_path)], tokenizer)
    assert sorted(os.listdir(tmp_path)) == []


# ---------------------------------------------------------------------------- batches and tokenizers at their edges
def test_a_token_budget_plan_takes_exact_budgets_and_refuses_sentinels():
    from transformer.data.token_batches import TokenBudgetPlan

    exact = TokenBudgetPlan([4] * 6, 8, shuffle=False)  # 2 x 4 fills the budget exactly: three batches of two
    assert [b.tolist() for b in exact.epoch(0)] == [[0, 1], [2, 3], [4, 5]]
    assert [len(b) for b in TokenBudgetPlan([4] * 6, 7, shuffle=False).epoch(0)] == [1] * 6
    assert [b.tolist() for b in TokenBudgetPlan([8], 8).epoch(0)] == [[0]]  # one example, as long as the budget
    shared = TokenBudgetPlan([4] * 6, 8, rank=2, world_size=3)  # as many ranks as batches: one each
    assert shared.batches_per_epoch == 1
    refusals = {
        "lengths must be a non-empty 1-D array": dict(lengths=[]),
        "lengths must be integers, got dtype float64": dict(lengths=[1.5, 2.0]),
        "example 1 has a negative length -1": dict(lengths=[3, -1]),
        "example 0 has 9 tokens, more than the batch budget max_tokens=8": dict(lengths=[9]),
        r"rank must be an int in \[0, world_size=1\), got -1": dict(lengths=[1], rank=-1),
        "max_tokens must be a positive int, got 0": dict(lengths=[1], max_tokens=0),
        "3 batches per epoch cannot be shared by world_size=4 ranks": dict(lengths=[4] * 6, world_size=4, rank=3),
    }
    for message, arguments in refusals.items():
        arguments = {"max_tokens": 8, **arguments}
        with pytest.raises(ValueError, match=message):
            TokenBudgetPlan(arguments.pop("lengths"), arguments.pop("max_tokens"), **arguments)
    with pytest.raises(ValueError, match="epoch must be a non-negative int, got -1"):
        exact.epoch(-1)


@pytest.mark.parametrize("kind, smallest", [("bpe", 260), ("char", 5)])
def test_a_tokenizer_at_its_smallest_vocabulary_round_trips_and_one_less_is_refused(kind, smallest):
    text = "ab ba abc\n"
    tokenizer = train_tokenizer([text], kind, vocab_size=smallest, min_frequency=1)
    assert tokenizer.vocab_size <= smallest and tokenizer.encode("") == [] and tokenizer.decode([]) == ""
    kept = tokenizer.decode(tokenizer.encode("ab"))  # bpe: every text round-trips; char: one character kept
    assert kept == "ab" if kind == "bpe" else (tokenizer.vocab_size == 5 and kept in ("a", "b"))
    assert tokenizer.decode([tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id]) == ""
    with pytest.raises(ValueError, match=f"vocab_size must be an int >= {smallest} for a {kind} tokenizer, got"):
        train_tokenizer([text], kind, vocab_size=smallest - 1)
    with pytest.raises(ValueError, match="min_frequency must be a positive int, got 0"):
        train_tokenizer([text], kind, vocab_size=smallest, min_frequency=0)


def test_a_packed_lm_batch_refuses_documents_that_go_back_and_a_bool_ignore_index():
    import torch

    from transformer.data.lm_batch import LMBatch

    tokens = torch.tensor([[5, 6, 7, 8], [1, 2, 3, 4]])
    good = torch.tensor([[0, 0, 1, 1], [3, 3, 3, 3]])  # ids need not start at 0: only their changes matter
    batch = LMBatch(tokens, pad=None, documents=good, ignore_index=-1)
    assert batch.labels.tolist() == [[6, -1, 8], [2, 3, 4]] and batch.ntokens == 5
    with pytest.raises(ValueError, match="row 1 goes from document 3 to 2 at token 2"):
        LMBatch(tokens, pad=None, documents=torch.tensor([[0, 0, 1, 1], [3, 3, 2, 2]]), ignore_index=-1)
    with pytest.raises(ValueError, match="documents must be integer ids, got dtype torch.float32"):
        LMBatch(tokens, pad=None, documents=good.float(), ignore_index=-1)
    with pytest.raises(ValueError, match="an int ignore_index .* got pad=None, ignore_index=True"):
        LMBatch(tokens, pad=None, documents=good, ignore_index=True)
