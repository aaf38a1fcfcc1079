"""No import circle inside the attention machinery (issue 44): the modules of ``transformer/backends`` import one way,
function-local imports included (``torch_backend.py`` took the drop-in's reference from ``sdpa.py``, which imports
it: the reference is now ``sdpa_reference.py``, below both), and ``transformer.kernels`` (optional, heavy) stays a lazy
import that points nowhere back (docs/architecture.md, "Which way imports run")."""

from __future__ import annotations

import ast

import pytest
from test_import_directions import ROOT, _cycles, _imports, _module_name, _package_graph

BACKENDS = ROOT / "transformer" / "backends"


def _graph() -> dict[str, set[str]]:
    """Module -> the modules of transformer.backends it imports, its ``__init__`` included (it imports every one)."""
    return _package_graph("transformer.backends", with_face=True)


def _function_local_lines(path) -> set[int]:
    """The lines of the imports inside a function (or a method) of the file."""
    tree = ast.parse(path.read_text(), str(path))
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return {n.lineno for f in functions for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}


def test_the_backends_package_has_no_import_circle():
    graph = _graph()
    assert set(graph) >= {
        f"transformer.backends.{name}"
        for name in ("choice", "dispatch", "sdpa", "sdpa_reference", "torch_backend", "grouped", "reference")
    }
    assert "transformer.backends.sdpa_reference" in graph["transformer.backends.torch_backend"]
    assert "transformer.backends.torch_backend" in graph["transformer.backends.sdpa"]
    cycles = _cycles(graph)
    assert cycles == [], "import circles in transformer/backends: " + "; ".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize(
    ("importer", "planted"),
    [
        ("torch_backend", "def _late():\n    from .sdpa import reference\n"),  # the circle issue 44 removed
        ("score_mods", "import transformer.backends.dispatch\n"),  # absolute, at module level
        ("sdpa_reference", "def _late():\n    from . import choice\n"),  # a module imported from its package
        ("reference", "def _late():\n    from transformer.backends import attention\n"),  # the package face
    ],
)
def test_the_cycle_finder_sees_a_planted_circle(importer, planted, monkeypatch):
    """Relative and absolute, module-level and function-local imports back up are each found, named by the path."""
    path = BACKENDS / f"{importer}.py"
    source = path.read_text() + "\n\n" + planted
    real = path.read_text

    def read_text(self, *args, **kwargs):
        return source if self == path else real.__func__(self, *args, **kwargs)

    monkeypatch.setattr(type(path), "read_text", read_text)
    cycles = _cycles(_graph())
    assert any(c[0] == c[-1] and f"transformer.backends.{importer}" in c for c in cycles), cycles


def test_transformer_kernels_stays_a_lazy_import_that_points_nowhere_back():
    """Every import of transformer.kernels in transformer/backends is inside a function (importing the backends
    imports no Triton), and no module of kernels/ imports the backends."""
    seen = 0
    for path in sorted(BACKENDS.glob("*.py")):
        lazy = _function_local_lines(path)
        for line, module in _imports(path):
            if module == "transformer.kernels" or module.startswith("transformer.kernels."):
                seen += 1
                assert line in lazy, f"{path.relative_to(ROOT)}:{line} imports {module} at module level"
    assert seen >= 2  # choice (the kernel's import check) and dispatch (the kernel's run)
    for path in sorted((ROOT / "kernels").rglob("*.py")):
        back = [m for _, m in _imports(path) if m.startswith("transformer.backends")]
        assert back == [], f"{_module_name(path)} imports {back}"
