"""Synthetic tasks: the Annotated Transformer's copy task and dates-in-words to ISO 8601.

``get_task(name, **params)`` builds one; ``task_from_metadata(meta)`` rebuilds the task a
checkpoint was trained on (the CLI's ``decode``); ``make_trainer(task)`` wires one to a model, Adam on the Noam
schedule and a Trainer (:mod:`~transformer.tasks.recipe`).

Besides the synthetic tasks, the recipes of training on your own files live here (imported from their modules, not
from this face, so that ``import transformer.tasks`` stays light): :mod:`~transformer.tasks.text_lm` (``train lm``),
:mod:`~transformer.tasks.translation_files` (``train translate``), :mod:`~transformer.tasks.file_trainer` (the
Trainer both build), :mod:`~transformer.tasks.tokenizer_assets` (a tokenizer inside a checkpoint) and
:mod:`~transformer.tasks.hf_export` (a ``train lm`` checkpoint as a Hugging Face folder, ``typed-transformer
export``). They are data and training recipes a program can call; the command line that parses flags, prints and
exits is :mod:`transformer.cli`.
"""

from __future__ import annotations

from typing import Any

from .base import Task, TrainingDefaults, UnknownTokenError, Vocab
from .copy import CopyTask, data_gen
from .dates import DatesTask
from .recipe import make_trainer

TASKS: dict[str, type[Task]] = {"copy": CopyTask, "dates": DatesTask}

__all__ = [
    "Task",
    "TrainingDefaults",
    "UnknownTokenError",
    "Vocab",
    "CopyTask",
    "DatesTask",
    "data_gen",
    "TASKS",
    "get_task",
    "task_from_metadata",
    "make_trainer",
]


def get_task(name: str, **params: Any) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)}")
    return TASKS[name](**params)


def task_from_metadata(meta: dict[str, Any]) -> Task:
    """The task recorded in a checkpoint's metadata (``{"task": name, "params": {...}}``)."""
    if not isinstance(meta, dict) or "task" not in meta:
        raise ValueError("the checkpoint records no task (it was not written by `typed-transformer train`)")
    return get_task(meta["task"], **meta.get("params", {}))
