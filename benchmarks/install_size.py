#!/usr/bin/env python
"""What each install of typed-transformer weighs: the core, and the core with each extra (docs/install.md).

For every variant a brand-new virtual environment gets ``pip install "torch==2.13.0"`` (the CPU build; on the CI
machine pip takes it from a local file), then ``pip install "CHECKOUT[EXTRAS]"`` (a regular, non-editable install
of this checkout). Recorded per variant: the size of site-packages without torch (``du -sk`` of everything but
``torch/`` and torch's ``.dist-info``), torch's own size, and the distributions installed besides pip, setuptools
and torch (their names and their count). Prints a table and writes JSON::

    python benchmarks/install_size.py                       # every variant, about 1 minute each
    python benchmarks/install_size.py --variants core text  # some of them
    python benchmarks/install_size.py --variants "torch alone" --json benchmarks/results/install_size_torch.json

Sizes depend on the index's newest releases on the day (and on the platform's wheels): the JSON names the date,
Python, and each installed distribution's version.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH = "torch==2.13.0"
VARIANTS = {
    "torch alone": None,  # the baseline: torch and its own dependencies, no typed-transformer
    "core": "",
    "triton": "[triton]",
    "text": "[text]",
    "hf": "[hf]",
    "every runtime extra": "[triton,text,hf]",
}
OWN = {"pip", "setuptools", "torch"}  # the venv's own tools, and torch (measured on its own)


def _du_kib(paths: list[Path]) -> int:
    if not paths:
        return 0
    out = subprocess.run(["du", "-sk", "-c", *map(str, paths)], capture_output=True, text=True, check=True).stdout
    return int(out.strip().splitlines()[-1].split()[0])


def measure(name: str, extras: str, workdir: Path) -> dict:
    """One variant in a fresh venv under ``workdir``."""
    venv = workdir / name.replace(" ", "-")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    subprocess.run([*pip, "install", "-q", TORCH], check=True, env=env)
    if extras is not None:
        subprocess.run([*pip, "install", "-q", f"{ROOT}{extras}"], check=True, env=env)
    listed = subprocess.run([*pip, "list", "--format", "json"], capture_output=True, text=True, check=True, env=env)
    listed = json.loads(listed.stdout)
    site = next((venv / "lib").glob("python*/site-packages"))
    entries = list(site.iterdir())
    torch_paths = [p for p in entries if p.name == "torch" or p.name.startswith("torch-")]
    others = [p for p in entries if p not in torch_paths]
    packages = sorted(
        (p["name"], p["version"]) for p in listed if p["name"].lower() not in OWN and p["name"] != "typed-transformer"
    )
    return {
        "variant": name,
        "command": f'pip install "{TORCH}"' + ("" if extras is None else f' && pip install "CHECKOUT{extras}"'),
        "site_packages_without_torch_mib": round(_du_kib(others) / 1024, 1),
        "torch_mib": round(_du_kib(torch_paths) / 1024, 1),
        "dependencies": len(packages),
        "installed": [f"{n}=={v}" for n, v in packages],
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "install_size.json")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="install-size-") as tmp:
        rows = [measure(name, VARIANTS[name], Path(tmp)) for name in args.variants]
    result = {
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "rows": rows,
    }
    print(f"{'variant':<22}{'site-packages w/o torch':>26}{'torch':>10}{'dependencies':>14}")
    for row in rows:
        print(
            f"{row['variant']:<22}{row['site_packages_without_torch_mib']:>22} MiB"
            f"{row['torch_mib']:>6} MiB{row['dependencies']:>14}"
        )
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
