"""The one-go GPU run's checks fail what they exist to catch (scripts/gpu_check/checks.py and model.py, docs/kernels.md
"The one-go GPU run"), shown on the CPU through their dry-run paths with a kernel or a step made wrong on purpose."""

import contextlib
import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _load(name, tmp_path):
    spec = importlib.util.spec_from_file_location(f"gpu_check_{name}", ROOT / "scripts" / "gpu_check" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "scripts" / "gpu_check"))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "scripts" / "gpu_check"))
    module.DRY, module.DEVICE = True, "cpu"
    _results(module).OUT = str(tmp_path / f"{name}.jsonl")
    return module


def _results(module):
    """Where the module's rows go: checks.py's ``record`` (model.py imports it)."""
    return getattr(module, "checks", module)


def _rows(module, check):
    return [r for r in map(json.loads, Path(_results(module).OUT).read_text().splitlines()) if r["check"] == check]


@pytest.fixture
def checks(tmp_path):
    return _load("checks", tmp_path)


@pytest.fixture
def model(tmp_path):
    return _load("model", tmp_path)


def test_split_kv_fails_when_the_decoding_shape_takes_no_split(checks, monkeypatch):
    assert checks.check_split_kv(torch.float32, 300)["ok"]
    monkeypatch.setattr(checks._tuning, "kv_splits", lambda batch_heads, q_len, k_len, device: (1, k_len))
    assert not checks.check_split_kv(torch.float32, 300)["ok"]


def _periodic_dropout(real):
    """A fake kernel whose keep mask has the right rate (3 in 4), is the same per seed and another per seed and per
    (batch, head), but drops every fourth key of a row: neighbouring keys are correlated (-1/3)."""

    def kernel(q, k, v, *, dropout_p=0.0, seed=None, **kw):
        if q.requires_grad:
            return real(q, k, v, dropout_p=dropout_p, seed=seed, **kw)
        batch, heads, n, _ = q.shape
        g = torch.Generator().manual_seed(seed)
        phase = torch.randint(0, 4, (batch, heads, n, 1), generator=g)
        keep = ((torch.arange(n) + phase) % 4 != 0).to(v.dtype)
        return keep / (1 - dropout_p) / n  # what the one-hot values of the check read back: keep / (n (1 - p))

    return kernel


def test_dropout_check_fails_a_mask_with_correlated_neighbours(checks, monkeypatch):
    checks.check_dropout(torch.float32, 2)
    assert _rows(checks, "dropout_mask")[-1]["ok"]
    monkeypatch.setattr(checks.kernels, "flash_attention", _periodic_dropout(checks.kernels.flash_attention))
    checks.check_dropout(torch.float32, 2)
    row = _rows(checks, "dropout_mask")[-1]
    assert row["keep_rate"] == 0.75 and row["same_seed_same_mask"] and row["other_seed_other_mask"]
    assert row["correlations"]["next_key"] < -0.3
    assert not row["ok"]


def test_backward_determinism_compares_every_run_with_the_first(checks, monkeypatch):
    real, calls = checks.kernels.flash_attention, []

    class SecondRunDiffers(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            return grad * (1.0 if len(calls) != 2 else 1.0 + 1e-3)

    def kernel(q, k, v, **kw):
        if not q.requires_grad:
            return real(q, k, v, **kw)
        calls.append(1)
        return real(SecondRunDiffers.apply(q), k, v, **kw)

    assert checks.check_dropout(torch.float32, 2)["ok"]
    calls.clear()
    monkeypatch.setattr(checks.kernels, "flash_attention", kernel)
    assert not checks.check_dropout(torch.float32, 2)["ok"]  # run 2 of 2 differs from run 1


def test_compile_check_fails_a_compiled_call_off_eager_by_1e_3(model, monkeypatch):
    model.part_compile()
    assert _rows(model, "compile_dynamic")[-1]["ok"]
    monkeypatch.setattr(
        model.torch, "compile", lambda fn, **kw: lambda *a: fn(*a) * (1 + 1e-3)
    )  # the compiled call's result 0.1 % off
    model.part_compile()
    assert not _rows(model, "compile_dynamic")[-1]["ok"]


def test_decode_check_compares_the_kernel_model_with_the_eager_one(model, monkeypatch):
    kernels = model.importlib.import_module("transformer.kernels")
    real = kernels.flash_attention

    def wrong_when_decoding(q, k, v, **kw):  # training (gradients on) untouched, decoding attends uniformly
        return real(q, k, v, **kw) if torch.is_grad_enabled() else real(q * 0, k, v, **kw)

    monkeypatch.setattr(kernels, "flash_attention", wrong_when_decoding)
    model.part_train_decode()
    assert _rows(model, "model_train_eager_match")[-1]["ok"]
    row = _rows(model, "model_decode_eager_match")[-1]
    assert not row["ok"] and row["differing_tokens"] > 0


def test_speed_summary_ratios_are_the_variants_own(model, monkeypatch):
    real = model.T.checks

    @contextlib.contextmanager
    def slow_when_off(enabled=True):
        with real(enabled):
            yield
        if not enabled:
            time.sleep(2.0)  # checks off made over twice as slow: the two ratios cannot round alike (3 decimals)

    monkeypatch.setattr(model.T, "checks", slow_when_off)
    model.part_speed()
    variants = {r["variant"]: r["speed_vs_torch"] for r in _rows(model, "model_speed_variant")}
    summary = _rows(model, "model_speed")[-1]
    assert summary["ratio_checks_on"] == variants["ours triton, checks on"]
    assert summary["ratio_checks_off"] == variants["ours triton, checks off"]
    assert summary["ratio_auto_checks_on"] == variants["ours auto, checks on"]
    assert summary["ratio_checks_off"] < summary["ratio_checks_on"]
