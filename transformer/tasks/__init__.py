"""Synthetic tasks: the Annotated Transformer's copy task and dates-in-words to ISO 8601.

``get_task(name, **params)`` builds one; ``task_from_metadata(meta)`` rebuilds the task a
checkpoint was trained on (the CLI's ``decode``).
"""

from __future__ import annotations

from typing import Any

from .base import Task, TrainingDefaults, UnknownTokenError, Vocab
from .copy import CopyTask, data_gen
from .dates import DatesTask

TASKS: dict[str, type[Task]] = {"copy": CopyTask, "dates": DatesTask}

__all__ = ["Task", "TrainingDefaults", "UnknownTokenError", "Vocab", "CopyTask", "DatesTask", "data_gen", "TASKS",
           "get_task", "task_from_metadata"]


def get_task(name: str, **params: Any) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of: {', '.join(TASKS)}")
    return TASKS[name](**params)


def task_from_metadata(meta: dict[str, Any]) -> Task:
    """The task recorded in a checkpoint's metadata (``{"task": name, "params": {...}}``)."""
    if not isinstance(meta, dict) or "task" not in meta:
        raise ValueError("the checkpoint records no task (it was not written by `typed-transformer train`)")
    return get_task(meta["task"], **meta.get("params", {}))
