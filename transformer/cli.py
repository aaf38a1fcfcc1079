"""The ``typed-transformer`` console script.

    typed-transformer train copy [--steps N] [--seed S] [--device cpu] [--attention-backend auto] [--out DIR]
    typed-transformer train dates ...
    typed-transformer decode --checkpoint DIR "1 2 3 4 5 6 7 8 9 10"

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

from .attention import BACKENDS, use_backend
from .checkpoint import CheckpointError, load_checkpoint
from .tasks import TASKS, UnknownTokenError, get_task, task_from_metadata

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
    parser = argparse.ArgumentParser(prog=PROG, description="Train and decode the typed Transformer on synthetic tasks.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{train,decode}")

    train = sub.add_parser("train", help="train a task and save a checkpoint",
                           description="Train on a synthetic task, save a checkpoint, report held-out exact match.")
    train.add_argument("task", choices=sorted(TASKS), help="copy: the tutorial's copy task; dates: dates in words -> ISO")
    train.add_argument("--steps", type=_positive_int, default=None, help="total optimizer steps (default: the task's); a resumed run continues up to it")
    train.add_argument("--batch-size", type=_positive_int, default=None, help="examples per batch (default: the task's)")
    train.add_argument("--seed", type=_non_negative_int, default=0, help="random seed (default 0)")
    train.add_argument("--out", default=None, help="checkpoint directory (default: runs/TASK)")
    train.add_argument("--eval-every", type=_non_negative_int, default=None, help="evaluate every N steps (0: only at the end)")
    train.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument("--eval-examples", type=_positive_int, default=500, help="held-out examples for exact match (default 500)")
    _add_runtime_flags(train)

    decode = sub.add_parser("decode", help="decode text with a trained checkpoint",
                            description="Greedy (or beam) decode each TEXT with a checkpoint written by `train`.")
    decode.add_argument("--checkpoint", required=True, help="checkpoint directory written by `train`")
    decode.add_argument("--beam-size", type=_positive_int, default=1, help="1: greedy (default); >1: beam search")
    decode.add_argument("text", nargs="+", help='source text, e.g. "1 2 3 4 5 6 7 8 9 10" or "fifth of june 1912"')
    _add_runtime_flags(decode)
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
    if backend == "triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise UsageError("--attention-backend triton needs --device cuda (or TRITON_INTERPRET=1 on CPU)")


def _train(args: argparse.Namespace) -> int:
    from .tasks.run import make_trainer

    device = _device(args.device)
    _check_backend(args.attention_backend, device)
    task = get_task(args.task)
    out = args.out or os.path.join("runs", args.task)
    changes = {} if args.attention_backend is None else {"attention_backend": args.attention_backend}
    trainer = make_trainer(
        task, steps=args.steps, batch_size=args.batch_size, seed=args.seed, device=device,
        progress=not args.no_progress, eval_every=args.eval_every, **changes,
    )
    trainer.config.out_dir = out
    trainer.config.checkpoint_every = trainer.config.eval_every
    cfg = trainer.model.config
    n_params = sum(p.numel() for p in trainer.model.parameters())
    if args.resume:
        trainer.resume(out)
        print(f"resumed from {out} at step {trainer.step}")
    print(f"task {task.name}: {n_params:,} parameters (N={cfg.n_encoder_layers}, d_model={cfg.d_model}, "
          f"d_ff={cfg.d_ff}, h={cfg.n_heads}), {trainer.config.steps} steps, device {device}, "
          f"{torch.get_num_threads()} thread(s), torch {torch.__version__}", flush=True)
    start = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - start
    eval_loss = trainer.evaluate()
    exact = task.exact_match(trainer.model, args.eval_examples)
    total_seconds = time.perf_counter() - start
    examples = task.examples(3)
    if task.name == "copy":
        examples = ["1 2 3 4 5 6 7 8 9 10"] + examples
    decodes = task.translate(trainer.model, examples)
    results = {
        "task": task.name, "steps": trainer.step, "seed": args.seed, "train_seconds": round(train_seconds, 2),
        "total_seconds": round(total_seconds, 2), "final_train_loss": trainer.last_train_loss, "eval_loss": eval_loss,
        "exact_match": exact, "eval_examples": args.eval_examples, "device": str(device), "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }
    trainer.metadata["results"] = results
    trainer.save(out)
    print(f"trained {trainer.step} steps in {train_seconds:.1f} s; final train loss {trainer.last_train_loss:.4f}")
    print(f"held-out eval loss {eval_loss:.4f}")
    for source, target in zip(examples, decodes):
        print(f"  {source!r} -> {target!r}")
    print(f"exact match on {args.eval_examples} held-out inputs: {exact:.1%}")
    print(f"checkpoint saved to {out}  (typed-transformer decode --checkpoint {out} \"...\")")
    print("RESULTS " + json.dumps(results))
    return 0


def _decode(args: argparse.Namespace) -> int:
    device = _device(args.device)
    _check_backend(args.attention_backend, device)
    ckpt = load_checkpoint(args.checkpoint, map_location=device, load_trainer_state=False)
    try:
        task = task_from_metadata(ckpt.metadata)
    except (ValueError, TypeError) as error:
        raise UsageError(f"checkpoint {args.checkpoint}: {error}") from None
    model = ckpt.model.eval()
    backend = contextlib.nullcontext() if args.attention_backend is None else use_backend(args.attention_backend)
    with backend:
        outputs = task.translate(model, args.text, beam_size=args.beam_size)
    for text, output in zip(args.text, outputs):
        print(output if len(args.text) == 1 else f"{text} -> {output}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits with status 2 and a usage line on bad flags
    torch.set_num_threads(args.threads)
    try:
        if args.command == "train":
            return _train(args)
        return _decode(args)
    except (UsageError, CheckpointError, UnknownTokenError) as error:
        print(f"{PROG} {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
