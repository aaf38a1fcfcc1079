"""Optional dependencies: a package of an extra imported when a feature first needs it, or one clear error.

The core install (modules, contracts, kernel, the synthetic tasks) needs none of them. Each feature that does
imports its package through :func:`require`, which returns the module or raises :class:`MissingDependencyError`
naming the feature, the missing package, its extra and the exact command that installs the extra's packages; the
command line reports it in one line with exit status 2. The version specifiers come from the installed
distribution's own metadata (pyproject.toml's ``[project.optional-dependencies]``), so they are written once.
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from importlib import metadata
from types import ModuleType

__all__ = ["EXTRAS", "MissingDependencyError", "install_command", "require"]

DISTRIBUTION = "typed-transformer"

#: The extra that provides each optional package (pyproject.toml's ``[project.optional-dependencies]``)
EXTRAS = {"tokenizers": "text", "sacrebleu": "text"}


class MissingDependencyError(ImportError):
    """A feature needs a package of an extra that is not installed (or cannot be imported)."""


@cache
def _extra_requirements(extra: str) -> tuple[str, ...]:
    """The requirements of ``extra`` as the installed distribution declares them, e.g. ``("tokenizers>=0.15",
    "sacrebleu>=2.3")``; the bare package names when the metadata cannot be read (a plain source tree)."""
    try:
        declared = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        declared = []
    marker = re.compile(rf"""^(?P<requirement>[^;]+);\s*extra\s*==\s*["']{re.escape(extra)}["']\s*$""")
    found = tuple(m["requirement"].strip() for line in declared if (m := marker.match(line)))
    return found or tuple(sorted(package for package, of in EXTRAS.items() if of == extra))


def install_command(extra: str) -> str:
    """The pip command that installs the packages of ``extra``: ``pip install "tokenizers>=0.15" "sacrebleu>=2.3"``
    (it works however typed-transformer itself was installed: from a wheel, a checkout or editable)."""
    return "pip install " + " ".join(f'"{requirement}"' for requirement in _extra_requirements(extra))


def require(package: str, feature: str) -> ModuleType:
    """Import ``package`` (a key of :data:`EXTRAS`) for ``feature`` (what the user asked for, e.g. ``"train lm
    --text (training a tokenizer)"``), or raise :class:`MissingDependencyError` saying what to install."""
    if package not in EXTRAS:
        raise ValueError(f"package must be one of {', '.join(sorted(EXTRAS))}, got {package!r}")
    try:
        return importlib.import_module(package)
    except ImportError as error:
        extra = EXTRAS[package]
        missing = error.name == package or (error.name or "").startswith(f"{package}.")
        state = "which is not installed" if missing else f"which is installed but cannot be imported ({error})"
        raise MissingDependencyError(
            f"{feature} needs the {package} package (typed-transformer's [{extra}] extra), {state}; "
            f"install it with: {install_command(extra)}",
            name=package,
        ) from None
