"""scripts/mutation_tool.py's rewrite of the scratch copy: ``@checked`` and ``@property`` moved after their def so
that mutmut 3 (which skips decorated functions) mutates them, with the contracts still checked on every mutant.

The second test needs mutmut (the tool is run by hand, not installed in CI): skipped without it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

from transformer import TypeCheckError

SOURCE = """\
from __future__ import annotations

from transformer import Float, Tensor, checked


class Pair:
    @property
    def two(self) -> int:
        return 2

    @checked
    def dot(self, x: Float[Tensor, "b d"], y: Float[Tensor, "b d"]) -> Float[Tensor, " b"]:
        return (x * y).sum(-1)


@checked
def total(x: Float[Tensor, "b d"]) -> Float[Tensor, " b"]:
    return x.sum(-1)
"""


def _tool():
    path = Path(__file__).resolve().parent.parent / "scripts" / "mutation_tool.py"
    spec = importlib.util.spec_from_file_location("mutation_tool", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _contracts_hold(module) -> None:
    assert module.Pair().two == 2
    assert module.total(torch.ones(2, 3)).tolist() == [3.0, 3.0]
    with pytest.raises(TypeCheckError, match="total"):
        module.total(torch.ones(2, 3, 4))
    with pytest.raises(TypeCheckError, match="dot"):
        module.Pair().dot(torch.ones(2, 3), torch.ones(2, 4))


def test_the_rewrite_moves_checked_and_property_after_the_def_and_keeps_the_contracts(tmp_path):
    path = tmp_path / "rewritten_plain.py"
    path.write_text(SOURCE)
    assert _tool().undecorate(path) == 3
    text = path.read_text()
    assert "@checked" not in text and "@property" not in text
    _contracts_hold(_load(path, "rewritten_plain"))


def test_the_contracts_check_mutmuts_trampolines_and_catch_a_mutant_that_breaks_a_shape(tmp_path, monkeypatch):
    """mutmut's trampoline lives in mutmut's module; ``checked`` must still resolve the annotations in ours (the
    rewrite rebuilds the trampoline with the module's globals) or every mutant would run unchecked."""
    (tmp_path / "pyproject.toml").write_text('[tool.mutmut]\nsource_paths = ["."]\n')  # read when mutmut loads
    monkeypatch.chdir(tmp_path)
    file_mutation = pytest.importorskip("mutmut.mutation.file_mutation")
    path = tmp_path / "rewritten_mutated.py"
    path.write_text(SOURCE)
    _tool().undecorate(path)
    mutated = file_mutation.mutate_file_contents(str(path), path.read_text())
    path.write_text(mutated.code)
    monkeypatch.setenv("MUTANT_UNDER_TEST", "")
    module = _load(path, "rewritten_mutated")
    _contracts_hold(module)
    shape_breakers = []
    for name in mutated.mutant_names:
        if not name.startswith("x_total__mutmut_"):
            continue
        monkeypatch.setenv("MUTANT_UNDER_TEST", f"rewritten_mutated.{name}")
        try:
            module.total(torch.ones(2, 3))
        except TypeCheckError as error:
            assert "the return value" in str(error)
            shape_breakers.append(name)
        except Exception:  # noqa: S112 (a mutant that breaks the call itself)
            continue
    assert shape_breakers, "no mutant of total() was refused by its contract: the trampoline is unchecked"
    monkeypatch.setenv("MUTANT_UNDER_TEST", "")
    assert os.environ["MUTANT_UNDER_TEST"] == ""
    _contracts_hold(module)
