"""The kernels must compile for a real GPU, not only run under the interpreter.

The interpreter skips Triton's type checks, layout passes and ptxas; a kernel can pass every CPU test and still
fail to compile on CUDA. Triton's wheel ships ptxas, so this compiles cubins for sm_90 (H100) on the CPU.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest
import triton

SCRIPT = pathlib.Path(__file__).parents[2] / "scripts" / "compile_kernels.py"


def test_kernels_compile_for_sm90():
    pytest.importorskip("triton")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "compiled 16/16 variants" in result.stdout, result.stdout  # 5 kernels x 2 dtypes, delta and combine x 3


def test_hopper_code_uses_warp_group_mma_and_pipelined_loads_without_spills(tmp_path):
    """At the benchmark's shapes (bf16, head_dim 64, the first autotune config, launch specialisation as on a
    GPU) every dot of the three kernels becomes a Hopper warp-group MMA, the loads inside the loops are
    asynchronous copies (software pipelining), and no register spills to local memory."""
    pytest.importorskip("triton")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    report, table = tmp_path / "inspect.json", tmp_path / "inspect.md"
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT.with_name("inspect_kernels.py")),
            "--quick",
            "--json",
            str(report),
            "--markdown",
            str(table),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads(report.read_text())["rows"]
    assert {row["kernel"] for row in rows} == {"forward", "dk/dv", "dq"}
    for row in rows:
        assert row["dots"] > 0 and row["wgmma_dots"] == row["dots"], row
        assert row["async_copies"] + row["tma_copies"] > 0, row  # the forward loads through tensor descriptors
        assert row["spill_bytes"] == 0, row
    lines = table.read_text().splitlines()
    assert len(lines) == 2 + len(rows) and lines[2].startswith("| forward | 64 | "), lines


RESULTS = pathlib.Path(__file__).parents[2] / "benchmarks" / "results"
TUNING_NAMES = {  # _tuning's names
    "forward": "forward",
    "forward, pointers": "forward",
    "forward split-KV": "split",
    "dk/dv": "dkdv",
    "dq": "dq",
}


@pytest.mark.parametrize("version", ["39", "36"])
def test_shared_memory_estimate_bounds_the_compilers_figures(version):
    """The resource files (scripts/inspect_kernels.py --resources, every config at head_dim 64/128/256, compiled for
    sm_90 as a launch specialises it, Triton 3.9 here and 3.6 as on the GPU machine): kernels/_tuning.py's estimate,
    which decides which configs a launch may use, is never below what the compiler allocates, so a config that does
    not fit an H100 block is never launched; and every kernel keeps at least one config at every head_dim."""
    from transformer.kernels import _tuning

    path = RESULTS / f"kernel_resources_triton{version}.json"
    data = json.loads(path.read_text())
    assert data["triton"].startswith(f"{version[0]}.{version[1]}"), data["triton"]
    launchable = {}
    for row in data["rows"]:
        config = triton.Config(
            {"BLOCK_M": row["block_m"], "BLOCK_N": row["block_n"]},
            num_warps=row["num_warps"],
            num_stages=row["num_stages"],
        )
        block_d = max(16, triton.next_power_of_2(row["head_dim"]))
        name = TUNING_NAMES[row["kernel"]]
        assert _tuning.shared_bytes(name, config, block_d, 2) >= row["shared_bytes"], row
        launched = _tuning.fits(name, config, block_d, 2)
        assert not launched or row["shared_bytes"] <= _tuning.SMEM_LIMIT, row
        launchable[(row["kernel"], row["head_dim"])] = launchable.get((row["kernel"], row["head_dim"]), 0) + launched
    kernels = {kernel for kernel, _ in launchable}
    assert len(launchable) == len(kernels) * 3 and len(kernels) >= 4 and all(launchable.values()), launchable


KEEP_LAYOUT_PROBE = """
import sys
sys.path.insert(0, {scripts!r})
import triton
from compile_kernels import KERNELS, compile_variant, jit_function
from triton.backends.compiler import GPUTarget
off = dict(HAS_MASK=False, HAS_KMASK=False, HAS_KLEN=False, CAUSAL=False)
for name in ("forward", "dq"):
    kernel, configs, variant = KERNELS[name]
    shared = [
        compile_variant(jit_function(kernel), "bf16", 64, dict(off, DROPOUT=d, **variant), configs[0],
                        GPUTarget("cuda", 90, 32)).metadata.shared
        for d in (False, True)
    ]
    print(name, *shared)
"""


def test_the_forward_and_dq_build_the_keep_mask_without_shared_memory():
    """kernels/_common.py keep_block builds the dropout keep tile in the scores' own layout (one Philox call's 8
    decisions are what one thread holds of its row): compiled for sm_90, dropout adds no shared memory to the forward
    and dQ kernels. (Built as 8 consecutive keys per call, it was shuffled through 8 KiB of shared memory per block.)"""
    pytest.importorskip("triton")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    probe = KEEP_LAYOUT_PROBE.format(scripts=str(SCRIPT.parent))
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    shared = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines() if line.strip()}
    assert set(shared) == {"forward", "dq"}, result.stdout
    for name, (without, with_dropout) in shared.items():
        assert with_dropout == without, (name, without, with_dropout)


def test_shared_memory_estimate_counts_dropout():
    """With dropout the dK/dV kernel transposes its keep tile through shared memory (2 bytes a score): the estimate
    counts it (checked against the compiler's figures with dropout, scripts/inspect_kernels.py --dropout after the
    keep-layout change), so dK/dV 32x128 x 3 stages at head_dim 256 (224.5 KiB without dropout, 232.5 with) is not
    launched with dropout."""
    from transformer.kernels import _tuning

    data = json.loads((RESULTS / "kernels_sm90_dropout_layout.json").read_text())
    rows = data["after"]["rows"]
    assert any(row["dropout"] and row["kernel"] == "dk/dv" for row in rows)
    for row in rows:
        config = triton.Config({"BLOCK_M": row["block_m"], "BLOCK_N": row["block_n"]}, num_stages=row["num_stages"])
        block_d = max(16, triton.next_power_of_2(row["head_dim"]))
        estimate = _tuning.shared_bytes(TUNING_NAMES[row["kernel"]], config, block_d, 2, row["dropout"])
        assert estimate >= row["shared_bytes"], row
    big = triton.Config({"BLOCK_M": 32, "BLOCK_N": 128}, num_warps=8, num_stages=3)
    assert _tuning.fits("dkdv", big, 256, 2) and not _tuning.fits("dkdv", big, 256, 2, dropout=True)
    assert _tuning.fits("forward", triton.Config({"BLOCK_M": 128, "BLOCK_N": 128}, num_stages=3), 128, 2, True)
