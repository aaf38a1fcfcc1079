"""Issue 31: the write paths of transformer.data (token stores, pair stores, tokenizer files) and of the text tasks
(``train lm``'s ``--data-dir``) on a really full tmpfs and a really read-only one (tests/real_faults.py; skipped with
the reason where the machine cannot mount): one line naming the path and the cause, the documented exit status 3
through the CLI (docs/troubleshooting.md), nothing left behind (not even the folders the write created), and what was
there before intact."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from real_faults import fill, make_read_only, make_writable, small_disk, snapshot

from transformer.common.output_dirs import OutputWriteError
from transformer.data.corpora import build_pair_stores, build_text_store
from transformer.data.token_store import TokenStore, write_token_store
from transformer.data.tokenizers import load_tokenizer, train_tokenizer

FULL = "No space left on device (ENOSPC)"
READ_ONLY = "Read-only file system (EROFS)"


def _entries(disk: Path) -> list[str]:
    """Every file and folder on the disk but the ballast that filled it."""
    return sorted(str(p.relative_to(disk)) for p in disk.rglob("*") if p.name != ".ballast")


def _refuse(disk: Path, fault: str) -> str:
    if fault == "full":
        fill(disk, leave_bytes=0)
        return FULL
    make_read_only(disk)
    return READ_ONLY


@pytest.fixture
def tokenizer():
    return train_tokenizer(["abcdefghijklmnopqrstuvwxyz \n\t"], "char", min_frequency=1)


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_token_store_that_cannot_be_written_leaves_nothing_not_even_its_folders(tmp_path, fault):
    with small_disk(tmp_path, 256) as disk:
        cause = _refuse(disk, fault)
        target = disk / "runs" / "lm.data" / "train"
        with pytest.raises(OutputWriteError) as info:
            write_token_store(target, [[1, 2, 3]] * 50, vocab_size=10)
        assert str(info.value) == (
            f"cannot write the token store to {target}: {cause}; nothing was left behind (its temporary directory "
            "was removed)"
        )
        assert _entries(disk) == []
        if fault == "read-only":
            make_writable(disk)


def test_a_disk_that_fills_up_while_the_ids_are_written_keeps_the_previous_store(tmp_path):
    with small_disk(tmp_path, 512) as disk:
        target = disk / "store"
        write_token_store(target, [[1, 2, 3], [4]], vocab_size=70000)  # uint32 ids
        before = snapshot(disk)
        fill(disk, leave_bytes=64 * 1024)
        with pytest.raises(OutputWriteError) as info:
            write_token_store(target, [list(range(60000))] * 4, vocab_size=70000)  # ~1 MB: fails midway
        assert "\n" not in str(info.value) and str(info.value).startswith(f"cannot write the token store to {target}")
        assert FULL in str(info.value)
        assert snapshot(disk) == before and _entries(disk) == [
            "store",
            *[f"store/{n}" for n in sorted(os.listdir(target))],
        ]
        assert [row.tolist() for row in TokenStore.open(target)] == [[1, 2, 3], [4]]


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_pair_stores_that_cannot_be_written_leave_nothing_and_the_previous_ones_intact(tmp_path, tokenizer, fault):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("abc\tdef\nghi\tjkl\n")
    with small_disk(tmp_path, 256) as disk:
        first = build_pair_stores(str(disk / "old"), [str(pairs)], tokenizer, 20)
        before = snapshot(disk)
        pairs.write_text("abc\tdef\nghi\tjkl\nmno\tpqr\n")
        cause = _refuse(disk, fault)
        for directory in (disk / "new" / "data", disk / "old"):  # a new cache; a stale one to rebuild
            with pytest.raises(OutputWriteError, match=re.escape(f": {cause}; nothing was left behind")) as info:
                build_pair_stores(str(directory), [str(pairs)], tokenizer, 20)
            assert "\n" not in str(info.value) and f"to {directory}/" in str(info.value)
        assert snapshot(disk) == before and not (disk / "new").exists()
        assert [row.tolist() for row in TokenStore.open(disk / "old" / "src")] == [r.tolist() for r in first[0]]
        if fault == "read-only":
            make_writable(disk)


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_text_store_on_a_read_only_or_full_disk_is_refused_and_a_stored_one_is_still_read(tmp_path, tokenizer, fault):
    """docs/troubleshooting.md: a cache that is only read may sit on a read-only disk (or a full one)."""
    text = tmp_path / "a.txt"
    text.write_text("abc def")
    with small_disk(tmp_path, 256) as disk:
        stored = build_text_store(str(disk / "train"), [str(text)], tokenizer)
        ids = [row.tolist() for row in stored]
        cause = _refuse(disk, fault)
        again = build_text_store(str(disk / "train"), [str(text)], tokenizer)
        assert [row.tolist() for row in again] == ids
        with pytest.raises(OutputWriteError, match=re.escape(f"to {disk}/valid: {cause}; nothing")):
            build_text_store(str(disk / "valid"), [str(text)], tokenizer)
        assert _entries(disk) == ["train", *[f"train/{n}" for n in sorted(os.listdir(disk / "train"))]]
        if fault == "read-only":
            make_writable(disk)


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_tokenizer_file_that_cannot_be_written_is_one_line_and_the_previous_file_stays(tmp_path, tokenizer, fault):
    other = train_tokenizer(["zyxw vu"], "char", min_frequency=1)
    with small_disk(tmp_path, 256) as disk:
        (disk / "fresh").mkdir()
        (disk / "kept").mkdir()
        other.save(disk / "kept")
        before = snapshot(disk)
        cause = _refuse(disk, fault)
        for folder, kept in (("fresh", "nothing was left behind"), ("kept", "the previous tokenizer file is intact")):
            path = disk / folder / "tokenizer.json"
            with pytest.raises(OutputWriteError) as info:
                tokenizer.save(disk / folder)
            assert str(info.value) == f"cannot write the tokenizer to {path}: {cause}; {kept}"
        assert snapshot(disk) == before
        assert _entries(disk) == ["fresh", "kept", "kept/tokenizer.json", "kept/tokenizer_extra.json"]
        assert load_tokenizer(disk / "kept").fingerprint == other.fingerprint
        if fault == "read-only":
            make_writable(disk)


@pytest.mark.parametrize("task", ["lm", "translate"])
@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_train_lm_with_a_data_dir_that_cannot_be_written_says_one_line_and_exits_3(tmp_path, capsys, fault, task):
    """``train lm`` and ``train translate``: the first store the disk refuses is named (``train``; for pairs
    ``train/src`` or ``train/tgt``: a full tmpfs still makes the empty folder and file of the first one)."""
    from transformer.cli import main

    text = tmp_path / "a.txt"
    text.write_text("the cat sat on the mat\n" * 20 if task == "lm" else "the cat\tle chat\n" * 20)
    out = tmp_path / "run"
    model = ["--tokenizer", "char", "--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "32"]
    given = ["--text", str(text), "--block-len", "8"] if task == "lm" else ["--train", str(text), "--valid", str(text)]
    with small_disk(tmp_path, 256) as disk:
        cause = _refuse(disk, fault)
        data_dir = disk / f"{task}.data"
        code = main(
            ["train", task, *given, "--out", str(out), "--data-dir", str(data_dir), "--steps", "1", *model]
            + ["--no-progress"]
        )
        err = capsys.readouterr().err
        store = re.escape(str(data_dir / "train")) + ("" if task == "lm" else "/(src|tgt)")  # the first refused
        assert code == 3 and "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert re.fullmatch(
            f"typed-transformer train: error: cannot write the token store to {store}: {re.escape(cause)}; nothing "
            r"was left behind \(its temporary directory was removed\)",
            err.strip(),
        ), err
        assert _entries(disk) == [] and not (out / "meta.json").exists()
        if fault == "read-only":
            make_writable(disk)


def test_pair_stores_replace_their_previous_versions_together_or_not_at_all(tmp_path, tokenizer, monkeypatch):
    """A simulated ENOSPC (why: a real disk cannot be made to fill exactly between the target store's last file and
    the source store's): the target store is finished, the source store's offsets cannot be written. Neither
    previous store is replaced (before, the target was renamed into place first and the pair no longer matched)."""
    import errno

    from transformer.data import token_store

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("abc\tdef\n")
    build_pair_stores(str(tmp_path / "d"), [str(pairs)], tokenizer, 20)
    before = snapshot(tmp_path / "d")
    pairs.write_text("abc\tdef\nghi\tjkl\n")
    real, calls = token_store.np.save, []

    def second_save_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(token_store.np, "save", second_save_fails)
    with pytest.raises(OutputWriteError, match=re.escape(f"to {tmp_path / 'd' / 'src'}: {FULL}; nothing was left")):
        build_pair_stores(str(tmp_path / "d"), [str(pairs)], tokenizer, 20)
    assert (
        len(calls) == 2 and snapshot(tmp_path / "d") == before and sorted(os.listdir(tmp_path / "d")) == ["src", "tgt"]
    )
