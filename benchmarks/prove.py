"""How long a proof takes (docs/proved-shapes.md, "Cost"): ``transformer.proofs.prove`` on the 6-layer encoder-decoder
of the Annotated Transformer and on the language model of the tutorials (notebooks/04), and how long torch.export
alone takes of it.

    python benchmarks/prove.py            # the two models at full size, 3 rounds each
    python benchmarks/prove.py --quick    # 1 round, small models (what tests/test_prove_benchmark.py runs)

Target (issue 42, section 3): at most 60 s per proof on the 2-core CI machine. Prints a table and writes
``benchmarks/results/prove.json`` (with the date, the versions and the load average before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

import transformer as tt
from transformer.proofs import prove

ROOT = Path(__file__).resolve().parents[1]


def cases(quick: bool) -> list[tuple[str, object, tuple, dict]]:
    """(name, model, example inputs, sizes)."""
    if quick:
        ed = tt.make_model(11, 11, N=1, d_model=32, d_ff=64, h=4, dropout=0.0).eval()
        lm = tt.build_lm(tt.LMConfig(vocab=50, n_layers=1, d_model=32, n_heads=4, max_len=32, dropout=0.0)).eval()
        src_max, lm_max = 32, 32
    else:
        ed = tt.make_model(11, 11, dropout=0.0).eval()  # N=6, d_model=512, d_ff=2048, h=8
        config = tt.LMConfig(vocab=512, n_layers=2, d_model=96, n_heads=4, d_ff=384, dropout=0.0, max_len=256)
        lm = tt.build_lm(config).eval()  # the tutorial's (notebooks/04_language_model.py)
        src_max, lm_max = 512, 256
    batch, src_len, tgt_len = 2, 10, 9
    ed_inputs = (
        torch.randint(1, 11, (batch, src_len)),
        torch.randint(1, 11, (batch, tgt_len)),
        torch.ones(batch, 1, src_len, dtype=torch.bool),
        tt.subsequent_mask(tgt_len).expand(batch, tgt_len, tgt_len).contiguous(),
    )
    ed_sizes = {"batch": (1, 64), "src_len": (1, src_max), "tgt_len": (1, src_max)}
    lm_sizes = {"batch": (1, 64), "seq": (1, lm_max)}
    return [
        ("encoder-decoder", ed, ed_inputs, ed_sizes),
        ("language model", lm, (torch.randint(0, 50, (2, 16)),), lm_sizes),
    ]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round, small models")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "prove.json"))
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    rows = []
    for name, model, inputs, sizes in cases(args.quick):
        totals, exports, proved = [], [], True
        for _ in range(rounds):
            report = prove(model, *inputs, sizes=sizes)
            totals.append(report.seconds)
            exports.append(report.export_seconds)
            proved = proved and report.proved
        rows.append(
            {
                "model": name,
                "sizes": {k: list(v) for k, v in sizes.items()},
                "proved": proved,
                "checked_calls": sum(c.times for c in report.calls),
                "prove_s_median": statistics.median(totals),
                "export_s_median": statistics.median(exports),
                "prove_s_each": totals,
            }
        )
    result = {
        "command": "python benchmarks/prove.py" + (" --quick" if args.quick else ""),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
        "threads": 1,
        "rounds": rounds,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "rows": rows,
    }
    print(f"{'model':<16} {'proved':<7} {'calls':>6} {'prove (s)':>10} {'export (s)':>11}")
    for row in rows:
        print(
            f"{row['model']:<16} {row['proved']!s:<7} {row['checked_calls']:>6} {row['prove_s_median']:>10.2f} "
            f"{row['export_s_median']:>11.2f}"
        )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
