"""Module paths from before the package layout of 2026-11-27, kept working.

``import transformer.sdpa`` (or ``from transformer.lm_config import LMConfig``) gives the module that holds that
code now: the very same module object, so an attribute read, set or monkeypatched through the old path is the new
module's. Nothing is copied and nothing warns; the docs name the new paths (docs/architecture.md).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

#: old module path -> the module that holds its code now
MOVED_MODULES: dict[str, str] = {
    "transformer.batching": "transformer.training.batch",
    "transformer.trainer": "transformer.training",  # the package gives every name the module gave
    "transformer.contracts_fast": "transformer.contracts.fast",
    "transformer.contracts_traced": "transformer.contracts.traced",
    "transformer.sdpa": "transformer.backends.sdpa",
    "transformer.lm_attention": "transformer.lm.attention",
    "transformer.lm_config": "transformer.lm.config",
    "transformer.lm_generate": "transformer.lm.generation",
    "transformer.lm_layers": "transformer.lm.layers",
    "transformer.output_dirs": "transformer.common.output_dirs",
    "transformer.tasks.file_commands": "transformer.cli",  # the CLI's face gives every name it gave
    "transformer.tasks.run": "transformer.tasks.recipe",
}


class _MovedModuleLoader(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path's module and answers with the new module (importlib keeps what ``exec_module`` leaves in
    ``sys.modules`` under the requested name, and binds that object on the parent package)."""

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        if fullname not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a placeholder module; exec_module swaps in the real one

    def exec_module(self, module: ModuleType) -> None:
        sys.modules[module.__name__] = importlib.import_module(MOVED_MODULES[module.__name__])


def install() -> None:
    """Make the old paths importable (idempotent; called by ``transformer/__init__.py``)."""
    if not any(isinstance(finder, _MovedModuleLoader) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedModuleLoader())
