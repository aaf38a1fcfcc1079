"""head_dim 80 and 96: the padded 128-wide tile against the split into power-of-two pieces (80 = 64 + 16,
96 = 64 + 32; kernels/_pieces.py), compiled for sm_90 exactly as a launch specialises each kernel
(scripts/compile_kernels.py ``compile_variant``), every autotune config of every kernel. No GPU needed.

    python benchmarks/kernel_split_head_dim.py --json benchmarks/results/kernel_split_head_dim.json

Per (kernel, head_dim, config, tile): registers and spilled bytes (ptxas -v), shared memory (the compiler's figure,
and kernels/_tuning.py's estimate, which decides whether a launch may use the config), SASS instructions, and the
matrix products from the PTX: how many MMA instructions (Hopper's ``wgmma.mma_async``, Ampere's ``mma.sync``) and
the FLOPs of the dots one program's code performs per pass through its loop bodies (each instruction's 2 m n k, times
the warp groups or warps that run it: the interior and the masked loop both count, so a forward 128x64 tile at head
dim 128 gives 2 x 2 x (2 x 128 x 64 x 128)). bf16, not causal, no masks, the benchmark's shapes (length 4096). A
kernel's split "pays" at a head_dim when at every pipelined config (two stages or more) a launch may use (the estimate
fits 227 KiB) it runs fewer MMA FLOPs with no more registers and no more spilled bytes than the padded tile at that
config. The one-stage configs, the last of each list, are reported but not judged: they are the fallback that fits
at head_dim 256 in fp32; at 80 and 96 pipelined configs fit in every dtype, and the autotuner times them all.
"""

import argparse
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HEAD_DIMS = (80, 96)
KERNEL_NAMES = ("forward", "forward, pointers", "forward split-KV", "dk/dv", "dq")  # scripts/compile_kernels.py's
WGMMA = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m(\d+)n(\d+)k(\d+)")
MMA = re.compile(r"\bmma\.sync\.aligned\.m(\d+)n(\d+)k(\d+)")


def mma_counts(ptx: str, num_warps: int) -> dict:
    """MMA instructions in the PTX and the FLOPs of one program's code through them: a warp-group MMA runs once
    per warp group (4 warps), an Ampere-style MMA once per warp."""
    wgmma = [tuple(map(int, m)) for m in WGMMA.findall(ptx)]
    mma = [tuple(map(int, m)) for m in MMA.findall(ptx)]
    flops = sum(2 * m * n * k for m, n, k in wgmma) * max(num_warps // 4, 1)
    flops += sum(2 * m * n * k for m, n, k in mma) * num_warps
    return dict(wgmma_instructions=len(wgmma), mma_instructions=len(mma), mma_flops=flops)


def rows(kernels=KERNEL_NAMES, head_dims=HEAD_DIMS):
    """Compile every config of each kernel at each head_dim, padded and split; imported here (compile_kernels switches
    the interpreter off for the process)."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts"))
    from compile_kernels import FLAGS, KERNELS, TUNING_NAMES, _tuning, compile_variant, head_dim_tile, jit_function
    from inspect_kernels import resources
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", 90, 32)
    for name in kernels:
        kernel, configs, variant = KERNELS[name]
        for head_dim in head_dims:
            for config in configs:
                for tile in ("padded", "split"):
                    flags = dict(dict.fromkeys(FLAGS, False), **variant)
                    split = tile == "split"
                    compiled = compile_variant(
                        jit_function(kernel), "bf16", head_dim, flags, config, target, split=split
                    )
                    width = sum(head_dim_tile(head_dim, split).values())
                    estimate = _tuning.shared_bytes(TUNING_NAMES[name], config, width, 2)
                    yield dict(
                        kernel=name,
                        head_dim=head_dim,
                        config=f"{config.kwargs['BLOCK_M']}x{config.kwargs['BLOCK_N']}x{config.num_warps}x{config.num_stages}",
                        tile=tile,
                        pieces=list(head_dim_tile(head_dim, split).values()),
                        **resources(compiled),
                        **mma_counts(compiled.asm["ptx"], config.num_warps),
                        estimate_bytes=estimate,
                        launched=estimate <= _tuning.SMEM_LIMIT,
                    )


def judged(config: str) -> bool:
    """Whether the decision looks at this config ("MxNxWARPSxSTAGES"): the pipelined ones, not the one-stage
    fallback."""
    return not config.endswith("x1")


def decide(results: list) -> dict:
    """{(kernel, head_dim): (pays, reasons)}: the split pays when at every launched pipelined config it has fewer MMA
    FLOPs and no more registers or spilled bytes than the padded tile (the reasons list the configs where it does
    not)."""
    by_key = {(r["kernel"], r["head_dim"], r["config"], r["tile"]): r for r in results}
    verdict = {}
    for (kernel, head_dim, config, tile), split in by_key.items():
        if tile != "split":
            continue
        padded = by_key[(kernel, head_dim, config, "padded")]
        pays, reasons = verdict.get((kernel, head_dim), (True, []))
        if (not padded["launched"] and not split["launched"]) or not judged(config):
            verdict[(kernel, head_dim)] = (pays, reasons)
            continue
        for field, worse in (
            ("mma_flops", split["mma_flops"] >= padded["mma_flops"]),
            ("registers", split["registers"] > padded["registers"]),
            ("spill_bytes", split["spill_bytes"] > padded["spill_bytes"]),
            ("launched", not split["launched"]),
        ):
            if worse:
                pays = False
                reasons.append(f"{config}: {field} {padded[field]} -> {split[field]}")
        verdict[(kernel, head_dim)] = (pays, reasons)
    return verdict


def markdown(results: list) -> str:
    """The table for docs/kernels.md: one row per (kernel, head_dim, config), padded -> split."""
    by_key = {(r["kernel"], r["head_dim"], r["config"], r["tile"]): r for r in results}
    lines = [
        "| kernel | head_dim | config | registers | spilled B | shared KiB | estimate KiB (launched) | MMA instr. |"
        " MMA MFLOP | SASS |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (kernel, head_dim, config, tile), p in by_key.items():
        if tile != "padded":
            continue
        s = by_key[(kernel, head_dim, config, "split")]

        def pair(field, scale=1, digits=0, p=p, s=s):
            a, b = p[field] / scale, s[field] / scale
            return f"{a:.{digits}f} -> {b:.{digits}f}"

        launched = f"{p['estimate_bytes'] / 1024:.0f} ({'yes' if p['launched'] else 'no'}) -> "
        launched += f"{s['estimate_bytes'] / 1024:.0f} ({'yes' if s['launched'] else 'no'})"
        mma = f"{p['wgmma_instructions'] + p['mma_instructions']} -> {s['wgmma_instructions'] + s['mma_instructions']}"
        lines.append(
            f"| {kernel} | {head_dim} | {config} | {pair('registers')} | {pair('spill_bytes')} | "
            f"{pair('shared_bytes', 1024, 1)} | {launched} | {mma} | {pair('mma_flops', 1e6, 1)} | "
            f"{pair('sass_instructions')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="write the rows, the decision and the run's context here")
    parser.add_argument("--markdown", help="also write the table here")
    parser.add_argument("--kernels", nargs="+", choices=KERNEL_NAMES, default=KERNEL_NAMES, help="only these")
    parser.add_argument("--head-dims", nargs="+", type=int, default=HEAD_DIMS, help="default: 80 96")
    args = parser.parse_args(argv)
    import torch
    import triton

    load_before, start = os.getloadavg(), time.perf_counter()
    print(f"triton {triton.__version__}, sm_90, bf16, not causal; padded -> split", flush=True)
    results = []
    for row in rows(args.kernels, args.head_dims):
        results.append(row)
        print(
            f"{row['kernel']:18s} d={row['head_dim']} {row['config']:11s} {row['tile']:6s} regs {row['registers']:3d} "
            f"spill {row['spill_bytes']:5d} smem {row['shared_bytes']:6d} est {row['estimate_bytes']:6d} "
            f"wgmma {row['wgmma_instructions']:3d} mma {row['mma_instructions']:3d} MFLOP {row['mma_flops'] / 1e6:.1f} "
            f"sass {row['sass_instructions']}",
            flush=True,
        )
    verdict = decide(results)
    for (kernel, head_dim), (pays, reasons) in verdict.items():
        print(f"{kernel} d={head_dim}: split {'PAYS' if pays else 'does not pay'} {'; '.join(reasons)}")
    table = markdown(results)
    if args.markdown:
        with open(args.markdown, "w") as handle:
            handle.write(table)
    with open(args.json, "w") as handle:
        json.dump(
            {
                "command": " ".join(["python"] + sys.argv),
                "triton": triton.__version__,
                "torch": torch.__version__,
                "python": sys.version.split()[0],
                "arch": "sm_90 (compiled only, no GPU)",
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "seconds": round(time.perf_counter() - start),
                "load_average_1_5_15": {"start": load_before, "end": os.getloadavg()},
                "decision": [
                    {"kernel": k, "head_dim": d, "split_pays": pays, "against": reasons}
                    for (k, d), (pays, reasons) in verdict.items()
                ],
                "rows": results,
            },
            handle,
            indent=1,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
