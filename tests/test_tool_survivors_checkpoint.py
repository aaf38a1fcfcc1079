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


def _rewrite_meta(path, change) -> None:
    """Apply ``change`` to the meta.json of checkpoint ``path`` (meta.json is not in its own manifest)."""
    meta_file = os.path.join(path, "meta.json")
    with open(meta_file) as f:
        meta = json.load(f)
    meta = change(meta)
    with open(meta_file, "w") as f:
        json.dump(meta, f)


def _replace_file(path, name: str, content: bytes) -> None:
    """Put ``content`` in file ``name`` of checkpoint ``path`` and record its SHA-256, as a tool that wrote it would."""
    from transformer.checkpoint import sha256_file

    with open(os.path.join(path, name), "wb") as f:
        f.write(content)

    def record(meta):
        meta["sha256"][name] = sha256_file(os.path.join(path, name))
        return meta

    _rewrite_meta(path, record)


def test_a_model_of_no_known_kind_is_refused_naming_the_kinds_and_what_it_got(tmp_path, tiny):
    """model_kind: "ValueError for any other object"; save_checkpoint and load_checkpoint (check_model_matches:
    "prefixed by ``who``") say so with their own name, the known kinds with their config classes and the type got."""
    known = "encoder_decoder (TransformerConfig), lm (LMConfig)"
    with_dict_config = torch.nn.Linear(2, 2)
    with_dict_config.config = {"d_model": 8}
    for model, got in ((torch.nn.Linear(2, 2), "NoneType"), (with_dict_config, "dict")):
        with pytest.raises(ValueError) as error:
            save_checkpoint(tmp_path / "x", model)
        assert str(error.value) == (
            f"save_checkpoint: model.config must be the config of a known model kind ({known}), got {got} "
            "(build models with make_model or build_lm)"
        )
    assert not (tmp_path / "x").exists()
    save_checkpoint(tmp_path / "ck", tiny)
    with pytest.raises(ValueError) as error:
        load_checkpoint(tmp_path / "ck", torch.nn.Linear(2, 2))
    assert str(error.value) == (
        f"load_checkpoint: model.config must be the config of a known model kind ({known}), got NoneType "
        "(build models with make_model or build_lm)"
    )


def test_every_file_of_the_manifest_is_checked_except_the_skipped(tmp_path):
    """verify_files: check every file ``digests`` names "except those ``skip`` names"; raise naming the first one
    that is missing or does not match."""
    from transformer.checkpoint import sha256_file, verify_files

    (tmp_path / "a.bin").write_bytes(b"a")
    (tmp_path / "b.bin").write_bytes(b"b")
    good = {"a.bin": sha256_file(str(tmp_path / "a.bin")), "b.bin": sha256_file(str(tmp_path / "b.bin"))}
    shard = {"shard-0.bin": "0" * 64}  # another rank's file, absent here: skipped
    verify_files(str(tmp_path), {**shard, **good}, skip=lambda name: name.startswith("shard-"))
    with pytest.raises(CheckpointError) as error:
        verify_files(str(tmp_path), {**shard, "a.bin": good["a.bin"], "b.bin": good["a.bin"]},
                     skip=lambda name: name.startswith("shard-"))  # fmt: skip
    assert str(error.value) == f"checkpoint {tmp_path} is corrupt: b.bin does not match its recorded SHA-256"
    with pytest.raises(CheckpointError) as error:
        verify_files(str(tmp_path), {**good, **shard})
    assert str(error.value) == f"checkpoint {tmp_path} is incomplete: shard-0.bin is missing"


def test_meta_json_that_is_not_an_object_reads_as_none(tmp_path):
    """read_meta: None when meta.json is missing, unreadable or not a JSON object."""
    from transformer.checkpoint import read_meta

    (tmp_path / "meta.json").write_text('["format_version", 1]')
    assert read_meta(str(tmp_path)) is None
    (tmp_path / "meta.json").write_text('{"format_version": 1}')
    assert read_meta(str(tmp_path)) == {"format_version": 1}


def test_the_stored_config_is_read_by_its_kind_and_a_bad_one_is_named(tmp_path, tiny):
    """read_config: the config stored (validated), by the kind config.json names, ``(kind, config)`` with
    ``with_kind``; "A config.json without a kind, as written before there were two, is an encoder-decoder"."""
    from transformer.checkpoint import read_config
    from transformer.config import TransformerConfig

    path = str(tmp_path / "ck")
    save_checkpoint(path, tiny)
    config = read_config(path)
    assert type(config) is TransformerConfig and config.differences(tiny.config, architecture_only=True) == {}
    kind, again = read_config(path, with_kind=True)
    assert kind == "encoder_decoder" and again == config
    config_file = os.path.join(path, "config.json")
    with open(config_file) as f:
        data = json.load(f)
    del data["kind"]
    with open(config_file, "w") as f:
        json.dump(data, f)
    assert read_config(path, with_kind=True) == ("encoder_decoder", config)
    corrupt = f"checkpoint {path} has a corrupt config.json: "
    for content, reason in (({**data, "kind": "gpt"}, "unknown model kind 'gpt'; known kinds: encoder_decoder, lm"),
                            ([data], "expected a JSON object, got list")):  # fmt: skip
        with open(config_file, "w") as f:
            json.dump(content, f)
        with pytest.raises(CheckpointError) as error:
            read_config(path)
        assert str(error.value) == corrupt + reason
    with open(config_file, "w") as f:
        f.write("{")
    with pytest.raises(CheckpointError) as error:
        read_config(path)
    assert str(error.value).startswith(corrupt + "Expecting property name")
    os.remove(config_file)
    with pytest.raises(CheckpointError) as error:
        read_config(path)
    assert str(error.value) == f"checkpoint {path} is incomplete: config.json is missing"


@pytest.mark.parametrize(
    "change",
    [lambda m: {**m, "format_version": 2}, lambda m: {k: v for k, v in m.items() if k != "sha256"},
     lambda m: {**m, "sha256": list(m["sha256"])}, lambda m: [m]],
    ids=["version-2", "no-manifest", "manifest-list", "not-an-object"],
)  # fmt: skip
def test_a_meta_json_of_another_format_is_refused_by_name(tmp_path, tiny, change):
    """load_checkpoint: CheckpointError when files "cannot be parsed": meta.json must be a JSON object of format
    version FORMAT_VERSION with a SHA-256 manifest."""
    path = str(tmp_path / "ck")
    save_checkpoint(path, tiny)
    _rewrite_meta(path, change)
    with pytest.raises(CheckpointError) as error:
        load_checkpoint(path)
    assert str(error.value) == f"checkpoint {path}: meta.json is not a typed-transformer checkpoint of format 1"


def test_a_model_of_another_architecture_is_refused_naming_the_checkpoint_and_the_field(tmp_path, tiny):
    """load_checkpoint: ConfigMismatchError "naming every mismatched field" (and the checkpoint's path)."""
    path = str(tmp_path / "ck")
    save_checkpoint(path, tiny)
    other = make_model(7, 7, N=1, d_model=8, d_ff=32, h=2, dropout=0.0)
    with pytest.raises(ConfigMismatchError) as error:
        load_checkpoint(path, other)
    assert str(error.value) == (
        f"checkpoint {path} was saved from a model with another config; mismatched fields: "
        "d_ff (model 32, checkpoint 16)"
    )


def test_weights_missing_from_the_file_or_extra_in_it_are_refused(tmp_path, tiny):
    """load_checkpoint: CheckpointError when model.safetensors "cannot be parsed" into the model: every weight of
    the model must be in it and nothing else (a file of the right hashes but the wrong tensors)."""
    from safetensors.torch import load_file, save_file

    path = str(tmp_path / "ck")
    save_checkpoint(path, tiny)
    weights = load_file(os.path.join(path, "model.safetensors"))
    for broken in ({k: v for k, v in weights.items() if k != "encoder.norm.bias"},
                   {**weights, "extra.weight": torch.zeros(2)}):  # fmt: skip
        save_file(broken, str(tmp_path / "w.safetensors"))
        _replace_file(path, "model.safetensors", (tmp_path / "w.safetensors").read_bytes())
        with pytest.raises(CheckpointError) as error:
            load_checkpoint(path)
        assert str(error.value).startswith(f"checkpoint {path}: cannot load model.safetensors: Error(s) in loading")


def test_a_training_state_that_cannot_be_read_is_named(tmp_path, tiny):
    """load_checkpoint: CheckpointError when the training state cannot be parsed (a tensor it names is absent)."""
    path = str(tmp_path / "ck")
    save_checkpoint(path, tiny, trainer_state={"m": torch.ones(2)})
    _replace_file(path, "state.json", b'{"m": {"__tensor__": "nope"}}')
    with pytest.raises(CheckpointError) as error:
        load_checkpoint(path)
    assert str(error.value) == f"checkpoint {path}: cannot read the training state: 'nope'"
    assert load_checkpoint(path, load_trainer_state=False).trainer_state is None


def test_what_is_loaded_says_its_kind_and_metadata_even_when_meta_json_has_none(tmp_path, tiny):
    """Checkpoint: ``kind`` (a key of MODEL_KINDS) and ``metadata`` (a dict, ``{}`` when there is none)."""
    from transformer.lm import LMConfig, build_lm

    lm = build_lm(LMConfig(vocab=7, n_layers=1, d_model=8, d_ff=16, n_heads=2))
    save_checkpoint(tmp_path / "lm", lm, metadata={"task": "lm"})
    loaded = load_checkpoint(tmp_path / "lm")
    assert loaded.kind == "lm" and loaded.metadata == {"task": "lm"} and type(loaded.model) is type(lm)
    save_checkpoint(tmp_path / "ed", tiny)
    _rewrite_meta(tmp_path / "ed", lambda m: {k: v for k, v in m.items() if k != "metadata"})
    loaded = load_checkpoint(tmp_path / "ed")
    assert loaded.kind == "encoder_decoder" and loaded.metadata == {}


def _names_the_caller(warning) -> bool:
    """Whether ``warning`` is attributed to this file (its caller). Under mutmut's recheck (MUTANT_UNDER_TEST set) each
    function of the package is called through mutmut's trampoline, one frame between it and its caller: there the
    warning names that trampoline, and must at least name no file of the package."""
    import transformer.checkpoint

    if "MUTANT_UNDER_TEST" in os.environ:
        return not warning.filename.startswith(os.path.dirname(transformer.checkpoint.__file__))
    return warning.filename == __file__


def _poison(model, name: str) -> int:
    with torch.no_grad():
        model.state_dict()[name].view(-1)[1] = float("nan")
    return model.state_dict()[name].numel()


def test_non_finite_weights_are_refused_on_save_and_load_and_loaded_with_a_warning_when_allowed(tmp_path, tiny):
    """save_checkpoint: weights that are NaN or infinite "are refused (NonFiniteWeightsError, naming the tensors;
    nothing is written) unless allow_nonfinite"; load_checkpoint: NonFiniteWeightsError naming the tensors; "with
    allow_nonfinite=True such a checkpoint loads with a warning that names them" (attributed to the caller)."""
    name = "encoder.norm.bias"
    size = _poison(tiny, name)
    where = f"1 tensor: {name} (1 of {size} values)"
    path = str(tmp_path / "ck")
    with pytest.raises(NonFiniteWeightsError) as error:
        save_checkpoint(path, tiny)
    assert str(error.value) == (
        f"save_checkpoint: refusing to save non-finite weights (NaN or inf) in {where} to {path}; "
        "there was no checkpoint there before, and nothing was left behind"
    )
    assert error.value.tensors == [(name, 1, size)] and os.listdir(tmp_path) == []
    save_checkpoint(path, tiny, allow_nonfinite=True)
    said = f"checkpoint {path} holds non-finite weights (NaN or inf) in {where}: it was saved from a run that diverged"
    with pytest.raises(NonFiniteWeightsError) as error:
        load_checkpoint(path)
    assert str(error.value) == said + " (load_checkpoint(..., allow_nonfinite=True) loads it to inspect)"
    assert error.value.tensors == [(name, 1, size)]
    with pytest.warns(UserWarning) as record:
        loaded = load_checkpoint(path, allow_nonfinite=True)
    assert [str(w.message) for w in record] == [said] and _names_the_caller(record[0])
    assert torch.isnan(loaded.model.state_dict()[name]).sum() == 1


def test_only_floating_and_complex_tensors_are_counted_and_named():
    """nonfinite_tensors: ``(name, non-finite values, size)`` of each floating tensor holding a NaN or an
    infinity; anything else in ``named`` (integers, non-tensors) is passed over."""
    from transformer.checkpoint import nonfinite_tensors

    nan, inf = float("nan"), float("inf")
    named = [("step", 3), ("count", torch.tensor([1, 2])), ("w", torch.tensor([1.0, nan, -inf])),
             ("z", torch.tensor([complex(nan, 0.0), 1j])), ("ok", torch.ones(2, dtype=torch.float64)),
             ("h", torch.tensor([inf, 0.0, 1.0], dtype=torch.float16).t())]  # fmt: skip
    assert nonfinite_tensors(named) == [("w", 2, 3), ("z", 1, 2), ("h", 1, 3)]
    assert nonfinite_tensors([("step", 3), ("count", torch.tensor([1]))]) == []
    assert nonfinite_tensors(iter([("b", torch.zeros(2))])) == []


def test_a_sharded_tensor_is_checked_on_this_ranks_shard(tmp_path):
    """nonfinite_tensors: "A sharded tensor (FSDP's DTensor) is checked on this rank's shard" (beside plain
    tensors, in the same read-back)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    from transformer.checkpoint import nonfinite_tensors

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        sharded = distribute_tensor(torch.tensor([float("nan"), 1.0, 2.0, float("inf")]), mesh, [Shard(0)])
        named = [("plain", torch.tensor([float("nan")])), ("sharded", sharded)]
        assert nonfinite_tensors(named) == [("plain", 1, 1), ("sharded", 2, 4)]
    finally:
        dist.destroy_process_group()
