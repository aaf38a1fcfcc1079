"""The ``typed-transformer`` console script.

    typed-transformer train copy [--steps N] [--seed S] [--device cpu] [--attention-backend auto] [--out DIR]
    typed-transformer train dates ...
    typed-transformer decode --checkpoint DIR "1 2 3 4 5 6 7 8 9 10"
    typed-transformer train lm --text FILE... / train translate --train FILE --valid FILE   (see docs/data.md)
    typed-transformer generate --checkpoint DIR "prompt"                                    (see docs/lm.md)
    torchrun --nproc_per_node=N -m transformer train TASK [--strategy ddp|fsdp] ...   (see docs/distributed.md)
    typed-transformer consolidate SHARDED_DIR OUT_DIR

``train`` shows a progress bar (loss, tokens/s, learning rate), evaluates periodically, saves an
atomic checkpoint into ``--out``, then prints the held-out loss, example decodes and the
exact-match accuracy of greedy decoding. ``decode`` loads a checkpoint written by ``train`` and
decodes each argument. Usage errors, a missing or corrupt checkpoint and unknown tokens print one
line on stderr and exit with status 2 (no traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence

import torch

from .attention import BACKENDS, triton_missing_reason, use_backend
from .checkpoint import CheckpointError, load_checkpoint
from .distributed import (
    STRATEGIES,
    DistributedSetupError,
    check_batch_size,
    restarted_with_checkpoint,
    torchrun_world,
)
from .tasks import TASKS, UnknownTokenError, get_task, task_from_metadata
from .tasks.file_commands import (
    FILE_TASKS,
    CommandError,
    add_file_flags,
    add_generate_parser,
    decode_translation,
    file_flags_misused,
    generate_command,
    train_file_task,
)

__all__ = ["main", "build_parser"]

PROG = "typed-transformer"


class UsageError(Exception):
    """A problem with the command line or its inputs: reported in one line, exit status 2."""


def _int_at_least(minimum: int, what: str):
    """An argparse ``type`` accepting integers >= ``minimum``; the error says ``expected {what}``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1, "a positive integer")
_non_negative_int = _int_at_least(0, "a non-negative integer")


def _add_runtime_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or auto (cuda when available)")
    p.add_argument("--attention-backend", choices=BACKENDS, default=None,
                   help="attention backend (default: the model config's, 'auto')")
    p.add_argument("--threads", type=_positive_int, default=1,
                   help="CPU threads for torch (default 1: fastest for these small models, and robust on a busy machine)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Train and decode the typed Transformer on synthetic tasks or your own files.")
    sub = parser.add_subparsers(dest="command", required=True)  # --help lists every sub-command

    train = sub.add_parser("train", help="train a task and save a checkpoint",
                           description="Train on a synthetic task, save a checkpoint, report held-out exact match.")
    train.add_argument("task", choices=sorted(TASKS) + list(FILE_TASKS),
                       help="copy: the tutorial's copy task; dates: dates in words -> ISO; lm: a language model on "
                            "--text files; translate: --train/--valid files of source<TAB>target pairs")
    train.add_argument("--steps", type=_positive_int, default=None, help="total optimizer steps (default: the task's); a resumed run continues up to it")
    train.add_argument("--batch-size", type=_positive_int, default=None, help="examples per batch (default: the task's)")
    train.add_argument("--seed", type=_non_negative_int, default=0, help="random seed (default 0)")
    train.add_argument("--out", default=None, help="checkpoint directory (default: runs/TASK)")
    train.add_argument("--eval-every", type=_non_negative_int, default=None, help="evaluate every N steps (0: only at the end)")
    train.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument("--eval-examples", type=_positive_int, default=500, help="held-out examples for exact match (default 500)")
    train.add_argument("--strategy", choices=STRATEGIES, default=None,
                       help="under torchrun: ddp (default: replicas) or fsdp (sharded, FSDP2); see docs/distributed.md")
    _add_runtime_flags(train)
    add_file_flags(train)

    decode = sub.add_parser("decode", help="decode text with a trained checkpoint",
                            description="Greedy (or beam) decode each TEXT with a checkpoint written by `train`.")
    decode.add_argument("--checkpoint", required=True, help="checkpoint directory written by `train`")
    decode.add_argument("--beam-size", type=_positive_int, default=1, help="1: greedy (default); >1: beam search")
    decode.add_argument("text", nargs="+", help='source text, e.g. "1 2 3 4 5 6 7 8 9 10" or "fifth of june 1912"')
    _add_runtime_flags(decode)

    add_generate_parser(sub, _add_runtime_flags)

    consolidate = sub.add_parser("consolidate", help="gather a sharded (FSDP) checkpoint into one that decode reads",
                                 description="Gather the shards of a checkpoint saved under --strategy fsdp into a "
                                             "single-file checkpoint (weights, config, metadata).")
    consolidate.add_argument("src", help="sharded checkpoint directory written by `train --strategy fsdp`")
    consolidate.add_argument("out", help="where to write the consolidated checkpoint")
    consolidate.add_argument("--threads", type=_positive_int, default=1, help="CPU threads for torch (default 1)")
    return parser


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device: unknown device {name!r} (use cpu, cuda, cuda:N or auto)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: CUDA is not available on this machine (use --device cpu)")
    if device.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {name}: only cpu and cuda are supported")
    return device


def _check_backend(backend: str | None, device: torch.device) -> None:
    missing = triton_missing_reason() if backend == "triton" else None
    if missing is not None:
        raise UsageError(f"--attention-backend triton: {missing}")
    if backend == "triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise UsageError("--attention-backend triton needs --device cuda (or TRITON_INTERPRET=1 on CPU)")


def _train(args: argparse.Namespace) -> int:
    try:
        world = torchrun_world()
    except DistributedSetupError as error:
        raise UsageError(str(error)) from None
    if world is None and args.strategy is not None:
        raise UsageError(f"--strategy {args.strategy} needs processes started by torchrun (RANK, WORLD_SIZE and "
                         f"LOCAL_RANK are not set): torchrun --nproc_per_node=N -m transformer train {args.task} "
                         f"--strategy {args.strategy} ...")
    device = _device(args.device)
    _check_backend(args.attention_backend, device)
    misused = file_flags_misused(args)
    if misused is not None:
        raise UsageError(misused)
    if args.task in FILE_TASKS:
        return _train_file_task(args, device, world)
    task = get_task(args.task)
    out = args.out or os.path.join("runs", args.task)
    if world is not None:
        return _train_distributed(args, task, out, device, world)
    with _backend(args.attention_backend):
        return _train_task(args, task, out, device)


def _train_file_task(args: argparse.Namespace, device: torch.device, world) -> int:
    """``train lm`` / ``train translate`` (transformer.tasks.file_commands), in one process or as one rank of a
    torchrun job (their token-budget batches are dealt out between the ranks: no batch size to divide)."""
    if world is None:
        with _backend(args.attention_backend):
            return train_file_task(args, device)
    with _torchrun_rank(args, device, world) as strategy:
        return train_file_task(args, strategy.device, strategy)


def _generate(args: argparse.Namespace) -> int:
    device = _device(args.device)
    _check_backend(args.attention_backend, device)
    _refuse_sharded(args.checkpoint)
    with _backend(args.attention_backend):
        return generate_command(args, device)


def _train_distributed(args: argparse.Namespace, task, out: str, device: torch.device, world) -> int:
    """``train copy`` / ``train dates`` on one rank of a torchrun job (each rank takes ``batch / N`` examples)."""
    batch_size = args.batch_size or task.default_training().batch_size
    try:
        check_batch_size(batch_size, world.world_size, "--batch-size" if args.batch_size else f"the {task.name} task's batch size")
    except DistributedSetupError as error:
        raise UsageError(str(error)) from None
    with _torchrun_rank(args, device, world) as strategy:
        return _train_task(args, task, out, strategy.device, strategy)


@contextlib.contextmanager
def _torchrun_rank(args: argparse.Namespace, device: torch.device, world):
    """This process as one rank of the torchrun job: the process group joined for ``--strategy`` (left on the way
    out), standard output from rank 0 only, the attention backend, and an escaping error recorded for torchrun's
    failure summary; a launch that cannot work is a usage error."""
    from .distributed import distributed, main_process_output, recorded_errors

    with recorded_errors():
        try:
            with (distributed(args.strategy or "ddp", str(device)) as strategy, main_process_output(world),
                  _backend(args.attention_backend)):
                yield strategy
        except DistributedSetupError as error:
            raise UsageError(str(error)) from None


def _backend(name: str | None) -> contextlib.AbstractContextManager:
    """The run's attention backend: a run-time choice, so a checkpoint resumes or decodes on any backend."""
    return contextlib.nullcontext() if name is None else use_backend(name)


def _train_task(args: argparse.Namespace, task, out: str, device: torch.device, strategy=None) -> int:
    from .distributed import is_sharded_checkpoint
    from .tasks.run import make_trainer

    trainer = make_trainer(
        task, steps=args.steps, batch_size=args.batch_size, seed=args.seed, device=device,
        progress=not args.no_progress, eval_every=args.eval_every,
    )
    if strategy is not None:
        trainer.distribute(strategy)
    trainer.config.out_dir = out
    trainer.config.checkpoint_every = trainer.config.eval_every
    cfg = trainer.model.config
    n_params = sum(p.numel() for p in trainer.model.parameters())
    world = trainer.strategy.world
    restarted = restarted_with_checkpoint(world, out)  # torchrun --max-restarts
    if args.resume or restarted:
        trainer.resume(out)
        print(f"{f'restart {world.restart_count}: ' if restarted and not args.resume else ''}resumed from {out} at step {trainer.step}")
    print(f"task {task.name}: {n_params:,} parameters (N={cfg.n_encoder_layers}, d_model={cfg.d_model}, "
          f"d_ff={cfg.d_ff}, h={cfg.n_heads}), {trainer.config.steps} steps, device {device}, "
          f"{torch.get_num_threads()} thread(s), torch {torch.__version__}"
          + (f", {strategy.describe()}" if strategy is not None else ""), flush=True)
    start = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - start
    eval_loss = trainer.evaluate()
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
        "task": task.name, "steps": trainer.step, "seed": args.seed, "train_seconds": round(train_seconds, 2),
        "total_seconds": round(total_seconds, 2), "final_train_loss": trainer.last_train_loss, "eval_loss": eval_loss,
        "exact_match": exact, "eval_examples": args.eval_examples, "device": str(device), "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    if strategy is not None:
        results.update(strategy=strategy.name, world_size=strategy.world_size)
    trainer.metadata["results"] = results
    trainer.save(out)
    print(f"trained {trainer.step} steps in {train_seconds:.1f} s; final train loss {trainer.last_train_loss:.4f}")
    print(f"held-out eval loss {eval_loss:.4f}")
    for source, target in zip(examples, decodes):
        print(f"  {source!r} -> {target!r}")
    print(f"exact match on {args.eval_examples} held-out inputs: {exact:.1%}")
    if is_sharded_checkpoint(out):
        print(f"sharded checkpoint saved to {out}  (for decode: typed-transformer consolidate {out} {out}-consolidated)")
    else:
        print(f"checkpoint saved to {out}  (typed-transformer decode --checkpoint {out} \"...\")")
    print("RESULTS " + json.dumps(results))
    return 0


def _refuse_sharded(path: str) -> None:
    """``decode`` and ``generate`` read single-file checkpoints: a sharded one must be consolidated first."""
    from .distributed import is_sharded_checkpoint

    if is_sharded_checkpoint(path):
        raise UsageError(f"checkpoint {path} is sharded (saved by --strategy fsdp); gather it first: "
                         f"{PROG} consolidate {path} OUT")


def _decode(args: argparse.Namespace) -> int:
    device = _device(args.device)
    _check_backend(args.attention_backend, device)
    _refuse_sharded(args.checkpoint)
    ckpt = load_checkpoint(args.checkpoint, map_location=device, load_trainer_state=False)
    if ckpt.metadata.get("task") in FILE_TASKS:
        with _backend(args.attention_backend):
            return decode_translation(args, ckpt)
    try:
        task = task_from_metadata(ckpt.metadata)
    except (ValueError, TypeError) as error:
        raise UsageError(f"checkpoint {args.checkpoint}: {error}") from None
    model = ckpt.model.eval()
    with _backend(args.attention_backend):
        outputs = task.translate(model, args.text, beam_size=args.beam_size)
    for text, output in zip(args.text, outputs):
        print(output if len(args.text) == 1 else f"{text} -> {output}")
    return 0


def _consolidate(args: argparse.Namespace) -> int:
    from .checkpoint import read_config
    from .distributed import consolidate_checkpoint

    path = consolidate_checkpoint(args.src, args.out)
    command = "generate" if read_config(path, with_kind=True)[0] == "lm" else "decode"  # an LM continues text
    print(f"consolidated {args.src} into {path}  ({PROG} {command} --checkpoint {path} \"...\")")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits with status 2 and a usage line on bad flags
    torch.set_num_threads(args.threads)
    try:
        if args.command == "train":
            return _train(args)
        if args.command == "consolidate":
            return _consolidate(args)
        if args.command == "generate":
            return _generate(args)
        return _decode(args)
    except (UsageError, CheckpointError, UnknownTokenError, CommandError) as error:
        print(f"{PROG} {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
