"""The whole trainer state, types included, after a save and a resume equals an uninterrupted run's (issue 31).

``Trainer`` promises an exact resume: "the trainer owns that generator and saves its state in checkpoints, together
with the torch and Python RNG states, the optimizer and scheduler, so that ``train`` after ``Trainer.resume`` continues
exactly where the saved run stopped". Here every key, type (a tuple stays a tuple, an int an int), dtype, shape and
value of the state is walked at the save and at the end, with a state built so that each part matters: dropout
(torch's RNG), a data stream that shuffles with Python's ``random``, Adam's ``betas`` and a user's tuples in the
optimizer and the schedule, and tensors in the state that are non-contiguous or share memory (which ``safetensors``
refuses). Then the next losses, the weights, and the results a resumed command reports.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import random
import types

import pytest
import torch
from cli_helpers import write_corpus
from run_safety_helpers import shuffled_copy_batches, stateful_copy_trainer

import transformer as T
from transformer.checkpoint import load_checkpoint
from transformer.cli import main, train_files
from transformer.tasks import CopyTask
from transformer.training import Trainer


def assert_identical(a, b, where="state"):
    """``b`` is ``a``: the same type at every level (tuple, list, dict, int, float, bool, str, None), the same keys
    in the same order, tensors of the same dtype, shape and values; NaN equals NaN."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), f"{where}: {a.dtype} {a.shape} != {b.dtype} {b.shape}"
        assert torch.equal(a, b) or (a.is_floating_point() and torch.equal(a.isnan(), b.isnan())), where
        assert torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)) if a.is_floating_point() else True, where
    elif isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys {list(a)} != {list(b)}"
        for key in a:
            assert_identical(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_identical(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), where
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


class UserSchedule:
    """A user's schedule object: ``LambdaLR`` saves its attributes (a tuple, a list of tuples) in its state."""

    def __init__(self) -> None:
        self.factors = (1.0, 0.5)
        self.marks = [(0, "start")]

    def __call__(self, step: int) -> float:
        return self.factors[step % 2] * min(1.0, (step + 1) / 3)


def _trainer(seed: int, device: str = "cpu") -> Trainer:
    torch.manual_seed(seed)
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=2, dropout=0.2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.9, 0.98), eps=1e-9)
    optimizer.param_groups[0]["user"] = (1, (2.5, "x"), [3, (4,)])  # a user's tuples inside the optimizer state
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, UserSchedule())
    return stateful_copy_trainer(
        model, optimizer, shuffled_copy_batches(CopyTask()), scheduler=scheduler, seed=seed, device=device
    )


def _add_awkward_tensors(trainer: Trainer) -> None:
    """Tensors in the optimizer state that safetensors would refuse as they are: a transposed (non-contiguous) one
    and a slice, both views of one tensor that is not itself in the state; and a float64 one."""
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    first = trainer.optimizer.state[next(iter(trainer.model.parameters()))]
    first["user_transposed"], first["user_slice"] = base.t(), base[1:]
    trainer.optimizer.param_groups[0]["user_tensor"] = torch.tensor([1.5, 2.5], dtype=torch.float64)[::2]


def test_the_whole_trainer_state_types_included_equals_an_uninterrupted_runs_after_a_resume(tmp_path):
    random.seed(11)
    straight = _trainer(4)
    straight.train(3)
    _add_awkward_tensors(straight)
    random.gauss(0.0, 1.0)  # one draw of a pair: Python keeps the second (its gauss_next) in its state
    at_save = copy.deepcopy(straight.state())
    assert at_save["python_rng"][2] is not None
    assert type(at_save["optimizer"]["param_groups"][0]["betas"]) is tuple
    straight.save(str(tmp_path / "ck"))
    straight.train()
    end = copy.deepcopy(straight.state())

    random.seed(12345)  # another process: other global RNG states, another seed
    torch.manual_seed(12345)
    resumed = _trainer(77)
    resumed.resume(str(tmp_path / "ck"))
    assert_identical(resumed.state(), at_save)
    assert resumed.tokens == at_save["tokens"] > 0
    resumed.train()
    assert_identical(resumed.state(), end)  # the next losses (history), tokens, RNGs, moments, schedule
    assert_identical(resumed.history.train_loss, straight.history.train_loss, "train losses")
    assert_identical(resumed.history.eval_loss, straight.history.eval_loss, "eval losses")
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA generators' state needs a GPU")
def test_a_resume_on_cuda_restores_the_cuda_generators_and_the_run(tmp_path):
    """Dropout on the GPU draws from the CUDA generator: its state (every device's) is saved and restored exactly;
    the next losses are the uninterrupted run's (up to the GPU's order of float sums)."""
    straight = _trainer(4, "cuda")
    straight.train(3)
    at_save = copy.deepcopy(straight.state())
    assert at_save["cuda_rng"], "no CUDA generator state was saved"
    straight.save(str(tmp_path / "ck"))
    straight.train()
    torch.cuda.manual_seed_all(12345)
    resumed = _trainer(77, "cuda")
    resumed.resume(str(tmp_path / "ck"))
    assert_identical(resumed.state()["cuda_rng"], at_save["cuda_rng"], "cuda_rng")
    assert_identical(resumed.state()["torch_rng"], at_save["torch_rng"], "torch_rng")
    resumed.train()
    assert [loss for _, loss in resumed.history.train_loss] == pytest.approx(
        [loss for _, loss in straight.history.train_loss], rel=1e-4
    )


def test_a_state_of_views_and_shared_memory_is_saved_as_its_values(tmp_path):
    """Non-contiguous tensors, slices, the same tensor twice: saved (not refused), each read back with its values,
    dtype and shape, and nothing shared on load."""
    trainer = _trainer(0)
    trainer.train(1)
    base = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    user = {"t": base.t(), "slice": base[1:], "again": base, "again2": base, "step": base[:, 2], "empty": base[:0]}
    from transformer.checkpoint import save_checkpoint

    save_checkpoint(tmp_path / "ck", trainer.model, trainer_state={"user": user, "pair": (base[0], base[0])})
    state = load_checkpoint(tmp_path / "ck").trainer_state
    assert_identical(state, {"user": {k: v.contiguous() for k, v in user.items()}, "pair": (base[0], base[0])})
    assert state["user"]["again"].untyped_storage().data_ptr() != state["user"]["again2"].untyped_storage().data_ptr()


# ---------------------------------------------------------------------------- what a resumed command reports
_TIMES = ("train_seconds", "total_seconds", "tokens_per_second")


def test_a_resumed_train_command_reports_the_uninterrupted_runs_results(tmp_path, capsys):
    """``train copy``: the results in the checkpoint (and the RESULTS line) of 2 + 2 resumed steps equal those of 4
    straight steps, times aside; so do the weights and the loss history."""
    base = ["train", "copy", "--eval-every", "2", "--no-progress", "--eval-examples", "4", "--batch-size", "8"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert main([*base, "--steps", "4", "--out", str(straight)]) == 0
    assert main([*base, "--steps", "2", "--out", str(split)]) == 0
    assert main([*base, "--steps", "4", "--out", str(split), "--resume"]) == 0
    printed = [json.loads(line[8:]) for line in capsys.readouterr().out.splitlines() if line.startswith("RESULTS ")]
    a, b = (load_checkpoint(path) for path in (straight, split))
    results = [{k: v for k, v in ck.metadata["results"].items() if k not in _TIMES} for ck in (a, b)]
    assert results[0] == results[1] and results[0]["steps"] == 4
    assert [{k: v for k, v in r.items() if k not in _TIMES} for r in (printed[0], printed[2])] == results
    assert_identical(a.trainer_state["history"], b.trainer_state["history"], "history")
    assert a.trainer_state["tokens"] == b.trainer_state["tokens"] > 0
    for name, value in a.model.state_dict().items():
        assert torch.equal(value, b.model.state_dict()[name]), name


def test_tokens_per_second_after_a_resume_counts_the_tokens_of_this_run(tmp_path, capsys, monkeypatch):
    """``train lm`` reports tokens/s: after a resume, the tokens trained since the resume over the seconds they
    took (not every token since step 0); the token count in the checkpoint is the uninterrupted run's. The command's
    clock is a fake one that says 10 s between its two readings (a real one, rounded to 10 ms, made the check depend
    on the machine's load)."""
    readings = itertools.count(start=1000.0, step=10.0)
    monkeypatch.setattr(train_files, "time", types.SimpleNamespace(perf_counter=lambda: next(readings)))
    corpus = write_corpus(tmp_path)
    tiny = ["--d-model", "32", "--layers", "1", "--heads", "2", "--d-ff", "32", "--vocab-size", "300"]
    base = ["train", "lm", "--text", corpus, *tiny, "--block-len", "16", "--max-tokens", "64", "--no-progress"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert main([*base, "--steps", "6", "--out", str(straight)]) == 0
    assert main([*base, "--steps", "4", "--out", str(split)]) == 0
    at_resume = load_checkpoint(split).trainer_state["tokens"]
    assert main([*base, "--steps", "6", "--out", str(split), "--resume"]) == 0
    capsys.readouterr()
    total = load_checkpoint(straight).trainer_state["tokens"]
    assert load_checkpoint(split).trainer_state["tokens"] == total > at_resume > 0
    results = load_checkpoint(split).metadata["results"]
    assert results["train_seconds"] == 10.0
    this_run = total - at_resume
    assert results["tokens_per_second"] == pytest.approx(this_run / 10, abs=0.05), (results, at_resume, total)
