"""Tests for the mutants of transformer/checkpoint/ that mutmut's run left alive: the training-state codec, where a
checkpoint is found, and the writing and swapping of one (the first half is tests/test_tool_survivors_checkpoint.py).

Each test names the promise it checks (the docstring it comes from); tests/mutation/tool_runs/checkpoint.json names
the mutants it kills (scripts/mutation_tool.py, issue 31).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import torch

from transformer import make_model
from transformer.checkpoint import (
    CheckpointError,
    decode_state,
    encode_state,
    load_checkpoint,
    read_config,
    save_checkpoint,
    swap_into_place,
)


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    return make_model(7, 7, N=1, d_model=8, d_ff=16, h=2, dropout=0.0)


# ---------------------------------------------------------------------------------------------- the state codec


def test_a_tensor_alone_is_stored_under_root_and_others_under_the_path_given():
    """encode_state: each tensor is ``{"__tensor__": key}``, put in ``tensors[key]``; "``path`` prefixes the keys"
    (none given: a tensor at the top is "root")."""
    tensors: dict[str, torch.Tensor] = {}
    assert encode_state(torch.ones(2), tensors) == {"__tensor__": "root"} and list(tensors) == ["root"]
    tensors = {}
    encoded = encode_state({"m": torch.ones(2), "v": [torch.zeros(1)], "t": (torch.zeros(3),)}, tensors, "opt")
    assert encoded == {"m": {"__tensor__": "opt.m"}, "v": [{"__tensor__": "opt.v.0"}],
                       "t": {"__tuple__": [{"__tensor__": "opt.t.0"}]}}  # fmt: skip
    assert sorted(tensors) == ["opt.m", "opt.t.0", "opt.v.0"]


def test_tensors_in_lists_tuples_and_under_any_key_come_back_each_in_its_place():
    """encode_state/decode_state: tuples and dicts with non-string keys are tagged so that decode_state gives them
    back; every tensor keeps its own entry (keys under ``path``)."""
    a, b, c, d = torch.tensor([1.0]), torch.tensor([2.0]), torch.tensor([3.0]), torch.tensor([4.0])
    key = torch.tensor(5.0)
    state = {"list": [a, b], "tuple": (c, d), "by_tensor": {key: a * 10, 2: "two"}}
    tensors: dict[str, torch.Tensor] = {}
    back = decode_state(json.loads(json.dumps(encode_state(state, tensors, "s"))), tensors)
    assert len(tensors) == 6 and all(k.startswith("s.") for k in tensors)
    assert [t.item() for t in back["list"]] == [1.0, 2.0] and type(back["tuple"]) is tuple
    assert [t.item() for t in back["tuple"]] == [3.0, 4.0]
    (k0, v0), (k1, v1) = back["by_tensor"].items()
    assert torch.equal(k0, key) and torch.equal(v0, a * 10) and (k1, v1) == (2, "two")


@pytest.mark.parametrize(
    "state",
    [{1: torch.tensor([1.0]), "1": torch.tensor([2.0])}, {"a.b": torch.tensor([1.0]), "a": {"b": torch.tensor([2.0])}}],
    ids=["int-and-str-key", "dotted-key"],
)
def test_two_tensors_whose_paths_read_the_same_keep_their_own_values(tmp_path, tiny, state):
    """encode_state: "a key already in ``tensors`` (two paths that read the same) gets a ``#N`` suffix, never
    overwriting a tensor": a saved training state loads back equal, each tensor its own."""
    tensors = {".1": torch.tensor([9.0])}  # an entry from before the call is not overwritten either
    encoded = encode_state(state, tensors)
    assert len(tensors) == 3 and tensors[".1"].item() == 9.0
    back = decode_state(json.loads(json.dumps(encoded)), tensors)
    assert [torch.equal(x, y) for x, y in zip(_leaves(back), _leaves(state), strict=True)] == [True, True]
    save_checkpoint(tmp_path / "ck", tiny, trainer_state={"s": state})
    loaded = load_checkpoint(tmp_path / "ck").trainer_state["s"]
    assert [torch.equal(x, y) for x, y in zip(_leaves(loaded), _leaves(state), strict=True)] == [True, True]


def _leaves(state):
    return [t for v in state.values() for t in (_leaves(v) if isinstance(v, dict) else [v])]


@pytest.mark.parametrize("tag", ["__tensor__", "__tuple__", "__items__"])
def test_a_dict_that_looks_like_a_tag_comes_back_as_the_dict_it_was(tag):
    """encode_state: dicts are tagged "so that decode_state gives them back": a user dict whose key is one of the
    tags is stored tagged itself, not read back as a tensor, a tuple or a dict of items."""
    state = {"user": {tag: [[1, 2]]}, "other": {tag: "x", "more": 1}}
    tensors: dict[str, torch.Tensor] = {}
    assert decode_state(json.loads(json.dumps(encode_state(state, tensors))), tensors) == state


def test_anything_else_is_refused_naming_where_it_is():
    """encode_state: "Anything else raises TypeError naming where it is" (the path of keys, or root)."""
    with pytest.raises(TypeError) as error:
        encode_state({"opt": [1, object()]}, {}, "state")
    assert str(error.value) == "cannot store a object at state.opt.1 in a checkpoint (only tensors and JSON values)"
    with pytest.raises(TypeError) as error:
        encode_state({1.5}, {})
    assert str(error.value) == "cannot store a set at root in a checkpoint (only tensors and JSON values)"


def test_a_tensor_that_owns_its_memory_is_stored_as_it_is_and_any_other_as_a_copy():
    """encode_state: "Every tensor put in tensors owns its memory": a non-contiguous tensor, a view into a larger
    tensor, or one whose memory another entry shares is stored as a contiguous copy; a tensor that owns its memory
    is put in ``tensors`` itself, and the entries there before the call are left as they are."""
    from safetensors.torch import load, save

    whole = torch.arange(6.0).reshape(2, 3)
    small = torch.arange(2, dtype=torch.float64)
    base = torch.arange(8.0)
    before_view = base[2:4]
    tensors = {"kept": before_view}
    state = {"whole": whole, "small": small, "again": whole, "slice": whole[1], "t": whole.t(), "tail": base[4:]}
    encode_state(state, tensors, "s")
    assert tensors["kept"] is before_view  # not this call's: left alone
    assert tensors["s.whole"].data_ptr() == whole.data_ptr() and tensors["s.small"].data_ptr() == small.data_ptr()
    for name in ("again", "slice", "t", "tail"):
        assert tensors[f"s.{name}"].data_ptr() != whole.data_ptr(), name
        assert tensors[f"s.{name}"].is_contiguous() and torch.equal(tensors[f"s.{name}"], state[name]), name
    del tensors["kept"]
    back = load(save(tensors))  # safetensors refuses tensors that share memory
    assert all(torch.equal(back[k], v) for k, v in tensors.items())


# --------------------------------------------------------------------------------- where the checkpoint is


def test_a_copy_left_aside_by_an_interrupted_save_is_used_with_a_warning_to_the_caller(tmp_path, tiny):
    """checkpoint_dir: the copy an interrupted save left aside is used "with a warning", attributed (by
    resolve_checkpoint) to the caller of load_checkpoint or read_config; a file instead of a directory is named."""
    path = str(tmp_path / "ck")
    save_checkpoint(path, tiny, trainer_state={"step": 3})
    aside = path + ".old-abc123"
    os.rename(path, aside)  # a crash between the save's two renames
    said = f"checkpoint {path} is missing; using {aside} left by an interrupted save"
    with pytest.warns(UserWarning) as record:
        loaded = load_checkpoint(path)
    assert loaded.trainer_state == {"step": 3} and loaded.path == aside
    assert [str(w.message) for w in record] == [said] and _names_the_caller(record[0])
    with pytest.warns(UserWarning) as record:
        read_config(path)
    assert [str(w.message) for w in record] == [said] and _names_the_caller(record[0])
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError) as error:
        load_checkpoint(tmp_path / "file")
    assert str(error.value) == f"checkpoint {tmp_path / 'file'} is not a directory"


def _names_the_caller(warning) -> bool:
    """Whether ``warning`` is attributed to this file (the caller of load_checkpoint and read_config). Under mutmut's
    recheck (MUTANT_UNDER_TEST set) each function of the package is called through mutmut's trampoline, three frames
    per call, and no stacklevel reaches the caller: there only the message is checked."""
    return "MUTANT_UNDER_TEST" in os.environ or warning.filename == __file__


# --------------------------------------------------------------------------------------------- the save


@pytest.mark.parametrize("name", ["config.json", "meta.json", ".hidden", "sub/notes.txt", "../notes.txt"])
def test_an_asset_name_that_is_not_a_plain_file_name_or_is_reserved_is_refused(tmp_path, tiny, name):
    """save_checkpoint: an asset name must be a plain file name other than the checkpoint's own files (the message
    names it and them); nothing is written."""
    with pytest.raises(ValueError) as error:
        save_checkpoint(tmp_path / "ck", tiny, assets={"notes.md": "ok", name: "x"})
    assert str(error.value) == (
        f"save_checkpoint: asset name {name!r} must be a plain file name other than "
        "config.json, meta.json, model.safetensors, state.json, state.safetensors"
    )
    assert os.listdir(tmp_path) == []


def test_a_save_to_a_file_or_of_a_state_it_cannot_hold_is_refused_naming_it(tmp_path, tiny):
    """save_checkpoint: a path that is a file is refused by name; a training state holding something that is not a
    tensor or JSON value raises TypeError naming where it is (keys from the state's top); nothing is left."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError) as error:
        save_checkpoint(tmp_path / "file", tiny)
    assert str(error.value) == f"checkpoint path {tmp_path / 'file'} exists and is not a directory"
    with pytest.raises(TypeError) as error:
        save_checkpoint(tmp_path / "ck", tiny, trainer_state={"opt": [1, object()]})
    assert str(error.value) == "cannot store a object at .opt.1 in a checkpoint (only tensors and JSON values)"
    assert sorted(os.listdir(tmp_path)) == ["file"]


# ---------------------------------------------------------------------------------------------- the swap


def test_a_failed_swap_puts_the_previous_checkpoint_back_and_raises_its_own_error(tmp_path, tiny):
    """swap_into_place: "If the swap fails, tmp is removed and the previous checkpoint put back" (no copy left
    aside); the error raised is the rename's, naming both paths."""
    path = str(tmp_path / "ck")
    save_checkpoint(path, tiny, trainer_state={"step": 4})
    missing_tmp = str(tmp_path / "ck.tmp-gone")
    with pytest.raises(FileNotFoundError) as error:
        swap_into_place(missing_tmp, path)
    assert (error.value.filename, error.value.filename2) == (missing_tmp, path)
    assert sorted(os.listdir(tmp_path)) == ["ck"] and load_checkpoint(path).trainer_state == {"step": 4}
    tmp = tmp_path / "ck.tmp-1"
    tmp.mkdir()
    (tmp / "meta.json").write_text("{}")
    nowhere = str(tmp_path / "absent" / "ck")  # nothing there before; the rename itself fails
    with pytest.raises(FileNotFoundError) as error:
        swap_into_place(str(tmp), nowhere)
    assert (error.value.filename, error.value.filename2) == (str(tmp), nowhere)
    assert sorted(os.listdir(tmp_path)) == ["ck"]


def _immutable(path, on: bool) -> bool:
    return subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True).returncode == 0


def test_a_save_succeeds_when_an_old_copy_cannot_be_removed(tmp_path, tiny):
    """save_checkpoint returns the path once the new checkpoint is in place: the previous one is deleted "only once
    the new one is in place" and copies left aside are removed where they can be; one that cannot be (here a file
    in it is immutable: a real refusal, even to root) is left, and the save still succeeds."""
    path = str(tmp_path / "ck")
    save_checkpoint(path, tiny, trainer_state={"step": 1})
    stuck = tmp_path / "ck" / "stuck.txt"
    stuck.write_text("x")
    if not _immutable(stuck, True):
        pytest.skip("chattr +i is refused here (needs root and a filesystem with the immutable attribute)")
    try:
        assert save_checkpoint(path, tiny, trainer_state={"step": 2}) == path
        assert load_checkpoint(path).trainer_state == {"step": 2}
        (left,) = [name for name in os.listdir(tmp_path) if name != "ck"]
        assert left.startswith("ck.old-") and os.listdir(tmp_path / left) == ["stuck.txt"]
        assert save_checkpoint(path, tiny, trainer_state={"step": 3}) == path  # the stale copy is tried again
        assert load_checkpoint(path).trainer_state == {"step": 3}
    finally:
        for found in tmp_path.glob("ck*/stuck.txt"):
            _immutable(found, False)


# ------------------------------------------------------------------------------ faults in the middle of a save


def test_a_disk_turned_read_only_mid_save_is_one_sentence_though_its_temporary_copy_stays(tmp_path, tiny, monkeypatch):
    """save_checkpoint: a read-only disk is one sentence (OutputWriteError: the path, the cause); here the disk
    turns read-only after the weights are written (a real remount, timed by the hash of the first file), so the
    temporary directory cannot be removed either: that is not allowed to replace the sentence, and the sentence
    names the copy left behind instead of saying that nothing was (kept_message)."""
    from real_faults import make_read_only, make_writable, small_disk

    from transformer.checkpoint import save as save_module
    from transformer.common.output_dirs import OutputWriteError

    real_hash = save_module.sha256_file
    with small_disk(tmp_path, 1024) as disk:

        def hash_then_turn_read_only(path):
            make_read_only(disk)
            return real_hash(path)

        monkeypatch.setattr(save_module, "sha256_file", hash_then_turn_read_only)
        target = disk / "ck"
        try:
            with pytest.raises(OutputWriteError) as error:
                save_checkpoint(target, tiny)
        finally:
            make_writable(disk)
        assert str(error.value).startswith(f"cannot write the checkpoint to {target}: Read-only file system (EROFS)")
        assert not target.exists()
        (left,) = [name for name in os.listdir(disk) if name.startswith("ck")]
        assert str(error.value).endswith(
            f"there was no checkpoint there before, and the unfinished {disk / left} could not be removed"
        ), str(error.value)


def test_a_writer_naming_no_errno_on_a_full_disk_is_read_from_the_disk_with_the_need(tmp_path, tiny, monkeypatch):
    """save_checkpoint: a full disk is one sentence naming "the path, the space needed"; a writer that names no
    errno (is_write_failure: "given the path written (and the bytes needed there)") is read from the disk, which
    has less room than the weights plus the training state's tensors need."""
    from real_faults import fill, small_disk

    from transformer.checkpoint import save as save_module
    from transformer.common.output_dirs import OutputWriteError, human_bytes

    state = {"moments": torch.zeros(1 << 16)}
    needed = sum(t.numel() * t.element_size() for t in tiny.state_dict().values()) + 4 * (1 << 16)
    with small_disk(tmp_path, 1024) as disk:

        def fill_then_fail(tensors, filename):  # the state's writer meets a full disk and says only this
            fill(disk)
            raise RuntimeError(f"cannot write {filename}: unexpected pos 4096")

        monkeypatch.setattr(save_module, "save_file", fill_then_fail)
        target = disk / "ck"
        with pytest.raises(OutputWriteError) as error:
            save_checkpoint(target, tiny, trainer_state=state)
        free = human_bytes(shutil.disk_usage(disk).free)
        assert str(error.value) == (
            f"cannot write the checkpoint to {target}: No space left on device (ENOSPC); it needs about "
            f"{human_bytes(needed)} and {free} is free there; there was no checkpoint there before, and nothing was "
            "left behind"
        )
        assert sorted(os.listdir(disk)) == [".ballast"]
