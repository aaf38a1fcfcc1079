"""Contracts on your own code (docs/contracts.md, "Contracts on your own modules"): ``transformer.checked`` and the
annotation types from the top level, with your own dimension names (the package's vocabulary, DIMENSIONS, binds only
the package's own annotations), eagerly and under torch.compile; and an import that loads no compiler."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import transformer as T
import transformer.contracts as contracts


class Mixer(nn.Module):
    """A user's module: names of its own (b, t, c) and a field of its own ({self.width})."""

    def __init__(self, width):
        super().__init__()
        self.width = width
        self.proj = nn.Linear(width, width)

    @T.checked
    def forward(
        self, x: T.Float[T.Tensor, "b t {self.width}"], keep: T.Bool[T.Tensor, "b t"]
    ) -> T.Float[T.Tensor, "b t {self.width}"]:
        return self.proj(x) * keep[..., None]


def _first_line(call):
    with pytest.raises(T.TypeCheckError) as info:
        call()
    return str(info.value).splitlines()[0]


def test_the_contract_api_is_exported_at_the_top_level():
    for name in (
        "checked",
        "check",
        "Float",
        "Int",
        "Bool",
        "Shaped",
        "Tensor",
        "TypeCheckError",
        "checks",
        "set_checks",
        "checks_enabled",
    ):
        assert getattr(T, name) is getattr(contracts, name) and name in T.__all__, name
    assert (Path(T.__file__).parent / "py.typed").is_file()  # shipped in the wheel: tests/test_packaging.py


def test_your_own_dimension_names_work_eagerly_and_compiled():
    mixer = Mixer(8).eval()
    x, keep = torch.randn(2, 5, 8), torch.rand(2, 5) > 0.3
    wrong = keep[:, :4]
    expected = "Mixer.forward: argument 'keep' is bool[2,4], expected Bool[Tensor, 'b t'] with b=2, t=5"
    with torch.no_grad():
        assert mixer(x, keep).shape == (2, 5, 8)
        assert _first_line(lambda: mixer(x, wrong)) == expected
        assert _first_line(lambda: mixer(x[..., :6], keep)) == (
            "Mixer.forward: argument 'x' is f32[2,5,6], expected Float[Tensor, 'b t {self.width}'] (self.width=8) "
            "with b=2, t=5"
        )
        torch._dynamo.reset()
        compiled = torch.compile(mixer, fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled(x, keep), mixer(x, keep))
        assert _first_line(lambda: compiled(x, wrong)) == expected


def test_importing_the_package_loads_no_compiler_and_no_type_checker():
    """torch.compile imports Dynamo on first use; beartype is imported by the first call that fails its contract."""
    code = (
        "import sys, torch, transformer as T\n"
        "heavy = ('torch._dynamo', 'torch._inductor', 'beartype')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "T.LayerNorm(4)(torch.zeros(2, 4))\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "try:\n    T.LayerNorm(4)(torch.zeros(2, 3))\nexcept T.TypeCheckError:\n    pass\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["[]", "[]", "['beartype']"]
