"""A whole model on attention_backend="triton": on the CPU through Triton's interpreter, on CUDA for real.

Under TRITON_INTERPRET=1 (set by tests/conftest.py when there is no GPU) the Triton kernels take CPU tensors,
so the model trains and decodes in CI exactly as it would on a GPU.
"""

import copy
import importlib
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import transformer as T

pytest.importorskip("triton")
attention_module = importlib.import_module("transformer.attention")
on_cuda = torch.cuda.is_available()
DEVICE = "cuda" if on_cuda else "cpu"
needs_kernels = pytest.mark.skipif(
    not on_cuda and os.environ.get("TRITON_INTERPRET") != "1", reason="needs CUDA or TRITON_INTERPRET=1"
)


def _models(**more):
    torch.manual_seed(0)
    settings = dict(N=1, d_model=32, d_ff=64, h=2, dropout=0.0) | more  # d_k = 16, the kernel's smallest
    eager = T.make_model(13, 13, attention_backend="eager", **settings).to(DEVICE)
    fused = copy.deepcopy(eager)
    for module in fused.modules():
        if isinstance(module, T.MultiHeadedAttention):
            module.backend = "triton"
    return eager, fused


def _batch(batch=3, src_len=9, tgt_len=7):
    g = torch.Generator().manual_seed(1)
    src = torch.randint(1, 13, (batch, src_len), generator=g)
    tgt = torch.randint(1, 13, (batch, tgt_len), generator=g)
    src[0, 6:] = 0
    tgt[0, 5:] = 0  # padded target rows are fully masked: the kernel must give zeros there
    src, tgt = src.to(DEVICE), tgt.to(DEVICE)
    return src, tgt, T.padding_mask(src, 0), T.target_mask(tgt, 0)


@needs_kernels
def test_config_flag_selects_the_kernel(monkeypatch):
    calls = []
    kernels = importlib.import_module("transformer.kernels")
    real = kernels.flash_attention
    monkeypatch.setattr(kernels, "flash_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    model = T.make_model(13, 13, N=1, d_model=32, d_ff=64, h=2, attention_backend="triton").to(DEVICE).eval()
    model(*_batch())
    assert len(calls) == 3  # encoder self, decoder self, decoder cross


@needs_kernels
def test_triton_model_matches_eager_forward_and_backward():
    eager, fused = _models()
    args = _batch()
    out_e, out_f = eager(*args), fused(*args)
    torch.testing.assert_close(out_f, out_e, rtol=1e-4, atol=1e-4)
    eager.generator(out_e).sum().backward()
    fused.generator(out_f).sum().backward()
    for (name, p_e), p_f in zip(eager.named_parameters(), fused.parameters(), strict=True):
        if p_e.grad is not None:
            torch.testing.assert_close(p_f.grad, p_e.grad, rtol=1e-3, atol=1e-4, msg=name)


@needs_kernels
def test_triton_model_trains():
    _, fused = _models(dropout=0.1)
    fused.train()
    optimizer = torch.optim.Adam(fused.parameters(), lr=3e-3)
    src, _, src_mask, _ = _batch()
    tgt = src.clone()  # learn to copy
    losses = []
    for _ in range(15):
        log_probs = fused.generator(fused(src, tgt[:, :-1], src_mask, T.target_mask(tgt[:, :-1], 0)))
        loss = torch.nn.functional.nll_loss(log_probs.transpose(1, 2), tgt[:, 1:], ignore_index=0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        assert torch.isfinite(loss)
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


@needs_kernels
def test_triton_model_decodes_like_eager():
    decoding = pytest.importorskip("transformer.decoding")
    eager, fused = _models()
    src, _, src_mask, _ = _batch()
    eager.eval(), fused.eval()
    ys_e = decoding.greedy_decode(eager, src, src_mask, max_len=6, start_symbol=1)
    ys_f = decoding.greedy_decode(fused, src, src_mask, max_len=6, start_symbol=1)
    assert ys_f.shape == (3, 6)
    assert torch.equal(ys_f, ys_e)


def test_unsupported_head_dim_is_refused_by_name():
    model = T.make_model(13, 13, N=1, d_model=16, d_ff=32, h=4, attention_backend="triton")  # d_k = 4
    with pytest.raises(
        ValueError, match="attention backend 'triton' cannot run these inputs: head_dim must be in \\[16, 256\\], got 4"
    ):
        model(*[a.cpu() for a in _batch()])


@pytest.mark.gpu
@pytest.mark.skipif(not on_cuda, reason="needs CUDA")
def test_auto_picks_triton_on_cuda_and_trains_in_bf16(monkeypatch):
    calls = []
    kernels = importlib.import_module("transformer.kernels")
    real = kernels.flash_attention
    monkeypatch.setattr(kernels, "flash_attention", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    eager, fused = _models(d_model=256, h=4)  # d_k = 64
    for module in fused.modules():
        if isinstance(module, T.MultiHeadedAttention):
            module.backend = "auto"
    args = _batch(batch=8, src_len=200, tgt_len=180)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out_e, out_f = eager(*args), fused(*args)
    assert calls
    assert (out_f.float() - out_e.float()).abs().max() < 5e-2
    fused.generator(out_f.float()).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in fused.parameters() if p.grad is not None)


OUR_DIRS = (Path(T.__file__).parent, Path(T.__file__).parents[1] / "kernels")
OUR_FILES = {p.name for d in OUR_DIRS for p in d.rglob("*.py") if p.name != "__init__.py"}


def _from_our_code(warning: warnings.WarningMessage) -> bool:
    """A warning raised in our files, or about them (Dynamo names the file it warns about in the message)."""
    if any(Path(warning.filename).resolve().is_relative_to(d.resolve()) for d in OUR_DIRS):
        return True
    return any(name in OUR_FILES for name in re.findall(r"(\w+\.py):\d+", str(warning.message)))


# Run in a fresh process: Dynamo warns about a given function once per process, so an earlier test of the session
# that traced the drop-in would leave nothing to see here and the check could not fail.
_COMPILE_DROP_IN = """
import json, sys, warnings
import torch
import transformer as T
sys.path.insert(0, sys.argv[1])
from test_triton_backend import DEVICE, _from_our_code

class Attend(torch.nn.Module):
    def forward(self, q, k, v):
        return T.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

q = torch.randn(1, 4, 9, 16, device=DEVICE)
k, v = torch.randn(1, 2, 9, 16, device=DEVICE), torch.randn(1, 2, 9, 16, device=DEVICE)
with T.use_backend("triton"), warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out = torch.compile(Attend(), fullgraph=True, backend="eager")(q, k, v)
ours = [f"{w.category.__name__}: {str(w.message)[:200]}" for w in caught if _from_our_code(w)]
expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
print("RESULT " + json.dumps({"ours": ours, "error": (out - expected).abs().max().item()}))
"""


@needs_kernels
def test_a_model_calling_the_drop_in_compiles_under_use_backend_triton_without_a_warning_from_our_code():
    """torch.compile(fullgraph=True) of a user's module calling the drop-in on the kernel: Dynamo warned twice about
    the lru_cache wrappers in kernels/_validate.py (issue 30); a user's compiled model gets no warning of ours."""
    done = subprocess.run(
        [sys.executable, "-c", _COMPILE_DROP_IN, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        env={**os.environ, "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1")},
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["ours"] == []
    assert result["error"] <= 1e-5


def test_a_warning_about_one_of_our_files_is_told_from_torchs_own():
    def warning(message, filename):
        return warnings.WarningMessage(UserWarning(message), UserWarning, filename, 1)

    dynamo = torch._dynamo.__file__
    assert _from_our_code(
        warning("Dynamo detected a call to a `functools.lru_cache`-wrapped function at '_validate.py:136'.", dynamo)
    )
    assert _from_our_code(warning("anything", str(OUR_DIRS[0] / "attention.py")))
    assert not _from_our_code(warning("Dynamo detected ... at 'functional.py:12'.", dynamo))
