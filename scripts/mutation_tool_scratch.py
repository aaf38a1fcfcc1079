"""The scratch copy scripts/mutation_tool.py lets mutmut work in: the repository's files copied in, and the
decorators mutmut would skip moved after their ``def`` (so the functions under them are mutated too)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from mutation_tool_triage import REPO

UNDECORATED = ("property", "checked")  # decorators moved after the def in the scratch copy (see undecorate)
# mutmut's trampoline is defined in mutmut's module: ``checked`` resolves string annotations in ``fn.__globals__``
# (as jaxtyping does), where they would resolve to Any and check nothing. The trampoline is rebuilt with the
# module's globals (its code only reads its closure) before ``checked`` wraps it.
REHOME = (
    '__import__("functools").update_wrapper(__import__("types").FunctionType({f}.__code__, globals(), '
    "{f}.__name__, {f}.__defaults__, {f}.__closure__), {f})"
)


def copy_repository(scratch: Path, keep: tuple[str, ...]) -> None:
    """Copy tracked and untracked-not-ignored files (no mutants/, no caches) into ``scratch``, but ``keep``.
    ``kernels/`` is copied to ``transformer/kernels/`` too, as the installed package lays it out (pyproject's
    package-dir): mutmut runs the tests on its copy of ``transformer/``, where ``transformer.kernels`` must import."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.split("\n")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file() and name not in keep:
            for target in [scratch / name] + ([scratch / "transformer" / name] if name.startswith("kernels/") else []):
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)


def undecorate(path: Path) -> int:
    """Rewrite ``@property``/``@checked`` on a plain def as an assignment after it, so mutmut mutates the function.

    mutmut 3 skips every decorated function (bar staticmethod/classmethod). ``def f(...): ...`` followed by
    ``f = checked(f)`` is the same object as the decorated form; mutmut then wraps ``f`` in its trampoline (which
    keeps ``__wrapped__``, ``__annotations__`` and the signature through ``functools.wraps``) and the decorator
    wraps the trampoline (given the module's globals: see REHOME). Only the scratch copy is rewritten. Returns how
    many definitions were rewritten.
    """
    import ast

    lines = path.read_text().split("\n")
    found = [
        node
        for node in ast.walk(ast.parse("\n".join(lines)))
        if isinstance(node, ast.FunctionDef)
        and len(node.decorator_list) == 1
        and isinstance(node.decorator_list[0], ast.Name)
        and node.decorator_list[0].id in UNDECORATED
    ]
    for node in sorted(found, key=lambda n: -n.lineno):  # bottom up, so earlier line numbers stay valid
        decorator = node.decorator_list[0]
        indent = lines[node.lineno - 1][: node.col_offset]
        target = REHOME.format(f=node.name) if decorator.id == "checked" else node.name
        lines.insert(node.end_lineno, f"{indent}{node.name} = {decorator.id}({target})")
        del lines[decorator.lineno - 1]
    path.write_text("\n".join(lines))
    return len(found)
