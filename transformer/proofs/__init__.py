"""Shapes proved for every size: a model's contracts decided by torch.export's symbolic shape reasoning over size
ranges (:func:`prove`), and the model exported with its checks on (:func:`export`); docs/proved-shapes.md."""

from .exported import Exported, export
from .prove import prove
from .report import CallReport, Counterexample, ProofReport

__all__ = ["prove", "export", "Exported", "ProofReport", "CallReport", "Counterexample"]
