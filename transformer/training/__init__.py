"""Training (section 5): one concept per module; import everything from here.

* :mod:`~transformer.training.batch`: :class:`Batch`, a source/target batch with its masks.
* :mod:`~transformer.training.losses`: label smoothing, the Noam schedule, the loss compute.
* :mod:`~transformer.training.trainer`: ``run_epoch`` and :class:`Trainer` (checkpoints, resume, divergence stop).
"""

from .batch import Batch
from .losses import (
    LabelSmoothing,
    NoamSchedule,
    SimpleLossCompute,
    check_label_ids,
    label_smoothing_entropy,
    noam_factor,
    rate,
)
from .trainer import (
    Trainer,
    TrainerConfig,
    TrainingDiverged,
    TrainingInterrupted,
    TrainState,
    autocast_context,
    run_epoch,
)

__all__ = [
    "Batch",
    "LabelSmoothing",
    "label_smoothing_entropy",
    "check_label_ids",
    "rate",
    "NoamSchedule",
    "noam_factor",
    "SimpleLossCompute",
    "TrainState",
    "run_epoch",
    "Trainer",
    "TrainerConfig",
    "TrainingDiverged",
    "TrainingInterrupted",
    "autocast_context",
]
