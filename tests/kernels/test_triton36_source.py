"""The kernels' source avoids what triton 3.6 (the GPU machine's Triton) cannot compile while CI runs 3.9 only.

Triton 3.6 computes a kernel's cache key with a ``DependenciesFinder`` that raises ``TypeError: unhashable type:
'list'`` on a nested assignment target (``a, (b, c) = block``), at every compile and launch; 3.9 accepts it. So a
nested target in any ``@triton.jit`` function would pass every CPU test and fail on the GPU (docs/kernels.md, "Triton
versions")."""

import ast
import pathlib

KERNELS = pathlib.Path(__file__).resolve().parents[2] / "kernels"


def _jit_functions(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            names = [ast.unparse(d) for d in node.decorator_list]
            if any(name.startswith(("triton.jit", "jit")) for name in names):
                yield node


def nested_targets(source: str) -> list[int]:
    """Line numbers of nested tuple or list assignment targets inside ``@triton.jit`` functions."""
    lines = []
    for function in _jit_functions(ast.parse(source)):
        for node in ast.walk(function):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for target in targets:
                if isinstance(target, (ast.Tuple, ast.List)) and any(
                    isinstance(element, (ast.Tuple, ast.List)) for element in target.elts
                ):
                    lines.append(node.lineno)
    return lines


def test_the_check_finds_a_nested_target():
    source = "import triton\n@triton.jit\ndef f(block):\n    a, (b, c) = block\n    d, e = block\n    return a\n"
    assert nested_targets(source) == [4]
    assert nested_targets(source.replace("@triton.jit\n", "")) == []  # plain Python may unpack as it likes


def test_no_jit_function_unpacks_a_nested_tuple():
    found = {path.name: nested_targets(path.read_text()) for path in sorted(KERNELS.glob("*.py"))}
    assert {name: lines for name, lines in found.items() if lines} == {}
