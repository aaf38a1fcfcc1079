"""What goes wrong with a checkpoint: missing, incomplete or corrupt; saved from another model; non-finite weights."""

from __future__ import annotations

from typing import Any

__all__ = ["CheckpointError", "ConfigMismatchError", "NonFiniteWeightsError"]


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete or corrupt."""


class ConfigMismatchError(CheckpointError):
    """A checkpoint was saved from a model with another config; ``fields`` maps name -> (model, checkpoint)."""

    def __init__(self, fields: dict[str, tuple[Any, Any]], path: str) -> None:
        self.fields = fields
        listing = ", ".join(f"{name} (model {a!r}, checkpoint {b!r})" for name, (a, b) in sorted(fields.items()))
        super().__init__(f"checkpoint {path} was saved from a model with another config; mismatched fields: {listing}")


class NonFiniteWeightsError(CheckpointError):
    """A checkpoint (or a model about to be saved) holds NaN or infinite weights; ``tensors`` lists
    ``(name, count of non-finite values, size)``."""

    def __init__(self, message: str, tensors: list[tuple[str, int, int]]) -> None:
        super().__init__(message)
        self.tensors = tensors
