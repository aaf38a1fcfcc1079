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
    assert "compiled 14/14 variants" in result.stdout, result.stdout


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
        assert row["async_copies"] > 0, row
        assert row["spill_bytes"] == 0, row
    lines = table.read_text().splitlines()
    assert len(lines) == 2 + len(rows) and lines[2].startswith("| forward | 64 | "), lines


RESULTS = pathlib.Path(__file__).parents[2] / "benchmarks" / "results"
TUNING_NAMES = {"forward": "forward", "forward split-KV": "split", "dk/dv": "dkdv", "dq": "dq"}


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
    assert len(launchable) == 4 * 3 and all(launchable.values()), launchable
