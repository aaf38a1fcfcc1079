"""Mutants of training: label smoothing, the loss, the schedule, the training loop."""

from .base import M

MUTANTS = [
    # --- label smoothing (transformer/training.py)
    M("label-smoothing-wrong-mass", "transformer/training.py",
      "each = s / self.size", "each = s / (self.size - 1)",
      "label smoothing spreads s/(V-1) instead of s/V (mass != 1)"),
    M("label-smoothing-full-confidence", "transformer/training.py",
      "cross = -((1.0 - s) * x_label + each * total)", "cross = -(x_label + each * total)",
      "label smoothing keeps confidence 1 on the label (mass 1 + s)"),
    M("label-smoothing-mass-on-padding", "transformer/training.py",
      "columns[self.padding_idx] = False", "columns[self.padding_idx] = True",
      "annotated label smoothing puts mass on the padding class"),
]

# --- the training loop (transformer/trainer.py): killed by tests/test_training.py's comparisons with SGD by hand (accumulation groups,
# the trailing partial group, global-norm clipping, the schedule, the loss normalisation)
from .base import Mutant  # noqa: E402

_T = "transformer/trainer.py"
MUTANTS += [
    M("accum-steps-every-batch", _T,
      "if (i + 1) % accum_iter == 0:", "if True:",
      "run_epoch steps the optimizer on every batch, ignoring accum_iter"),
    M("accum-tutorial-off-by-one", _T,
      "if (i + 1) % accum_iter == 0:", "if i % accum_iter == 0:",
      "run_epoch steps after the first batch alone, then every accum_iter (the tutorial's i % accum_iter)"),
    M("accum-trailing-group-applied", _T,
      "        # gradients of a trailing partial accumulation are discarded, as in the tutorial\n"
      "        optimizer.zero_grad(set_to_none=True)",
      "        if (i + 1) % accum_iter:\n            _optimizer_step(model, optimizer, scheduler, clip_grad)\n"
      "        optimizer.zero_grad(set_to_none=True)",
      "a trailing partial accumulation group gets its own optimizer step (documented: discarded)"),
    M("accum-trailing-gradient-leaks", _T,
      "        # gradients of a trailing partial accumulation are discarded, as in the tutorial\n"
      "        optimizer.zero_grad(set_to_none=True)",
      "        pass",
      "a trailing partial group's gradients stay and leak into the next epoch's first step"),
    M("clip-per-parameter", _T,
      "        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)",
      "        [torch.nn.utils.clip_grad_norm_([p], clip_grad) for p in model.parameters()]",
      "gradient clipping bounds each parameter's norm instead of the global norm"),
    M("clip-by-value", _T,
      "        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)",
      "        torch.nn.utils.clip_grad_value_(model.parameters(), clip_grad)",
      "gradient clipping by value instead of by global norm"),
    M("clip-after-step", _T,
      "    if clip_grad is not None:\n        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)\n    optimizer.step()",
      "    optimizer.step()\n    if clip_grad is not None:\n        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad)",
      "gradients are clipped after the optimizer step (no effect on the update)"),
    M("loss-normalised-by-batch-size", _T,
      "return loss_compute(out, batch.labels, batch.ntokens)", "return loss_compute(out, batch.labels, len(batch))",
      "the loss is normalised by the number of sequences instead of ntokens"),
    Mutant("scheduler-steps-per-batch", _T, (
        ("_optimizer_step(model, optimizer, scheduler, clip_grad)", "_optimizer_step(model, optimizer, None, clip_grad)"),
        ("                train_state.step += 1",
         "                train_state.step += 1\n                if scheduler is not None:\n                    scheduler.step()"),
    ), "run_epoch steps the learning-rate schedule on every batch, not every optimizer step"),
    M("scheduler-steps-before-optimizer", _T,
      "    optimizer.step()\n    optimizer.zero_grad(set_to_none=True)\n    if scheduler is not None:\n        scheduler.step()",
      "    if scheduler is not None:\n        scheduler.step()\n    optimizer.step()\n    optimizer.zero_grad(set_to_none=True)",
      "the schedule advances before the optimizer step (the first step already uses the second rate)"),
    M("trainer-no-accumulation", _T,
      "for _ in range(self.config.accum_iter):", "for _ in range(1):",
      "Trainer.train_step uses one batch per optimizer step whatever accum_iter says"),
    M("trainer-ignores-clip", _T,
      "_optimizer_step(self.model, self.optimizer, self.scheduler, self.config.clip_grad)",
      "_optimizer_step(self.model, self.optimizer, self.scheduler, None)",
      "Trainer never clips the gradient"),
    M("trainer-loss-per-last-batch", _T,
      "self.last_train_loss = loss_sum / max(ntokens, 1)", "self.last_train_loss = loss_sum / max(batch.ntokens, 1)",
      "Trainer's loss per token divides by the last batch's tokens only"),
    M("loss-compute-unnormalised", "transformer/training.py",
      "sloss = self.criterion(x.contiguous().view(-1, x.size(-1)), y.contiguous().view(-1)) / norm",
      "sloss = self.criterion(x.contiguous().view(-1, x.size(-1)), y.contiguous().view(-1))",
      "SimpleLossCompute back-propagates the summed loss, not the loss / norm"),
]
