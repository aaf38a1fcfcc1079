"""One run of ``train lm`` or ``train translate`` (:mod:`transformer.cli.train_files`): where it saves, the strategy
it runs under (one process, or this rank of a torchrun job), preparing the data once, refusing a resume whose data or
``--init`` differ from its checkpoint's, and what every rank adds to the results."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from ..checkpoint import find_checkpoint, read_metadata
from ..data.tokenizers import TextTokenizer
from ..distributed import Strategy, restarted_with_checkpoint
from .errors import UsageError
from .messages import setting_flag
from .train_setup import resume

__all__ = ["FileRun"]

_Data = TypeVar("_Data")

#: The data settings of a checkpoint written before they were recorded: train lm packed no window before 2026-11-27.
_BEFORE_RECORDED = {"pack": False}


class FileRun:
    """What ``train lm`` and ``train translate`` share: where to save, the strategy (one process, or this rank of a
    torchrun job), preparing the data once, resuming, and the end of training every rank takes part in."""

    def __init__(self, args: argparse.Namespace, out: str, strategy: Strategy, *, torchrun: bool) -> None:
        self.args, self.out, self.strategy, self.torchrun = args, out, strategy, torchrun
        self.restarted = restarted_with_checkpoint(strategy.world, out)  # torchrun --max-restarts
        self.resumes = args.resume or self.restarted

    @property
    def device(self) -> torch.device:
        return self.strategy.device

    def prepare(self, prepare: Callable[[TextTokenizer | None], _Data], tokenizer: TextTokenizer | None) -> _Data:
        """``prepare(tokenizer)`` on rank 0 first (it trains the tokenizer unless one is given, and tokenizes the files
        into the cache), then on the other ranks with rank 0's tokenizer, so that they read rank 0's cache."""
        data = prepare(tokenizer) if self.strategy.is_main else None
        shared = self.strategy.broadcast(None if data is None else data.tokenizer.to_json())  # the others wait here
        return data if data is not None else prepare(TextTokenizer.from_json(shared, source="rank 0's tokenizer"))

    def check_same_data(self, settings: dict[str, Any]) -> None:
        """A resumed run continues the checkpoint's batches: its data settings (``--seed``, ``--max-tokens``,
        ``--block-len``, as recorded in the checkpoint's metadata) must be the command line's, or the plan of batches
        (and so what the position in it means) would silently change."""
        if not self.resumes:
            return
        found = find_checkpoint(self.out)
        if found is None:
            return
        recorded = {**_BEFORE_RECORDED, **read_metadata(found).get("data", {})}
        for name, value in settings.items():
            if name in recorded and recorded[name] != value:
                theirs = setting_flag(name, recorded[name])
                raise UsageError(
                    f"{setting_flag(name, value)} differs from the checkpoint's "
                    f"{theirs if isinstance(value, bool) else recorded[name]} (in {found}): a resumed run continues "
                    f"the checkpoint's plan of batches; give {theirs}"
                )

    def check_same_init(self) -> None:
        """A resumed run continues what its checkpoint started: a pretrained model (``--init``, recorded in the
        metadata as ``init``) again with ``--init``, a new model without it."""
        found = find_checkpoint(self.out) if self.resumes else None
        if found is None:
            return
        recorded, init = read_metadata(found).get("init"), getattr(self.args, "init", None)
        if recorded is not None and init is None:
            raise UsageError(
                f"the checkpoint in --out {self.out} continues the pretrained model of {recorded}: give --init "
                f"{recorded} again to resume it"
            )
        if recorded is None and init is not None:
            raise UsageError(
                f"the checkpoint in --out {self.out} trains a new model, not a pretrained one: resume it without --init"
            )

    def start(self, trainer) -> None:
        """Spread ``trainer`` over the job's ranks (DDP or FSDP), and resume it from ``--out`` if asked or restarted
        (with the learning rate the command line sets, if it sets one: :func:`~transformer.cli.train_setup.resume`)."""
        trainer.distribute(self.strategy)
        resume(trainer, self.args, self.out, self.restarted)

    def describe(self) -> str:
        return f"device {self.device}, {torch.get_num_threads()} thread(s)" + (
            f", {self.strategy.describe()}" if self.torchrun else ""
        )

    def results(self, results: dict[str, Any], data) -> dict[str, Any]:
        results.update(
            seed=self.args.seed,
            device=str(self.device),
            threads=torch.get_num_threads(),
            torch=torch.__version__,
            corpus=data.report.to_json(),
        )
        if self.torchrun:
            results.update(strategy=self.strategy.name, world_size=self.strategy.world_size)
        return results
