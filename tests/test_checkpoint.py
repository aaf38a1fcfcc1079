"""Checkpoints: safetensors + JSON, exact resume, config mismatch errors, no pickle, atomic writes."""

import json
import os
import pickle

import pytest
import torch

import transformer as T
import transformer.checkpoint.save as checkpoint_save
from transformer.checkpoint import CheckpointError, ConfigMismatchError, load_checkpoint, save_checkpoint
from transformer.tasks import CopyTask, make_trainer


def _model(**changes):
    torch.manual_seed(0)
    return T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=2, dropout=0.0, **changes).eval()


def _outputs(model):
    src = torch.randint(1, 11, (2, 5), generator=torch.Generator().manual_seed(3))
    return model(src, src, T.padding_mask(src, 0), T.target_mask(src, 0))


def test_round_trip_restores_weights_config_and_metadata(tmp_path):
    model = _model(tie_weights="all")
    save_checkpoint(tmp_path / "ck", model, metadata={"task": "copy", "note": [1, 2]})
    assert sorted(os.listdir(tmp_path / "ck")) == ["config.json", "meta.json", "model.safetensors"]
    loaded = load_checkpoint(tmp_path / "ck")
    assert loaded.config == model.config and loaded.metadata == {"task": "copy", "note": [1, 2]}
    assert torch.equal(_outputs(loaded.model.eval()), _outputs(model))
    assert loaded.model.generator.proj.weight is loaded.model.tgt_embed[0].lut.weight  # tying survives
    other = _model(tie_weights="all")
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)
    load_checkpoint(tmp_path / "ck", model=other)
    assert torch.equal(_outputs(other), _outputs(model))


def test_loading_into_another_config_names_the_mismatched_fields(tmp_path):
    save_checkpoint(tmp_path / "ck", _model())
    with pytest.raises(ConfigMismatchError) as info:
        load_checkpoint(tmp_path / "ck", model=T.make_model(11, 11, N=2, d_model=16, d_ff=64, h=2, dropout=0.0))
    message = str(info.value)
    assert "n_encoder_layers (model 2, checkpoint 1)" in message and "d_ff (model 64, checkpoint 32)" in message
    assert set(info.value.fields) == {"n_encoder_layers", "n_decoder_layers", "d_ff"}


def test_loading_never_unpickles(tmp_path, monkeypatch):
    trainer = make_trainer(
        CopyTask(), steps=2, batch_size=4, n_encoder_layers=1, n_decoder_layers=1, d_model=16, d_ff=32, n_heads=2
    )
    trainer.train()
    trainer.save(str(tmp_path / "ck"))

    def forbidden(*args, **kwargs):
        raise AssertionError("unpickling attempted")

    monkeypatch.setattr(torch, "load", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    loaded = load_checkpoint(tmp_path / "ck")
    assert loaded.trainer_state["step"] == 2
    assert isinstance(loaded.trainer_state["optimizer"]["state"][0]["exp_avg"], torch.Tensor)
    json.loads((tmp_path / "ck" / "state.json").read_text())  # plain JSON


def test_exact_resume_2k_steps_equal_1k_plus_resume_plus_1k(tmp_path):
    tiny = dict(
        batch_size=4,
        n_encoder_layers=1,
        n_decoder_layers=1,
        d_model=8,
        d_ff=16,
        n_heads=2,
        dropout=0.1,
        eval_every=0,
        warmup=100,
        seed=7,
    )
    task = CopyTask()
    straight = make_trainer(task, steps=2000, **tiny)
    # a checkpoint at step 1000 of the straight run is what a 1k-step run would have saved: saving draws no randomness
    straight.config.out_dir, straight.config.checkpoint_every = str(tmp_path / "ck"), 1000
    straight.train(1000)
    halfway = straight.last_train_loss
    straight.config.out_dir = None
    straight.train()

    resumed = make_trainer(
        task, steps=2000, **{**tiny, "seed": 123}
    )  # another seed: everything must come from the checkpoint
    resumed.resume(str(tmp_path / "ck"))
    assert resumed.step == 1000 and resumed.last_train_loss == halfway
    resumed.train()
    assert resumed.step == 2000
    assert resumed.last_train_loss == straight.last_train_loss
    assert resumed.history.train_loss == straight.history.train_loss
    for a, b in zip(resumed.model.parameters(), straight.model.parameters(), strict=True):
        assert torch.equal(a, b)
    assert resumed.optimizer.param_groups[0]["lr"] == straight.optimizer.param_groups[0]["lr"]


def test_interrupted_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    target = tmp_path / "ck"
    first = _model()
    save_checkpoint(target, first, metadata={"version": 1})
    second = _model(tie_weights="target")

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("power cut while writing the weights")

    monkeypatch.setattr(checkpoint_save, "save_model", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(target, second, metadata={"version": 2})
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["ck"]  # no temporary left behind
    loaded = load_checkpoint(target)
    assert loaded.metadata == {"version": 1} and torch.equal(_outputs(loaded.model.eval()), _outputs(first))


def test_crash_between_the_renames_still_loads_the_previous_checkpoint(tmp_path, monkeypatch):
    target = tmp_path / "ck"
    save_checkpoint(target, _model(), metadata={"version": 1})
    real_rename = os.rename
    calls = []

    def rename(src, dst):
        calls.append((src, dst))
        if len(calls) >= 2:  # the old checkpoint was moved aside, then the process dies (no rollback either)
            raise SystemExit("killed")
        return real_rename(src, dst)

    monkeypatch.setattr(checkpoint_save.os, "rename", rename)
    monkeypatch.setattr(checkpoint_save.shutil, "rmtree", lambda *a, **k: None)  # a dead process cleans nothing up
    with pytest.raises(SystemExit):
        save_checkpoint(target, _model(), metadata={"version": 2})
    monkeypatch.undo()
    assert not target.exists()
    with pytest.warns(UserWarning, match="interrupted save"):
        loaded = load_checkpoint(target)
    assert loaded.metadata == {"version": 1}
    save_checkpoint(target, _model(), metadata={"version": 3})  # and the next save works
    assert load_checkpoint(target).metadata == {"version": 3}
    assert not [name for name in os.listdir(tmp_path) if ".old-" in name]  # the aside copy is cleaned up once replaced


def test_missing_and_corrupt_checkpoints_raise_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path / "nothing")
    save_checkpoint(tmp_path / "ck", _model())
    weights = tmp_path / "ck" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt: model.safetensors"):
        load_checkpoint(tmp_path / "ck")
    (tmp_path / "ck" / "meta.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt meta.json"):
        load_checkpoint(tmp_path / "ck")
    (tmp_path / "ck" / "meta.json").unlink()
    with pytest.raises(CheckpointError, match="meta.json is missing"):
        load_checkpoint(tmp_path / "ck")
