"""Tests for the mutants of transformer/checkpoint/ that mutmut's run left alive.

Each test names the promise it checks (the docstring it comes from); tests/mutation/tool_runs/checkpoint.json names
the mutants it kills (scripts/mutation_tool.py, issue 31).
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from transformer import make_model
from transformer.checkpoint import (
    CheckpointError,
    ConfigMismatchError,
    NonFiniteWeightsError,
    checkpoint_step,
    kept_message,
    load_checkpoint,
    read_metadata,
    save_checkpoint,
)


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    return make_model(7, 7, N=1, d_model=8, d_ff=16, h=2, dropout=0.0)


def test_a_config_mismatch_lists_every_field_with_both_values(tmp_path):
    """ConfigMismatchError: ``fields`` maps name -> (model, checkpoint); the message lists each, sorted by name."""
    error = ConfigMismatchError({"n_layers": (2, 3), "d_model": (8, 16)}, "runs/a")
    assert error.fields == {"n_layers": (2, 3), "d_model": (8, 16)}
    assert str(error) == (
        "checkpoint runs/a was saved from a model with another config; mismatched fields: "
        "d_model (model 8, checkpoint 16), n_layers (model 2, checkpoint 3)"
    )


def test_non_finite_weights_keep_the_message_and_the_tensors():
    """NonFiniteWeightsError: ``tensors`` lists (name, count of non-finite values, size)."""
    error = NonFiniteWeightsError("2 tensors hold NaN", [("w", 1, 4), ("b", 2, 2)])
    assert str(error) == "2 tensors hold NaN" and error.tensors == [("w", 1, 4), ("b", 2, 2)]
    assert isinstance(error, CheckpointError) and isinstance(error, ValueError)


@pytest.mark.parametrize(("state", "step"), [({"step": 12}, 12), ({"step": "12"}, None), ({"step": 1.5}, None),
                                             ({}, None), (None, None)])  # fmt: skip
def test_the_step_of_a_checkpoint_is_an_int_from_its_state_or_none(tmp_path, state, step):
    """checkpoint_step: the training step of state.json, None if it has none (not an int, no key, no file)."""
    if state is not None:
        (tmp_path / "state.json").write_text(json.dumps(state))
    assert checkpoint_step(str(tmp_path)) == step


def test_what_a_failed_save_leaves_is_said_with_the_step_only_when_there_is_one(tmp_path, tiny):
    """kept_message: the previous checkpoint (intact, with its step), or nothing."""
    path = str(tmp_path / "ckpt")
    assert kept_message(path) == "there was no checkpoint there before, and nothing was left behind"
    save_checkpoint(path, tiny)
    assert kept_message(path) == f"the previous checkpoint in {path} is intact"
    save_checkpoint(path, tiny, trainer_state={"step": 5})  # state.json records the trainer state's step
    assert kept_message(path) == f"the previous checkpoint in {path} (step 5) is intact"


def test_an_asset_is_found_by_name_and_a_missing_one_names_what_is_there(tmp_path, tiny):
    """Checkpoint.asset: the path of asset ``name``; a name it does not hold is refused, listing its assets."""
    path = str(tmp_path / "ckpt")
    save_checkpoint(path, tiny)
    bare = load_checkpoint(path)
    with pytest.raises(CheckpointError) as error:
        bare.asset("tokenizer.json")
    assert str(error.value) == f"checkpoint {bare.path} holds no tokenizer.json (assets: none)"
    save_checkpoint(path, tiny, assets={"tokenizer.json": "{}", "notes.txt": b"n"})
    loaded = load_checkpoint(path)
    assert loaded.asset("tokenizer.json") == os.path.join(loaded.path, "tokenizer.json")
    with open(loaded.asset("notes.txt"), "rb") as f:
        assert f.read() == b"n"
    with pytest.raises(CheckpointError) as error:
        loaded.asset("vocab.txt")
    assert str(error.value) == f"checkpoint {loaded.path} holds no vocab.txt (assets: notes.txt, tokenizer.json)"


def test_user_metadata_is_read_back_and_anything_else_is_an_empty_dict(tmp_path, tiny):
    """read_metadata: the user metadata of meta.json; ``{}`` when there is none or it cannot be read."""
    path = str(tmp_path / "ckpt")
    save_checkpoint(path, tiny, metadata={"task": "copy"})
    assert read_metadata(path) == {"task": "copy"}
    meta_file = os.path.join(path, "meta.json")
    with open(meta_file) as f:
        meta = json.load(f)
    meta["metadata"] = ["not", "a", "dict"]
    with open(meta_file, "w") as f:
        json.dump(meta, f)
    assert read_metadata(path) == {}
    assert read_metadata(str(tmp_path / "nowhere")) == {}


def test_a_model_of_another_kind_or_of_no_kind_or_another_architecture_is_refused(tiny):
    """check_model_matches: another kind is a CheckpointError; a model of no known kind a ValueError prefixed by
    ``who``; another architecture a ConfigMismatchError; run-time fields such as ``attention_backend`` may differ."""
    from dataclasses import replace

    from transformer.checkpoint.format import model_kind
    from transformer.checkpoint.load import check_model_matches
    from transformer.lm import LMConfig, build_lm

    kind = model_kind(tiny.config)
    with pytest.raises(ValueError) as error:
        check_model_matches(torch.nn.Linear(2, 2), kind, tiny.config, "runs/a", "load_checkpoint")
    assert str(error.value).startswith("load_checkpoint: model.config must be the config of a known model kind")
    lm = build_lm(LMConfig(vocab=7, n_layers=1, d_model=8, d_ff=16, n_heads=2))
    with pytest.raises(CheckpointError) as error:
        check_model_matches(lm, kind, tiny.config, "runs/a", "load_checkpoint")
    assert str(error.value) == (
        f"checkpoint runs/a holds a model of kind {kind!r}; the model given is of kind {model_kind(lm.config)!r}"
    )
    other_backend = "eager" if tiny.config.attention_backend != "eager" else "torch"
    check_model_matches(tiny, kind, replace(tiny.config, attention_backend=other_backend), "runs/a", "x")
    with pytest.raises(ConfigMismatchError, match="d_ff"):
        check_model_matches(tiny, kind, replace(tiny.config, d_ff=32), "runs/a", "x")


def test_non_finite_tensors_are_named_in_one_phrase():
    """describe_nonfinite: ``"2 tensors: a.weight (3 of 64 values), b.bias (all 8 values)"``; the first ``shown``
    (3) named, then how many more; one tensor is "1 tensor"."""
    from transformer.checkpoint import describe_nonfinite

    assert describe_nonfinite([("a.weight", 3, 64), ("b.bias", 8, 8)]) == (
        "2 tensors: a.weight (3 of 64 values), b.bias (all 8 values)"
    )
    assert describe_nonfinite([("w", 1, 2)]) == "1 tensor: w (1 of 2 values)"
    five = [(f"t{i}", 1, 4) for i in range(5)]
    assert describe_nonfinite(five) == (
        "5 tensors: t0 (1 of 4 values), t1 (1 of 4 values), t2 (1 of 4 values) and 2 more"
    )
    assert describe_nonfinite(five, shown=4).endswith("t3 (1 of 4 values) and 1 more")
    assert describe_nonfinite(five[:3]) == "3 tensors: t0 (1 of 4 values), t1 (1 of 4 values), t2 (1 of 4 values)"


def test_the_bytes_of_every_tensor_in_a_nested_state_are_counted():
    """tensor_bytes: the bytes of every tensor in ``obj`` (dicts, lists and tuples of tensors and other values)."""
    from transformer.checkpoint import tensor_bytes

    state = {"a": torch.zeros(3, 4), "b": [torch.zeros(5, dtype=torch.float64), ("x", 7, torch.zeros(2, 2))],
             "step": 12, "name": "run"}  # fmt: skip
    assert tensor_bytes(state) == 3 * 4 * 4 + 5 * 8 + 2 * 2 * 4
    assert tensor_bytes({"step": 1, "lr": 0.5, "tags": ["a"]}) == 0


@pytest.mark.parametrize(
    "state",
    [{}, {"step": 0}, {"empty": {}, "none": None, "list": [], "tuple": (), "nested": {"a": [{}], "b": ((),)}}],
    ids=["empty", "one", "empty-containers"],
)
def test_a_training_state_comes_back_as_it_was_saved_even_empty(tiny, tmp_path, state):
    """save_checkpoint: "optional training state": whatever dict is given (an empty one too) is loaded back equal,
    types of its containers included; none given loads as None."""
    save_checkpoint(tmp_path / "given", tiny, trainer_state=state)
    loaded = load_checkpoint(tmp_path / "given").trainer_state
    assert loaded == state and type(loaded) is dict
    assert type(loaded.get("tuple", ())) is tuple and type(loaded.get("list", [])) is list
    save_checkpoint(tmp_path / "none", tiny)
    assert load_checkpoint(tmp_path / "none").trainer_state is None
