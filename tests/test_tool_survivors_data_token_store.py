"""Tests for the mutants of transformer/data/token_store.py that mutmut's run left alive.

Each test names the promise it checks (the module's docstring); tests/mutation/tool_runs/data_token_store.json
names the mutants it kills (scripts/mutation_tool.py, issue 31). The write failures are real ones: a small tmpfs
that is full, or remounted read-only (tests/real_faults.py; skipped with the reason where the machine cannot mount).
"""

from __future__ import annotations

import errno
import json
import os
import shutil

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


# ---------------------------------------------------------------------------- the second run's survivors


def _ids(path) -> list[list[int]]:
    return [ids.tolist() for ids in TokenStore.open(path)[:]]


def test_a_failed_write_removes_every_folder_it_created_above_the_store(tmp_path):
    """Nothing left behind, not even the folders the write created (two levels here); a folder that was there
    before stays."""
    (tmp_path / "keep").mkdir()
    with pytest.raises(ValueError, match=r"^TokenStoreWriter: token id 5 is outside \[0, 5\)$"):
        write_token_store(tmp_path / "keep" / "a" / "b" / "s", [[1], [5]], vocab_size=5)
    assert os.listdir(tmp_path) == ["keep"] and os.listdir(tmp_path / "keep") == []


def test_discarding_twice_changes_nothing_and_a_folder_another_store_filled_stays(tmp_path):
    """``discard``: a folder the writer created that another store filled in the meantime stays; discarding again
    (the translation corpora discard a failed pair twice) removes nothing more, even once that folder is empty."""
    writer = TokenStoreWriter(tmp_path / "a" / "b" / "s", vocab_size=5, commit=False)
    write_token_store(tmp_path / "a" / "b" / "t", [[1, 2]], vocab_size=5)
    writer.discard()
    assert os.listdir(tmp_path / "a" / "b") == ["t"] and writer.tmp is None
    shutil.rmtree(tmp_path / "a" / "b" / "t")
    writer.discard()
    assert os.listdir(tmp_path / "a" / "b") == [] and writer.tmp is None


def test_with_commit_false_the_store_is_only_replaced_by_commit(tmp_path):
    """``commit=False``: the finished store waits in its temporary directory (the previous store is untouched and
    ``writer.store`` is None) until ``commit()``, which replaces the previous one and returns the new store opened;
    the writer then holds no temporary directory and no folder is left beside the store."""
    write_token_store(tmp_path / "s", [[1, 2]], vocab_size=5)
    with TokenStoreWriter(tmp_path / "s", vocab_size=5, commit=False) as writer:
        writer.add([3, 4, 0])
    assert writer.store is None and _ids(tmp_path / "s") == [[1, 2]]
    store = writer.commit()
    assert store is writer.store and store[0].tolist() == [3, 4, 0] and _ids(tmp_path / "s") == [[3, 4, 0]]
    assert writer.tmp is None and os.listdir(tmp_path) == ["s"]


def test_replacing_a_store_leaves_no_copy_of_the_old_one_beside_it(tmp_path):
    """A previous store is replaced: afterwards only the new store is there (the old one, moved aside during the
    commit, is removed)."""
    write_token_store(tmp_path / "s", [[1, 2]], vocab_size=5)
    store = write_token_store(tmp_path / "s", [[4], [3]], vocab_size=5)
    assert os.listdir(tmp_path) == ["s"] and _ids(tmp_path / "s") == [[4], [3]] and len(store) == 2


def _failing_rename(monkeypatch, at: int, error: BaseException) -> list:
    """``os.rename`` raises ``error`` at its ``at``-th call (1-based), else renames; returns the calls made."""
    real, calls = os.rename, []

    def rename(source, target, *args, **kwargs):
        calls.append((source, target))
        if len(calls) == at:
            raise error
        return real(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "rename", rename)
    return calls


def test_a_commit_that_fails_after_the_old_store_was_moved_aside_puts_it_back(tmp_path, monkeypatch):
    """The rename of the new store into place fails (here: ENOSPC) after the previous store was moved aside: one
    sentence naming the store, the previous store is back where it was with its ids, and neither the folder it was
    moved into nor the temporary directory is left."""
    write_token_store(tmp_path / "s", [[1, 2], [3]], vocab_size=5)
    before = snapshot(tmp_path / "s")
    calls = _failing_rename(monkeypatch, 2, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    with pytest.raises(OutputWriteError) as error:
        write_token_store(tmp_path / "s", [[4, 4, 4]], vocab_size=5)
    _one_sentence(error.value, tmp_path / "s")
    assert len(calls) == 3  # aside, into place (failed), back
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["s"] and snapshot(tmp_path / "s") == before
    assert _ids(tmp_path / "s") == [[1, 2], [3]]


def test_an_interrupt_during_the_commit_of_a_new_store_is_raised_as_it_is_and_leaves_nothing(tmp_path, monkeypatch):
    """Ctrl-C while the first store at a path is renamed into place: the KeyboardInterrupt itself comes out (not
    another error), and nothing is left behind."""
    _failing_rename(monkeypatch, 1, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        write_token_store(tmp_path / "s", [[1, 2]], vocab_size=5)
    assert os.listdir(tmp_path) == []


def test_an_old_store_that_cannot_be_deleted_does_not_fail_the_commit(tmp_path, monkeypatch):
    """Replacing a store whose old files this process may not delete (EACCES): the new store is committed and
    returned all the same (the copy moved aside stays, a ``PATH.tmp-HOST-PID-*`` folder that a later write removes
    once this process has ended), not a write failure for a store that was written."""
    write_token_store(tmp_path / "s", [[1, 2]], vocab_size=5)
    real_unlink = os.unlink

    def unlink(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    with TokenStoreWriter(tmp_path / "s", vocab_size=5, commit=False) as writer:
        writer.add([3, 3])
    monkeypatch.setattr(os, "unlink", unlink)
    store = writer.commit()
    monkeypatch.setattr(os, "unlink", real_unlink)
    assert store[0].tolist() == [3, 3] and _ids(tmp_path / "s") == [[3, 3]]
    left = sorted(os.listdir(tmp_path))
    assert left[0] == "s" and len(left) == 2 and left[1].startswith("s.tmp-")


def test_a_disk_made_read_only_before_the_commit_is_one_sentence_and_the_previous_store_is_intact(tmp_path):
    """A finished store (``commit=False``) whose disk turns read-only before ``commit()``: OutputWriteError, one
    sentence naming the store, the cause and the unfinished copy the read-only disk keeps (not a traceback of the
    cleanup it refuses, not "nothing was left behind"); the previous store is intact."""
    with small_disk(tmp_path, 256) as disk:
        write_token_store(disk / "store", [[1, 2]], vocab_size=5)
        before = snapshot(disk / "store")
        with TokenStoreWriter(disk / "store", vocab_size=5, commit=False) as writer:
            writer.add([3, 4, 1])
        unfinished = writer.tmp
        make_read_only(disk)
        try:
            with pytest.raises(OutputWriteError) as error:
                writer.commit()
        finally:
            make_writable(disk)
        assert str(error.value).startswith(f"cannot write the token store to {disk / 'store'}: Read-only file system")
        assert error.value.errno == errno.EROFS
        assert snapshot(disk / "store") == before and _ids(disk / "store") == [[1, 2]]
        # the read-only disk kept the unfinished copy: the sentence names it instead of "nothing was left behind"
        assert os.path.isdir(unfinished)
        assert f"its unfinished temporary directory {unfinished} could not be removed" in str(error.value)
        assert "nothing was left behind" not in str(error.value)


def test_a_store_of_no_sequences_opens_empty(tmp_path):
    """A store may hold no sequence at all: offsets.npy is ``[0]``."""
    store = write_token_store(tmp_path / "s", [], vocab_size=5)
    assert len(store) == 0 and store[:] == [] and store.lengths.tolist() == []
    assert len(TokenStore.open(tmp_path / "s")) == 0


def _store_with(tmp_path, offsets, tokens: int | None = None, raw: bytes | None = None):
    """A store at tmp_path/"s" whose offsets.npy is ``offsets`` and whose tokens.bin holds ``tokens`` uint16 ids (or
    the bytes ``raw``)."""
    path = tmp_path / "s"
    write_token_store(path, [[1]], vocab_size=5)
    np.save(path / "offsets.npy", np.asarray(offsets, dtype=np.int64))
    (path / "tokens.bin").write_bytes(raw if raw is not None else np.ones(tokens, np.uint16).tobytes())
    return path


@pytest.mark.parametrize(
    ("offsets", "shown"),
    [([1, 3], "[1 3]"), ([], "[]"), ([[0, 1, 2]], "[[0 1 2]]"), ([2, 3, 4, 5, 6, 7], "[2 3 4 5]")],
    ids=["from-1", "empty", "2-D", "from-2"],
)
def test_offsets_that_are_not_1d_from_0_are_refused_naming_the_first_four(tmp_path, offsets, shown):
    """TokenStore.open refuses offsets.npy unless it is 1-D integers from 0: one line naming the store and (at most)
    the first four offsets."""
    path = _store_with(tmp_path, offsets, tokens=3)
    with pytest.raises(ValueError) as error:
        TokenStore.open(path)
    assert str(error.value) == f"{path}: not a token store (offsets.npy must be 1-D integers from 0, got {shown})"


def test_offsets_that_decrease_are_refused(tmp_path):
    path = _store_with(tmp_path, [0, 3, 2], tokens=2)
    with pytest.raises(ValueError) as error:
        TokenStore.open(path)
    assert str(error.value) == f"{path}: not a token store (offsets.npy decreases)"


@pytest.mark.parametrize(
    ("raw", "held"),
    [(np.ones(5, np.uint16).tobytes(), "5 ids"), (b"\1" * 11, "11 bytes"), (b"", "0 ids")],
    ids=["5-ids", "11-bytes", "empty"],
)
def test_a_tokens_file_of_another_store_is_refused_naming_both_lengths(tmp_path, raw, held):
    """tokens.bin that holds another number of ids than offsets.npy ends at: both lengths named (ids, or bytes when
    the file is not a whole number of ids), and what to do."""
    path = _store_with(tmp_path, [0, 2, 3], raw=raw)
    with pytest.raises(ValueError) as error:
        TokenStore.open(path)
    assert str(error.value) == (
        f"{path}: tokens.bin holds {held} of uint16 but offsets.npy says 3 ids: the two files do not belong together "
        "(another store's file?); delete the store to rebuild it"
    )


def test_a_store_json_without_a_dtype_is_refused_naming_the_error(tmp_path):
    """The cause of a store that cannot be read is named with its type: a missing file, a missing key."""
    path = tmp_path / "s"
    path.mkdir()
    with pytest.raises(ValueError) as error:
        TokenStore.open(path)
    assert str(error.value).startswith(f"{path}: not a token store (FileNotFoundError: [Errno 2] ")
    write_token_store(path, [[1]], vocab_size=5)
    (path / "store.json").write_text(json.dumps({"vocab_size": 5}))
    with pytest.raises(ValueError) as error:
        TokenStore.open(path)
    assert str(error.value) == f"{path}: not a token store (KeyError: 'dtype')"


def test_a_store_indexes_and_slices_as_a_python_sequence(tmp_path):
    """``store[i]`` as a Python sequence: ``-n`` to ``n - 1``; a slice (with a step, negative too) gives a list."""
    store = write_token_store(tmp_path / "s", [[1], [2, 2], [3, 3, 3]], vocab_size=5)
    assert [ids.tolist() for ids in store[1:]] == [[2, 2], [3, 3, 3]]
    assert [ids.tolist() for ids in store[::-2]] == [[3, 3, 3], [1]]
    assert store[-3].tolist() == [1] and store[2].tolist() == [3, 3, 3]
    for index in (3, -4):
        with pytest.raises(IndexError) as error:
            store[index]
        assert str(error.value) == f"TokenStore: index {index} is out of range for 3 sequences (valid: -3 to 2)"


@pytest.mark.parametrize(("index", "name"), [("1", "str"), (1.0, "float"), (None, "NoneType")])
def test_an_index_that_is_not_an_integer_is_a_type_error_naming_its_type(tmp_path, index, name):
    store = write_token_store(tmp_path / "s", [[1]], vocab_size=5)
    with pytest.raises(TypeError) as error:
        store[index]
    assert str(error.value) == f"TokenStore indices must be integers or slices, not {name}"


@pytest.mark.parametrize(("start", "length"), [(-1, 2), (-1, 0), (2, -1), (0, -1), (1.0, 2), (1, 2.0), (2, 3)])
def test_a_window_outside_the_stream_is_an_index_error_naming_it(tmp_path, start, length):
    """``window(start, length)`` must lie inside the stream: a negative or non-integral start or length, or one
    past the end, is an IndexError naming the window and the stream's length."""
    store = write_token_store(tmp_path / "s", [[1, 2], [3, 4]], vocab_size=5)
    with pytest.raises(IndexError) as error:
        store.window(start, length)
    assert str(error.value) == f"TokenStore.window: start {start!r} and length {length!r} are not inside the 4 tokens"


def test_a_window_may_end_at_the_end_of_the_stream(tmp_path):
    store = write_token_store(tmp_path / "s", [[1, 2], [3, 4]], vocab_size=5)
    assert store.window(1, 3).tolist() == [2, 3, 4] and store.window(4, 0).tolist() == []
    assert store.window(np.int64(0), np.int32(4)).tolist() == [1, 2, 3, 4]
