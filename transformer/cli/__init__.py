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
decodes each argument. Every task of ``train`` has its own options (``typed-transformer train TASK --help``,
with their defaults); no option may be abbreviated (``--lr`` is the peak learning rate, never ``--lr-factor``).

What a command says when it cannot do its job is one line on stderr, never a traceback, with an exit status:
2 for the command line and its inputs (flags, files, a missing, corrupt or non-finite checkpoint, unknown tokens,
an ``--out`` that is not writable or already holds a checkpoint), 3 when a run stops without a result (the loss
diverged, the disk is full or read-only: the last good checkpoint is intact), 130 after Ctrl-C (``train`` saves a
checkpoint at the end of the current step first; a second Ctrl-C stops at once).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import sys
import time
from collections.abc import Sequence

import torch

from ..attention import BACKENDS, triton_missing_reason, use_backend
from ..checkpoint import CheckpointError, find_checkpoint, load_checkpoint
from ..distributed import (
    STRATEGIES,
    DistributedSetupError,
    check_batch_size,
    restarted_with_checkpoint,
    torchrun_world,
)
from ..common.output_dirs import OutputWriteError, check_writable, remove_stale_temps
from ..tasks import TASKS, UnknownTokenError, get_task, task_from_metadata
from .file_commands import (
    FILE_TASKS,
    CommandError,
    add_generate_parser,
    add_lm_flags,
    add_translate_flags,
    decode_translation,
    describe_schedule,
    generate_command,
    require_finite,
    resume_schedule,
    schedule_settings,
    train_file_task,
)
from ..training.trainer import TrainingDiverged

__all__ = ["main", "build_parser", "EXIT_USAGE", "EXIT_RUN_FAILED", "EXIT_INTERRUPTED"]

PROG = "typed-transformer"
EXIT_USAGE, EXIT_RUN_FAILED, EXIT_INTERRUPTED = 2, 3, 130

_EXIT_STATUSES = ("exit status: 0 done; 2 a problem with the command line or its inputs (one line on stderr); 3 the run "
                  "stopped without a result: the loss diverged, or the disk is full or read-only (the last good "
                  "checkpoint is intact); 130 interrupted by Ctrl-C (train saves a checkpoint at the end of the "
                  "current step first)")


class UsageError(Exception):
    """A problem with the command line or its inputs: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """An argument parser that accepts no abbreviation (``--lr`` is never read as ``--lr-factor``). The
    sub-parsers that ``add_subparsers`` makes are of the parser's own class, so every command and task is one."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)


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


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def _add_runtime_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("runtime")
    g.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (cuda when available) (default: %(default)s)")
    g.add_argument("--attention-backend", choices=BACKENDS, default=None,
                   help="attention backend, a run-time choice (default: the model config's, auto)")
    g.add_argument("--threads", type=_positive_int, default=1,
                   help="CPU threads for torch; 1 is fastest for these small models and robust on a busy machine "
                        "(default: %(default)s)")


def _task_defaults(task: str) -> dict:
    """The defaults ``train TASK`` shows and uses: the synthetic task's ``default_training()``, or the file
    task's ``LM_DEFAULTS``/``TRANSLATE_DEFAULTS``; and the d_model of its default model (for --lr's default)."""
    if task == "lm":
        from ..tasks.text_lm import LM_DEFAULTS as d

        return dict(steps=d["steps"], eval_every=d["eval_every"], warmup=d["warmup"], factor=d["factor"],
                    d_model=d["d_model"])
    if task == "translate":
        from ..tasks.translation_files import TRANSLATE_DEFAULTS as d

        return dict(steps=d["steps"], eval_every=d["eval_every"], warmup=d["warmup"], factor=d["factor"],
                    d_model=d["d_model"])
    t = get_task(task)
    d = t.default_training()
    return dict(steps=d.steps, eval_every=d.eval_every, warmup=d.warmup, factor=d.factor,
                d_model=t.default_config().d_model, batch_size=d.batch_size)


def _add_training_flags(p: argparse.ArgumentParser, task: str) -> None:
    """The flags every task of ``train`` takes, with the task's defaults."""
    from ..training.losses import NoamSchedule

    d = _task_defaults(task)
    g = p.add_argument_group("training")
    g.add_argument("--steps", type=_positive_int, default=d["steps"],
                   help="total optimizer steps; a resumed run continues up to it (default: %(default)s)")
    if "batch_size" in d:
        g.add_argument("--batch-size", type=_positive_int, default=d["batch_size"],
                       help="examples per batch; under torchrun the global batch (default: %(default)s)")
    g.add_argument("--seed", type=_non_negative_int, default=0,
                   help="seeds the weights, dropout and the data (default: %(default)s)")
    g.add_argument("--eval-every", type=_non_negative_int, default=d["eval_every"],
                   help="evaluate and save a checkpoint every N steps; 0: only at the end (default: %(default)s)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--strategy", choices=STRATEGIES, default=None,
                   help="under torchrun: ddp (replicas; the default there) or fsdp (sharded); see docs/distributed.md")
    peak = NoamSchedule(d["d_model"], d["factor"], d["warmup"]).peak
    lr = p.add_argument_group(
        "learning rate", "Adam on the Noam schedule (section 5.3): the rate rises linearly for --warmup steps to its "
                         "peak, then decays as 1/sqrt(step). Set the peak with --lr, or the schedule's factor with "
                         "--lr-factor (peak = factor / sqrt(d_model * warmup)); not both. A resumed run keeps its "
                         "checkpoint's schedule unless one of these is given.")
    lr.add_argument("--warmup", type=_positive_int, default=None, help=f"warm-up steps (default: {d['warmup']})")
    either = lr.add_mutually_exclusive_group()
    either.add_argument("--lr", type=_positive_float, default=None, metavar="PEAK",
                        help=f"the peak learning rate, reached at step --warmup (default: the factor's peak, {peak:.3g} "
                             f"with the default model and warm-up)")
    either.add_argument("--lr-factor", type=_positive_float, default=None,
                        help=f"the Noam schedule's factor (default: {d['factor']})")
    out = p.add_argument_group("checkpoints")
    out.add_argument("--out", default=os.path.join("runs", task),
                     help="checkpoint directory (default: %(default)s)")
    out.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    out.add_argument("--overwrite", action="store_true",
                     help="start a new run even though --out holds a checkpoint (replaced at the first save)")


_TASK_HELP = {
    "copy": ("the Annotated Transformer's copy task", "Train the Annotated Transformer's copy task (copy 10 random "
             "symbols), save a checkpoint, report held-out exact match."),
    "dates": ("dates in words to ISO 8601", "Train the dates task (dates in words, in three word orders, to ISO 8601), "
              "save a checkpoint, report held-out exact match."),
    "lm": ("a language model on your text files", "Train a tokenizer and a decoder-only language model on your text "
           "files, save a checkpoint with the tokenizer, report held-out perplexity beside a unigram model's "
           "(docs/data.md)."),
    "translate": ("a translation model on your pairs of sentences", "Train a tokenizer and an encoder-decoder on "
                  "source<TAB>target pairs (or JSON lines), save a checkpoint, report held-out BLEU, chrF and exact "
                  "match (docs/data.md)."),
}


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = _Parser(prog=PROG, description="Train and decode the typed Transformer on synthetic tasks or your own "
                                            "files.", epilog=_EXIT_STATUSES)
    parser.add_argument("--version", action="version",
                        version=f"{PROG} {__version__} (torch {torch.__version__}, Python {sys.version.split()[0]})")
    sub = parser.add_subparsers(dest="command", required=True)  # --help lists every sub-command

    train = sub.add_parser("train", help="train a task and save a checkpoint", epilog=_EXIT_STATUSES,
                           description="Train a task and save a checkpoint. Each task has its own options and defaults: "
                                       f"{PROG} train TASK --help.")
    tasks = train.add_subparsers(dest="task", required=True, metavar="TASK")
    parser.task_parsers = {}
    for name in [*sorted(TASKS), *FILE_TASKS]:
        short, long = _TASK_HELP[name]
        p = tasks.add_parser(name, help=short, description=long, epilog=_EXIT_STATUSES)
        if name == "lm":
            add_lm_flags(p)
        elif name == "translate":
            add_translate_flags(p)
        else:
            p.add_argument("--eval-examples", type=_positive_int, default=500,
                           help="held-out inputs for exact match (default: %(default)s)")
        _add_training_flags(p, name)
        _add_runtime_flags(p)
        parser.task_parsers[name] = p

    decode = sub.add_parser("decode", help="decode text with a trained checkpoint",
                            description="Greedy (or beam) decode each TEXT with a checkpoint written by `train`.")
    decode.add_argument("--checkpoint", required=True, help="checkpoint directory written by `train`")
    decode.add_argument("--beam-size", type=_positive_int, default=1, help="1: greedy (default); >1: beam search")
    decode.add_argument("text", nargs="+", help='source text, e.g. "1 2 3 4 5 6 7 8 9 10" or "fifth of june 1912"')
    _add_runtime_flags(decode)

    generate = add_generate_parser(sub, _add_runtime_flags)

    consolidate = sub.add_parser("consolidate", help="gather a sharded (FSDP) checkpoint into one that decode reads",
                                 description="Gather the shards of a checkpoint saved under --strategy fsdp into a "
                                             "single-file checkpoint (weights, config, metadata).")
    consolidate.add_argument("src", help="sharded checkpoint directory written by `train --strategy fsdp`")
    consolidate.add_argument("out", help="where to write the consolidated checkpoint")
    consolidate.add_argument("--threads", type=_positive_int, default=1, help="CPU threads for torch (default 1)")
    parser.command_parsers = {"train": train, "decode": decode, "generate": generate, "consolidate": consolidate}
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, with what an unknown option is said in one sentence: an abbreviation (refused, and
    what it abbreviates), an option of another task (which), a close spelling."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _refuse_abbreviations(parser, argv)
    args, extras = parser.parse_known_args(argv)
    if extras:
        command = getattr(args, "command", None)
        sub = parser.task_parsers.get(getattr(args, "task", None)) if command == "train" else None
        sub = sub or parser.command_parsers.get(command, parser)
        sub.error(_unknown_option(extras, sub, args, parser.task_parsers))
    return args


def _refuse_abbreviations(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """An abbreviated option is refused before argparse sees it (which would call it unknown, or first complain that
    the option it abbreviates is missing), naming what it abbreviates."""
    words = [w for w in argv[: argv.index("--")] if not w.startswith("-")] if "--" in argv else \
        [w for w in argv if not w.startswith("-")]
    sub = parser
    if words and words[0] in parser.command_parsers:
        sub = parser.command_parsers[words[0]]
        if words[0] == "train" and len(words) > 1 and words[1] in parser.task_parsers:
            sub = parser.task_parsers[words[1]]
    own = [o for o in sub._option_string_actions if o.startswith("--")]
    for word in argv:
        if word == "--":
            break
        name = word.split("=", 1)[0]
        if not name.startswith("--") or name in sub._option_string_actions:
            continue
        expanded = sorted(o for o in own if o.startswith(name))
        if expanded:
            sub.error(f"unrecognized argument {name}: options cannot be abbreviated; did you mean "
                      f"{' or '.join(expanded)}?")


def _unknown_option(extras: list[str], parser: argparse.ArgumentParser, args: argparse.Namespace,
                    task_parsers: dict[str, argparse.ArgumentParser]) -> str:
    flag = next((e.split("=", 1)[0] for e in extras if e.startswith("--")), None)
    if flag is None:
        return f"unrecognized arguments: {' '.join(extras)}"
    own = sorted(o for o in parser._option_string_actions if o.startswith("--"))
    expanded = [o for o in own if o.startswith(flag)]
    if expanded:
        return (f"unrecognized argument {flag}: options cannot be abbreviated; did you mean "
                f"{' or '.join(expanded)}?")
    task = getattr(args, "task", None)
    if task is not None:
        if flag == "--batch-size" and task in FILE_TASKS:
            return f"train {task} batches by tokens: use --max-tokens instead of --batch-size"
        owners = [name for name, p in task_parsers.items() if flag in p._option_string_actions]
        if owners:
            return f"{flag} is for {' or '.join(f'train {name}' for name in owners)}, not train {task}"
    close = difflib.get_close_matches(flag, own, n=1)
    return f"unrecognized arguments: {' '.join(extras)}" + (f" (did you mean {close[0]}?)" if close else "")


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
    _check_out(args, world)  # every rank, before any joins the process group: none has saved yet
    if args.task in FILE_TASKS:
        return _train_file_task(args, device, world)
    task = get_task(args.task)
    out = args.out
    if world is not None:
        return _train_distributed(args, task, out, device, world)
    with _backend(args.attention_backend):
        return _train_task(args, task, out, device)


def _check_out(args: argparse.Namespace, world) -> None:
    """Before anything is trained: ``--out`` must be writable, and a new run never replaces a checkpoint (or a
    directory it did not write) unless ``--overwrite`` says so. Temporary directories of interrupted saves into
    ``--out`` whose process is gone are removed."""
    out = args.out
    if args.resume and args.overwrite:
        raise UsageError("--resume continues the checkpoint in --out and --overwrite starts a new run over it: "
                         "give one of them")
    found = find_checkpoint(out)
    resuming = args.resume or restarted_with_checkpoint(world, out)
    if not resuming:
        if found is not None and not args.overwrite:
            raise UsageError(f"--out {out} already holds a checkpoint{_describe_checkpoint(found)}: continue it with "
                             f"--resume, or start a new run over it with --overwrite (it is replaced at the first save)")
        if found is None and os.path.isdir(out) and os.listdir(out):
            raise UsageError(f"--out {out} is a directory that is not empty and holds no checkpoint; "
                             f"{PROG} only replaces checkpoints it wrote: choose another --out")
    try:
        check_writable(out, "--out")
    except OutputWriteError as error:
        raise UsageError(str(error)) from None
    remove_stale_temps(out)


def _describe_checkpoint(path: str) -> str:
    """`` (step 600 of train copy)``, read from the checkpoint at ``path`` (less when it says less)."""
    from ..checkpoint import checkpoint_step

    step = checkpoint_step(path)
    try:
        with open(os.path.join(path, "meta.json")) as f:
            task = json.load(f)["metadata"]["task"]
    except (OSError, ValueError, KeyError, TypeError):
        task = None
    parts = [f"step {step}" if step is not None else None, f"train {task}" if isinstance(task, str) else None]
    return f" ({' of '.join(p for p in parts if p)})" if any(parts) else ""


def _train_file_task(args: argparse.Namespace, device: torch.device, world) -> int:
    """``train lm`` / ``train translate`` (transformer.cli.file_commands), in one process or as one rank of a
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
    batch_size = args.batch_size
    given = batch_size != task.default_training().batch_size
    try:
        check_batch_size(batch_size, world.world_size, "--batch-size" if given else f"the {task.name} task's batch size")
    except DistributedSetupError as error:
        raise UsageError(str(error)) from None
    with _torchrun_rank(args, device, world) as strategy:
        return _train_task(args, task, out, strategy.device, strategy)


@contextlib.contextmanager
def _torchrun_rank(args: argparse.Namespace, device: torch.device, world):
    """This process as one rank of the torchrun job: the process group joined for ``--strategy`` (left on the way
    out), standard output from rank 0 only, the attention backend, and an escaping error recorded for torchrun's
    failure summary; a launch that cannot work is a usage error."""
    from ..distributed import distributed, main_process_output, recorded_errors

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
    from ..distributed import is_sharded_checkpoint
    from .run import make_trainer

    defaults = task.default_training()
    factor, warmup = schedule_settings(args, task.default_config().d_model,
                                       {"factor": defaults.factor, "warmup": defaults.warmup})
    trainer = make_trainer(
        task, steps=args.steps, batch_size=args.batch_size, seed=args.seed, device=device,
        progress=not args.no_progress, eval_every=args.eval_every, warmup=warmup, factor=factor,
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
        changed = resume_schedule(trainer, args)
        if changed:
            print(changed)
    print(f"task {task.name}: {n_params:,} parameters (N={cfg.n_encoder_layers}, d_model={cfg.d_model}, "
          f"d_ff={cfg.d_ff}, h={cfg.n_heads}), {trainer.config.steps} steps, device {device}, "
          f"{torch.get_num_threads()} thread(s), torch {torch.__version__}"
          + (f", {strategy.describe()}" if strategy is not None else ""))
    print(describe_schedule(trainer.scheduler.lr_lambdas[0]), flush=True)
    start = time.perf_counter()
    trainer.train()
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
    from ..distributed import is_sharded_checkpoint

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
    from ..checkpoint import read_config
    from ..distributed import consolidate_checkpoint

    path = consolidate_checkpoint(args.src, args.out)
    command = "generate" if read_config(path, with_kind=True)[0] == "lm" else "decode"  # an LM continues text
    print(f"consolidated {args.src} into {path}  ({PROG} {command} --checkpoint {path} \"...\")")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` (default: ``sys.argv[1:]``); returns the exit status (see the module docstring)."""
    from ..training.trainer import TrainingInterrupted

    parser = build_parser()
    args = _parse(parser, argv)  # exits with status 2 and a usage line on bad flags
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
        return EXIT_USAGE
    except (TrainingDiverged, OutputWriteError) as error:
        print(f"{PROG} {args.command}: error: {error}", file=sys.stderr)
        return EXIT_RUN_FAILED
    except TrainingInterrupted as interrupted:
        more = f"; continue it with --resume --out {interrupted.saved_to}" if interrupted.saved_to else ""
        print(f"{PROG} {args.command}: {interrupted}{more}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
