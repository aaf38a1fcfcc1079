"""Promises of the training modules that no other test checks by value (see docs/promises/training.md): defaults and
validation of the configs, the checks switch per step, the state codec, Batch.to, autocast, the tasks' exact match
and optimizer, and the Trainer's refusals."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch

import transformer as T
from transformer.checkpoint import decode_state, encode_state, save_checkpoint
from transformer.distributed import SingleProcess
from transformer.tasks import CopyTask, DatesTask, data_gen, make_trainer
from transformer.training import (
    LabelSmoothing,
    NoamSchedule,
    SimpleLossCompute,
    TrainerConfig,
    TrainState,
    autocast_context,
    label_smoothing_entropy,
    rate,
    run_epoch,
)
from transformer.training.batch import Batch

TINY = dict(batch_size=4, n_encoder_layers=1, n_decoder_layers=1, d_model=16, d_ff=32, n_heads=2, eval_every=0)


def test_trainer_config_defaults_are_the_documented_ones():
    cfg = TrainerConfig()
    assert (
        cfg.steps,
        cfg.accum_iter,
        cfg.clip_grad,
        cfg.eval_every,
        cfg.checkpoint_every,
        cfg.amp,
        cfg.progress,
        cfg.checks,
        cfg.out_dir,
        cfg.interrupt_at_step_boundary,
    ) == (1000, 1, 1.0, 0, 0, True, False, "always", None, True)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("steps", -1, "steps must be >= 0, got -1"),
        ("accum_iter", 0, "accum_iter must be >= 1, got 0"),
        ("checks", "sometimes", "checks must be 'always', 'first' or 'never', got 'sometimes'"),
        ("clip_grad", 0.0, "clip_grad must be positive or None, got 0.0"),
    ],
)
def test_trainer_config_refuses_impossible_values_naming_them(field, value, message):
    with pytest.raises(ValueError, match=f"TrainerConfig: {message}"):
        TrainerConfig(**{field: value})
    TrainerConfig(steps=0, clip_grad=None)  # the boundaries that are allowed


@pytest.mark.parametrize(
    "checks, expected",
    [("always", [True, True, True]), ("first", [True, False, False]), ("never", [False, False, False])],
)
def test_the_checks_setting_says_which_steps_check_contracts(checks, expected):
    trainer = make_trainer(CopyTask(), steps=3, **TINY)
    trainer.config.checks = checks
    seen = []
    trainer.model.register_forward_pre_hook(lambda module, args: seen.append(T.checks_enabled()))
    with T.checks(not expected[0]) if checks == "never" else contextlib.nullcontext():
        trainer.train()
    assert seen == expected
    assert T.checks_enabled()  # the switch is back to what it was


def test_trainer_refusals_name_what_is_wrong(tmp_path):
    trainer = make_trainer(CopyTask(), steps=1, **TINY)
    trainer.eval_batches = None
    with pytest.raises(ValueError, match="Trainer.evaluate: no eval_batches were given"):
        trainer.evaluate()
    with pytest.raises(ValueError, match="the trainer is on cpu but the strategy on meta"):
        trainer.distribute(SingleProcess(device="meta"))
    trainer.train()
    with pytest.raises(ValueError, match="Trainer.distribute: call it before training starts"):
        trainer.distribute(SingleProcess())
    save_checkpoint(tmp_path / "weights-only", trainer.model)
    with pytest.raises(ValueError, match="holds no training state to resume from"):
        make_trainer(CopyTask(), steps=1, **TINY).resume(str(tmp_path / "weights-only"))


def test_the_state_codec_round_trips_tuples_non_string_keys_and_tensors():
    state = {
        "a": (1, 2.5, "x", None, True),
        "b": {3: torch.arange(3), "k": [torch.ones(2, 2), {"n": 1}]},
        "__tensor__": "a key that looks like a tag",
    }
    tensors: dict = {}
    encoded = encode_state(state, tensors, "s")
    import json

    restored = decode_state(json.loads(json.dumps(encoded)), tensors)
    assert restored["a"] == (1, 2.5, "x", None, True) and isinstance(restored["a"], tuple)
    assert list(restored["b"]) == [3, "k"] and torch.equal(restored["b"][3], torch.arange(3))
    assert torch.equal(restored["b"]["k"][0], torch.ones(2, 2)) and restored["b"]["k"][1] == {"n": 1}
    assert restored["__tensor__"] == "a key that looks like a tag"
    with pytest.raises(TypeError, match=r"cannot store a set at s\.bad in a checkpoint"):
        encode_state({"bad": {1, 2}}, {}, "s")


def test_batch_to_moves_every_tensor_and_returns_the_batch():
    src = torch.tensor([[1, 2, 0]])
    batch = Batch(src, torch.tensor([[1, 2, 3, 0]]), 0)
    assert batch.to("meta") is batch and len(batch) == 1
    assert {name: getattr(batch, name).device.type for name in ("src", "tgt", "tgt_y")} == dict.fromkeys(
        ("src", "tgt", "tgt_y"), "meta"
    )
    assert batch.src_mask.key_lengths.device.type == "meta" and batch.inputs()[0] is batch.src


def test_autocast_is_bf16_on_cuda_only_and_only_when_enabled():
    assert isinstance(autocast_context("cpu"), contextlib.nullcontext)
    assert isinstance(autocast_context("cuda", enabled=False), contextlib.nullcontext)
    with pytest.warns(UserWarning) if not torch.cuda.is_available() else contextlib.nullcontext():
        amp = autocast_context("cuda")
    assert isinstance(amp, torch.autocast) and amp.fast_dtype == torch.bfloat16 and amp.device == "cuda"


def test_run_epoch_and_the_schedule_refuse_impossible_settings():
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=2)
    compute = SimpleLossCompute(model.generator, LabelSmoothing(11, 0))
    with pytest.raises(ValueError, match="run_epoch: accum_iter must be >= 1, got 0"):
        run_epoch(data_gen(11, 2, 1), model, compute, torch.optim.SGD(model.parameters(), lr=0.1), accum_iter=0)
    with pytest.raises(ValueError, match="rate: warmup must be positive, got warmup=0"):
        rate(1, 512, 1.0, 0)
    with pytest.raises(ValueError, match="LabelSmoothing: style must be 'torch' or 'annotated', got 'other'"):
        LabelSmoothing(5, 0, 0.1, style="other")
    with pytest.raises(ValueError, match="style='annotated' needs size >= 3 to smooth, got size=2"):
        LabelSmoothing(2, 0, 0.1, style="annotated")
    LabelSmoothing(2, 0, 0.0, style="annotated")  # no smoothing: nothing to spread


def test_data_gen_is_the_tutorials():
    batches = list(data_gen(11, 5, 3, torch.Generator().manual_seed(0)))
    assert len(batches) == 3
    for batch in batches:
        full = torch.cat([batch.tgt, batch.tgt_y[:, -1:]], dim=1)
        assert torch.equal(batch.src, full) and (batch.src[:, 0] == 1).all()
        assert batch.src.shape == (5, 10) and batch.src.min() >= 1 and batch.src.max() <= 10 and batch.pad == 0


def test_make_trainer_uses_the_tutorials_optimizer_and_the_tasks_defaults():
    for task in (CopyTask(), DatesTask()):
        defaults = task.default_training()
        trainer = make_trainer(task, seed=5)
        group = trainer.optimizer.param_groups[0]
        assert type(trainer.optimizer) is torch.optim.Adam and (group["betas"], group["eps"]) == ((0.9, 0.98), 1e-9)
        assert trainer.scheduler.base_lrs == [1.0]
        (schedule,) = trainer.scheduler.lr_lambdas
        assert (schedule.model_size, schedule.factor, schedule.warmup) == (64, defaults.factor, defaults.warmup)
        assert trainer.criterion.smoothing == defaults.smoothing and trainer.config.clip_grad == defaults.clip_grad
        assert trainer.config.steps == defaults.steps and trainer.config.eval_every == defaults.eval_every
        assert trainer.metadata == task.to_metadata() and trainer.data_generator.initial_seed() == 5
        other = make_trainer(task, warmup=7, factor=0.5)
        assert (other.scheduler.lr_lambdas[0].warmup, other.scheduler.lr_lambdas[0].factor) == (7, 0.5)


def test_exact_match_is_the_fraction_of_decodes_equal_to_the_reference(monkeypatch):
    """Every second held-out example decoded right, one wrong token in the others: exactly one half, whatever the
    decodes' width (a decode shorter or longer than the reference is padded before comparing)."""
    task = DatesTask()

    def half_right(self, model, src, **kwargs):
        g = torch.Generator().manual_seed(4321)
        _, tgt = task.sample(g, src.size(0), held_out=True)  # the references exact_match draws
        out = torch.nn.functional.pad(tgt.clone(), (0, 3), value=task.pad)  # wider, padded
        out[1::2, 5] = (out[1::2, 5] + 1) % len(task.tgt_vocab)
        return out

    monkeypatch.setattr(DatesTask, "translate_ids", half_right)
    assert task.exact_match(None, 40, batch_size=40) == 0.5


def test_noam_schedule_state_is_plain_json_and_restores_the_factor():
    import json

    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, NoamSchedule(64, 0.25, 9))
    state = json.loads(json.dumps(sched.state_dict()))
    other = torch.optim.lr_scheduler.LambdaLR(
        torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1.0), NoamSchedule(64, 1.0, 200)
    )
    other.load_state_dict(state)
    assert (other.lr_lambdas[0].factor, other.lr_lambdas[0].warmup) == (0.25, 9)


# ------------------------------------------------------------------ found missing by a blind review
# Each test below kills a bug that a reviewer who never read the tests planted and the tests missed
# (tests/mutation/catalog/blind_*.py).


def test_run_epoch_train_and_log_mode_trains():
    """run_epoch: mode is "train", "train+log" or "eval"; both training modes step the optimizer and scheduler."""
    torch.manual_seed(0)
    model = T.make_model(11, 11, N=1, d_model=32, d_ff=64, h=4, dropout=0.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    compute = SimpleLossCompute(model.generator, LabelSmoothing(11, 0, 0.0))
    before = [p.detach().clone() for p in model.parameters()]
    loss, state = run_epoch(
        data_gen(11, 4, 3, torch.Generator().manual_seed(0)),
        model,
        compute,
        optimizer,
        scheduler,
        mode="train+log",
        train_state=TrainState(),
    )
    assert math.isfinite(loss)
    assert (state.step, state.accum_step, state.samples) == (3, 3, 12)
    assert scheduler.last_epoch == 3
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize("style", ["torch", "annotated"])
@pytest.mark.parametrize("size,smoothing", [(7, 0.2), (5, 0.1), (11, 0.4)])
def test_label_smoothing_of_the_smoothed_target_itself_is_zero(size, smoothing, style):
    """LabelSmoothing is KL(q || p): zero when p is the smoothed target q itself. Built here from the docstring's
    definition of q, independently of label_smoothing_entropy, whose value is checked against it too."""
    pad, labels = 0, torch.tensor([3, 1, size - 1, 2])
    q = torch.zeros(len(labels), size, dtype=torch.float64)
    for row, label in enumerate(labels.tolist()):
        if style == "torch":  # (1 - s) * onehot + s / size over all classes
            q[row] = smoothing / size
            q[row, label] += 1.0 - smoothing
        else:  # 1 - s on the label, s / (size - 2) on every other class except the padding id
            q[row] = smoothing / (size - 2)
            q[row, pad] = 0.0
            q[row, label] = 1.0 - smoothing
    assert torch.allclose(q.sum(-1), torch.ones(len(labels), dtype=torch.float64))
    entropy = -(q[0] * q[0].clamp_min(1e-300).log()).sum().item()
    assert label_smoothing_entropy(size, smoothing, style) == pytest.approx(entropy, rel=1e-12)
    loss = LabelSmoothing(size, pad, smoothing, style=style)(q.clamp_min(1e-300).log().float(), labels)
    assert abs(loss.item()) < 1e-5


def test_a_checkpoint_loads_into_a_model_that_differs_only_in_run_time_fields(tmp_path):
    """load_checkpoint: run-time fields such as attention_backend may differ; the architecture may not."""
    config = T.TransformerConfig(
        src_vocab=11, tgt_vocab=11, n_encoder_layers=1, n_decoder_layers=1, d_model=16, d_ff=32, n_heads=2
    )
    saved = T.make_model(config)
    T.save_checkpoint(tmp_path / "ckpt", saved)
    for backend in ("eager", "torch"):
        other = T.make_model(config.replace(attention_backend=backend))
        T.load_checkpoint(tmp_path / "ckpt", other)
        assert other.config.attention_backend == backend
        assert all(
            torch.equal(a, b) for a, b in zip(saved.state_dict().values(), other.state_dict().values(), strict=True)
        )
    with pytest.raises(T.ConfigMismatchError, match="d_ff"):
        T.load_checkpoint(tmp_path / "ckpt", T.make_model(config.replace(d_ff=64)))


def test_a_changed_asset_is_refused_by_its_checksum(tmp_path):
    """save_checkpoint: assets are covered by the SHA-256 manifest, so a changed byte is refused on load."""
    model = T.make_model(
        T.TransformerConfig(
            src_vocab=11, tgt_vocab=11, n_encoder_layers=1, n_decoder_layers=1, d_model=16, d_ff=32, n_heads=2
        )
    )
    T.save_checkpoint(tmp_path / "ckpt", model, assets={"tokenizer.json": '{"kind": "char"}'})
    assert T.load_checkpoint(tmp_path / "ckpt").assets == ["tokenizer.json"]
    (tmp_path / "ckpt" / "tokenizer.json").write_text('{"kind": "bpe!"}')
    with pytest.raises(T.CheckpointError, match="tokenizer.json does not match its recorded SHA-256"):
        T.load_checkpoint(tmp_path / "ckpt")


def test_make_trainer_passes_every_setting_through_zero_included():
    """make_trainer: each argument given reaches the Trainer; None means the task's default. 0 is a value
    (eval_every=0: evaluate only at the end), not "unset"."""
    from transformer.tasks import CopyTask, make_trainer

    task = CopyTask()
    defaults = task.default_training()
    given = make_trainer(task, steps=7, eval_every=0, checkpoint_every=0, accum_iter=3, batch_size=5, warmup=9)
    assert (given.config.steps, given.config.eval_every, given.config.checkpoint_every, given.config.accum_iter) == (
        7,
        0,
        0,
        3,
    )
    assert defaults.eval_every != 0
    assert make_trainer(task).config.eval_every == defaults.eval_every
    assert make_trainer(task, eval_every=3).config.eval_every == 3
