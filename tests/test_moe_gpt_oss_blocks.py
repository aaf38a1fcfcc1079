"""gpt-oss's blocks on their own (docs/moe.md, "gpt-oss"): the clamped SwiGLU experts with biases against their
formula row by row (eager and the traced path), the router's softmax over its top-k logits, the attention module's
learned sinks on every backend, and LMConfig's gpt-oss fields refused by name when impossible."""

from __future__ import annotations

import pytest
import torch

from transformer.lm import LMConfig
from transformer.lm.moe.clamped_experts import ClampedSwiGLUExperts
from transformer.lm.moe.router import TopKRouter


def _formula(experts: ClampedSwiGLUExperts, row: torch.Tensor, e: int) -> torch.Tensor:
    """One row through expert e, written from the formula (gate and up interleaved: even and odd columns)."""
    h = row @ experts.gate_up_proj[e] + experts.gate_up_proj_bias[e]
    gate, up = h[0::2], h[1::2]
    gate = torch.minimum(gate, torch.tensor(experts.limit, dtype=h.dtype))
    up = torch.maximum(torch.minimum(up, torch.tensor(experts.limit, dtype=h.dtype)), torch.tensor(-experts.limit))
    return ((up + 1) * gate / (1 + torch.exp(-experts.alpha * gate))) @ experts.down_proj[e] + experts.down_proj_bias[e]


@pytest.mark.parametrize("traced", [False, True])
def test_clamped_experts_are_their_formula_row_by_row(monkeypatch, traced):
    """Rows sorted by expert (one expert with none), wide weights so that the clamp binds on both sides; the traced
    path (every expert on every row, no host read of the counts) gives the same rows."""
    torch.manual_seed(0)
    experts = ClampedSwiGLUExperts(4, 6, 5, limit=1.5, alpha=1.3).double()
    with torch.no_grad():
        for p in experts.parameters():
            p.normal_(0.0, 1.0)
    counts = torch.tensor([3, 0, 2, 4])
    x = torch.randn(9, 6, dtype=torch.float64)
    if traced:
        monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    out = experts(x, counts)
    monkeypatch.undo()
    owners = torch.repeat_interleave(torch.arange(4), counts)
    want = torch.stack([_formula(experts, x[r], int(owners[r])) for r in range(9)])
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    h = torch.einsum("rd,rdf->rf", x, experts.gate_up_proj[owners]) + experts.gate_up_proj_bias[owners]
    assert (h[:, 0::2] > 1.5).any() and (h[:, 1::2] < -1.5).any() and (h[:, 1::2] > 1.5).any()  # clamps bind
    with pytest.raises(ValueError, match="argument 'counts' must be 4 non-negative counts summing to the 9 rows"):
        experts(x, torch.tensor([3, 0, 2, 3]))


def test_the_router_takes_the_softmax_of_its_top_k_logits():
    torch.manual_seed(1)
    router = TopKRouter(6, 5, 2, bias=True, norm_topk=False, softmax_topk=True).double()
    with torch.no_grad():
        router.bias.normal_()
    x = torch.randn(7, 6, dtype=torch.float64)
    routing = router(x)
    logits = x @ router.weight.T + router.bias
    top, chosen = torch.topk(logits, 2, dim=-1)
    assert torch.equal(routing.experts, chosen) and routing.weights.dtype == torch.float64
    torch.testing.assert_close(routing.weights, torch.exp(top) / torch.exp(top).sum(-1, keepdim=True))


@pytest.mark.parametrize("backend", ["eager", "torch", "triton"])
def test_the_attention_modules_learned_sinks_reach_every_backend(backend):
    """A module with ``sinks=True`` has a (heads,) parameter; on each backend (and with ``record_attention``) the
    output is the reference's with those sinks, and their gradient flows."""
    import transformer as T
    from transformer.backends import reference

    torch.manual_seed(2)
    mha = T.MultiHeadedAttention(4, 64, dropout=0.0, kv_heads=2, sinks=True, backend=backend)
    assert tuple(mha.sinks.shape) == (4,) and "sinks" in dict(mha.named_parameters())
    with torch.no_grad():
        mha.sinks.copy_(torch.tensor([2.0, -1.0, 0.5, 3.0]))
    x = torch.randn(2, 5, 64)
    out = mha(x, x, x)
    q, k, v = mha.project(x, x, x, None)
    k, v = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    want = mha.combine_heads(reference.attention(q, k, v, sinks=mha.sinks)[0])
    torch.testing.assert_close(out, want, rtol=2e-5, atol=2e-5)
    (grad,) = torch.autograd.grad(out.sum(), mha.sinks)
    assert grad.abs().min() > 0
    mha.record_attention = True
    torch.testing.assert_close(mha(x, x, x), want, rtol=2e-5, atol=2e-5)
    assert (mha.attn.sum(-1) < 1 - 1e-3).all()


def test_gpt_oss_fields_are_refused_by_name_when_impossible():
    base = dict(vocab=11, n_layers=2, d_model=16, d_ff=8, n_heads=2, ffn_gated=True)
    moe = dict(base, n_experts=3, router_norm_topk=False)
    LMConfig(**moe, router_softmax_topk=True, expert_swiglu_limit=7.0, attention_sinks=True)
    for fields, message in (
        (dict(base, expert_swiglu_limit=7.0), r"expert_swiglu_limit=7\.0 needs n_experts"),
        (dict(base, router_softmax_topk=True), r"router_softmax_topk=True needs n_experts"),
        (dict(moe, expert_swiglu_limit=-1.0), r"expert_swiglu_limit must be a float > 0 or None, got .*-1\.0"),
        (dict(moe, expert_swiglu_alpha=2.0), r"expert_swiglu_alpha=2\.0 needs expert_swiglu_limit"),
        (dict(moe, router_softmax_topk=True, router_norm_topk=True), r"router_norm_topk=False"),
        (dict(moe, router_softmax_topk=True, router_score="sigmoid"), r"router_score='softmax'"),
        (dict(base, attention_sinks=1), r"attention_sinks must be a bool, got attention_sinks=1"),
        (dict(base, attention_sinks=True, value_projection="per_head", d_model=16, n_heads=2),
         r"attention_sinks=True needs value_projection='output'"),
    ):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            LMConfig(**fields)
