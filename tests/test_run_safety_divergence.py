"""Never silently wrong (issue 20), in one process: a diverging loss stops the run and keeps the last good checkpoint,
non-finite weights are neither saved nor loaded, label ids outside the vocabulary are named."""

from __future__ import annotations

import math
import os

import pytest
import torch
from run_safety_helpers import params, tiny_trainer
from torch import nn

import transformer as T
import transformer.training.losses as losses_module
from transformer.checkpoint import (
    NonFiniteWeightsError,
    load_checkpoint,
    save_checkpoint,
)
from transformer.tasks import CopyTask
from transformer.training import (
    LabelSmoothing,
    SimpleLossCompute,
    TrainingDiverged,
    run_epoch,
)
from transformer.training.batch import Batch


class NaNAfter(nn.Module):
    """A criterion that is ``base``'s until it has been called ``calls`` times in training, then NaN."""

    def __init__(self, base: nn.Module, calls: int, model: nn.Module) -> None:
        super().__init__()
        self.base, self.calls, self.model, self.seen = base, calls, model, 0
        self.size = base.size

    def forward(self, x, target):
        loss = self.base(x, target)
        if self.model.training:
            self.seen += 1
            if self.seen > self.calls:
                return loss * float("nan")
        return loss


# ---------------------------------------------------------------------------- divergence
def test_a_nan_loss_stops_before_the_optimizer_step_and_the_last_checkpoint_stays(tmp_path):
    """Steps 1-3 train and save (at 2, and at the end of ``train(3)``); step 4's loss is NaN. Training stops there
    with a message naming the step, the loss and what to change; the weights in memory are step 3's (the optimizer did
    not step on a NaN loss); the checkpoint on disk is step 3's, byte for byte; nothing half-written is left."""
    trainer = tiny_trainer(steps=8)
    trainer.criterion = NaNAfter(trainer.criterion, 3, trainer.model)
    trainer.loss_compute.criterion = trainer.criterion
    trainer.config.out_dir, trainer.config.checkpoint_every = str(tmp_path / "ck"), 2
    trainer.train(3)
    after_3 = params(trainer.model)
    saved = (tmp_path / "ck" / "model.safetensors").read_bytes()
    with pytest.raises(TrainingDiverged) as info:
        trainer.train()
    message = str(info.value)
    assert info.value.step == 4 and math.isnan(info.value.loss)
    assert "training diverged at step 4: the loss is nan" in message and "at step 3)" in message
    assert f"the previous checkpoint in {tmp_path / 'ck'} (step 3) is intact" in message
    assert "--lr" in message and "--warmup" in message and "clip" in message
    assert trainer.step == 3 and [s for s, _ in trainer.history.train_loss] == [1, 2, 3]
    for name, value in params(trainer.model).items():
        assert torch.equal(value, after_3[name]), name
    assert (tmp_path / "ck" / "model.safetensors").read_bytes() == saved
    assert load_checkpoint(tmp_path / "ck").trainer_state["step"] == 3
    assert sorted(os.listdir(tmp_path)) == ["ck"]


def test_the_cli_stops_a_diverging_run_with_exit_3_and_keeps_the_last_good_checkpoint(tmp_path, capsys):
    """``--lr-factor 1e30`` (the issue's example): the resumed run diverges within a few steps; exit status 3, one
    line, no results, the checkpoint of step 4 untouched. A fresh run that diverges at once reports nothing."""
    from transformer.cli import main

    out = tmp_path / "run"
    base = [
        "train",
        "copy",
        "--out",
        str(out),
        "--no-progress",
        "--eval-examples",
        "2",
        "--batch-size",
        "8",
        "--eval-every",
        "2",
    ]
    assert main([*base, "--steps", "4"]) == 0
    saved = (out / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert main([*base, "--steps", "12", "--resume", "--lr-factor", "1e30"]) == 3
    captured = capsys.readouterr()
    assert (
        "training diverged at step" in captured.err
        and f"the previous checkpoint in {out} (step 4) is intact" in captured.err
        and "Traceback" not in captured.err
        and len(captured.err.strip().splitlines()) == 1
    )
    assert "RESULTS" not in captured.out and (out / "model.safetensors").read_bytes() == saved
    assert (
        main(
            [
                "train",
                "copy",
                "--out",
                str(tmp_path / "fresh"),
                "--no-progress",
                "--steps",
                "4",
                "--eval-every",
                "1",
                "--lr-factor",
                "1e30",
                "--batch-size",
                "8",
            ]
        )
        == 3
    )
    captured = capsys.readouterr()
    assert "training diverged at step 1: the held-out loss is nan" in captured.err and "RESULTS" not in captured.out
    assert not (tmp_path / "fresh").exists()


def test_non_finite_weights_are_never_saved(tmp_path):
    """A finite loss can still leave NaN weights (an overflowing gradient): the save refuses them, naming the
    tensor, and the checkpoint already there stays; save_checkpoint itself refuses them too."""
    trainer = tiny_trainer(steps=2)
    trainer.config.out_dir = str(tmp_path / "ck")
    trainer.train()
    saved = (tmp_path / "ck" / "model.safetensors").read_bytes()
    with torch.no_grad():
        trainer.model.generator.proj.bias[3] = float("inf")
    with pytest.raises(
        TrainingDiverged,
        match=r"after step 2 the weights hold NaN or inf in 1 tensor: "
        r"generator\.proj\.bias \(1 of 11 values\); they were not saved and "
        r"the previous checkpoint in .* \(step 2\) is intact",
    ):
        trainer.save(str(tmp_path / "ck"))
    with pytest.raises(NonFiniteWeightsError, match=r"refusing to save non-finite weights .* generator\.proj\.bias"):
        save_checkpoint(tmp_path / "ck", trainer.model)
    with pytest.raises(NonFiniteWeightsError, match="there was no checkpoint there before"):
        save_checkpoint(tmp_path / "other", trainer.model)
    assert (tmp_path / "ck" / "model.safetensors").read_bytes() == saved
    assert sorted(os.listdir(tmp_path)) == ["ck"]


def test_a_nan_held_out_loss_stops_training(tmp_path):
    trainer = tiny_trainer(steps=6, eval_every=2)
    base, model = trainer.criterion, trainer.model

    class NaNInEvaluation(nn.Module):
        def forward(self, x, target):
            return base(x, target) * (1.0 if model.training else math.nan)

    trainer.loss_compute.criterion = NaNInEvaluation()
    with pytest.raises(TrainingDiverged, match="training diverged at step 2: the held-out loss is nan"):
        trainer.train()
    assert trainer.history.eval_loss == []


def test_run_epoch_stops_on_a_nan_loss():
    torch.manual_seed(0)
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=2, dropout=0.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compute = SimpleLossCompute(model.generator, NaNAfter(LabelSmoothing(11, 0), 2, model))
    with pytest.raises(TrainingDiverged, match=r"run_epoch: the loss of batch 2 is nan: training diverged; lower"):
        run_epoch(
            (CopyTask().batch(*CopyTask().sample(torch.Generator().manual_seed(i), 3)) for i in range(5)),
            model,
            compute,
            opt,
            mode="train",
        )


# ---------------------------------------------------------------------------- loading non-finite weights
def _poisoned_checkpoint(path, **metadata):
    torch.manual_seed(0)
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=2)
    with torch.no_grad():
        model.encoder.layers[0].feed_forward.w_1.weight[0, :3] = float("nan")
        model.generator.proj.bias.fill_(float("-inf"))
    save_checkpoint(path, model, metadata=metadata, allow_nonfinite=True)
    return model


def test_loading_refuses_non_finite_weights_naming_them(tmp_path):
    _poisoned_checkpoint(tmp_path / "ck")
    with pytest.raises(NonFiniteWeightsError) as info:
        load_checkpoint(tmp_path / "ck")
    message = str(info.value)
    assert "holds non-finite weights (NaN or inf) in 2 tensors" in message
    assert "encoder.layers.0.feed_forward.w_1.weight (3 of 512 values)" in message
    assert "generator.proj.bias (all 11 values)" in message and "allow_nonfinite=True" in message
    assert {name for name, _, _ in info.value.tensors} == {
        "encoder.layers.0.feed_forward.w_1.weight",
        "generator.proj.bias",
    }
    with pytest.warns(UserWarning, match="holds non-finite weights"):
        loaded = load_checkpoint(tmp_path / "ck", allow_nonfinite=True)
    assert torch.isnan(loaded.model.encoder.layers[0].feed_forward.w_1.weight[0, :3]).all()


def test_decode_generate_and_resume_refuse_a_non_finite_checkpoint(tmp_path, capsys):
    from transformer.cli import main

    _poisoned_checkpoint(tmp_path / "ck", task="copy", params={"vocab": 11, "seq_len": 10})
    assert main(["decode", "--checkpoint", str(tmp_path / "ck"), "1 2 3"]) == 2
    err = capsys.readouterr().err
    assert "error: checkpoint" in err and "non-finite weights" in err and "generator.proj.bias" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    trainer = tiny_trainer()
    trainer.model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=2)
    with pytest.raises(NonFiniteWeightsError):
        trainer.resume(str(tmp_path / "ck"))
    # generate reads a language model the same way
    from transformer.data.tokenizers import train_tokenizer
    from transformer.lm import build_lm
    from transformer.lm.config import LMConfig
    from transformer.tasks.tokenizer_assets import attach_tokenizer, tokenizer_metadata

    tokenizer = train_tokenizer(["abcabc"], "char", vocab_size=10, min_frequency=1)
    lm = build_lm(LMConfig(vocab=tokenizer.vocab_size, n_layers=1, d_model=16, d_ff=16, n_heads=2, max_len=16))
    attach_tokenizer(lm, tokenizer)
    with torch.no_grad():
        lm.layers[0].feed_forward.w_2.bias[1] = float("nan")
    save_checkpoint(
        tmp_path / "lm", lm, metadata={"task": "lm", "tokenizer": tokenizer_metadata(tokenizer)}, allow_nonfinite=True
    )
    assert main(["generate", "--checkpoint", str(tmp_path / "lm"), "ab"]) == 2
    err = capsys.readouterr().err
    assert "non-finite weights (NaN or inf) in 1 tensor: layers.0.feed_forward.w_2.bias (1 of 16 values)" in err


# ---------------------------------------------------------------------------- label ids
@pytest.mark.parametrize("bad, position", [(11, (1, 2)), (-1, (0, 1)), (12, (1, 0))])
def test_label_smoothing_names_a_label_outside_the_vocabulary(bad, position):
    x = torch.randn(2, 3, 11).log_softmax(-1)
    target = torch.tensor([[1, 2, 0], [4, 5, 6]])
    target[position] = bad
    with pytest.raises(ValueError) as info:
        LabelSmoothing(11, 0, 0.1)(x, target)
    assert str(info.value) == (
        f"LabelSmoothing: target holds label id {bad} at position {position}, outside [0, 11) (vocabulary size 11)"
    )


def test_simple_loss_compute_names_a_label_outside_the_generator_vocabulary():
    gen = T.Generator(8, 5)
    x = torch.randn(2, 3, 8)
    with pytest.raises(
        ValueError,
        match=r"SimpleLossCompute: y \(the labels\) holds label id 5 at position \(1, 1\), "
        r"outside \[0, 5\) \(vocabulary size 5\)",
    ):
        SimpleLossCompute(gen, LabelSmoothing(5, 0))(x, torch.tensor([[1, 2, 0], [3, 5, 0]]), 4)
    ce = SimpleLossCompute(gen, nn.CrossEntropyLoss(reduction="sum"))  # ignore_index -100 is its padding
    total, _ = ce(x, torch.tensor([[1, 2, -100], [3, 4, -100]]), 4)
    assert math.isfinite(total.item())
    with pytest.raises(
        ValueError,
        match=r"holds label id -5 at position \(0, 2\), outside \[0, 5\) or the ignored id "
        r"-100",
    ):
        ce(x, torch.tensor([[1, 2, -5], [3, 4, -100]]), 4)


def test_on_a_gpu_a_bad_label_is_nan_never_an_index_error_and_the_trainer_names_it(monkeypatch):
    """What a GPU does without reading the labels back (emulated on the CPU by switching the host check off): the
    loss is NaN, no index error (a device-side assert on CUDA); valid labels give the host path's loss; the Trainer,
    which reads the loss anyway, names the label."""
    x = torch.randn(2, 3, 11).log_softmax(-1)
    good = torch.tensor([[1, 2, 0], [4, 5, 6]])
    expected = LabelSmoothing(11, 0, 0.1)(x, good)
    monkeypatch.setattr(losses_module, "_checked_on_host", lambda tensor: False)
    assert torch.equal(LabelSmoothing(11, 0, 0.1)(x, good), expected)
    assert torch.isnan(LabelSmoothing(11, 0, 0.1)(x, torch.tensor([[1, 2, 0], [4, 11, 6]])))
    gen = T.Generator(8, 5)
    total, node = SimpleLossCompute(gen, nn.CrossEntropyLoss(reduction="sum"))(
        torch.randn(2, 3, 8), torch.tensor([[1, 2, 9], [3, 4, -100]]), 4
    )
    assert torch.isnan(total) and torch.isnan(node)

    trainer = tiny_trainer(steps=3)
    task = CopyTask()

    def bad_labels(generator):
        for i, batch in enumerate(task.batches(generator, 4)):
            if i == 1:
                tgt = torch.cat([batch.tgt, batch.tgt_y[:, -1:]], dim=1)
                tgt[2, -1] = 11
                batch = Batch(batch.src, tgt, 0)  # built without the vocabularies: nothing checks it here
            yield batch

    trainer.make_batches = bad_labels
    with pytest.raises(
        ValueError,
        match=r"Trainer \(step 2\): a batch's labels holds label id 11 at position "
        r"\(2, 8\), outside \[0, 11\)",
    ):
        trainer.train()
    assert trainer.step == 1


def test_batch_checks_every_target_position_against_the_vocabulary():
    src = torch.tensor([[1, 2, 3], [1, 4, 0]])
    tgt = torch.tensor([[1, 2, 3, 4], [1, 4, 0, 0]])
    Batch(src, tgt, 0, src_vocab=5, tgt_vocab=5)
    last = tgt.clone()
    last[1, 3] = 5
    with pytest.raises(
        ValueError,
        match=r"Batch: tgt holds id 5 at position \(1, 3\) \(the last target position: a "
        r"label only, which the model never reads\), outside the target vocabulary "
        r"\[0, 5\)",
    ):
        Batch(src, last, 0, src_vocab=5, tgt_vocab=5)
    inner = tgt.clone()
    inner[0, 1] = -2
    with pytest.raises(ValueError, match=r"Batch: tgt holds id -2 at position \(0, 1\), outside"):
        Batch(src, inner, 0, tgt_vocab=5)
    with pytest.raises(ValueError, match=r"Batch: src holds id 7 at position \(0, 2\), outside the source vocabulary"):
        Batch(torch.tensor([[1, 2, 7], [1, 4, 0]]), tgt, 0, src_vocab=5)
    Batch(src, last, 0)  # no vocabulary given: not checked here (the model and the loss check)
    with pytest.raises(ValueError, match=r"tgt holds id 11 at position \(0, 9\) \(the last target position"):
        bad = torch.ones(1, 10, dtype=torch.long)
        bad[0, 9] = 11
        CopyTask().batch(torch.ones(1, 10, dtype=torch.long), bad)
