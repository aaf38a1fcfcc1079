"""The mixture-of-experts package (transformer.lm.moe, docs/moe.md) on its own: the dispatch's permutation, inverse
and counts; the block against a loop over tokens (the definition, y = sum over the top-k of g_e E_e(x)); the
load-balancing loss against transformers' ``load_balancing_loss_func`` (a seeded short fuzz); the contracts and
LMConfig's expert fields refused by name."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch

from transformer.lm import LMConfig, build_lm
from transformer.lm.moe import (
    GatedExperts,
    MoEFeedForward,
    SharedExpert,
    TopKRouter,
    dispatch,
    load_balancing_loss,
    sparse_layers,
)


def _block(n_experts=6, k=2, d_model=8, d_ff=5, shared=None, score="softmax", norm_topk=True, bias=False, seed=0):
    torch.manual_seed(seed)
    router = TopKRouter(d_model, n_experts, k, score=score, norm_topk=norm_topk, bias=bias)
    block = MoEFeedForward(router, GatedExperts(n_experts, d_model, d_ff), shared and SharedExpert(d_model, shared))
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.7)
    return block.double()


def _loop_over_tokens(block, x):
    """The definition, token by token: the k best experts by score, weighted, plus the shared expert."""
    out = torch.zeros_like(x)
    for t in range(x.size(0)):
        logits = block.router.weight @ x[t] + (0 if block.router.bias is None else block.router.bias)
        scores = logits.float().softmax(-1) if block.router.score == "softmax" else logits.float().sigmoid()
        top = scores.topk(block.router.k)
        weights = top.values / top.values.sum() if block.router.norm_topk else top.values
        for w, e in zip(weights.tolist(), top.indices.tolist(), strict=True):
            gate, up = (block.experts.gate_up_proj[e] @ x[t]).chunk(2)
            out[t] += w * (block.experts.down_proj[e] @ (torch.nn.functional.silu(gate) * up))
        if block.shared is not None:
            out[t] += block.shared(x[t : t + 1])[0]
    return out


@pytest.mark.parametrize(
    "options",
    [
        {},
        dict(k=1),
        dict(k=6),
        dict(shared=7),
        dict(score="sigmoid", norm_topk=False, bias=True),
        dict(norm_topk=False),
    ],
)
def test_the_block_is_the_loop_over_tokens(options):
    block = _block(**options)
    x = torch.randn(2, 9, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = block(x)
    expected = _loop_over_tokens(block, x.reshape(-1, 8)).view(2, 9, 8)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-9)  # the weights are float32, as transformers'
    assert block.router_logits.shape == (18, 6)


def test_the_dispatch_is_a_stable_sort_by_expert_with_its_inverse():
    experts = torch.tensor([[3, 0], [0, 3], [2, 0], [3, 1], [0, 2]])
    d = dispatch(experts, 5)
    flat = experts.reshape(-1)
    assert sorted(d.order.tolist()) == list(range(10))  # a permutation
    assert torch.equal(d.inverse[d.order], torch.arange(10)) and torch.equal(d.order[d.inverse], torch.arange(10))
    assert torch.equal(flat[d.order], torch.sort(flat).values)  # sorted by expert
    assert d.order.tolist() == [1, 2, 5, 8, 7, 4, 9, 0, 3, 6]  # within an expert, in pair order (stable)
    assert d.counts.tolist() == [4, 1, 2, 3, 0] and torch.equal(d.token, d.order // 2)
    x = torch.randn(5, 3)
    assert torch.equal(d.gather(x), x[d.token])
    ones = torch.ones(5, 2)
    torch.testing.assert_close(d.combine(d.gather(x), ones), 2 * x)  # back to each token, its k rows summed


def test_the_contracts_name_what_is_wrong():
    with pytest.raises(
        ValueError, match=r"argument 'experts' must hold expert indices in \[0, 4\), got values in \[0, 4\]"
    ):
        dispatch(torch.tensor([[0, 4]]), 4)
    d = dispatch(torch.tensor([[0, 1], [1, 2]]), 3)
    with pytest.raises(ValueError, match=r"'x' has 3 tokens, the dispatch 4 pairs of k=2 \(expected 2 tokens\)"):
        d.gather(torch.randn(3, 4))
    with pytest.raises(ValueError, match=r"'weights' shape \(2, 2\), got y \(4, 4\) and weights \(2, 1\)"):
        d.combine(torch.randn(4, 4), torch.randn(2, 1))
    experts = GatedExperts(3, 4, 5)
    with pytest.raises(
        ValueError, match=r"'counts' must be 3 non-negative counts summing to the 4 rows of 'x', got \[1, 1, 1\]"
    ):
        experts(torch.randn(4, 4), torch.tensor([1, 1, 1]))
    with pytest.raises(ValueError, match=r"k must be in \[1, n_experts=3\], got k=4"):
        TopKRouter(4, 3, 4)
    block = _block()
    with pytest.raises(Exception, match="d_model"):
        block(torch.randn(2, 3, 7, dtype=torch.float64))


def _their_loss(logits, n_experts, k, mask):
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func

    return load_balancing_loss_func(tuple(logits), n_experts, k, mask)


#: seeded cases of the loss fuzz: 40 in the suite; MOE_FUZZ_CASES=N runs N by hand and records the counts in
#: benchmarks/results/moe_fuzz.json (docs/moe.md)
FUZZ_CASES = int(os.environ.get("MOE_FUZZ_CASES", "40"))


def test_the_load_balancing_loss_is_transformers_short_fuzz():
    """Seeded cases: 1 to 3 layers, 2 to 9 experts (up to 64 in the long run), k in [1, n], 1 to 6 (long: 40)
    tokens per row, with and without a padding mask; a disagreement is any loss outside rtol 1e-6."""
    transformers = pytest.importorskip("transformers")
    generator = torch.Generator().manual_seed(44)
    long = "MOE_FUZZ_CASES" in os.environ
    disagreements = []
    for case in range(FUZZ_CASES):
        n_experts = int(torch.randint(2, 65 if long else 10, (1,), generator=generator))
        k = int(torch.randint(1, n_experts + 1, (1,), generator=generator))
        batch, seq, layers = 2, int(torch.randint(1, 41 if long else 7, (1,), generator=generator)), case % 3 + 1
        logits = [torch.randn(batch * seq, n_experts, generator=generator) * 3 for _ in range(layers)]
        mask = None
        if case % 2:
            mask = torch.rand(batch, seq, generator=generator) > 0.3
            mask[:, -1] = True
        ours = load_balancing_loss(logits, n_experts, k, mask)
        theirs = _their_loss(logits, n_experts, k, None if mask is None else mask.long()).float()
        if not torch.allclose(ours, theirs, rtol=1e-6, atol=1e-7):
            disagreements.append({"case": case, "ours": ours.item(), "theirs": theirs.item()})
    if long:
        result = {
            "command": f"MOE_FUZZ_CASES={FUZZ_CASES} pytest tests/test_moe.py -k short_fuzz",
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "oracle": "transformers.models.mixtral.modeling_mixtral.load_balancing_loss_func",
            "cases": FUZZ_CASES,
            "disagreements": len(disagreements),
            "first_disagreements": disagreements[:5],
        }
        out = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "moe_fuzz.json"
        out.write_text(json.dumps(result, indent=2) + "\n")
    assert not disagreements, disagreements[:5]


def test_the_load_balancing_loss_is_k_when_uniform_and_grows_with_imbalance():
    uniform = torch.zeros(12, 4)
    assert load_balancing_loss([uniform], 4, 2).item() == pytest.approx(2.0)
    skewed = torch.tensor([[5.0, 4.0, 0.0, 0.0]]).repeat(12, 1)
    assert load_balancing_loss([skewed], 4, 2).item() > 3.5
    with pytest.raises(ValueError, match=r"argument 'mask' has 5 elements, router_logits\[0\] 12 tokens"):
        load_balancing_loss([uniform], 4, 2, torch.ones(5, dtype=torch.bool))


def _config(**fields):
    base = dict(vocab=20, n_layers=3, d_model=8, d_ff=12, n_heads=2, norm="rms", ffn_gated=True, dropout=0.0)
    return LMConfig(**{**base, **fields})


def test_lmconfig_expert_fields_are_refused_by_name():
    with pytest.raises(ValueError, match=r"experts_per_token=3 needs n_experts"):
        _config(experts_per_token=3)
    with pytest.raises(
        ValueError, match=r"experts_per_token must be an int in \[1, n_experts=4\], got experts_per_token=5"
    ):
        _config(n_experts=4, experts_per_token=5)
    with pytest.raises(
        ValueError, match=r"dense_layers must be layer indices in \[0, n_layers=3\), got dense_layers=\(3,\)"
    ):
        _config(n_experts=4, dense_layers=(3,))
    with pytest.raises(ValueError, match=r"dense_layers=\(0, 1, 2\) makes every layer dense"):
        _config(n_experts=4, dense_layers=(0, 1, 2))
    with pytest.raises(ValueError, match=r"router_score must be 'softmax' or 'sigmoid', got router_score='relu'"):
        _config(n_experts=4, router_score="relu")
    with pytest.raises(ValueError, match=r"n_experts \(gated experts\) needs ffn_gated=True"):
        _config(n_experts=4, ffn_gated=False)
    with pytest.raises(ValueError, match=r"router_weights_rounded=True needs n_experts"):
        _config(router_weights_rounded=True)
    with pytest.raises(ValueError, match=r"router_weights_rounded must be a bool, got router_weights_rounded=1"):
        _config(n_experts=4, router_weights_rounded=1)


def test_dense_layers_keep_the_dense_network_and_the_config_survives_json():
    config = _config(n_experts=4, expert_d_ff=6, dense_layers=(1,), shared_expert_d_ff=5)
    model = build_lm(config)
    kinds = [type(layer.feed_forward).__name__ for layer in model.layers]
    assert kinds == ["MoEFeedForward", "GatedFeedForward", "MoEFeedForward"] and sparse_layers(config) == [0, 2]
    assert model.layers[0].feed_forward.experts.down_proj.shape == (4, 8, 6)
    again = LMConfig.from_json(config.to_json())
    assert again == config and again.dense_layers == (1,)


def test_the_grouped_matmul_and_the_loop_over_experts_agree(monkeypatch):
    """float32 rows of 32 bytes take torch's grouped_mm where it exists; without it (torch 2.9, float64) the loop
    over experts runs: the same outputs and gradients, and both the loop over tokens."""
    import transformer.lm.moe.experts as experts_module

    block = _block(n_experts=5, d_model=8, d_ff=8, k=2).float()
    x = torch.randn(13, 8, generator=torch.Generator().manual_seed(3), requires_grad=True)
    results = []
    for grouped in (experts_module._GROUPED_MM, None):
        monkeypatch.setattr(experts_module, "_GROUPED_MM", grouped)
        block.zero_grad()
        x.grad = None
        y = block(x)
        (y * torch.linspace(-1, 1, 8)).sum().backward()
        results.append((y.detach(), x.grad.clone(), block.experts.gate_up_proj.grad.clone()))
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(results[0][0], _loop_over_tokens(block.double(), x.detach().double()).float())
