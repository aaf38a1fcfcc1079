"""Registers, spills, shared memory and SASS size of every kernel's default autotune config, per flag set, for sm_90:
run before and after a change of the kernels' source that should not change what the compiler makes of it (e.g.
sharing helpers between the forward and backward kernels), then compared row by row.

    python benchmarks/kernel_refactor_resources.py --json before.json          # on the old tree
    python benchmarks/kernel_refactor_resources.py --json after.json --compare before.json

Rows: each kernel of scripts/compile_kernels.py's KERNELS (the forward with tensor descriptors and with pointers, the
split-KV forward, dK/dV, dQ), its first (default) config, bf16, head_dim 64 and 128, with the switches all off, causal
alone, and every switch on (masks, key lengths, causal, dropout, documents, window, softcap, ALiBi); compiled as a
launch of the benchmark's shapes specialises it (scripts/compile_kernels.py ``compile_variant``). Needs no GPU.
``--compare`` exits 1 if a row has more registers, spilled bytes or shared memory than before.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KERNEL_NAMES = ("forward", "forward, pointers", "forward split-KV", "dk/dv", "dq")  # scripts/compile_kernels.py's
FLAG_SETS = ("none", "causal", "all")
FIELDS = ("registers", "spill_bytes", "shared_bytes", "sass_instructions")


def rows(kernels=KERNEL_NAMES, head_dims=(64, 128), flag_sets=FLAG_SETS):
    """Compile each variant; imported here, not at the top (scripts/compile_kernels.py switches the interpreter
    off for the process: the comparison itself, ``worse``, can be imported by tests)."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts"))
    from compile_kernels import FLAGS, KERNELS, STRUCTURE_FLAGS, compile_variant, jit_function
    from inspect_kernels import resources
    from triton.backends.compiler import GPUTarget

    assert tuple(KERNELS) == KERNEL_NAMES, f"scripts/compile_kernels.py's kernels are now {tuple(KERNELS)}"
    switches = {"none": {}, "causal": {"CAUSAL": True}, "all": dict.fromkeys(FLAGS + STRUCTURE_FLAGS, True)}
    target = GPUTarget("cuda", 90, 32)
    for name in kernels:
        kernel, configs, variant = KERNELS[name]
        for head_dim in head_dims:
            for flag_set in flag_sets:
                flags = dict(dict.fromkeys(FLAGS, False), **switches[flag_set], **variant)
                compiled = compile_variant(jit_function(kernel), "bf16", head_dim, flags, configs[0], target)
                yield dict(
                    kernel=name, head_dim=head_dim, flags=flag_set, config=str(configs[0]), **resources(compiled)
                )


def key(row) -> tuple:
    return row["kernel"], row["head_dim"], row["flags"]


def worse(row: dict, old: dict) -> list:
    """The resources (registers, spilled bytes, shared memory) that ``row`` uses more of than ``old``, the same
    kernel, head_dim and flags compiled before (SASS instructions are reported, not judged)."""
    return [field for field in FIELDS[:3] if row[field] > old[field]]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="write the rows here")
    parser.add_argument("--compare", help="an earlier run's JSON: print both side by side, exit 1 on a regression")
    parser.add_argument("--kernels", nargs="+", choices=KERNEL_NAMES, default=KERNEL_NAMES, help="only these")
    parser.add_argument("--flags", nargs="+", choices=FLAG_SETS, default=FLAG_SETS, help="only these")
    parser.add_argument("--label", default="", help="what this run compiles (e.g. a commit), kept in the JSON")
    args = parser.parse_args(argv)
    before = {key(r): r for r in json.load(open(args.compare))["rows"]} if args.compare else {}
    import triton

    load_before = os.getloadavg()
    print(f"triton {triton.__version__}, sm_90, bf16, default config; registers / spill B / smem B / SASS")
    results, regressions = [], 0
    for row in rows(args.kernels, flag_sets=args.flags):
        results.append(row)
        now = " / ".join(str(row[f]) for f in FIELDS)
        line = f"{row['kernel']:18s} d={row['head_dim']:3d} {row['flags']:6s} {now}"
        if key(row) in before:
            old = before[key(row)]
            line += "   before: " + " / ".join(str(old[f]) for f in FIELDS)
            more = worse(row, old)
            if more:
                regressions += 1
                line += "   WORSE: more " + ", ".join(more)
        print(line, flush=True)
    with open(args.json, "w") as handle:
        json.dump(
            {
                "triton": triton.__version__,
                "arch": "sm_90",
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "command": " ".join(["python"] + sys.argv),
                "label": args.label,
                "load_average_1_5_15": {"start": load_before, "end": os.getloadavg()},
                "before_label": json.load(open(args.compare)).get("label", args.compare) if args.compare else None,
                "rows": results,
                "before": list(before.values()),
            },
            handle,
            indent=1,
        )
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
