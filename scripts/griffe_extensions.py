"""Griffe extensions for the API reference (mkdocs.yml: mkdocstrings' ``extensions``).

* ``PackageDirs``: the wheel maps repository folders into the package (pyproject.toml,
  ``[tool.setuptools] package-dir``: ``kernels/`` ships as ``transformer.kernels``). Griffe reads sources by
  folder, so it would not find ``transformer.kernels``; this extension loads each mapped folder as the submodule
  the package-dir mapping names, so the reference documents it under its import name.
* ``SphinxRoles``: the docstrings write references the Sphinx way (``:class:`~transformer.cache.KVCache```,
  ``:func:`use_backend```, ``:meth:`attend```), which Markdown would show as ``:class:`` followed by code. Each
  role becomes an optional autorefs link: a link to the object's entry when the reference documents it, plain
  code otherwise. A leading ``~`` shows the last name only, as in Sphinx. Nothing else in the docstrings changes.
"""

from __future__ import annotations

import html
import re
import tomllib
from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parents[1]
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj):`(?P<target>[^`]+)`")


def package_dirs() -> dict[str, Path]:
    """``{"transformer.kernels": ROOT / "kernels", ...}``: the submodules that live outside their parent's folder."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text()).get("tool", {}).get("setuptools", {})
    mapped = {}
    for name, folder in setuptools.get("package-dir", {}).items():
        parent, _, leaf = name.rpartition(".")
        if parent and (ROOT / folder).resolve() != (ROOT / parent.replace(".", "/") / leaf).resolve():
            mapped[name] = ROOT / folder
    return mapped


class PackageDirs(griffe.Extension):
    """Attach ``kernels/`` as ``transformer.kernels`` (and any other package-dir mapping)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        for name, folder in package_dirs().items():
            parent_name, _, leaf = name.rpartition(".")
            if parent_name != pkg.path or leaf in pkg.members:
                continue
            # GriffeLoader has no public call that loads a folder as a submodule of a given parent.
            module = loader._load_module(leaf, folder / "__init__.py", parent=pkg)
            pkg.set_member(leaf, module)


def _identifier(target: str, obj: griffe.Object) -> str:
    """A dotted path for ``target``: as written when it is a full path, else relative to ``obj``'s class or module."""
    if target.startswith(("transformer.", "torch.")) or target == "transformer":
        return target
    scope = obj
    while scope is not None and not (scope.is_class or scope.is_module):
        scope = scope.parent
    if scope is None:
        return target
    first = target.split(".")[0]
    candidates = [scope] + ([scope.module] if not scope.is_module else [])
    for candidate in candidates:  # a member of the enclosing class, else of its module
        if first in candidate.members:
            return f"{candidate.path}.{target}"
    return f"{scope.path}.{target}"


def rewrite(text: str, obj: griffe.Object) -> str:
    """``text`` with every Sphinx role replaced by an optional autorefs cross-reference."""

    def replace(match: re.Match) -> str:
        target = match.group("target").strip()
        shown = target.lstrip("~")
        if target.startswith("~"):
            shown = shown.rsplit(".", 1)[-1]
        identifier = _identifier(target.lstrip("~").removesuffix("()"), obj)
        return f'<autoref identifier="{html.escape(identifier)}" optional><code>{html.escape(shown)}</code></autoref>'

    return ROLE.sub(replace, text)


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring of a loaded package (after ``PackageDirs`` attached its folders)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        seen: set[int] = set()
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if obj.docstring is not None:
                obj.docstring.value = rewrite(obj.docstring.value, obj)
            stack.extend(member for member in obj.members.values() if not member.is_alias)
