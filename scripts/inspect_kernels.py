"""What the compiler makes of the attention kernels for an H100, read from the compiled code (no GPU needed).

Compiles each kernel for sm_90 as a real launch of the benchmark's shapes would specialise it (contiguous
(batch, heads, len, head_dim) tensors: unit strides become constants, multiples of 16 are marked divisible,
pointers are 16-byte aligned) and reports, per autotune config:

* registers per thread and bytes spilled to local memory (``ptxas -v``; 255 registers is the ceiling),
* shared memory (an H100 block may use at most 227 KiB),
* how many of the kernel's dots became Hopper warp-group MMAs (``wgmma``) rather than Ampere-style ``mma``,
* how many loads are asynchronous copies (``cp.async``, what the software pipeliner emits) or tensor-memory-accelerator
  copies (TMA, the forward's tensor-descriptor loads),
* how many SASS instructions the kernel has (static count from ``cuobjdump -sass``; the loops are unrolled
  per block, so this tracks the work per key block, e.g. what dropout's Philox generator adds).

These are necessary conditions for speed, not speed: only benchmarks/attention.py on a GPU measures that.

    python scripts/inspect_kernels.py --markdown t.md       # bf16, head_dim 64 and 128, causal or not (the
                                                            # split-KV forward: one decoding step, not causal)
    python scripts/inspect_kernels.py --quick --json r.json # bf16 head_dim 64, first config (CI)
    python scripts/inspect_kernels.py --dropout             # first configs, dropout off and on, not causal
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.pop("TRITON_INTERPRET", None)  # the autotuned kernels are only built without the interpreter

import triton  # noqa: E402
from compile_kernels import (
    ITEMSIZE,
    KERNELS,
    LENGTH,
    SMEM_LIMIT,
    TUNING_NAMES,
    _tuning,  # noqa: E402
    compile_variant,
    jit_function,
)
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability  # noqa: E402
from triton.knobs import nvidia as nvidia_tools  # noqa: E402


def resources(compiled) -> dict:
    """Registers, spills, shared memory and instruction mix of one compiled kernel. ptxas is the one Triton
    itself runs for this architecture (3.9 needs the newer of the two its wheel ships)."""
    arch = compiled.metadata.target.arch
    with tempfile.TemporaryDirectory() as tmp:
        ptx = os.path.join(tmp, "kernel.ptx")
        with open(ptx, "w") as handle:
            handle.write(compiled.asm["ptx"])
        report = subprocess.run(
            [
                get_ptxas(arch).path,
                "-v",
                f"-arch={sm_arch_from_capability(arch)}",
                ptx,
                "-o",
                os.path.join(tmp, "kernel.cubin"),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
        cubin = os.path.join(tmp, "kernel.cubin")
        sass = subprocess.run(
            [nvidia_tools.cuobjdump.path, "-sass", cubin], capture_output=True, text=True, check=True
        ).stdout
    registers = int(re.search(r"Used (\d+) registers", report).group(1))
    stores, loads = map(int, re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report).groups())
    ttgir = compiled.asm["ttgir"]
    wgmma = len(re.findall(r"= ttng\.warp_group_dot ", ttgir))
    return dict(
        registers=registers,
        spill_bytes=stores + loads,
        shared_bytes=compiled.metadata.shared,
        dots=wgmma + len(re.findall(r"= tt\.dot ", ttgir)),
        wgmma_dots=wgmma,
        async_copies=len(re.findall(r"= ttg\.async_copy_global_to_local ", ttgir)),
        tma_copies=len(re.findall(r"ttng\.async_tma_copy_global_to_local ", ttgir)),  # tensor-descriptor loads
        sass_instructions=len(re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+\S", sass, re.MULTILINE)),
    )


def inspect(name: str, dtype: str, head_dim: int, causal: bool, config, arch: int = 90, dropout: bool = False) -> dict:
    """One kernel at the benchmark's shapes (compile_kernels.benchmark_integers: 2048 // head_dim heads, length
    4096; the split-KV forward as one decoding step over that length, 4 splits), specialised as a launch would."""
    kernel, _, variant = KERNELS[name]
    fn = jit_function(kernel)
    flags = dict(HAS_MASK=False, HAS_KMASK=False, HAS_KLEN=False, CAUSAL=causal, DROPOUT=dropout, **variant)
    compiled = compile_variant(fn, dtype, head_dim, flags, config, GPUTarget("cuda", arch, 32))
    row = dict(
        kernel=name,
        dtype=dtype,
        head_dim=head_dim,
        causal=causal,
        dropout=dropout,
        block_m=config.kwargs["BLOCK_M"],
        block_n=config.kwargs["BLOCK_N"],
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    block_d = max(16, triton.next_power_of_2(head_dim))
    row = dict(row, **resources(compiled))
    estimate = _tuning.shared_bytes(TUNING_NAMES[name], config, block_d, ITEMSIZE[dtype], dropout)
    return dict(
        row,
        estimate_bytes=estimate,
        fits=row["shared_bytes"] <= SMEM_LIMIT,
        launched=_tuning.fits(TUNING_NAMES[name], config, block_d, ITEMSIZE[dtype], dropout),
    )


def rows(quick: bool, dropout: bool = False, head_dims=(64, 128), every_config: bool = True, causal=(False, True)):
    main = {name: configs for name, (_, configs, variant) in KERNELS.items() if not variant.get("SPLIT")}
    if dropout:  # what dropout costs: the first config of each kernel, not causal, dropout off and on
        for name, configs in main.items():
            for head_dim in (64, 128):
                for with_dropout in (False, True):
                    yield inspect(name, "bf16", head_dim, False, configs[0], dropout=with_dropout)
        return
    for name, (_, configs, variant) in KERNELS.items():
        if quick and (variant.get("SPLIT") or variant.get("TMA") is False):
            continue
        for head_dim in (64,) if quick else head_dims:
            for flag in (False,) if quick or variant.get("SPLIT") else causal:
                for config in configs if every_config and not quick else configs[:1]:
                    yield inspect(name, "bf16", head_dim, flag, config)


def markdown_table(results: list) -> str:
    """One row per kernel, head_dim and config; registers and spills as "not causal / causal"."""
    merged = {}
    for row in results:
        key = (
            row["kernel"],
            row["head_dim"],
            f"{row['block_m']}x{row['block_n']}",
            row["num_warps"],
            row["num_stages"],
        )
        merged.setdefault(key, {})[row["causal"]] = row
    lines = [
        "| kernel | head_dim | blocks | warps | stages | registers | spilled bytes | shared KiB | fits 227 KiB "
        "| wgmma / dots |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, by_causal in merged.items():
        variants = [by_causal[c] for c in (False, True) if c in by_causal]
        registers, spills = (" / ".join(str(v[field]) for v in variants) for field in ("registers", "spill_bytes"))
        first = variants[0]
        lines.append(
            "| " + " | ".join(map(str, key)) + f" | {registers} | {spills} | "
            f"{first['shared_bytes'] // 1024} | {'yes' if first['shared_bytes'] <= SMEM_LIMIT else 'no'} | "
            f"{first['wgmma_dots']} / {first['dots']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="head_dim 64, not causal, first config only")
    parser.add_argument(
        "--dropout",
        action="store_true",
        help="instead: the first config of each kernel at "
        "head_dim 64 and 128, not causal, with dropout off and on (what the Philox generator costs)",
    )
    parser.add_argument(
        "--resources",
        action="store_true",
        help="instead: every config of every kernel at "
        "head_dim 64, 128 and 256, not causal (the resource table of docs/kernels.md)",
    )
    parser.add_argument("--json", help="write the rows here as JSON")
    parser.add_argument("--markdown", help="write a table here (registers and spills: not causal / causal)")
    args = parser.parse_args(argv)
    print(f"triton {triton.__version__}, sm_90, bf16, length {LENGTH}, contiguous inputs, no masks")
    header = (
        "kernel",
        "head_dim",
        "causal",
        "dropout",
        "blocks",
        "warps",
        "stages",
        "regs",
        "spill B",
        "smem KiB",
        "estimate KiB",
        "wgmma/dots",
        "cp.async",
        "TMA",
        "SASS",
    )
    print(" | ".join(header))
    results = []
    selection = rows(args.quick, args.dropout)
    if args.resources:
        selection = rows(False, head_dims=(64, 128, 256), causal=(False,))
    for row in selection:
        results.append(row)
        print(
            " | ".join(
                map(
                    str,
                    (
                        row["kernel"],
                        row["head_dim"],
                        row["causal"],
                        row["dropout"],
                        f"{row['block_m']}x{row['block_n']}",
                        row["num_warps"],
                        row["num_stages"],
                        row["registers"],
                        row["spill_bytes"],
                        row["shared_bytes"] // 1024,
                        row["estimate_bytes"] // 1024,
                        f"{row['wgmma_dots']}/{row['dots']}",
                        row["async_copies"],
                        row["tma_copies"],
                        row["sass_instructions"],
                    ),
                )
            ),
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {
                    "triton": triton.__version__,
                    "arch": "sm_90",
                    "date": time.strftime("%Y-%m-%d"),
                    "command": " ".join(["python"] + sys.argv),
                    "shapes": "bf16, 2048 // head_dim heads, length "
                    f"{LENGTH} (split-KV: 1 query, 4 splits), contiguous, no masks, launch specialisation",
                    "smem_limit_bytes": SMEM_LIMIT,
                    "rows": results,
                },
                handle,
                indent=1,
            )
    if args.markdown:
        with open(args.markdown, "w") as handle:
            handle.write(markdown_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
