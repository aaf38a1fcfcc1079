"""The mutant catalog: one module per area, each with a ``MUTANTS`` list (see tests/mutation/README.md)."""

from . import (  # blind reviews (docs/guarantees.md)
    blind_contracts,
    blind_data,
    blind_decoding,
    blind_dist,
    blind_dropin,
    blind_guards,
    blind_kernels,
    blind_layout_contracts,
    blind_model,
    blind_runsafety,
    blind_stepchecks,
    blind_training,
    contracts,
    decoding,
    distributed,
    dropout,
    guards,
    interface,
    kernels,
    lm,
    model,
    training,
)
from .base import KERNEL_TESTS, K, M, Mutant

ALL: list[Mutant] = [
    *model.MUTANTS,
    *interface.MUTANTS,
    *contracts.MUTANTS,
    *guards.MUTANTS,
    *dropout.MUTANTS,
    *decoding.MUTANTS,
    *training.MUTANTS,
    *kernels.MUTANTS,
    *lm.MUTANTS,
    *distributed.MUTANTS,
    *blind_data.MUTANTS,
    *blind_training.MUTANTS,
    *blind_decoding.MUTANTS,
    *blind_model.MUTANTS,
    *blind_dropin.MUTANTS,
    *blind_runsafety.MUTANTS,
    *blind_guards.MUTANTS,
    *blind_dist.MUTANTS,
    *blind_kernels.MUTANTS,
    *blind_contracts.MUTANTS,
    *blind_stepchecks.MUTANTS,
    *blind_layout_contracts.MUTANTS,
]

__all__ = ["ALL", "KERNEL_TESTS", "K", "M", "Mutant"]
