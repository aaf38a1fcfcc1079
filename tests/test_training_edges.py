"""Edge values of documented training and checkpoint promises (blind review of issue 31: each survived every test).

* ``Trainer.train(steps)``: "Train until ``steps`` optimizer steps in total (default ``config.steps``)" -- 0, and the
  step already reached, train nothing (0 is a count, not "the default").
* ``InterruptAtStepBoundary``: active "only if nobody else handles SIGINT" -- a handler the user installed keeps
  receiving Ctrl-C, SIG_IGN stays, and the default handler is replaced only while training and restored after.
* ``nonfinite_tensors``: "each floating tensor" -- float16, bfloat16, float32, float64 and complex alike; a
  bfloat16/float16 model holding a NaN is refused at save and at load like a float32 one.
* ``bleu_note``: speaks "when most references are shorter" than ``order`` tokens -- exactly half is not most.
"""

from __future__ import annotations

import os
import signal

import pytest
import torch
from run_safety_helpers import params, tiny_trainer

from transformer.checkpoint import NonFiniteWeightsError, load_checkpoint, save_checkpoint
from transformer.checkpoint.nonfinite import nonfinite_tensors
from transformer.lm import LMConfig, build_lm
from transformer.tasks.translation_files import bleu_note
from transformer.training.stops import InterruptAtStepBoundary


# ------------------------------------------------------------------------------------------------ train(steps)
def test_train_to_zero_steps_or_the_step_reached_trains_nothing():
    trainer = tiny_trainer(steps=3)
    before = params(trainer.model)
    trainer.train(0)
    assert trainer.step == 0
    assert all(torch.equal(before[n], p) for n, p in params(trainer.model).items())
    trainer.train(2)
    assert trainer.step == 2
    after_two = params(trainer.model)
    trainer.train(2)  # the step reached: nothing more
    trainer.train(1)  # below it: nothing either
    assert trainer.step == 2 and all(torch.equal(after_two[n], p) for n, p in params(trainer.model).items())
    trainer.train()  # the default: config.steps
    assert trainer.step == 3


# ------------------------------------------------------------------------------------------------ Ctrl-C
def _ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


@pytest.fixture
def restore_sigint():
    previous = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_users_sigint_handler_keeps_receiving_ctrl_c_while_training(restore_sigint):
    seen = []

    def users(signum, frame):
        seen.append(signum)

    signal.signal(signal.SIGINT, users)
    with InterruptAtStepBoundary(announce=False) as guard:
        assert signal.getsignal(signal.SIGINT) is users
        _ctrl_c()
    assert seen == [signal.SIGINT] and not guard.requested
    assert signal.getsignal(signal.SIGINT) is users


def test_an_ignored_sigint_stays_ignored(restore_sigint):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with InterruptAtStepBoundary(announce=False) as guard:
        _ctrl_c()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert not guard.requested and signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_the_default_handler_is_replaced_while_training_and_restored_after(restore_sigint):
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with InterruptAtStepBoundary(announce=False) as guard:
        _ctrl_c()  # the first Ctrl-C asks to stop at the step's end
        assert guard.requested
        with pytest.raises(KeyboardInterrupt):
            _ctrl_c()  # the second stops at once
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_trainer_leaves_a_users_handler_in_place_through_a_whole_run(restore_sigint):
    seen = []
    signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    trainer = tiny_trainer(steps=2)
    trainer.train()
    assert trainer.step == 2 and signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    _ctrl_c()
    assert seen == [signal.SIGINT]


# ------------------------------------------------------------------------------------------------ non-finite weights
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_value_is_found_in_every_floating_dtype(dtype, bad):
    tensor = torch.zeros(5, dtype=dtype)
    tensor[3] = bad
    named = [("ok", torch.ones(4, dtype=dtype)), ("w", tensor), ("ids", torch.arange(3))]
    assert nonfinite_tensors(named) == [("w", 1, 5)]


def _tiny_lm(dtype):
    return build_lm(LMConfig(vocab=7, n_layers=1, d_model=8, d_ff=8, n_heads=2, max_len=8)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_model_holding_a_nan_is_refused_at_save_and_at_load(dtype, tmp_path):
    model = _tiny_lm(dtype)
    name, weight = next(iter(model.named_parameters()))
    with torch.no_grad():
        weight.view(-1)[1] = float("nan")
    with pytest.raises(NonFiniteWeightsError, match=name.split(".")[-1]):
        save_checkpoint(tmp_path / "ck", model)
    assert not (tmp_path / "ck").exists()
    save_checkpoint(tmp_path / "kept", model, allow_nonfinite=True)  # asked for: kept, but never loaded silently
    with pytest.raises(NonFiniteWeightsError, match=name.split(".")[-1]):
        load_checkpoint(tmp_path / "kept", _tiny_lm(dtype))


# ------------------------------------------------------------------------------------------------ bleu_note
def _note(lengths: list[int]) -> str | None:
    return bleu_note([" ".join(["w"] * n) for n in lengths], tokenize=lambda text: text)


def test_bleu_note_speaks_only_when_most_references_are_short():
    assert _note([4, 2]) is None  # exactly half short: not most
    assert _note([4, 4, 2, 3]) is None
    assert _note([5, 3, 1]) is not None and "1 of 3" in _note([5, 3, 1])  # two of three short
    assert "none of the 2 references" in _note([3, 0])
    assert _note([4, 4, 4]) is None and _note([]) is None
