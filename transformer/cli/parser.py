"""The ``typed-transformer`` command line: its commands and tasks (:func:`build_parser`), and reading it
(:func:`parse`), where an unknown option is said in one sentence: an abbreviation (refused, naming what it
abbreviates), an option of another task, a close spelling."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable, Sequence

import torch

from ..tasks import TASKS
from .arguments import CommandParser, add_runtime_flags, add_training_flags, positive_int
from .errors import EXIT_STATUSES
from .export import add_export_parser
from .file_flags import add_lm_flags, add_translate_flags
from .generate_flags import add_generate_flags
from .prove import add_prove_parser

__all__ = ["PROG", "FILE_TASKS", "build_parser", "add_generate_parser", "parse"]

PROG = "typed-transformer"
#: The tasks of ``train`` that read your files (the others are the synthetic tasks of :mod:`transformer.tasks`).
FILE_TASKS = ("lm", "translate")

_TASK_HELP = {
    "copy": (
        "the Annotated Transformer's copy task",
        "Train the Annotated Transformer's copy task (copy 10 random "
        "symbols), save a checkpoint, report held-out exact match.",
    ),
    "dates": (
        "dates in words to ISO 8601",
        "Train the dates task (dates in words, in three word orders, to ISO 8601), "
        "save a checkpoint, report held-out exact match.",
    ),
    "lm": (
        "a language model on your text files",
        "Train a tokenizer and a decoder-only language model on your text "
        "files, or continue a pretrained model on them (--init), save a checkpoint with the tokenizer, report "
        "held-out perplexity beside a unigram model's (docs/data.md).",
    ),
    "translate": (
        "a translation model on your pairs of sentences",
        "Train a tokenizer and an encoder-decoder on "
        "source<TAB>target pairs (or JSON lines), save a checkpoint, report held-out BLEU, chrF and exact "
        "match (docs/data.md).",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = CommandParser(
        prog=PROG,
        description="Train and decode the typed Transformer on synthetic tasks or your own files.",
        epilog=EXIT_STATUSES,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"{PROG} {__version__} (torch {torch.__version__}, Python {sys.version.split()[0]})",
    )
    sub = parser.add_subparsers(dest="command", required=True)  # --help lists every sub-command

    train = sub.add_parser(
        "train",
        help="train a task and save a checkpoint",
        epilog=EXIT_STATUSES,
        description="Train a task and save a checkpoint. Each task has its own options and defaults: "
        f"{PROG} train TASK --help.",
    )
    tasks = train.add_subparsers(dest="task", required=True, metavar="TASK")
    parser.task_parsers = {}
    for name in [*sorted(TASKS), *FILE_TASKS]:
        short, long = _TASK_HELP[name]
        p = tasks.add_parser(name, help=short, description=long, epilog=EXIT_STATUSES)
        if name == "lm":
            add_lm_flags(p)
        elif name == "translate":
            add_translate_flags(p)
        else:
            p.add_argument(
                "--eval-examples",
                type=positive_int,
                default=500,
                help="held-out inputs for exact match (default: %(default)s)",
            )
        add_training_flags(p, name)
        add_runtime_flags(p)
        parser.task_parsers[name] = p

    decode = sub.add_parser(
        "decode",
        help="decode text with a trained checkpoint",
        description="Greedy (or beam) decode each TEXT with a checkpoint written by `train`.",
    )
    decode.add_argument("--checkpoint", required=True, help="checkpoint directory written by `train`")
    decode.add_argument("--beam-size", type=positive_int, default=1, help="1: greedy (default); >1: beam search")
    decode.add_argument("text", nargs="+", help='source text, e.g. "1 2 3 4 5 6 7 8 9 10" or "fifth of june 1912"')
    add_runtime_flags(decode)

    generate = add_generate_parser(sub, add_runtime_flags)

    consolidate = sub.add_parser(
        "consolidate",
        help="gather a sharded (FSDP) checkpoint into one that decode reads",
        description="Gather the shards of a checkpoint saved under --strategy fsdp into a "
        "single-file checkpoint (weights, config, metadata).",
    )
    consolidate.add_argument("src", help="sharded checkpoint directory written by `train --strategy fsdp`")
    consolidate.add_argument("out", help="where to write the consolidated checkpoint")
    consolidate.add_argument("--threads", type=positive_int, default=1, help="CPU threads for torch (default 1)")
    export = add_export_parser(sub)
    prove = add_prove_parser(sub)
    parser.command_parsers = {
        "train": train,
        "decode": decode,
        "generate": generate,
        "consolidate": consolidate,
        "export": export,
        "prove": prove,
    }
    return parser


def add_generate_parser(sub, add_runtime_flags: Callable[[argparse.ArgumentParser], None]) -> argparse.ArgumentParser:
    """The ``generate`` command on the sub-parsers ``sub``, its runtime flags added by ``add_runtime_flags``."""
    p = sub.add_parser(
        "generate",
        help="continue a prompt with a language model trained by `train lm` or a pretrained one",
        description="Continue each PROMPT with a checkpoint written by `train lm` (--checkpoint) or a pretrained "
        "model's Hugging Face folder (--model): greedy by default, or --sample (temperature, top-k, top-p, from "
        "--seed); --stop ends at a text.",
    )
    add_generate_flags(p)
    add_runtime_flags(p)
    return p


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
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


def _abbreviation(name: str, parser: argparse.ArgumentParser) -> str | None:
    """The refusal of ``name`` when it abbreviates some of ``parser``'s own ``--`` options, else None."""
    expanded = sorted(o for o in parser._option_string_actions if o.startswith("--") and o.startswith(name))
    if not expanded:
        return None
    return f"unrecognized argument {name}: options cannot be abbreviated; did you mean {' or '.join(expanded)}?"


def _refuse_abbreviations(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """An abbreviated option is refused before argparse sees it (which would call it unknown, or first complain that
    the option it abbreviates is missing), naming what it abbreviates."""
    words = (
        [w for w in argv[: argv.index("--")] if not w.startswith("-")]
        if "--" in argv
        else [w for w in argv if not w.startswith("-")]
    )
    sub = parser
    if words and words[0] in parser.command_parsers:
        sub = parser.command_parsers[words[0]]
        if words[0] == "train" and len(words) > 1 and words[1] in parser.task_parsers:
            sub = parser.task_parsers[words[1]]
    for word in argv:
        if word == "--":
            break
        name = word.split("=", 1)[0]
        if not name.startswith("--") or name in sub._option_string_actions:
            continue
        refusal = _abbreviation(name, sub)
        if refusal:
            sub.error(refusal)


def _unknown_option(
    extras: list[str],
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    task_parsers: dict[str, argparse.ArgumentParser],
) -> str:
    flag = next((e.split("=", 1)[0] for e in extras if e.startswith("--")), None)
    if flag is None:
        return f"unrecognized arguments: {' '.join(extras)}"
    refusal = _abbreviation(flag, parser)
    if refusal:
        return refusal
    task = getattr(args, "task", None)
    if task is not None:
        if flag == "--batch-size" and task in FILE_TASKS:
            return f"train {task} batches by tokens: use --max-tokens instead of --batch-size"
        owners = [name for name, p in task_parsers.items() if flag in p._option_string_actions]
        if owners:
            return f"{flag} is for {' or '.join(f'train {name}' for name in owners)}, not train {task}"
    own = sorted(o for o in parser._option_string_actions if o.startswith("--"))
    close = difflib.get_close_matches(flag, own, n=1)
    return f"unrecognized arguments: {' '.join(extras)}" + (f" (did you mean {close[0]}?)" if close else "")
