"""The long budget of the contracts' differential fuzzer (``tests/contracts_fuzz.py``), run by hand.

``checked`` eagerly and under ``torch.compile(fullgraph=True)`` (static and ``dynamic=True``) against jaxtyping +
beartype, on seeded random signatures and calls; writes counts of calls and of disagreements by class and by grammar
feature, the seed, the date and the versions to ``benchmarks/results/differential/contracts.json``::

    python scripts/contracts_fuzz.py --eager-calls 10000 --compiled-signatures 130 --seed 0

The suite runs a short budget of the same generator (``tests/test_contracts_differential.py``); setting
``TT_FUZZ_BUDGET=long`` there runs this budget as a test instead.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eager-calls", type=int, default=10000)
    parser.add_argument("--compiled-signatures", type=int, default=130)
    parser.add_argument("--calls-per-signature", type=int, default=3)
    parser.add_argument("--label", default="", help="what was run (e.g. 'before the fixes of issue 41')")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "differential", "contracts.json"))
    args = parser.parse_args(argv)

    import beartype
    import contracts_fuzz
    import jaxtyping
    import torch

    start = time.perf_counter()
    eager = contracts_fuzz.run_eager(args.seed, args.eager_calls, keep=10)
    eager_s = time.perf_counter() - start
    start = time.perf_counter()
    compiled = contracts_fuzz.run_compiled(args.seed, args.compiled_signatures, args.calls_per_signature, keep=10)
    compiled_s = time.perf_counter() - start
    result = {
        "command": "python scripts/contracts_fuzz.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "label": args.label,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seed": args.seed,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "jaxtyping": jaxtyping.__version__,
            "beartype": beartype.__version__,
        },
        "eager": {**eager.as_json(), "seconds": round(eager_s, 1)},
        "compiled_fullgraph_static": compiled["static"].as_json(),
        "compiled_fullgraph_dynamic": compiled["dynamic"].as_json(),
        "compiled_seconds": round(compiled_s, 1),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)
        handle.write("\n")
    for part in ("eager", "compiled_fullgraph_static", "compiled_fullgraph_dynamic"):
        print(
            part,
            result[part]["calls"],
            "calls,",
            result[part]["disagreements"],
            "disagreements",
            result[part]["by_class"],
        )
    return result


if __name__ == "__main__":
    main()
