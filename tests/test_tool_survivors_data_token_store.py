"""Tests for the mutants of transformer/data/token_store.py that mutmut's run left alive.

Each test names the promise it checks (the module's docstring); tests/mutation/tool_runs/data_token_store.json
names the mutants it kills (scripts/mutation_tool.py, issue 31). The write failures are real ones: a small tmpfs
that is full, or remounted read-only (tests/real_faults.py; skipped with the reason where the machine cannot mount).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from real_faults import fill, make_read_only, make_writable, small_disk, snapshot

from transformer.common.output_dirs import OutputWriteError
from transformer.data.token_store import TokenStore, TokenStoreWriter, write_token_store

LEFT = "nothing was left behind (its temporary directory was removed)"


@pytest.mark.parametrize(("vocab", "dtype"), [(65535, "uint16"), (65536, "uint16"), (65537, "uint32")])
def test_ids_are_uint16_exactly_when_the_vocabulary_fits(tmp_path, vocab, dtype):
    """tokens.bin: uint16 when the vocabulary fits (ids 0..65535: a vocabulary of 65536), else uint32."""
    store = write_token_store(tmp_path / "s", [[0, vocab - 1], [vocab - 2]], vocab_size=vocab)
    assert store.meta["dtype"] == dtype
    assert os.path.getsize(tmp_path / "s" / "tokens.bin") == 3 * np.dtype(dtype).itemsize
    assert store[0].tolist() == [0, vocab - 1] and store[0].dtype == np.int64


def test_store_json_records_the_sizes_and_info(tmp_path):
    """store.json: dtype, sizes, and what built it (``info``); offsets.npy int64 (n + 1,)."""
    write_token_store(tmp_path / "s", [[1, 2, 3], [], [4]], vocab_size=9, info={"tokenizer": "abc"})
    meta = json.loads((tmp_path / "s" / "store.json").read_text())
    assert meta == {"dtype": "uint16", "vocab_size": 9, "sequences": 3, "tokens": 4, "info": {"tokenizer": "abc"}}
    offsets = np.load(tmp_path / "s" / "offsets.npy")
    assert offsets.dtype == np.int64 and offsets.tolist() == [0, 3, 3, 4]
    store = TokenStore.open(tmp_path / "s")
    assert store.path == os.fspath(tmp_path / "s") and store.info == {"tokenizer": "abc"} and len(store) == 3


def test_a_store_without_info_has_an_empty_info_and_an_empty_store_reads_back(tmp_path):
    """``info`` defaults to {}; a store of empty sequences (no ids) opens with an empty stream, whose window of 0
    tokens is empty and any longer window an IndexError (``window``'s docstring)."""
    store = write_token_store(tmp_path / "s", [[], []], vocab_size=5)
    meta_path = tmp_path / "s" / "store.json"
    meta = json.loads(meta_path.read_text())
    del meta["info"]
    meta_path.write_text(json.dumps(meta))
    store = TokenStore.open(tmp_path / "s")
    assert store.info == {}
    assert store.tokens.shape == (0,) and store[1].tolist() == [] and store.window(0, 0).tolist() == []
    with pytest.raises(IndexError, match="start 0 and length 3 are not inside the 0 tokens"):
        store.window(0, 3)
    assert store.tokens.dtype == np.uint16


def test_every_id_of_the_vocabulary_is_accepted_and_int64_ids_come_back_unchanged(tmp_path):
    """add(ids): ids in ``[0, vocab_size)``, id 0 included; a large vocabulary's ids above 2^16 are kept."""
    store = write_token_store(tmp_path / "s", [[0], [70000, 0]], vocab_size=70001)
    assert store[0].tolist() == [0] and store[1].tolist() == [70000, 0]
    with pytest.raises(ValueError, match=r"TokenStoreWriter: token id -1 is outside \[0, 5\)"):
        write_token_store(tmp_path / "t", [[0, 1, -1]], vocab_size=5)
    assert not (tmp_path / "t").exists()


def test_a_folder_that_is_not_a_store_is_named_with_the_cause(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(ValueError, match=r"x: not a token store \(.*store\.json"):
        TokenStore.open(tmp_path / "x")


def test_an_error_inside_the_with_block_closes_the_file_and_removes_the_temporary_directory(tmp_path):
    """Leaving the ``with`` block with an error removes everything written."""
    with pytest.raises(KeyError), TokenStoreWriter(tmp_path / "s", vocab_size=5) as writer:
        writer.add([1, 2])
        raise KeyError("stop")
    assert writer.file.closed
    assert sorted(os.listdir(tmp_path)) == []


def _one_sentence(error: OutputWriteError, path, cause: str = "No space left on device (ENOSPC)") -> None:
    """The store, its path, the cause (strerror and errno name) and what was left: nothing."""
    assert str(error) == f"cannot write the token store to {path}: {cause}; {LEFT}"


def test_a_full_disk_at_the_start_of_a_store_is_one_sentence_and_leaves_nothing(tmp_path):
    """A disk that fills up raises OutputWriteError: one sentence naming the store, nothing left behind."""
    with small_disk(tmp_path, 64) as disk:
        fill(disk)
        before = snapshot(disk)
        with pytest.raises(OutputWriteError) as error:
            write_token_store(disk / "store", [[1, 2]], vocab_size=5)
        _one_sentence(error.value, disk / "store")
        assert snapshot(disk) == before and sorted(os.listdir(disk)) == [".ballast"]


def test_a_disk_that_fills_up_while_ids_are_added_is_one_sentence_and_leaves_nothing(tmp_path):
    with small_disk(tmp_path, 64) as disk:
        fill(disk, leave_bytes=8192)
        with pytest.raises(OutputWriteError) as error:
            write_token_store(disk / "store", ([7] * 4096 for _ in range(64)), vocab_size=70000)
        _one_sentence(error.value, disk / "store")
        assert sorted(os.listdir(disk)) == [".ballast"]


def test_a_disk_that_fills_up_before_the_commit_is_one_sentence_and_leaves_nothing(tmp_path):
    """The commit (the last ids, offsets.npy, store.json, the rename) on a disk that has just filled up: one sentence
    naming the store, not a traceback, and no store or temporary directory."""
    with small_disk(tmp_path, 256) as disk:
        with pytest.raises(OutputWriteError) as error, TokenStoreWriter(disk / "store", vocab_size=5) as writer:
            writer.add([1, 2, 3])
            fill(disk)
        _one_sentence(error.value, disk / "store")
        assert sorted(os.listdir(disk)) == [".ballast"]


def test_reading_a_store_cannot_change_it(tmp_path):
    """TokenStore.open maps tokens.bin read-only: a reader cannot write into the corpus through ``store.tokens``."""
    store = write_token_store(tmp_path / "s", [[1, 2, 3]], vocab_size=5)
    with pytest.raises(ValueError, match="read-only"):
        store.tokens[0] = 4
    assert TokenStore.open(tmp_path / "s")[0].tolist() == [1, 2, 3]


def test_a_read_only_disk_is_one_sentence_before_anything_is_written(tmp_path):
    """A read-only directory refuses the store's temporary directory: one sentence naming the store and the cause."""
    with small_disk(tmp_path, 64) as disk:
        make_read_only(disk)
        try:
            with pytest.raises(OutputWriteError) as error:
                write_token_store(disk / "store", [[1, 2]], vocab_size=5)
        finally:
            make_writable(disk)
        _one_sentence(error.value, disk / "store", "Read-only file system (EROFS)")
        assert os.listdir(disk) == []
