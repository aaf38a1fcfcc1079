"""Training (section 5): one concept per module; import everything from here.

* :mod:`~transformer.training.batch`: :class:`Batch`, a source/target batch with its masks.
* :mod:`~transformer.training.losses`: label smoothing, the label-id check, the loss compute (section 5.4).
* :mod:`~transformer.training.schedule`: the Noam learning-rate schedule and Adam on it (section 5.3); the warm-up
  and constant, linear or cosine decay of fine-tuning.
* :mod:`~transformer.training.loop`: ``run_epoch`` (the tutorial's loop) and the step's pieces it shares.
* :mod:`~transformer.training.trainer`: :class:`Trainer` (step-counted, checkpoints, exact resume, torchrun).
* :mod:`~transformer.training.stops`: when a run stops without a result: divergence, Ctrl-C.
"""

from .batch import Batch
from .loop import TrainState, autocast_context, run_epoch
from .losses import LabelSmoothing, SimpleLossCompute, check_label_ids, label_smoothing_entropy
from .schedule import (
    DEFAULT_WARMUP_RATIO,
    SCHEDULES,
    NoamSchedule,
    WarmupDecaySchedule,
    fused_supported,
    noam_adam,
    noam_factor,
    rate,
    schedule_from_state,
    use_schedule,
    warmup_steps,
)
from .stops import InterruptAtStepBoundary, TrainingDiverged, TrainingInterrupted
from .trainer import Trainer, TrainerConfig

__all__ = [
    "Batch",
    "LabelSmoothing",
    "label_smoothing_entropy",
    "check_label_ids",
    "rate",
    "NoamSchedule",
    "noam_factor",
    "noam_adam",
    "fused_supported",
    "SCHEDULES",
    "DEFAULT_WARMUP_RATIO",
    "WarmupDecaySchedule",
    "warmup_steps",
    "schedule_from_state",
    "use_schedule",
    "SimpleLossCompute",
    "TrainState",
    "run_epoch",
    "Trainer",
    "TrainerConfig",
    "TrainingDiverged",
    "TrainingInterrupted",
    "InterruptAtStepBoundary",
    "autocast_context",
]
