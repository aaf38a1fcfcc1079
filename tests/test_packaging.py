"""The distribution ships kernels/ as transformer.kernels and installs no top-level `kernels` module; tokenizers and
sacrebleu are the `text` extra's; its description (README.md) has no link that only the repository resolves."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_readme import relative_links

ROOT = Path(__file__).resolve().parents[1]


def test_installed_package_maps_kernels_inside_transformer(tmp_path):
    code = (
        "import importlib.util, transformer.kernels as k, transformer;"
        "print(k.__name__, importlib.util.find_spec('kernels') is None)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["transformer.kernels", "True"]


@pytest.mark.slow
def test_wheel_contents(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("typed_transformer-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "transformer/kernels/__init__.py" in names
    assert "transformer/tasks/__init__.py" in names
    packages = {str(p.relative_to(ROOT)) for p in (ROOT / "transformer").rglob("__init__.py")}
    assert packages - set(names) == set(), "subpackages missing from pyproject.toml's packages (not in the wheel)"
    assert "transformer/py.typed" in names  # PEP 561 marker: type checkers read our annotations
    assert not [n for n in names if n.startswith("kernels/")]
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    triton = [line for line in requires if "triton" in line]
    assert triton and all("extra ==" in line for line in triton), triton  # never a hard requirement
    assert any(line.startswith("Requires-Dist: torch") and "<" not in line for line in requires)
    for package in ("tokenizers", "sacrebleu"):  # the text extra: the core install needs neither
        (line,) = [line for line in requires if line.startswith(f"Requires-Dist: {package}")]
        assert line.endswith('; extra == "text"'), line
    description = metadata.split("\n\n", 1)[1]  # the long description: README.md, read on an index or offline
    assert "## Set up" in description and relative_links(description) == []


WITHOUT_TRITON = r"""
import sys, warnings
sys.modules["triton"] = None  # as if Triton were not installed: `import triton` fails, find_spec finds nothing
warnings.simplefilter("error")  # importing and using the package must not warn
import torch, transformer as T
from transformer.cli import main

model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=2)
src = torch.randint(1, 11, (2, 5))
model.generator(model(src, src, T.padding_mask(src, 0), T.target_mask(src, 0))).sum().backward()
try:
    with T.use_backend("triton"):
        model(src, src, T.padding_mask(src, 0), T.target_mask(src, 0))
except ValueError as error:
    print("MODEL:", error)
print("CLI:", main(["train", "copy", "--steps", "1", "--attention-backend", "triton", "--out", sys.argv[1]]))
"""


def test_without_triton_auto_works_silently_and_asking_for_triton_says_how_to_install(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_TRITON, str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    hint = 'Triton is not installed; install it with: pip install triton (or pip install "typed-transformer[triton]")'
    assert out.stdout.splitlines() == [f"MODEL: attention backend 'triton' cannot run these inputs: {hint}", "CLI: 2"]
    assert out.stderr.strip() == f"typed-transformer train: error: --attention-backend triton: {hint}"
    assert not (tmp_path / "run").exists()
