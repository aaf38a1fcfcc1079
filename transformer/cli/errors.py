"""What a command says when it cannot do its job: one error class for the command line and its inputs, and the
exit statuses (2 the command line or its inputs, 3 a run that stopped without a result, 130 Ctrl-C, 143 SIGTERM)."""

from __future__ import annotations

__all__ = [
    "UsageError",
    "CommandError",
    "EXIT_USAGE",
    "EXIT_RUN_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "EXIT_STATUSES",
]

#: 130 and 143 are what a shell reports for a process that SIGINT or SIGTERM ended (128 + the signal's number)
EXIT_USAGE, EXIT_RUN_FAILED, EXIT_INTERRUPTED, EXIT_TERMINATED = 2, 3, 130, 143

#: The exit statuses, as every command's ``--help`` ends.
EXIT_STATUSES = (
    "exit status: 0 done; 2 a problem with the command line or its inputs (one line on stderr); 3 the run "
    "stopped without a result: the loss diverged, or the disk is full or read-only (the last good "
    "checkpoint is intact); 130 interrupted by Ctrl-C, 143 by SIGTERM (train saves a checkpoint at "
    "the end of the current step first)"
)


class UsageError(ValueError):
    """A problem with the command line or its inputs (flags, files, checkpoints, tokenizers): reported in one line,
    exit status 2."""


#: The name the file tasks' error had (``transformer.tasks.file_commands.CommandError``): the same class.
CommandError = UsageError
