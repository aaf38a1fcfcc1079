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
    return make_trainer(CopyTask(), steps=steps, **{**TINY, **kwargs})


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


# ---------------------------------------------------------------- the training loop: bar, evaluations, stops, weights
def test_a_trainer_built_with_a_strategy_trains_under_it_and_its_data_seed_defaults_to_0():
    """Trainer(strategy=...): the same as distribute(strategy) right after construction; ``seed`` (default 0) seeds
    the generator the batches are drawn from."""
    from transformer.training import Trainer

    made = _trainer()
    strategy = Recording()
    trainer = Trainer(made.model, made.optimizer, made.make_batches, criterion=made.criterion, strategy=strategy)
    assert trainer.strategy is strategy and strategy.calls["prepare"] == (made.model, made.optimizer)
    plain = Trainer(made.model, made.optimizer, made.make_batches, criterion=made.criterion)
    assert plain.data_generator.initial_seed() == 0


class _Clock:
    """time.perf_counter for the trainer's module: one second later at each call, so tokens/s is known."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now


def test_the_progress_bar_counts_from_the_resumed_step_and_shows_loss_tokens_per_second_and_rate(capsys, monkeypatch):
    """TrainerConfig.progress: a tqdm bar named ``train`` from the current step to the target, with the loss, the
    tokens per second of this call and the learning rate; each evaluation prints its step and both losses."""
    import transformer.training.trainer as trainer_module

    trainer = _trainer(steps=3, eval_every=2, dropout=0.0)
    trainer.train(1)  # progress off: the bar of the next call starts at step 1 of 3
    assert capsys.readouterr() == ("", "")
    trainer.config.progress = True
    monkeypatch.setattr(trainer_module, "time", _Clock())
    tokens_before = trainer.tokens
    trainer.train()
    out, err = capsys.readouterr()
    frames = [frame.strip() for frame in err.replace("\n", "\r").split("\r") if frame.strip()]
    assert frames[0].startswith("train:") and " 1/3 " in frames[0]
    last = frames[-1]
    assert last.startswith("train: 100%") and " 3/3 " in last
    tokens_per_second = (trainer.tokens - tokens_before) / 2  # two steps, one clock second each
    lr = trainer.optimizer.param_groups[0]["lr"]
    assert last.endswith(f"loss={trainer.last_train_loss:.3f}, tok/s={tokens_per_second:.0f}, lr={lr:.2e}]")
    ((step, eval_loss),) = trainer.history.eval_loss
    train_loss = dict(trainer.history.train_loss)[2]
    assert out == f"step 2: train loss {train_loss:.4f}, eval loss {eval_loss:.4f}\n"


def test_without_progress_nothing_is_printed_and_every_evaluation_goes_to_on_eval(capsys):
    """Trainer.train(on_eval=...): called with (step, held-out loss) after each evaluation; progress off (the
    default) prints nothing, evaluations included."""
    trainer = _trainer(steps=4, eval_every=2)
    seen = []
    trainer.train(on_eval=lambda step, loss: seen.append((step, loss)))
    assert capsys.readouterr() == ("", "")
    assert seen == trainer.history.eval_loss and [step for step, _ in seen] == [2, 4]
    assert all(isinstance(loss, float) and math.isfinite(loss) for _, loss in seen)


def test_a_held_out_loss_that_is_not_finite_stops_with_its_step_loss_and_the_checkpoint_kept(tmp_path):
    """Trainer.train: a NaN held-out loss raises TrainingDiverged (``step``, ``loss``; the message says what was
    kept in out_dir). Simulated (``evaluate`` returns NaN): weights that give a finite training loss and a NaN
    held-out loss on the same model cannot be built."""
    trainer = _trainer(steps=4, eval_every=2, checkpoint_every=1, out_dir=str(tmp_path / "ck"))
    trainer.evaluate = lambda: float("nan")
    with pytest.raises(TrainingDiverged) as error:
        trainer.train()
    assert error.value.step == 2 and math.isnan(error.value.loss)
    assert str(error.value).startswith(
        f"training diverged at step 2: the held-out loss is nan; the previous checkpoint in {tmp_path / 'ck'}"
    )
    assert "(step 1) is intact" in str(error.value)  # step 2 is evaluated before it is saved


def test_ctrl_c_without_out_dir_stops_at_the_step_boundary_and_writes_nothing(tmp_path, monkeypatch):
    """TrainerConfig.interrupt_at_step_boundary: Ctrl-C stops at the end of the step; without out_dir nothing is
    saved (``saved_to`` is None) and nothing is written anywhere. A real SIGINT to this process."""
    import os
    import signal

    from transformer.training import TrainingInterrupted

    monkeypatch.chdir(tmp_path)
    trainer = _trainer(steps=4)
    make = trainer.make_batches

    def batches(generator):
        for i, batch in enumerate(make(generator)):
            if i == 1:
                os.kill(os.getpid(), signal.SIGINT)
            yield batch

    trainer.make_batches = batches
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(TrainingInterrupted) as info:
            trainer.train()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert info.value.step == 2 and info.value.saved_to is None and trainer.saved_step is None
    assert list(tmp_path.iterdir()) == []
    trainer.train_step()  # train_step outside train() reads no leftover Ctrl-C handler
    assert trainer.step == 3


class _Weighted(SingleProcess):
    """A strategy whose ranks hold unequal token counts: this rank's loss per token is weighted by ``weight``."""

    def __init__(self, weight: float) -> None:
        super().__init__(device="cpu")
        self.weight = weight

    def token_weights(self, ntokens):
        return [self.weight] * len(ntokens)


@pytest.mark.parametrize("weight", [0.25, 2.0])
def test_each_ranks_gradient_is_its_loss_per_token_times_its_token_weight(weight):
    """train_step: under torchrun each rank's loss per token is weighted by its share of all the ranks' tokens (1.0
    alone), so the averaged gradient is the global loss's: the gradient is ``weight`` times the unweighted one."""

    def gradients(strategy):
        trainer = _trainer(dropout=0.0, attention_dropout=0.0)
        trainer.config.clip_grad = None
        trainer.distribute(strategy)
        seen = []  # each parameter's gradient once backward has accumulated it
        for parameter in trainer.model.parameters():
            parameter.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.clone()))
        trainer.train_step()
        return seen

    plain, weighted = gradients(_Weighted(1.0)), gradients(_Weighted(weight))
    assert len(plain) == len(weighted) > 0
    for a, b in zip(plain, weighted, strict=True):
        torch.testing.assert_close(b, a * weight)


def _one_token_batches(rows):
    """A copy-task batch of ``rows`` identical rows whose target holds exactly one label each (ntokens == rows)."""
    from transformer.training import Batch

    return Batch(torch.tensor([[1, 3, 4, 5]] * rows), torch.tensor([[1, 3]] * rows), pad=0)


def test_the_loss_per_token_of_a_single_token_is_that_tokens_loss():
    """Trainer.evaluate and train_step: the loss per token is the summed loss over the tokens counted, so one token
    alone has the loss per token of two copies of it (a plausible bug divides by at least 2)."""
    single, double = _one_token_batches(1), _one_token_batches(2)
    assert (single.ntokens, double.ntokens) == (1, 2)
    trainer = _trainer(dropout=0.0, attention_dropout=0.0)
    losses = []
    for batch in (single, double):
        trainer.eval_batches = lambda b=batch: [b]
        losses.append(trainer.evaluate())
    assert losses[0] > 0 and losses[0] == pytest.approx(losses[1], rel=1e-6)
    steps = []
    for batch in (single, double):
        trainer = _trainer(dropout=0.0, attention_dropout=0.0)
        trainer.make_batches = lambda generator, b=batch: iter([b] * 4)
        steps.append(trainer.train_step())
    assert steps[0] > 0 and steps[0] == pytest.approx(steps[1], rel=1e-6)


class _NoVocabulary(torch.nn.Module):
    """A criterion that names no vocabulary size (no ``size``), e.g. a user's own loss."""

    def __init__(self, inner) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x, target):
        return self.inner(x, target)


def test_a_non_finite_loss_under_a_criterion_without_a_vocabulary_size_is_a_divergence():
    """_diverged: the labels are checked against the criterion's vocabulary only when it has one; otherwise a
    non-finite loss is TrainingDiverged."""
    trainer = _trainer()
    trainer.criterion = _NoVocabulary(trainer.criterion)
    assert not hasattr(trainer.criterion, "size")
    with torch.no_grad():
        next(trainer.model.parameters()).fill_(float("nan"))
    with pytest.raises(TrainingDiverged, match="^training diverged at step 1: the loss is nan"):
        trainer.train_step()
