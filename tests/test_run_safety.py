"""Never silently wrong (issue 20), in one process: a diverging loss stops the run and keeps the last good checkpoint,
non-finite weights are neither saved nor loaded, label ids outside the vocabulary are named, a full or read-only disk
is one sentence, leftovers of interrupted saves are removed only when provably leftovers, one rule finds a
checkpoint, Ctrl-C saves at the step boundary, and a training state resumes in full."""

from __future__ import annotations

import copy
import errno
import math
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch
from torch import nn

import transformer as T
import transformer.checkpoint as ckpt_mod
import transformer.common.output_dirs as output_dirs
from transformer.training import losses as training_mod
from transformer.training.batch import Batch
from transformer.checkpoint import (
    NonFiniteWeightsError,
    find_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from transformer.common.output_dirs import OutputWriteError, make_temp_dir, remove_stale_temps
from transformer.tasks import CopyTask
from transformer.cli.run import make_trainer
from transformer.training.trainer import Trainer, TrainerConfig, TrainingDiverged, TrainingInterrupted, run_epoch
from transformer.training import LabelSmoothing, NoamSchedule, SimpleLossCompute, noam_factor

TINY = dict(batch_size=4, n_encoder_layers=1, n_decoder_layers=1, d_model=16, d_ff=32, n_heads=2, eval_every=0)


def _tiny_trainer(steps=6, **changes):
    return make_trainer(CopyTask(), steps=steps, **{**TINY, **changes})


def _params(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


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
    trainer = _tiny_trainer(steps=8)
    trainer.criterion = NaNAfter(trainer.criterion, 3, trainer.model)
    trainer.loss_compute.criterion = trainer.criterion
    trainer.config.out_dir, trainer.config.checkpoint_every = str(tmp_path / "ck"), 2
    trainer.train(3)
    after_3 = _params(trainer.model)
    saved = (tmp_path / "ck" / "model.safetensors").read_bytes()
    with pytest.raises(TrainingDiverged) as info:
        trainer.train()
    message = str(info.value)
    assert info.value.step == 4 and math.isnan(info.value.loss)
    assert "training diverged at step 4: the loss is nan" in message and "at step 3)" in message
    assert f"the previous checkpoint in {tmp_path / 'ck'} (step 3) is intact" in message
    assert "--lr" in message and "--warmup" in message and "clip" in message
    assert trainer.step == 3 and [s for s, _ in trainer.history.train_loss] == [1, 2, 3]
    for name, value in _params(trainer.model).items():
        assert torch.equal(value, after_3[name]), name
    assert (tmp_path / "ck" / "model.safetensors").read_bytes() == saved
    assert load_checkpoint(tmp_path / "ck").trainer_state["step"] == 3
    assert sorted(os.listdir(tmp_path)) == ["ck"]


def test_the_cli_stops_a_diverging_run_with_exit_3_and_keeps_the_last_good_checkpoint(tmp_path, capsys):
    """``--lr-factor 1e30`` (the issue's example): the resumed run diverges within a few steps; exit status 3, one
    line, no results, the checkpoint of step 4 untouched. A fresh run that diverges at once reports nothing."""
    from transformer.cli import main

    out = tmp_path / "run"
    base = ["train", "copy", "--out", str(out), "--no-progress", "--eval-examples", "2", "--batch-size", "8",
            "--eval-every", "2"]
    assert main([*base, "--steps", "4"]) == 0
    saved = (out / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert main([*base, "--steps", "12", "--resume", "--lr-factor", "1e30"]) == 3
    captured = capsys.readouterr()
    assert "training diverged at step" in captured.err and f"the previous checkpoint in {out} (step 4) is intact" in \
        captured.err and "Traceback" not in captured.err and len(captured.err.strip().splitlines()) == 1
    assert "RESULTS" not in captured.out and (out / "model.safetensors").read_bytes() == saved
    assert main(["train", "copy", "--out", str(tmp_path / "fresh"), "--no-progress", "--steps", "4", "--eval-every",
                 "1", "--lr-factor", "1e30", "--batch-size", "8"]) == 3
    captured = capsys.readouterr()
    assert "training diverged at step 1: the held-out loss is nan" in captured.err and "RESULTS" not in captured.out
    assert not (tmp_path / "fresh").exists()


def test_non_finite_weights_are_never_saved(tmp_path):
    """A finite loss can still leave NaN weights (an overflowing gradient): the save refuses them, naming the
    tensor, and the checkpoint already there stays; save_checkpoint itself refuses them too."""
    trainer = _tiny_trainer(steps=2)
    trainer.config.out_dir = str(tmp_path / "ck")
    trainer.train()
    saved = (tmp_path / "ck" / "model.safetensors").read_bytes()
    with torch.no_grad():
        trainer.model.generator.proj.bias[3] = float("inf")
    with pytest.raises(TrainingDiverged, match=r"after step 2 the weights hold NaN or inf in 1 tensor: "
                                               r"generator\.proj\.bias \(1 of 11 values\); they were not saved and "
                                               r"the previous checkpoint in .* \(step 2\) is intact"):
        trainer.save(str(tmp_path / "ck"))
    with pytest.raises(NonFiniteWeightsError, match=r"refusing to save non-finite weights .* generator\.proj\.bias"):
        save_checkpoint(tmp_path / "ck", trainer.model)
    with pytest.raises(NonFiniteWeightsError, match="there was no checkpoint there before"):
        save_checkpoint(tmp_path / "other", trainer.model)
    assert (tmp_path / "ck" / "model.safetensors").read_bytes() == saved
    assert sorted(os.listdir(tmp_path)) == ["ck"]


def test_a_nan_held_out_loss_stops_training(tmp_path):
    trainer = _tiny_trainer(steps=6, eval_every=2)
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
        run_epoch((CopyTask().batch(*CopyTask().sample(torch.Generator().manual_seed(i), 3)) for i in range(5)),
                  model, compute, opt, mode="train")


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
    assert {name for name, _, _ in info.value.tensors} == {"encoder.layers.0.feed_forward.w_1.weight",
                                                          "generator.proj.bias"}
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
    trainer = _tiny_trainer()
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
    save_checkpoint(tmp_path / "lm", lm, metadata={"task": "lm", "tokenizer": tokenizer_metadata(tokenizer)},
                    allow_nonfinite=True)
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
    assert str(info.value) == (f"LabelSmoothing: target holds label id {bad} at position {position}, outside [0, 11) "
                               "(vocabulary size 11)")


def test_simple_loss_compute_names_a_label_outside_the_generator_vocabulary():
    gen = T.Generator(8, 5)
    x = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match=r"SimpleLossCompute: y \(the labels\) holds label id 5 at position \(1, 1\), "
                                         r"outside \[0, 5\) \(vocabulary size 5\)"):
        SimpleLossCompute(gen, LabelSmoothing(5, 0))(x, torch.tensor([[1, 2, 0], [3, 5, 0]]), 4)
    ce = SimpleLossCompute(gen, nn.CrossEntropyLoss(reduction="sum"))  # ignore_index -100 is its padding
    total, _ = ce(x, torch.tensor([[1, 2, -100], [3, 4, -100]]), 4)
    assert math.isfinite(total.item())
    with pytest.raises(ValueError, match=r"holds label id -5 at position \(0, 2\), outside \[0, 5\) or the ignored id "
                                         r"-100"):
        ce(x, torch.tensor([[1, 2, -5], [3, 4, -100]]), 4)


def test_on_a_gpu_a_bad_label_is_nan_never_an_index_error_and_the_trainer_names_it(monkeypatch):
    """What a GPU does without reading the labels back (emulated on the CPU by switching the host check off): the
    loss is NaN, no index error (a device-side assert on CUDA); valid labels give the host path's loss; the Trainer,
    which reads the loss anyway, names the label."""
    x = torch.randn(2, 3, 11).log_softmax(-1)
    good = torch.tensor([[1, 2, 0], [4, 5, 6]])
    expected = LabelSmoothing(11, 0, 0.1)(x, good)
    monkeypatch.setattr(training_mod, "_checked_on_host", lambda tensor: False)
    assert torch.equal(LabelSmoothing(11, 0, 0.1)(x, good), expected)
    assert torch.isnan(LabelSmoothing(11, 0, 0.1)(x, torch.tensor([[1, 2, 0], [4, 11, 6]])))
    gen = T.Generator(8, 5)
    total, node = SimpleLossCompute(gen, nn.CrossEntropyLoss(reduction="sum"))(
        torch.randn(2, 3, 8), torch.tensor([[1, 2, 9], [3, 4, -100]]), 4)
    assert torch.isnan(total) and torch.isnan(node)

    trainer = _tiny_trainer(steps=3)
    task = CopyTask()

    def bad_labels(generator):
        for i, batch in enumerate(task.batches(generator, 4)):
            if i == 1:
                tgt = torch.cat([batch.tgt, batch.tgt_y[:, -1:]], dim=1)
                tgt[2, -1] = 11
                batch = Batch(batch.src, tgt, 0)  # built without the vocabularies: nothing checks it here
            yield batch

    trainer.make_batches = bad_labels
    with pytest.raises(ValueError, match=r"Trainer \(step 2\): a batch's labels holds label id 11 at position "
                                         r"\(2, 8\), outside \[0, 11\)"):
        trainer.train()
    assert trainer.step == 1


def test_batch_checks_every_target_position_against_the_vocabulary():
    src = torch.tensor([[1, 2, 3], [1, 4, 0]])
    tgt = torch.tensor([[1, 2, 3, 4], [1, 4, 0, 0]])
    Batch(src, tgt, 0, src_vocab=5, tgt_vocab=5)
    last = tgt.clone()
    last[1, 3] = 5
    with pytest.raises(ValueError, match=r"Batch: tgt holds id 5 at position \(1, 3\) \(the last target position: a "
                                         r"label only, which the model never reads\), outside the target vocabulary "
                                         r"\[0, 5\)"):
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


# ---------------------------------------------------------------------------- disk full, read-only
def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_during_a_save_is_one_sentence_and_the_previous_checkpoint_stays(tmp_path, monkeypatch):
    trainer = _tiny_trainer(steps=2)
    trainer.config.out_dir = str(tmp_path / "ck")
    trainer.train()
    before = {name: (tmp_path / "ck" / name).read_bytes() for name in os.listdir(tmp_path / "ck")}
    monkeypatch.setattr(ckpt_mod, "save_file", _enospc)  # the training state's tensors
    with pytest.raises(OutputWriteError) as info:
        trainer.save(str(tmp_path / "ck"))
    message = str(info.value)
    assert message.startswith(f"cannot write the checkpoint to {tmp_path / 'ck'}: No space left on device (ENOSPC); "
                              "it needs about ")
    assert " is free there; the previous checkpoint in " in message and "(step 2) is intact" in message
    needed = sum(p.numel() * 4 for p in trainer.model.state_dict().values())
    assert f"needs about {output_dirs.human_bytes(needed)}" not in message  # the optimizer state counts too
    assert info.value.errno == errno.ENOSPC and "\n" not in message
    assert {name: (tmp_path / "ck" / name).read_bytes() for name in os.listdir(tmp_path / "ck")} == before
    assert sorted(os.listdir(tmp_path)) == ["ck"]
    monkeypatch.setattr(output_dirs.tempfile, "mkdtemp", lambda *a, **k: (_ for _ in ()).throw(
        OSError(errno.EROFS, "Read-only file system")))
    with pytest.raises(OutputWriteError, match=r"cannot write the checkpoint to .*: Read-only file system \(EROFS\); "
                                               r"the previous checkpoint .* is intact$"):
        save_checkpoint(tmp_path / "ck", trainer.model)


def test_a_full_disk_while_writing_a_token_store_is_one_sentence(tmp_path, monkeypatch):
    from transformer.data import token_store

    monkeypatch.setattr(token_store.np, "save", _enospc)
    with pytest.raises(OutputWriteError, match=r"^cannot write the token store .*/store: No space left on device "
                                               r"\(ENOSPC\); nothing was left behind"):
        token_store.write_token_store(tmp_path / "store", [[1, 2, 3], [4]], vocab_size=10)
    assert os.listdir(tmp_path) == []


class _FillsUp:
    """A file whose disk fills up after ``room`` bytes."""

    def __init__(self, file, room: int) -> None:
        self.file, self.room = file, room

    def write(self, data: bytes) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.file.write(data)

    def close(self) -> None:
        self.file.close()


def test_a_disk_that_fills_up_while_the_ids_are_written_is_one_sentence(tmp_path):
    from transformer.data import token_store

    with pytest.raises(OutputWriteError, match=r"^cannot write the token store .*/store: No space left on device "
                                               r"\(ENOSPC\); nothing was left behind") as info:
        with token_store.TokenStoreWriter(tmp_path / "store", vocab_size=10) as writer:
            writer.file = _FillsUp(writer.file, room=8)
            writer.add([1, 2, 3])  # 3 bytes (uint8 ids)
            writer.add([4, 5, 6, 7, 8, 9])  # 6 more: the disk is full
    assert "\n" not in str(info.value)
    assert os.listdir(tmp_path) == []


def test_the_cli_says_a_full_disk_in_one_line_exit_3(tmp_path, monkeypatch, capsys):
    from transformer.cli import main

    calls = []
    real = ckpt_mod.save_file

    def second_save_fails(*args, **kwargs):
        calls.append(1)
        return _enospc() if len(calls) == 2 else real(*args, **kwargs)

    monkeypatch.setattr(ckpt_mod, "save_file", second_save_fails)
    out = tmp_path / "run"
    code = main(["train", "copy", "--steps", "4", "--eval-every", "2", "--out", str(out), "--no-progress",
                 "--eval-examples", "2"])
    err = capsys.readouterr().err
    assert code == 3 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"typed-transformer train: error: cannot write the checkpoint to {out}: No space left on device" in err
    assert f"the previous checkpoint in {out} (step 2) is intact" in err
    assert load_checkpoint(out).trainer_state["step"] == 2


def test_an_out_that_cannot_be_written_is_refused_before_training(tmp_path, monkeypatch, capsys):
    from transformer.cli import main

    trained = []
    monkeypatch.setattr(Trainer, "train", lambda self, *a, **k: trained.append(1))
    (tmp_path / "file").write_text("not a directory")
    assert main(["train", "copy", "--out", str(tmp_path / "file" / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"--out {tmp_path / 'file' / 'run'}: cannot write in {tmp_path / 'file'}: {tmp_path / 'file'} is not a " \
           "directory" in err
    assert main(["train", "copy", "--out", str(tmp_path / "file"), "--no-progress"]) == 2
    assert f"--out {tmp_path / 'file'} exists and is not a directory" in capsys.readouterr().err
    # a read-only directory: root writes through chmod, so the refusal is planted where the write test writes
    monkeypatch.setattr(output_dirs.tempfile, "mkdtemp", lambda *a, **k: (_ for _ in ()).throw(
        PermissionError(errno.EACCES, "Permission denied")))
    assert main(["train", "copy", "--out", str(tmp_path / "ro" / "run"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"--out {tmp_path / 'ro' / 'run'}: cannot write in {tmp_path / 'ro'}: Permission denied (EACCES)" in err
    assert trained == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_out_directory_is_refused_before_training(tmp_path, capsys):  # pragma: no cover - not as root
    from transformer.cli import main

    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "ro", 0o500)
    try:
        assert main(["train", "copy", "--out", str(tmp_path / "ro" / "run"), "--no-progress"]) == 2
        assert "Permission denied (EACCES)" in capsys.readouterr().err
    finally:
        os.chmod(tmp_path / "ro", 0o700)


# ---------------------------------------------------------------------------- leftovers of interrupted saves
def test_only_provable_leftovers_of_interrupted_saves_are_removed(tmp_path):
    host = output_dirs._host()
    dead = _dead_pid()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        names = {
            "dead": f"ck.tmp-{host}-{dead}-abcd_123",
            "ours": f"ck.tmp-{host}-{os.getpid()}-abcd_123",
            "live": f"ck.tmp-{host}-{live.pid}-abcd_123",
            "other host": f"ck.tmp-{host}x-{dead}-abcd_123",
            "old pattern": "ck.tmp-abcd1234",
            "another target": f"ckpt.tmp-{host}-{dead}-abcd_123",
            "user's": f"ck.tmp-{host}-{dead}-abcd_123.bak",
        }
        for name in names.values():
            (tmp_path / name).mkdir()
            (tmp_path / name / "f").write_text("x")
        torch.manual_seed(0)
        save_checkpoint(tmp_path / "ck", T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=2))
        left = set(os.listdir(tmp_path))
        assert names["dead"] not in left
        assert left == {"ck"} | {name for key, name in names.items() if key != "dead"}
    finally:
        live.kill()
        live.wait()


def test_temporary_directories_are_named_after_their_host_and_process(tmp_path):
    path = make_temp_dir(tmp_path / "ck")
    assert os.path.basename(path).startswith(f"ck.tmp-{output_dirs._host()}-{os.getpid()}-")
    assert remove_stale_temps(tmp_path / "ck") == []  # our own: alive
    os.rmdir(path)


def test_a_token_store_write_and_a_new_run_remove_dead_leftovers(tmp_path, monkeypatch, capsys):
    from transformer.cli import main
    from transformer.data.token_store import write_token_store

    dead = f"{output_dirs._host()}-{_dead_pid()}-abcdefgh"
    (tmp_path / f"store.tmp-{dead}").mkdir()
    write_token_store(tmp_path / "store", [[1, 2]], vocab_size=5)
    assert sorted(os.listdir(tmp_path)) == ["store"]
    (tmp_path / f"run.tmp-{dead}").mkdir()
    seen = []
    monkeypatch.setattr(Trainer, "train", lambda self, *a, **k: seen.append(sorted(os.listdir(tmp_path))) or 0.0)
    monkeypatch.setattr(CopyTask, "exact_match", lambda self, model, n: 0.0)
    assert main(["train", "copy", "--steps", "1", "--out", str(tmp_path / "run"), "--eval-examples", "1"]) == 0
    assert seen == [["store"]]  # removed before training started


# ---------------------------------------------------------------------------- one rule for finding a checkpoint
def _crash_between_the_renames(path):
    """Save twice into ``path``; the second save dies after moving the first aside (the state a crash leaves)."""
    torch.manual_seed(0)
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=2)
    save_checkpoint(path, model, metadata={"version": 1})
    real_rename, calls = os.rename, []

    def rename(src, dst):
        calls.append(1)
        if len(calls) >= 2:
            raise SystemExit("killed")
        return real_rename(src, dst)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ckpt_mod.os, "rename", rename)
        patch.setattr(ckpt_mod.shutil, "rmtree", lambda *a, **k: None)
        with pytest.raises(SystemExit):
            save_checkpoint(path, model, metadata={"version": 2})


def test_resume_and_a_torchrun_restart_find_the_copy_a_crashed_save_left_aside(tmp_path, monkeypatch):
    from transformer.distributed import World, restarted_with_checkpoint

    out = tmp_path / "ck"
    _crash_between_the_renames(out)
    aside = [name for name in os.listdir(tmp_path) if name.startswith("ck.old-")]
    assert not out.exists() and len(aside) == 1
    assert find_checkpoint(out) == str(tmp_path / aside[0])
    assert restarted_with_checkpoint(World(restart_count=1), str(out))  # the restart resumes, as --resume does
    assert not restarted_with_checkpoint(World(restart_count=0), str(out))
    assert not restarted_with_checkpoint(None, str(out))
    with pytest.warns(UserWarning, match="interrupted save"):
        assert load_checkpoint(out).metadata == {"version": 1}
    (tmp_path / "empty").mkdir()
    assert find_checkpoint(tmp_path / "empty") is None and find_checkpoint(tmp_path / "nothing") is None
    assert not restarted_with_checkpoint(World(restart_count=1), str(tmp_path / "nothing"))


# ---------------------------------------------------------------------------- --out already holds a run
def test_a_new_run_into_an_out_that_holds_a_checkpoint_is_refused_unless_asked(tmp_path, monkeypatch, capsys):
    from transformer.cli import main

    out = tmp_path / "run"
    base = ["train", "copy", "--steps", "2", "--out", str(out), "--no-progress", "--eval-examples", "2"]
    assert main(base) == 0
    capsys.readouterr()
    saved = (out / "model.safetensors").read_bytes()
    assert main([*base, "--seed", "5"]) == 2
    err = capsys.readouterr().err
    assert f"--out {out} already holds a checkpoint (step 2 of train copy): continue it with --resume, or start a " \
           "new run over it with --overwrite" in err
    assert (out / "model.safetensors").read_bytes() == saved
    assert main([*base, "--resume", "--overwrite"]) == 2
    assert "give one of them" in capsys.readouterr().err
    assert main([*base, "--seed", "5", "--overwrite"]) == 0
    assert (out / "model.safetensors").read_bytes() != saved
    # a directory typed-transformer did not write is never replaced, --overwrite or not
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    for extra in ([], ["--overwrite"]):
        assert main(["train", "copy", "--out", str(tmp_path / "mine"), "--steps", "1", *extra]) == 2
        assert "is a directory that is not empty and holds no checkpoint" in capsys.readouterr().err
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]
    # the copy a crashed save left aside counts as the checkpoint of --out (the one rule)
    monkeypatch.chdir(tmp_path)
    _crash_between_the_renames(tmp_path / "crashed")
    assert main(["train", "copy", "--out", "crashed", "--steps", "1"]) == 2
    assert "--out crashed already holds a checkpoint" in capsys.readouterr().err


# ---------------------------------------------------------------------------- Ctrl-C
@pytest.fixture
def python_sigint():
    """Python's own SIGINT handler, as an interactive run has it (a job started in the background, e.g. by nohup,
    inherits SIGINT ignored, and then neither Ctrl-C nor the Trainer's handling of it applies)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _python_sigint_in_the_child():
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the child's Python then installs its own handler


def _sigint_at(factory, batch_index, times=1):
    def batches(generator):
        for i, batch in enumerate(factory(generator)):
            if i == batch_index:
                for _ in range(times):
                    os.kill(os.getpid(), signal.SIGINT)
            yield batch

    return batches


def test_ctrl_c_saves_at_the_step_boundary_and_the_run_resumes_exactly(tmp_path, python_sigint):
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    straight = _tiny_trainer(steps=6, dropout=0.1, seed=3)
    straight.train()
    interrupted = _tiny_trainer(steps=6, dropout=0.1, seed=3)
    interrupted.config.out_dir = str(tmp_path / "ck")
    interrupted.make_batches = _sigint_at(interrupted.make_batches, 2)  # while step 3 draws its batch
    with pytest.raises(TrainingInterrupted) as info:
        interrupted.train()
    assert isinstance(info.value, KeyboardInterrupt) and info.value.step == 3
    assert str(info.value) == f"interrupted at step 3: the checkpoint in {tmp_path / 'ck'} holds step 3"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    resumed = _tiny_trainer(steps=6, dropout=0.1, seed=99)
    resumed.resume(str(tmp_path / "ck"))
    assert resumed.step == 3
    resumed.train()
    assert resumed.history.train_loss == straight.history.train_loss
    for name, value in _params(straight.model).items():
        assert torch.equal(value, dict(resumed.model.named_parameters())[name].detach()), name


def test_a_second_ctrl_c_stops_at_once_without_saving(tmp_path, python_sigint):
    trainer = _tiny_trainer(steps=6, eval_every=2)
    trainer.config.out_dir, trainer.config.checkpoint_every = str(tmp_path / "ck"), 2
    trainer.make_batches = _sigint_at(trainer.make_batches, 4, times=2)  # step 5's batch
    with pytest.raises(KeyboardInterrupt) as info:
        trainer.train()
    assert not isinstance(info.value, TrainingInterrupted)
    assert trainer.step == 4 and load_checkpoint(tmp_path / "ck").trainer_state["step"] == 4
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_without_the_step_boundary_ctrl_c_stops_at_once(tmp_path, python_sigint):
    trainer = _tiny_trainer(steps=6)
    trainer.config.out_dir, trainer.config.interrupt_at_step_boundary = str(tmp_path / "ck"), False
    trainer.make_batches = _sigint_at(trainer.make_batches, 2)
    with pytest.raises(KeyboardInterrupt) as info:
        trainer.train()
    assert not isinstance(info.value, TrainingInterrupted) and trainer.step == 2 and not (tmp_path / "ck").exists()


def test_the_cli_exits_130_after_saving_on_ctrl_c(tmp_path, monkeypatch, capsys, python_sigint):
    from transformer.cli import main

    real = CopyTask.batches
    monkeypatch.setattr(CopyTask, "batches", lambda self, g, n: _sigint_at(lambda g: real(self, g, n), 1)(g))
    out = tmp_path / "run"
    assert main(["train", "copy", "--steps", "50", "--out", str(out), "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (f"typed-transformer train: interrupted at step 2: the checkpoint in {out} "
                                            f"holds step 2; continue it with --resume --out {out}")
    assert "interrupted: saving at the end of this step (Ctrl-C again to stop at once)" in err
    assert load_checkpoint(out).trainer_state["step"] == 2


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_on_the_command_line_saves_then_exits_130(tmp_path):
    """The real thing: a SIGINT to ``typed-transformer train`` once its first checkpoint exists."""
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "transformer", "train", "copy", "--steps", "100000", "--eval-every",
                             "3", "--batch-size", "8", "--out", str(out), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_python_sigint_in_the_child)
    deadline = time.monotonic() + 120
    while not (out / "meta.json").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    step = load_checkpoint(out).trainer_state["step"]
    assert f"interrupted at step {step}: the checkpoint in {out} holds step {step}" in err and step >= 3
    assert "Traceback" not in err


# ---------------------------------------------------------------------------- the learning rate
def test_noam_factor_gives_a_schedule_whose_peak_is_the_learning_rate():
    for peak, d_model, warmup in [(1e-3, 64, 200), (3e-4, 512, 4000), (0.5, 16, 2)]:
        schedule = NoamSchedule(d_model, noam_factor(peak, d_model, warmup), warmup)
        values = [schedule(step) for step in range(0, 3 * warmup + 2)]
        assert max(values) == pytest.approx(peak, rel=1e-12) and values.index(max(values)) == warmup
        assert schedule.peak == pytest.approx(peak, rel=1e-12)
    assert NoamSchedule(512, 1.0, 4000).peak == pytest.approx(512**-0.5 * 4000**-0.5)
    with pytest.raises(ValueError, match="must be a positive number, got 0"):
        noam_factor(0, 64, 10)


# ---------------------------------------------------------------------------- a resume restores the whole state
def assert_same_state(a, b, where="state"):
    """Equal in full: every tensor (dtype, shape, values), key, list element and number; NaN equals NaN."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_same_state(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_state(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert a == b and type(a) is type(b), f"{where}: {a!r} != {b!r}"


def _stateful_trainer(seed, kind):
    """A trainer whose every piece of state matters: dropout (torch's RNG), a data stream that draws from its
    generator and from Python's random (or a token-budget plan whose position lives in the generator), label
    smoothing, Adam, the Noam schedule, periodic evaluation (history)."""
    from transformer.data.token_batches import ResumableBatches

    torch.manual_seed(seed)
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=2, dropout=0.2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, NoamSchedule(16, 1.0, 3))
    task = CopyTask()
    if kind == "generator":
        def batches(generator):
            while True:
                src, tgt = task.sample(generator, 4)
                rows = list(range(4))
                random.shuffle(rows)  # Python's RNG is part of the stream
                yield task.batch(src[rows], tgt[rows])
    else:
        lengths = torch.randint(2, 9, (40,), generator=torch.Generator().manual_seed(5)).tolist()

        def make_batch(indices):
            rows = [[1] + [2 + (int(i) + j) % 9 for j in range(lengths[int(i)] - 1)] for i in indices]
            width = max(len(r) for r in rows)
            ids = torch.tensor([r + [0] * (width - len(r)) for r in rows])
            return task.batch(ids, ids)

        batches = ResumableBatches(lengths, 24, make_batch, seed=5)  # the plan: part of the trainer's definition
    evals = [task.batch(*task.sample(torch.Generator().manual_seed(8), 4))]
    return Trainer(model, optimizer, batches, criterion=LabelSmoothing(11, 0, 0.1), scheduler=scheduler,
                   eval_batches=lambda: evals, seed=seed, config=TrainerConfig(steps=6, eval_every=2))


@pytest.mark.parametrize("kind", ["generator", "token-budget plan"])
def test_a_resume_restores_the_whole_training_state(tmp_path, kind):
    """The state at the save and at the end equal an uninterrupted run's in full: step and token counters, the
    optimizer's moments and step counts, the schedule (with its factor), torch's, Python's and the data's RNG
    states (the data position), the loss histories, the last loss; and the weights."""
    random.seed(11)
    straight = _stateful_trainer(4, kind)
    straight.train(3)
    at_save = copy.deepcopy(straight.state())  # the optimizer's state_dict holds its live tensors
    straight.save(str(tmp_path / "ck"))
    straight.train()
    end = copy.deepcopy(straight.state())
    random.seed(12345)  # another process: other global RNG states, another seed
    torch.manual_seed(12345)
    resumed = _stateful_trainer(77, kind)
    resumed.resume(str(tmp_path / "ck"))
    assert_same_state(resumed.state(), at_save)
    resumed.train()
    assert_same_state(resumed.state(), end)
    assert resumed.history.eval_loss and len(resumed.history.train_loss) == 6
    for name, value in _params(straight.model).items():
        assert torch.equal(value, dict(resumed.model.named_parameters())[name].detach()), name
