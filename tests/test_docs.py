"""The documentation site builds with every page and link resolved (mkdocs --strict)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_docs_site_builds_strictly(tmp_path):
    if shutil.which("mkdocs") is None and subprocess.run([sys.executable, "-c", "import mkdocs"]).returncode:
        pytest.fail("mkdocs is not installed: it is part of the 'dev' extra")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").exists()
