"""The drop-in where the outside check of issue 41 found it unlike torch's function: torch's causal bias objects,
torch.export with a data-dependent batch, torch.jit.script, and the named triton backend's refusal of empty
sequences (docs/integrations.md, "A drop-in for F.scaled_dot_product_attention")."""

import json
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

import transformer as tt

BACKENDS = ["eager", "torch", "triton"]


def _backend(name):
    if name == "triton":
        pytest.importorskip("triton")
    return name


def _qkv(q_len, k_len, seed=0, heads=3):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, heads, n, 16, generator=g) for n in (q_len, k_len, k_len))


def _bias(make, q_len, k_len):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that a lower-right bias with q_len > k_len has empty rows
        return make(q_len, k_len)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("lengths", [(4, 7), (7, 4), (5, 5)])
def test_causal_bias_objects_align_as_torch_aligns_them(backend, lengths):
    backend = _backend(backend)
    q, k, v = _qkv(*lengths)
    for make, diagonal in ((causal_upper_left, 0), (causal_lower_right, lengths[1] - lengths[0])):
        bias = _bias(make, *lengths)
        out = tt.scaled_dot_product_attention(q, k, v, bias, backend=backend)
        assert type(out) is torch.Tensor  # never the uninitialised bias subclass
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, bias))
        dense = torch.ones(*lengths, dtype=torch.bool).tril(diagonal)  # what each variant means, spelled out
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, dense))


def test_a_lower_right_bias_is_not_upper_left_when_the_lengths_differ():
    q, k, v = _qkv(3, 8)
    lower = tt.scaled_dot_product_attention(q, k, v, causal_lower_right(3, 8), backend="eager")
    upper = tt.scaled_dot_product_attention(q, k, v, causal_upper_left(3, 8), backend="eager")
    assert (lower - upper).abs().max() > 0.1  # the data makes the alignment matter


@pytest.mark.parametrize("backend", ["eager", "torch"])
def test_causal_bias_gradients_match_torch(backend):
    q, k, v = (t.double().requires_grad_() for t in _qkv(4, 6, heads=2))
    bias = causal_lower_right(4, 6)
    ours = torch.autograd.grad(tt.scaled_dot_product_attention(q, k, v, bias, backend=backend).sum(), (q, k, v))
    theirs = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, bias).sum(), (q, k, v))
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("make", [causal_upper_left, causal_lower_right])
def test_a_causal_bias_with_is_causal_raises_torchs_value_error(make):
    q, k, v = _qkv(4, 6)
    with pytest.raises(ValueError, match="CausalBias should not be used with causal=True") as theirs:
        F.scaled_dot_product_attention(q, k, v, make(4, 6), is_causal=True)
    with pytest.raises(ValueError, match="CausalBias should not be used with causal=True") as ours:
        tt.scaled_dot_product_attention(q, k, v, make(4, 6), is_causal=True)
    assert str(ours.value) == str(theirs.value)


def test_a_lower_right_bias_validates_the_inputs_as_torch_does():
    q, k, v = _qkv(4, 6)
    with pytest.raises(ValueError, match="same dtype") as theirs:
        F.scaled_dot_product_attention(q, k.double(), v, causal_lower_right(4, 6))
    with pytest.raises(ValueError, match="same dtype") as ours:
        tt.scaled_dot_product_attention(q, k.double(), v, causal_lower_right(4, 6))
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_causal_bias_objects_compile(backend):
    backend = _backend(backend)
    q, k, v = _qkv(4, 7)

    def attend(q, k, v, bias):
        return tt.scaled_dot_product_attention(q, k, v, bias, backend=backend)

    attend(q, k, v, None)  # eagerly first: torch 2.9's Dynamo cannot trace the first look for Triton (find_spec)
    compiled = torch.compile(attend, backend="eager", fullgraph=True)
    torch._dynamo.reset()
    for make in (causal_upper_left, causal_lower_right):
        bias = make(4, 7)
        torch.testing.assert_close(compiled(q, k, v, bias), F.scaled_dot_product_attention(q, k, v, bias))


class _DataDependentBatch(torch.nn.Module):
    def __init__(self, backend, with_mask):
        super().__init__()
        self.backend, self.with_mask = backend, with_mask

    def forward(self, n, x, mask):
        b = n.item()
        torch._check(b >= 1)
        torch._check(b <= x.size(0))
        q = x[:b]
        return tt.scaled_dot_product_attention(
            q, q, q, attn_mask=mask[:b] if self.with_mask else None, backend=self.backend
        )


def _torch_exports_a_masked_data_dependent_batch() -> bool:
    class Torchs(torch.nn.Module):
        def forward(self, n, x, mask):
            b = n.item()
            torch._check(b >= 1)
            torch._check(b <= x.size(0))
            return F.scaled_dot_product_attention(x[:b], x[:b], x[:b], attn_mask=mask[:b])

    try:
        torch.export.export(Torchs(), (torch.tensor(3), torch.randn(5, 2, 4, 16), torch.ones(5, 1, 4, 4).bool()))
    except Exception:  # noqa: BLE001 (torch 2.9: GuardOnDataDependentSymNode inside its own checks)
        return False
    return True


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("with_mask", [False, True])
def test_torch_export_takes_a_data_dependent_batch(backend, with_mask):
    backend = _backend(backend)
    x = torch.randn(5, 2, 4, 16)
    mask = torch.rand(5, 1, 4, 4, generator=torch.Generator().manual_seed(0)) > 0.4
    mask[..., 0] = True
    if backend == "torch" and with_mask and not _torch_exports_a_masked_data_dependent_batch():
        pytest.skip(f"torch {torch.__version__}'s own function cannot export this (it guards on the batch in C++)")
    program = torch.export.export(_DataDependentBatch(backend, with_mask), (torch.tensor(3), x, mask))
    for b in (1, 2, 5):  # 1 too: the export made no assumption that the batch is not 1
        got = program.module()(torch.tensor(b), x, mask)
        expected = F.scaled_dot_product_attention(x[:b], x[:b], x[:b], attn_mask=mask[:b] if with_mask else None)
        torch.testing.assert_close(got, expected)


def _scripted_caller(q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return tt.scaled_dot_product_attention(q, q, q, mask, 0.0, False, scale=0.3)


def _scripted_with_an_extra(q: torch.Tensor) -> torch.Tensor:
    return tt.scaled_dot_product_attention(q, q, q, backend="eager")


def test_torch_jit_script_compiles_a_caller_into_torchs_operator():
    scripted = torch.jit.script(_scripted_caller)
    assert "aten::scaled_dot_product_attention" in str(scripted.graph)
    q, mask = torch.randn(2, 3, 4, 8), torch.randn(4, 4)
    torch.testing.assert_close(scripted(q, mask), F.scaled_dot_product_attention(q, q, q, mask, scale=0.3))


def test_torch_jit_script_names_an_extra_it_cannot_take():
    with pytest.raises(RuntimeError, match="Keyword argument backend unknown"):
        torch.jit.script(_scripted_with_an_extra)


def test_the_named_triton_backend_refuses_empty_sequences_with_the_reason_and_auto_falls_back():
    pytest.importorskip("triton")
    q, k, v = _qkv(0, 3)
    with pytest.raises(ValueError, match="q_len and k_len must be >= 1, got q_len=0"):
        tt.scaled_dot_product_attention(q, k, v, backend="triton")
    assert tt.scaled_dot_product_attention(q, k, v).shape == (2, 3, 0, 16)  # auto: torch's function


@pytest.mark.parametrize("backend", ["auto", "torch", "eager"])
def test_the_drop_in_in_place_of_torchs_function_runs_torchs_own_modules(backend, monkeypatch):
    """F.scaled_dot_product_attention rebound to the drop-in (how torch's own tests are run against it, and how code
    that calls torch's function by name gets it): the torch backend still reaches torch's operator (a RecursionError
    before), and nn.MultiheadAttention, which calls the name, gives torch's values through the drop-in."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    want = mha(x, x, x, attn_mask=~mask, need_weights=False)[0]
    q, k, v = _qkv(4, 6)
    want_sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    calls = []

    def drop_in(*args, **kwargs):
        calls.append(backend)
        return tt.scaled_dot_product_attention(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", drop_in)
    with tt.use_backend(backend):
        got = mha(x, x, x, attn_mask=~mask, need_weights=False)[0]
        got_sdpa = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert len(calls) == 2  # the module's call went through the drop-in too
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_sdpa, want_sdpa)


_RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "differential"
_TORCH_TESTS_COMMIT = "6ac86627d419394fc77fd09392046a4bbd44ec9e"


def _torch_tests(run):
    return json.loads((_RESULTS / f"torch_tests_{run}.json").read_text())


def _documented_counts():
    """The table of docs/integrations.md ("torch's own tests"): run label -> (passed, failed, skipped, differences)."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "integrations.md").read_text()
    rows = {}
    for start, run in (
        ("| torch's function alone", "none"),
        ("| the drop-in, `eager`", "eager"),
        ("| the drop-in, `torch`", "torch"),
        ("| the drop-in, `triton`", "triton"),
    ):
        line = next(row for row in page.splitlines() if row.startswith(start))
        rows[run] = [cell.strip() for cell in line.split("|")[2:6]]
    return rows


def test_torchs_own_tests_against_the_drop_in_are_committed_with_no_difference():
    """torch's test_transformers.py (its CPU classes) with F.scaled_dot_product_attention replaced by the drop-in:
    the committed runs name the test file's commit, date and versions; on eager and torch every test torch passes
    passes, and the tests that fail are torch's own failures, of the two kinds docs/integrations.md explains; the
    counts are the page's."""
    alone = _torch_tests("none")
    documented = _documented_counts()
    kinds = {"sdpa_vs_reference_with_empty_rows": 0, "fused_sdp_choice": 0}
    for test in alone["failures"]:
        name = test.split("::")[-1]
        if name.startswith("test_scaled_dot_product_attention_") and "_attn_mask_" in name:
            kinds["sdpa_vs_reference_with_empty_rows"] += 1
            assert "Tensor-likes are not close" in alone["failures"][test]
        else:
            assert name.startswith("test_fused_sdp_choice_cpu_"), test
            kinds["fused_sdp_choice"] += 1
            assert "SDPBackend." in alone["failures"][test]  # the dispatcher's answer compared with an enum member
    assert kinds == {"sdpa_vs_reference_with_empty_rows": 9, "fused_sdp_choice": 16}
    for run in ("none", "eager", "torch", "triton"):
        result = _torch_tests(run)
        assert result["source"] == f"pytorch/pytorch@{_TORCH_TESTS_COMMIT}"
        assert result["date"] and result["versions"]["torch"].startswith("2.")
        totals = result["totals"]
        counts = [str(totals["passed"]), str(totals["failed"]), str(totals["skipped"])]
        counts.append("-" if run == "none" else str(len(result["differences"])))
        assert documented[run] == counts, run
    for run in ("eager", "torch"):
        result = _torch_tests(run)
        assert result["keyword"] == "CPU" and result["backend"] == run
        assert result["differences"] == {} and result["passes_where_compared_fails"] == []
        assert set(result["failures"]) == set(alone["failures"])
        assert result["totals"] == alone["totals"] and sum(alone["totals"].values()) == 317
    triton = _torch_tests("triton")  # a subset: the named kernel refuses head dims below 16, by design
    assert triton["differences"] and all(
        "head_dim must be in [16, 256], got 8" in e for e in triton["differences"].values()
    )
    assert set(triton["failures"]) == set(triton["differences"])
