"""Start-up time: ``import transformer`` and ``typed-transformer --help`` against ``python -c "import torch"``.

    python benchmarks/startup.py            # 15 alternating rounds: about 1.5 minutes on an idle 2-core machine
    python benchmarks/startup.py --quick    # 4 rounds, about 25 s

Each round starts one fresh interpreter per command, in turn (the order rotates every round), and times it from
start to exit; the table shows the medians and each command's median ratio to ``import torch`` taken round by round.
Target (issue 21, section 5): ``typed-transformer --help`` within 1.5x of ``import torch``. Also recorded: which heavy
modules ``import transformer`` loads (``torch._dynamo`` must not be among them: it is imported on first use by
torch.compile). Writes ``benchmarks/results/startup.json`` with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
HEAVY = (
    "torch._dynamo",
    "torch._inductor",
    "sympy",
    "beartype",
    "transformers",
    "triton",
    "tokenizers",
    "sacrebleu",
    "matplotlib",
)


def commands() -> dict[str, list[str]]:
    cli = shutil.which("typed-transformer")
    help_cmd = [cli, "--help"] if cli else [sys.executable, "-m", "transformer", "--help"]
    return {
        "python -c 'import torch'": [sys.executable, "-c", "import torch"],
        "python -c 'import transformer'": [sys.executable, "-c", "import transformer"],
        "typed-transformer --help": help_cmd,
    }


def run(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    return time.perf_counter() - start


def loaded_modules() -> dict[str, bool]:
    code = f"import sys, transformer; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT).stdout
    found = set(filter(None, out.strip().split(",")))
    return {name: name in found for name in HEAVY}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--quick", action="store_true", help="4 rounds")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "startup.json"))
    args = p.parse_args(argv)
    rounds = 4 if args.quick else args.rounds
    cmds = commands()
    names = list(cmds)
    load_before = os.getloadavg()
    for argv_ in cmds.values():  # warm the file cache
        run(argv_)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            times[name].append(run(cmds[name]))
    load_after = os.getloadavg()
    base = names[0]
    rows = []
    print(
        f"start-up, {rounds} alternating rounds, Python {platform.python_version()}, torch {torch.__version__}, "
        f"{os.cpu_count()} CPUs, load average {load_before[0]:.2f} -> {load_after[0]:.2f}"
    )
    print(f"{'command':34s} | {'median s':>8s} | {'ratio to import torch (median of rounds)':>40s}")
    for name in names:
        ratios = [t / b for t, b in zip(times[name], times[base], strict=True)]
        row = {
            "command": name,
            "median_s": round(statistics.median(times[name]), 3),
            "ratio_to_import_torch": round(statistics.median(ratios), 3),
            "times_s": [round(t, 3) for t in times[name]],
        }
        rows.append(row)
        print(f"{name:34s} | {row['median_s']:8.3f} | {row['ratio_to_import_torch']:40.2f}")
    modules = loaded_modules()
    print("heavy modules loaded by `import transformer`:", [m for m, on in modules.items() if on] or "none")
    target = next(r for r in rows if r["command"] == "typed-transformer --help")["ratio_to_import_torch"]
    print(
        f"target: typed-transformer --help within 1.5x of import torch: {'met' if target <= 1.5 else 'MISSED'} "
        f"({target:.2f}x)"
    )
    result = {
        "benchmark": "start-up time",
        "rounds": rounds,
        "rows": rows,
        "heavy_modules_loaded": modules,
        "target": "typed-transformer --help <= 1.5x python -c 'import torch'",
        "met": target <= 1.5,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "date": time.strftime("%Y-%m-%d"),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
