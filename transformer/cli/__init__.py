"""The ``typed-transformer`` console script.

    typed-transformer train copy [--steps N] [--seed S] [--device cpu] [--attention-backend auto] [--out DIR]
    typed-transformer train dates ...
    typed-transformer decode --checkpoint DIR "1 2 3 4 5 6 7 8 9 10"
    typed-transformer train lm --text FILE... / train translate --train FILE --valid FILE   (see docs/data.md)
    typed-transformer generate --checkpoint DIR "prompt"                                    (see docs/lm.md)
    typed-transformer generate --model HF_FOLDER "prompt"                                   (see docs/data.md)
    typed-transformer train lm --init HF_FOLDER --text FILE...                              (see docs/data.md)
    torchrun --nproc_per_node=N -m transformer train TASK [--strategy ddp|fsdp] ...   (see docs/distributed.md)
    typed-transformer consolidate SHARDED_DIR OUT_DIR
    typed-transformer export --checkpoint DIR --to HF_DIR   (a train lm checkpoint as a Hugging Face folder)
    typed-transformer prove PACKAGE.MODULE:FACTORY [--sizes batch=1..64,seq=1..512]   (see docs/proved-shapes.md)

``train`` shows a progress bar (loss, tokens/s, learning rate), evaluates periodically, saves an
atomic checkpoint into ``--out``, then prints the held-out loss, example decodes and the
exact-match accuracy of greedy decoding. ``decode`` loads a checkpoint written by ``train`` and
decodes each argument. Every task of ``train`` has its own options (``typed-transformer train TASK --help``,
with their defaults); no option may be abbreviated (``--lr`` is the peak learning rate, never ``--lr-factor``).

What a command says when it cannot do its job is one line on stderr, never a traceback, with an exit status:
2 for the command line and its inputs (flags, files, a missing, corrupt or non-finite checkpoint, unknown tokens,
an ``--out`` that is not writable or already holds a checkpoint, a package of the ``text`` extra missing for
``train lm``, ``train translate`` or a file task's checkpoint), 3 when a run stops without a result (the loss
diverged, the disk is full or read-only: the last good checkpoint is intact), 130 after Ctrl-C and 143 after
SIGTERM (``train`` saves a checkpoint at the end of the current step first; a second one stops at once), the last
line then the command that continues the run, to paste as printed (:func:`~transformer.cli.messages.resume_command`).

One concept per module; ``main`` is here, everything else is imported from here:

* :mod:`~transformer.cli.parser`: the commands and tasks, and reading the command line (no abbreviations).
* :mod:`~transformer.cli.arguments`: the argparse types (one set) and each command's flags with their defaults.
* :mod:`~transformer.cli.errors`: :class:`UsageError` (exit status 2) and the exit statuses.
* :mod:`~transformer.cli.runtime`: the device, the attention backend, this process as a torchrun rank.
* :mod:`~transformer.cli.messages`: what the train commands print about checkpoints and the learning rate.
* :mod:`~transformer.cli.train_setup`: what every train command shares: ``--out``, the learning-rate flags, resuming.
* :mod:`~transformer.cli.train`: ``train TASK``, and the synthetic tasks (``copy``, ``dates``).
* :mod:`~transformer.cli.train_files`: ``train lm``, ``train translate`` (your own files).
* :mod:`~transformer.cli.checkpoint_commands`: ``decode``, ``generate``, ``consolidate``.
* :mod:`~transformer.cli.export`: ``export`` (a ``train lm`` checkpoint as a Hugging Face folder).
* :mod:`~transformer.cli.prove`: ``prove`` (a model's contracts for every size in ranges).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

import torch

from ..checkpoint import CheckpointError
from ..common.optional import MissingDependencyError
from ..common.output_dirs import OutputWriteError
from ..lm.pretrained import PretrainedFormatError
from ..tasks import UnknownTokenError
from ..training import TrainingDiverged, TrainingInterrupted
from .checkpoint_commands import decode_translation, generate_command, run_consolidate, run_decode, run_generate
from .errors import EXIT_INTERRUPTED, EXIT_RUN_FAILED, EXIT_TERMINATED, EXIT_USAGE, CommandError, UsageError
from .export import run_export
from .file_flags import add_lm_flags, add_translate_flags
from .messages import describe_schedule, resume_command
from .parser import FILE_TASKS, PROG, add_generate_parser, build_parser, parse
from .prove import run_prove
from .train import run_train
from .train_files import train_file_task
from .train_setup import require_finite, resume_schedule, schedule_given, schedule_settings

__all__ = [
    "main",
    "build_parser",
    "EXIT_USAGE",
    "EXIT_RUN_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "UsageError",
    "PROG",
    # what transformer.tasks.file_commands (now this package) gave
    "FILE_TASKS",
    "CommandError",
    "add_lm_flags",
    "add_translate_flags",
    "add_generate_parser",
    "train_file_task",
    "generate_command",
    "decode_translation",
    "schedule_settings",
    "schedule_given",
    "describe_schedule",
    "resume_schedule",
    "require_finite",
]

_COMMANDS = {
    "train": run_train,
    "decode": run_decode,
    "generate": run_generate,
    "consolidate": run_consolidate,
    "export": run_export,
    "prove": run_prove,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` (default: ``sys.argv[1:]``); returns the exit status (see the module docstring)."""
    parser = build_parser()
    args = parse(parser, argv)  # exits with status 2 and a usage line on bad flags
    torch.set_num_threads(args.threads)
    try:
        return _COMMANDS[args.command](args)
    except (UsageError, CheckpointError, UnknownTokenError, PretrainedFormatError, MissingDependencyError) as error:
        print(f"{PROG} {args.command}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except (TrainingDiverged, OutputWriteError) as error:
        print(f"{PROG} {args.command}: error: {error}", file=sys.stderr)
        return EXIT_RUN_FAILED
    except TrainingInterrupted as interrupted:
        saved = interrupted.saved_to
        more = f"; continue it with: {resume_command(args.task, saved)}" if saved and args.command == "train" else ""
        print(f"{PROG} {args.command}: {interrupted}{more}", file=sys.stderr)
        return EXIT_TERMINATED if interrupted.signum == signal.SIGTERM else EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
