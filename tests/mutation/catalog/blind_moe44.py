"""Blind review of the mixture-of-experts branch (helper-M; 2026-12-02), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-m44-norm-topk-skipped-at-k1",
        "transformer/lm/moe/router.py",
        (("        if self.norm_topk:\n", "        if self.norm_topk and self.k > 1:\n"),),
        "The renormalisation is skipped when k = 1 (as if dividing one weight by itself were a no-op): a top-1 "
        "router with norm_topk (Mixtral always renormalises) weights its expert by its softmax score instead of 1, "
        "so docs/moe.md's 'g = g / sum(g) when router_norm_topk' fails and a top-1 Mixtral's logits are no longer "
        "transformers'.",
    ),
    Mutant(
        "blind-m44-scores-in-model-dtype",
        "transformer/lm/moe/router.py",
        (
            (
                '        scores = logits.float().softmax(-1) if self.score == "softmax" else logits.float().sigmoid()\n',
                '        scores = (logits.softmax(-1) if self.score == "softmax" else logits.sigmoid()).float()\n',
            ),
        ),
        "The scores are computed in the logits' dtype and only then cast: the router module docstring and "
        "docs/moe.md promise 'in float32, whatever the model's dtype' (as transformers' softmax(router_logits.float())); "
        "a float64 model's routing weights then differ from transformers' at ~1e-8 and the float64 1e-10 logits "
        "parity breaks (bfloat16 routes on bfloat16 scores, ties picked differently).",
    ),
    Mutant(
        "blind-m44-dispatch-range-off-by-one",
        "transformer/lm/moe/dispatch.py",
        (("        if low < 0 or high >= n_experts:\n", "        if low < 0 or high > n_experts:\n"),),
        "Off by one at the top of the range: an expert index equal to n_experts passes dispatch's check, so the "
        "promised refusal 'argument 'experts' must hold expert indices in [0, n_experts), got values in [...]' is "
        "not raised (the count's index_add_ then fails with torch's own IndexError instead).",
    ),
    Mutant(
        "blind-m44-counts-without-minlength",
        "transformer/lm/moe/dispatch.py",
        (
            (
                "    counts = torch.zeros(n_experts, dtype=torch.long, device=flat.device).index_add_(0, flat, "
                "torch.ones_like(flat))\n",
                "    counts = torch.zeros(int(flat.max()) + 1, dtype=torch.long, device=flat.device).index_add_(0, flat, "
                "torch.ones_like(flat))\n",
            ),
        ),
        "counts loses the trailing experts no token chose: Dispatch.counts is documented as (n_experts,) tokens per "
        "expert, but is shorter whenever the highest experts get no rows, and the block then fails in GatedExperts "
        "('counts must be n_experts non-negative counts') on a batch that leaves the last expert unused.",
    ),
    Mutant(
        "blind-m44-combine-uses-order",
        "transformer/lm/moe/dispatch.py",
        (
            (
                "        back = y.index_select(0, self.inverse) * weights.reshape(-1, 1)\n",
                "        back = y.index_select(0, self.order) * weights.reshape(-1, 1)\n",
            ),
        ),
        "combine brings the rows back with the permutation instead of its inverse: the documented "
        "'sum_j weights[t, j] * y[inverse[t * k + j]]' becomes y[order[...]], so tokens receive other tokens' "
        "expert outputs whenever the sort is not an involution: gather then combine no longer goes there and back, "
        "and the block differs from the token-by-token definition.",
    ),
    Mutant(
        "blind-m44-aux-mask-repeated-not-interleaved",
        "transformer/lm/moe/aux_loss.py",
        (
            (
                "        counts = counts.scatter_add(0, chosen.reshape(-1), real.repeat_interleave(k))\n",
                "        counts = counts.scatter_add(0, chosen.reshape(-1), real.repeat(k))\n",
            ),
        ),
        "The mask is tiled (t0 t1 ... t0 t1 ...) instead of repeated per token (t0 t0 t1 t1 ...) against the "
        "flattened (token, slot) pairs: with padding, the pads' choices are counted in f_e and real tokens' dropped, "
        "so load_balancing_loss with a mask no longer equals transformers' load_balancing_loss_func (without a mask "
        "nothing changes).",
    ),
    Mutant(
        "blind-m44-aux-in-evaluation",
        "transformer/lm/moe/aux_loss.py",
        (("        if not model.training or self.coef == 0.0:\n", "        if self.coef == 0.0:\n"),),
        "WithLoadBalancing adds coef * aux in evaluation too: the docstring and docs/moe.md promise 'Only while "
        "model trains: evaluation's loss is the cross-entropy alone', so the evaluation loss and perplexity of a "
        "Mixtral fine-tune (router_aux_loss_coef 0.001) are inflated by the load-balancing term.",
    ),
    Mutant(
        "blind-m44-k-equal-n-experts-refused",
        "transformer/lm/moe/checks.py",
        (
            (
                "    if not is_int(config.experts_per_token, at_least=1) or config.experts_per_token > config.n_experts:\n",
                "    if not is_int(config.experts_per_token, at_least=1) or config.experts_per_token >= config.n_experts:\n",
            ),
        ),
        "Off by one: experts_per_token = n_experts (every expert for every token) is refused with 'must be an int in "
        "[1, n_experts=...]', though the message itself, docs/moe.md and TopKRouter accept k = n_experts.",
    ),
    Mutant(
        "blind-m44-sparse-step-off-by-one",
        "transformer/lm/pretrained/qwen_moe.py",
        (
            (
                "n_experts == 0 or (i + 1) % step != 0)\n",
                "n_experts == 0 or i % step != 0)\n",
            ),
        ),
        "decoder_sparse_step counted from layer 0 instead of layer 1: with decoder_sparse_step=2 layers 0, 2, ... "
        "are sparse where transformers (and the qwen_moe docstring: '(i + 1) % decoder_sparse_step == 0') makes "
        "layers 1, 3, ... sparse; the expert tensors are then looked for on the wrong layers (a load refused or, "
        "with mlp_only_layers, wrong logits). With step 1 nothing changes.",
    ),
    Mutant(
        "blind-m44-mixtral-w1-w3-swapped",
        "transformer/lm/pretrained/mixtral.py",
        (
            (
                '    expert_files = {"gate_up_proj": ("w1", "w3"), "down_proj": ("w2",)}\n',
                '    expert_files = {"gate_up_proj": ("w3", "w1"), "down_proj": ("w2",)}\n',
            ),
        ),
        "Mixtral's per-expert w1 (gate) and w3 (up) are swapped in the stacking: gate_up_proj is documented gate "
        "above up (w1 above w3), so a loaded Mixtral computes silu(up x) * gate x and its logits differ from "
        "transformers'; saving writes the swap back, so theirs -> ours -> theirs still agrees but our logits do not, "
        "nor does a model of ours loaded by transformers.",
    ),
]

_TESTS = (
    "tests/test_pretrained_absent_fields.py",
    "tests/test_moe.py",
    "tests/test_pretrained_moe.py",
    "tests/test_moe_training.py",
    "tests/test_lm_config_sweep.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
