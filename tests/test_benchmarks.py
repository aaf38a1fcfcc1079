"""The attention benchmark needs a GPU to measure, but its reporting must work before one is lent."""

import importlib.util
import pathlib

import pytest
import torch

SCRIPT = pathlib.Path(__file__).parents[1] / "benchmarks" / "attention.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("attention_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


META = {
    "device": "test device",
    "torch": "t",
    "triton": "x",
    "dtype": "bfloat16",
    "batch": 4,
    "date": "2026-11-22",
    "flops": "4*B*H*N^2*D",
}


def _rows():
    rows = []
    for n, ours_fwd, cudnn_fwd, ours_bwd, flash_bwd in (
        (1024, 100.0, 300.0, 200.0, 150.0),
        (4096, 500.0, 400.0, 100.0, 250.0),
    ):
        for provider, fwd, bwd in (
            ("triton (ours)", ours_fwd, ours_bwd),
            ("sdpa flash", 350.0, flash_bwd),
            ("sdpa cudnn", cudnn_fwd, 260.0),
        ):
            for mode, value in (("fwd", fwd), ("bwd", bwd)):
                rows.append(
                    {
                        "provider": provider,
                        "head_dim": 64,
                        "heads": 32,
                        "n": n,
                        "causal": False,
                        "mode": mode,
                        "ms": 1.0,
                        "tflops": value,
                        "peak_mib": 12.0,
                    }
                )
    rows.append(
        {
            "provider": "eager",
            "head_dim": 64,
            "heads": 32,
            "n": 4096,
            "causal": False,
            "mode": "fwd",
            "error": "out of memory",
        }
    )
    return rows


def test_flop_count_halves_for_causal_and_scales_backward(bench):
    full = bench.flops(4, 32, 1024, 64, False, "fwd")
    assert full == 4 * 4 * 32 * 1024 * 1024 * 64
    assert bench.flops(4, 32, 1024, 64, True, "fwd") == full / 2
    assert bench.flops(4, 32, 1024, 64, False, "bwd") == full * 2.5


def test_markdown_table_has_a_row_per_case_and_a_column_per_provider(bench):
    table = bench.markdown_table(_rows(), META)
    assert "test device" in table
    assert "| D | N | causal | pass | triton (ours) | sdpa flash | sdpa cudnn | eager | ours: peak MiB |" in table
    assert "| 64 | 4096 | False | fwd | 500.0 | 350.0 | 400.0 | - | 12 |" in table
    assert sum(line.startswith("| 64 |") for line in table.splitlines()) == 4


def test_targets_compare_forward_with_cudnn_from_4k_and_backward_with_flash(bench):
    lines = bench.target_lines(_rows())
    assert not any("N=1024" in line and "fwd" in line for line in lines)  # forward target starts at 4k
    assert "- target D=64 N=4096 causal=False fwd: ours >= sdpa cudnn: met (1.25x)" in lines
    assert "- target D=64 N=1024 causal=False bwd: ours >= sdpa flash: met (1.33x)" in lines
    assert "- target D=64 N=4096 causal=False bwd: ours >= sdpa flash: MISSED (0.40x)" in lines


def test_plot_writes_a_png(bench, tmp_path):
    pytest.importorskip("matplotlib")
    bench.plot(_rows(), tmp_path / "attention.png", META)
    assert (tmp_path / "attention.png").stat().st_size > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="measures on a GPU")
def test_without_a_gpu_it_says_so_and_measures_nothing(bench, tmp_path):
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        bench.main(["--out", str(tmp_path / "attention")])
    assert not list(tmp_path.iterdir())
