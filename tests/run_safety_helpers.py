"""What the run-safety and resume tests (tests/test_run_safety_*.py, tests/test_resume_promises.py) share: a tiny
copy-task trainer, a stateful one, and a copy of its weights."""

import random

import torch

from transformer.tasks import CopyTask, make_trainer
from transformer.training import LabelSmoothing, Trainer, TrainerConfig

TINY = dict(batch_size=4, n_encoder_layers=1, n_decoder_layers=1, d_model=16, d_ff=32, n_heads=2, eval_every=0)


def tiny_trainer(steps=6, **changes):
    return make_trainer(CopyTask(), steps=steps, **{**TINY, **changes})


def params(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def shuffled_copy_batches(task: CopyTask):
    """A copy-task batch stream that draws from its generator and from Python's ``random`` (its rows shuffled), so
    that a resume must restore both."""

    def batches(generator):
        while True:
            src, tgt = task.sample(generator, 4)
            rows = list(range(4))
            random.shuffle(rows)  # Python's RNG is part of the stream
            yield task.batch(src[rows], tgt[rows])

    return batches


def stateful_copy_trainer(model, optimizer, batches, *, scheduler, seed, device="cpu") -> Trainer:
    """A Trainer of the 11-symbol copy task whose every piece of state matters: label smoothing, the given
    optimizer and schedule, periodic evaluation (history), 6 steps."""
    task = CopyTask()
    evals = [task.batch(*task.sample(torch.Generator().manual_seed(8), 4))]
    return Trainer(
        model,
        optimizer,
        batches,
        criterion=LabelSmoothing(11, 0, 0.1),
        scheduler=scheduler,
        eval_batches=lambda: evals,
        seed=seed,
        device=device,
        config=TrainerConfig(steps=6, eval_every=2),
    )
