"""``typed-transformer train TASK``: the checks every task's run starts with (torchrun, ``--strategy``, the device and
backend, ``--out``), then the synthetic tasks (``train copy``, ``train dates``: train, evaluate, decode examples,
report exact match, save), in one process or as one rank of a torchrun job. The file tasks (``train lm``, ``train
translate``) continue in :mod:`~transformer.cli.train_files`."""

from __future__ import annotations

import argparse
import json
import time

import torch

from ..distributed import (
    DistributedSetupError,
    Strategy,
    World,
    check_batch_size,
    restarted_with_checkpoint,
    torchrun_world,
)
from ..tasks import Task, get_task, make_trainer
from ..training import NoamSchedule
from .errors import UsageError
from .messages import saved_message
from .parser import FILE_TASKS
from .runtime import attention_backend, check_backend_runs_on, resolve_device, torchrun_rank
from .train_files import train_file_task
from .train_setup import (
    apply_schedule,
    check_out,
    loss_lines,
    recall_flags,
    recorded_flags,
    require_files,
    require_finite,
    resume,
    schedule_line,
    trained_line,
    training_schedule,
)

__all__ = ["run_train"]


def run_train(args: argparse.Namespace) -> int:
    """``train TASK``: returns the exit status (a problem with the command line raises :class:`UsageError`)."""
    try:
        world = torchrun_world()
    except DistributedSetupError as error:
        raise UsageError(str(error)) from None
    if world is None and args.strategy is not None:
        raise UsageError(
            f"--strategy {args.strategy} needs processes started by torchrun (RANK, WORLD_SIZE and "
            f"LOCAL_RANK are not set): torchrun --nproc_per_node=N -m transformer train {args.task} "
            f"--strategy {args.strategy} ..."
        )
    device = resolve_device(args.device)
    check_backend_runs_on(args.attention_backend, device)
    resuming = args.resume or restarted_with_checkpoint(world, args.out)
    recall_flags(args, args.out, resuming)  # --resume --out DIR: the flags left out are the checkpoint's
    require_files(args, resuming)
    check_out(args, world)  # every rank, before any joins the process group: none has saved yet
    if args.task in FILE_TASKS:
        return _train_file_task(args, device, world)
    task = get_task(args.task)
    out = args.out
    if world is not None:
        return _train_distributed(args, task, out, device, world)
    with attention_backend(args.attention_backend):
        return _train_task(args, task, out, device)


def _train_file_task(args: argparse.Namespace, device: torch.device, world: World | None) -> int:
    """``train lm`` / ``train translate`` (:mod:`~transformer.cli.train_files`), in one process or as one rank of a
    torchrun job (their token-budget batches are dealt out between the ranks: no batch size to divide)."""
    if world is None:
        with attention_backend(args.attention_backend):
            return train_file_task(args, device)
    with torchrun_rank(args, device, world) as strategy:
        return train_file_task(args, strategy.device, strategy)


def _train_distributed(args: argparse.Namespace, task: Task, out: str, device: torch.device, world: World) -> int:
    """``train copy`` / ``train dates`` on one rank of a torchrun job (each rank takes ``batch / N`` examples)."""
    batch_size = args.batch_size
    given = batch_size != task.default_training().batch_size
    try:
        check_batch_size(
            batch_size, world.world_size, "--batch-size" if given else f"the {task.name} task's batch size"
        )
    except DistributedSetupError as error:
        raise UsageError(str(error)) from None
    with torchrun_rank(args, device, world) as strategy:
        return _train_task(args, task, out, strategy.device, strategy)


def _train_task(
    args: argparse.Namespace, task: Task, out: str, device: torch.device, strategy: Strategy | None = None
) -> int:
    defaults = task.default_training()
    noam = {"factor": defaults.factor, "warmup": defaults.warmup}
    schedule = training_schedule(args, task.default_config().d_model, noam, args.steps)
    factor, warmup = (schedule.factor, schedule.warmup) if isinstance(schedule, NoamSchedule) else noam.values()
    trainer = make_trainer(
        task,
        steps=args.steps,
        batch_size=args.batch_size,
        seed=args.seed,
        device=device,
        progress=not args.no_progress,
        eval_every=args.eval_every,
        warmup=warmup,
        factor=factor,
    )
    apply_schedule(trainer, schedule)
    if strategy is not None:
        trainer.distribute(strategy)
    trainer.config.out_dir = out
    trainer.config.checkpoint_every = trainer.config.eval_every
    trainer.metadata["flags"] = recorded_flags(args)
    cfg = trainer.model.config
    n_params = sum(p.numel() for p in trainer.model.parameters())
    resume(trainer, args, out, restarted_with_checkpoint(trainer.strategy.world, out))  # torchrun --max-restarts
    first_step = trainer.step
    print(
        f"task {task.name}: {n_params:,} parameters (N={cfg.n_encoder_layers}, d_model={cfg.d_model}, "
        f"d_ff={cfg.d_ff}, h={cfg.n_heads}), {trainer.config.steps} steps, device {device}, "
        f"{torch.get_num_threads()} thread(s), torch {torch.__version__}"
        + (f", {strategy.describe()}" if strategy is not None else "")
    )
    print(schedule_line(trainer.scheduler.lr_lambdas[0]), flush=True)
    start = time.perf_counter()
    trainer.train(on_eval=loss_lines(trainer, args))
    train_seconds = time.perf_counter() - start
    eval_loss = require_finite(trainer.evaluate(), trainer.step)
    model = trainer.strategy.full_model(trainer.model)  # FSDP: the weights gathered on rank 0 (every rank takes part)
    if not trainer.strategy.is_main:  # rank 0 decodes and reports; the others only take part in the final save
        trainer.save(out)
        return 0
    exact = task.exact_match(model, args.eval_examples)
    total_seconds = time.perf_counter() - start
    examples = task.examples(3)
    if task.name == "copy":
        examples = ["1 2 3 4 5 6 7 8 9 10"] + examples
    decodes = task.translate(model, examples)
    results = {
        "task": task.name,
        "steps": trainer.step,
        "seed": args.seed,
        "train_seconds": round(train_seconds, 2),
        "total_seconds": round(total_seconds, 2),
        "final_train_loss": trainer.last_train_loss,
        "eval_loss": eval_loss,
        "exact_match": exact,
        "eval_examples": args.eval_examples,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    if strategy is not None:
        results.update(strategy=strategy.name, world_size=strategy.world_size)
    trainer.metadata["results"] = results
    trainer.save(out)
    print(
        f"{trained_line(trainer, first_step)} in {train_seconds:.1f} s; final train loss {trainer.last_train_loss:.4f}"
    )
    print(f"held-out eval loss {eval_loss:.4f}")
    for source, target in zip(examples, decodes, strict=True):
        print(f"  {source!r} -> {target!r}")
    print(f"exact match on {args.eval_examples} held-out inputs: {exact:.1%}")
    print(saved_message(out, "decode"))
    print("RESULTS " + json.dumps(results))
    return 0
