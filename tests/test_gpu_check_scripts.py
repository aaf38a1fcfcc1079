"""The one-go GPU run's own promises, checked on the CPU (scripts/gpu_check.sh, scripts/gpu_check/sweep.py):
the randomized sweep draws the cases its docstring names within its memory bound, and its error rule passes the
kernel and fails a kernel that is slightly wrong; the script's stage limits add up to what docs/kernels.md says,
and ONLY= runs only the stages it names (besides the environment and the install)."""

import importlib.util
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sweep():
    spec = importlib.util.spec_from_file_location("gpu_check_sweep", ROOT / "scripts" / "gpu_check" / "sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_drawn_shapes_stay_within_the_memory_bound_and_keep_documents_and_groups_valid(sweep):
    rng = random.Random(0)
    seen = set()
    for _ in range(3000):
        flags = sweep.draw_flags(rng, dry=False)
        shape = sweep.draw_shape(rng, dry=False, documents=flags["documents"])
        b, h, kvh, q_len, k_len = (shape[x] for x in ("batch", "heads", "kv_heads", "q_len", "k_len"))
        assert b * h * q_len * k_len <= sweep.MAX_SCORES
        assert 1 <= q_len <= 8192 and 1 <= k_len <= 8192
        assert h % kvh == 0
        if flags["documents"]:
            assert q_len <= k_len
        seen.update({("dtype", flags["dtype"]), ("mask", flags["mask"]), ("head_dim", flags["head_dim"])})
        seen.update({("layout", flags["layout"]), ("gqa", h > kvh), ("unequal", q_len != k_len)})
        seen.update({("documents", flags["documents"]), ("window", flags["window_left"] is not None)})
        seen.update({("softcap", flags["softcap"] is not None), ("alibi", flags["alibi"]), ("long", k_len > 4096)})
        seen.update({("q_len_1", q_len == 1), ("k_len_1", k_len == 1)})
    wanted = {("dtype", d) for d in ("bfloat16", "float16", "float32")} | {("mask", m) for m in sweep.MASKS}
    wanted |= {("head_dim", d) for d in (16, 40, 80, 96, 256)} | {("layout", "bshd_view"), ("gqa", True)}
    wanted |= {("unequal", True), ("documents", True), ("window", True), ("softcap", True), ("alibi", True)}
    wanted |= {("long", True), ("q_len_1", True), ("k_len_1", True)}  # decoding's one query, a single key
    assert wanted <= seen


CASE = {"batch": 2, "heads": 4, "kv_heads": 2, "q_len": 37, "k_len": 53, "head_dim": 32, "dtype": "float32",
        "mask": "dense_b1qk", "layout": "bshd_view", "documents": True, "window_left": 7, "window_right": 0,
        "softcap": 20.0, "alibi": True}  # fmt: skip


def test_the_rule_passes_the_kernel_on_a_case_with_every_structure(sweep):
    row = sweep.check_case(CASE, seed=3, device="cpu", dry=True)
    assert row["ok"], row
    assert all(e < 1e-5 for e in row["ours"])


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("wrong", ["scale", "drops_softcap", "dq_only", "dv_only"])
def test_the_rule_fails_a_kernel_slightly_wrong(sweep, monkeypatch, dtype, wrong):
    real = sweep.kernels.flash_attention

    def kernel(q, k, v, **kw):
        if wrong == "scale":  # a scale off by 1 %
            return real(q, k, v, scale=1.01 / q.shape[-1] ** 0.5, **kw)
        return real(q, k, v, **{**kw, "softcap": None})

    if wrong in ("dq_only", "dv_only"):  # the right forward, the gradient of q (or v) 1 % off

        class Skewed(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.view_as(x)

            @staticmethod
            def backward(ctx, grad):
                return grad * 1.01

        if wrong == "dq_only":
            monkeypatch.setattr(
                sweep.kernels, "flash_attention", lambda q, k, v, **kw: real(Skewed.apply(q), k, v, **kw)
            )
        else:
            monkeypatch.setattr(
                sweep.kernels, "flash_attention", lambda q, k, v, **kw: real(q, k, Skewed.apply(v), **kw)
            )
    else:
        monkeypatch.setattr(sweep.kernels, "flash_attention", kernel)
    row = sweep.check_case({**CASE, "dtype": dtype}, seed=3, device="cpu", dry=True)
    assert not row["ok"], row


def test_the_stage_limits_add_up_to_what_the_docs_say():
    script = (ROOT / "scripts" / "gpu_check.sh").read_text()
    limits = [int(x) for x in re.search(r"unset TRITON_INTERPRET\n.*\n  LIMITS=\(([\d ]+)\)", script).group(1).split()]
    environment, install, correctness, tests, sweep_, speed, split, model_speed = limits
    parallel = max(correctness, tests, sweep_, correctness)  # the model's checks run under correctness's limit
    total = environment + install + parallel + speed + split + model_speed
    docs = (ROOT / "docs" / "kernels.md").read_text()
    assert f"{total} s at most" in script
    assert f"add up to {total} s" in docs
    assert re.search(r"--seconds \$\(\(LIMITS\[4\] - (\d+)\)\)", script), "the sweep stops drawing before its limit"


def test_only_runs_the_named_stages_and_the_summary_counts_the_sweeps_failures_too(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "SITE": str(tmp_path / "site"), "PYTHON": sys.executable}
    env["ONLY"] = "no_such_stage"
    (tmp_path / "out").mkdir()
    failed_case = {"check": "sweep_case", "ok": False}  # as a sweep stage of an earlier call left it in $OUT
    (tmp_path / "out" / "sweep.jsonl").write_text(
        json.dumps(failed_case) + "\n" + json.dumps({**failed_case, "ok": True})
    )
    subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run"], env=env, check=True, timeout=300)
    rows = [json.loads(line) for line in (tmp_path / "out" / "gpu_check.jsonl").read_text().splitlines()]
    assert [r["stage"] for r in rows if r["check"] == "stage"] == ["environment", "install", "summary"]
    assert rows[1]["rc"] == 0  # the package importable from the symlink tree
    assert rows[-1]["failed_checks"] == 1 and rows[-1]["sweep_cases"] == 2


def test_each_sweep_worker_draws_its_own_cases(sweep, tmp_path):
    out = tmp_path / "sweep.jsonl"
    args = ["--dry-run", "--out", str(out), "--cases", "2", "--per-flags", "1", "--workers", "2"]
    assert sweep.main(args) == 0  # TRITON_INTERPRET=1 is set by the tests' conftest without CUDA
    cases = [json.loads(line) for line in out.read_text().splitlines()]
    seeds = {w: {r["seed"] for r in cases if r.get("worker") == w and r["check"] == "sweep_case"} for w in (0, 1)}
    assert len(seeds[0]) == len(seeds[1]) == 2 and not seeds[0] & seeds[1]
