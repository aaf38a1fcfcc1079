"""The distribution ships kernels/ as transformer.kernels and installs no top-level `kernels` module."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

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
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True, capture_output=True, cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("typed_transformer-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "transformer/kernels/__init__.py" in names
    assert "transformer/tasks/__init__.py" in names
    assert not [n for n in names if n.startswith("kernels/")]
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    triton = [line for line in requires if "triton" in line]
    assert triton and all("extra ==" in line for line in triton), triton  # never a hard requirement
    assert any(line.startswith("Requires-Dist: torch") and "<" not in line for line in requires)
