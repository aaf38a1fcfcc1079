"""Tests for the mutants of transformer/training/trainer.py that mutmut's run left alive.

Each test names the promise it checks (the docstring it comes from); tests/mutation/tool_runs/training_trainer.json
names the mutants it kills (scripts/mutation_tool.py, issue 31). A recording strategy (the one-process strategy
that writes down what the trainer hands it) stands in for a torchrun job where the trainer's arguments matter.
"""

from __future__ import annotations

import math

import pytest
import torch

from transformer.distributed import SingleProcess
from transformer.tasks import CopyTask, make_trainer
from transformer.training import TrainingDiverged

TINY = dict(batch_size=4, n_encoder_layers=1, n_decoder_layers=1, d_model=16, d_ff=32, n_heads=2, eval_every=0)


class Recording(SingleProcess):
    """SingleProcess that records the arguments of prepare, rank_states and save; ``other_ranks_bad`` non-finite
    tensors are added to the all-reduced count of a save (another rank's shard)."""

    def __init__(self, other_ranks_bad: int = 0) -> None:
        super().__init__(device="cpu")
        self.calls: dict[str, tuple] = {}
        self.other_ranks_bad = other_ranks_bad

    def prepare(self, model, optimizer=None):
        self.calls["prepare"] = (model, optimizer)
        return super().prepare(model, optimizer)

    def rank_states(self, own):
        self.calls["rank_states"] = (own,)
        return {"ranks": [{"step": own["step"]}]}

    def no_sync(self, train_model, last):
        self.calls.setdefault("no_sync", []).append((train_model, last))
        return super().no_sync(train_model, last)

    def all_reduce_sum(self, values):
        if len(values) == 1:  # the save's count of non-finite tensors (a step reduces loss, tokens and Ctrl-C)
            return [float(values[0]) + self.other_ranks_bad]
        return super().all_reduce_sum(values)

    def save(self, path, model, optimizer, state, metadata):
        self.calls["save"] = (path, model, optimizer, state, metadata)
        return super().save(path, model, optimizer, state, metadata)


def _trainer(steps=2, **kwargs):
    return make_trainer(CopyTask(), steps=steps, **TINY, **kwargs)


def test_distribute_hands_the_model_and_optimizer_to_the_strategy_and_trains_under_it():
    """Trainer.distribute: train under ``strategy`` from now on (it wraps the model and points the optimizer)."""
    trainer = _trainer()
    strategy = Recording()
    trainer.distribute(strategy)
    assert trainer.strategy is strategy
    assert strategy.calls["prepare"] == (trainer.model, trainer.optimizer)
    assert trainer.train_model is trainer.model
    assert math.isfinite(trainer.train(1))


def test_distribute_is_refused_once_training_has_started_or_was_resumed(tmp_path):
    """Call it before training (the optimizer must not have stepped): a resumed trainer has stepped too."""
    trainer = _trainer()
    trainer.train(1)
    with pytest.raises(ValueError) as error:
        trainer.distribute(SingleProcess(device="cpu"))
    assert str(error.value) == "Trainer.distribute: call it before training starts"
    trainer.save(str(tmp_path / "ckpt"))
    resumed = _trainer()
    resumed.resume(str(tmp_path / "ckpt"))
    with pytest.raises(ValueError, match="call it before training starts"):
        resumed.distribute(SingleProcess(device="cpu"))


def test_the_state_holds_every_documented_key_with_its_type_and_the_ranks_states():
    """Trainer.state: everything besides the weights that an exact resume needs; the ranks' RNG states gathered."""
    strategy = Recording()
    trainer = make_trainer(CopyTask(), steps=1, **TINY)
    trainer.scheduler = None
    trainer.distribute(strategy)
    state = trainer.state()
    assert state["scheduler"] is None
    assert state["cuda_rng"] == ([] if not torch.cuda.is_available() else state["cuda_rng"])
    assert {"step", "tokens", "optimizer", "torch_rng", "cuda_rng", "python_rng", "data_rng", "history",
            "last_train_loss", "ranks"} <= set(state)  # fmt: skip
    assert strategy.calls["rank_states"][0]["step"] == 0 and state["ranks"] == [{"step": 0}]


def test_a_state_without_a_scheduler_or_the_newer_keys_loads(tmp_path):
    """load_state: a scheduler's state is loaded only when both the trainer and the state have one; a state
    without history lists or last_train_loss (an older checkpoint's) loads with empty histories and a NaN loss."""
    trainer = _trainer()
    state = trainer.state()
    with_scheduler = _trainer()
    before = with_scheduler.scheduler.state_dict()
    with_scheduler.load_state({**state, "scheduler": None})
    assert with_scheduler.scheduler.state_dict() == before
    without = _trainer()
    without.scheduler = None
    without.load_state(state)
    old = {key: value for key, value in state.items() if key != "last_train_loss"}
    old["history"] = {}
    trainer.last_train_loss = 1.5
    trainer.load_state(old)
    assert trainer.history.train_loss == [] and trainer.history.eval_loss == []
    assert math.isnan(trainer.last_train_loss)
    trainer.load_state({**old, "history": {"eval_loss": [[3, 0.5]]}})
    assert trainer.history.train_loss == [] and trainer.history.eval_loss == [(3, 0.5)]
    trainer.load_state({**old, "history": {"train_loss": [[2, 0.25]]}})
    assert trainer.history.train_loss == [(2, 0.25)] and trainer.history.eval_loss == []


def test_save_hands_the_strategy_the_optimizer_state_and_metadata_and_records_the_step(tmp_path):
    """Trainer.save writes the checkpoint through the strategy; ``saved_step`` is the step it wrote."""
    trainer = make_trainer(CopyTask(), steps=1, **TINY)
    trainer.metadata = {"task": "copy"}
    strategy = Recording()
    trainer.distribute(strategy)
    trainer.train(1)
    trainer.save(str(tmp_path / "ckpt"))
    path, model, optimizer, state, metadata = strategy.calls["save"]
    assert (model, optimizer, metadata) == (trainer.model, trainer.optimizer, {"task": "copy"})
    assert state["step"] == 1 and trainer.saved_step == 1


@pytest.mark.parametrize("mine", [True, False])
def test_non_finite_weights_are_never_saved_and_the_error_names_where_they_are(tmp_path, mine):
    """Trainer.save: NaN or infinite weights are never saved: TrainingDiverged names them (or another rank's shard)
    and the checkpoint already at ``path`` stays."""
    trainer = make_trainer(CopyTask(), steps=1, **TINY)
    trainer.distribute(Recording(other_ranks_bad=0 if mine else 1))
    trainer.train(1)
    path = str(tmp_path / "ckpt")
    if mine:
        with torch.no_grad():
            next(trainer.model.parameters()).view(-1)[0] = float("nan")
    with pytest.raises(TrainingDiverged) as error:
        trainer.save(path)
    name, parameter = next(iter(trainer.model.named_parameters()))
    where = f"1 tensor: {name} (1 of {parameter.numel()} values)" if mine else "another rank's shard"
    message = str(error.value)
    assert message.startswith(
        f"training diverged: after step 1 the weights hold NaN or inf in {where}; they were not saved and there was "
        "no checkpoint there before, and nothing was left behind; "
    )
    assert error.value.step == 1


def test_gradients_are_synchronised_once_a_step_on_its_last_batch():
    """train_step: with gradient accumulation, every batch but the last runs under ``no_sync`` (gradients synced
    once a step)."""
    from transformer.training import TrainerConfig

    trainer = make_trainer(CopyTask(), steps=1, **TINY)
    trainer.config = TrainerConfig(steps=1, accum_iter=3, progress=False)
    strategy = Recording()
    trainer.distribute(strategy)
    trainer.train_step()
    assert strategy.calls["no_sync"] == [(trainer.train_model, False), (trainer.train_model, False),
                                         (trainer.train_model, True)]  # fmt: skip


def test_the_checks_settings_are_accepted():
    """TrainerConfig.checks: "always", "first" or "never"."""
    from transformer.training import TrainerConfig

    assert [TrainerConfig(checks=c).checks for c in ("always", "first", "never")] == ["always", "first", "never"]


def test_a_fresh_trainer_has_no_loss_no_checkpoint_and_the_strategy_it_was_given(tmp_path):
    """Before training: no last loss (NaN), no checkpoint written (``saved_step`` None); ``strategy`` is used from
    construction; after ``resume`` the saved step is the resumed one, the optimizer handed to the strategy."""
    trainer = _trainer()
    assert math.isnan(trainer.state()["last_train_loss"]) and trainer.saved_step is None
    strategy = Recording()
    given = make_trainer(CopyTask(), steps=1, **TINY)
    given.distribute(strategy)
    assert given.strategy is strategy
    trainer.train(2)
    trainer.save(str(tmp_path / "ckpt"))
    resumed = _trainer()
    loads = []
    original = resumed.strategy.load

    def load(path, model, optimizer, device):
        loads.append(optimizer)
        return original(path, model, optimizer, device)

    resumed.strategy.load = load
    resumed.resume(str(tmp_path / "ckpt"))
    assert resumed.saved_step == 2 and loads == [resumed.optimizer]


def test_evaluation_is_the_loss_per_token_over_all_evaluation_batches():
    """Trainer.evaluate: the summed loss over every evaluation batch divided by their tokens (a weighted mean of
    the batches' own per-token losses); without eval_batches it is refused."""
    trainer = _trainer()
    batches = list(trainer.eval_batches())[:2]
    assert len(batches) == 2
    per_batch = []
    for batch in batches:
        trainer.eval_batches = lambda b=batch: [b]
        per_batch.append((trainer.evaluate(), batch.ntokens))
    trainer.eval_batches = lambda: batches
    expected = sum(loss * n for loss, n in per_batch) / sum(n for _, n in per_batch)
    assert trainer.evaluate() == pytest.approx(expected, rel=1e-6)
    assert per_batch[0][0] != pytest.approx(per_batch[1][0])  # the batches' losses differ: the weights matter
    assert all(loss > 0 for loss, _ in per_batch)  # a cross-entropy: positive
    trainer.eval_batches = None
    with pytest.raises(ValueError) as error:
        trainer.evaluate()
    assert str(error.value) == "Trainer.evaluate: no eval_batches were given"


def test_a_loss_that_is_not_finite_at_the_first_step_is_named_without_a_previous_loss():
    """_diverged: the loss at the step, and the last finite loss only when there is one."""
    trainer = _trainer()
    with torch.no_grad():
        next(trainer.model.parameters()).fill_(float("nan"))
    with pytest.raises(TrainingDiverged) as error:
        trainer.train_step()
    assert str(error.value).startswith("training diverged at step 1: the loss is nan; stopped before the optimizer")


def test_every_optimizer_step_steps_the_learning_rate_schedule():
    """train_step: the optimizer step and the scheduler's (Noam: the rate changes every step)."""
    trainer = _trainer()
    rates = []
    for _ in range(3):
        trainer.train_step()
        rates.append(trainer.optimizer.param_groups[0]["lr"])
    assert trainer.scheduler.last_epoch == 3 and len(set(rates)) == 3
