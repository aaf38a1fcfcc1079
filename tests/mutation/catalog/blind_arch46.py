"""Blind review of issue 44's newest code (2026-12-02), by a reviewer who did not read the tests: OLMo 2 and OLMoE
(transformer/lm/pretrained/olmo2.py, olmoe.py; LMConfig's pre_sublayer_norm, qk_norm_scope and
float32_gain_and_rotation in transformer/lm/config.py and config_checks.py, and where they act: transformer/lm/
attention.py, blocks.py, rms_norm.py, rotary.py), gpt-oss (transformer/lm/pretrained/gpt_oss.py,
transformer/lm/moe/clamped_experts.py, the router's router_softmax_topk, rope_yarn_truncate in rotary.py) and the
attention sinks (the torch paths in transformer/backends/torch_backend.py, the Triton kernel's sink code in
kernels/_forward.py and kernels/_op.py, forward and backward). Docs read: docs/moe.md, docs/lm_blocks.md,
docs/attention.md, docs/pretrained.md and the docstrings."""

import dataclasses

from .base import KERNEL_TESTS, Mutant

# the kernel's sink tests (docs/attention.md names them) first, then the kernels' own suite
_KERNEL_TESTS = ("tests/kernels/test_kernel_sinks.py", *KERNEL_TESTS)

MUTANTS = [
    # ------------------------------------------------------------------ OLMo 2 and OLMoE: the readers
    Mutant(
        "blind-g46-olmo2-rotation-and-gain-not-float32",
        "transformer/lm/pretrained/olmo2.py",
        (("            float32_gain_and_rotation=True,\n", "            float32_gain_and_rotation=False,\n"),),
        "An Olmo2ForCausalLM folder loads with float32_gain_and_rotation=False: its RMSNorms cast before the gain "
        "and its rotation runs in the model's dtype (Llama's rounding). float32/float64 logits are unchanged, but a "
        "bfloat16 OLMo 2 no longer rounds as OLMo 2 does, against docs/pretrained.md ('its RMSNorm's gain and the "
        "rotation in float32 (float32_gain_and_rotation: bfloat16 logits bit for bit)') and olmo2.py's docstring. "
        "Input: Olmo2().lm_config on a minimal olmo2 config.json gives float32_gain_and_rotation False.",
    ),
    Mutant(
        "blind-g46-olmoe-norm-topk-default-true",
        "transformer/lm/pretrained/olmoe.py",
        (
            (
                'router_norm_topk=config.flag("norm_topk_prob", False),',
                'router_norm_topk=config.flag("norm_topk_prob", True),',
            ),
        ),
        "An OLMoE config.json without norm_topk_prob renormalises the top-k router weights (router_norm_topk=True), "
        "against olmoe.py's docstring and docs/pretrained.md ('renormalised when norm_topk_prob (false)'): with "
        "experts_per_token > 1 every token's expert weights then sum to 1 instead of to their softmax mass, so the "
        "logits change. Input: an olmoe config with num_experts=5, num_experts_per_tok=2 and no norm_topk_prob.",
    ),
    Mutant(
        "blind-g46-olmoe-head-dim-refusal-gone",
        "transformer/lm/pretrained/olmoe.py",
        (
            (
                '        if fields["head_dim"] not in (None, d_k) or fields["d_model"] % fields["n_heads"]:\n',
                '        if fields["d_model"] % fields["n_heads"]:\n',
            ),
        ),
        "OLMoE with a head_dim other than hidden_size / num_attention_heads is no longer refused: a config.json "
        "with hidden_size 32, 4 heads and head_dim 16 loads as an LMConfig with head_dim 16 (q_norm 64 wide where "
        "OLMoE's is hidden_size = 32), against docs/pretrained.md's refusal ('head_dim other than hidden_size / "
        "num_attention_heads (its norms are d_model wide)') and olmoe.py's docstring ('is refused').",
    ),
    # ------------------------------------------------------------------ the config checks
    Mutant(
        "blind-g46-check-olmo-post-placement-accepted",
        "transformer/lm/config_checks.py",
        (
            (
                '        not config.post_sublayer_norm or config.norm_placement != "pre" or config.parallel_residual\n',
                "        not config.post_sublayer_norm or config.parallel_residual\n",
            ),
        ),
        "pre_sublayer_norm=False with norm_placement='post' is accepted: LMConfig(vocab=50, norm='rms', "
        "pre_sublayer_norm=False, post_sublayer_norm=True, norm_placement='post') constructs (a layer that is "
        "neither OLMo 2's x + Norm'(Sublayer(x)) nor a post-norm one), against docs/lm_blocks.md ('pre_sublayer_norm"
        "=False (with post_sublayer_norm=True, pre-norm placement, no parallel residual)') and check_olmo's message "
        "('it needs ... norm_placement='pre'').",
    ),
    Mutant(
        "blind-g46-check-olmo-scope-without-qk-norm",
        "transformer/lm/config_checks.py",
        (
            (
                '    if config.qk_norm_scope != "head" and not config.qk_norm:\n'
                '        _fail(f"qk_norm_scope={config.qk_norm_scope!r} says what QK-norm normalises, and qk_norm=False")\n',
                "",
            ),
        ),
        "qk_norm_scope='projection' with qk_norm=False is no longer refused: LMConfig(vocab=50, "
        "qk_norm_scope='projection') constructs and the scope is silently ignored (no QK-norm at all), against "
        "LMConfig's docstring and docs/lm_blocks.md ('qk_norm_scope=\"projection\" (with qk_norm=True)') and "
        "config_checks' module promise that a field one choice uses is refused when that choice is not made.",
    ),
    # ------------------------------------------------------------------ where the OLMo fields act
    Mutant(
        "blind-g46-attn-k-norm-as-wide-as-queries",
        "transformer/lm/attention.py",
        (
            (
                "(self.d_heads, self.kv_heads * self.d_k) if whole",
                "(self.d_heads, self.d_heads) if whole",
            ),
        ),
        "With qk_norm_scope='projection' and grouped-query heads the key norm is built n_heads * d_k wide instead of "
        "n_kv_heads * d_k: docs/lm_blocks.md's example (d_model 32, 4 heads, 2 kv heads) prints k_norm.weight "
        "torch.Size([32]) instead of torch.Size([16]), and the forward fails on the 16-wide keys, against "
        "docs/lm_blocks.md ('one over the n_kv_heads x d_k of the keys ... self_attn.k_norm.weight has n_kv_heads x "
        "d_k entries').",
    ),
    Mutant(
        "blind-g46-attn-whole-heads-joined-without-transpose",
        "transformer/lm/attention.py",
        (
            (
                "        joined = norm(x.transpose(1, 2).reshape(batch, seq, heads * d_k))\n"
                "        return joined.view(batch, seq, heads, d_k).transpose(1, 2)\n",
                "        joined = norm(x.reshape(batch, seq, heads * d_k))\n"
                "        return joined.view(batch, heads, seq, d_k)\n",
            ),
        ),
        "The projection-wide QK-norm joins the heads without moving the heads axis behind the positions: "
        "(batch, heads, seq, d_k) reshaped straight to (batch, seq, heads * d_k), so each normalised row mixes "
        "several positions' features of different heads (and the gain entries land on the wrong features); with one "
        "position (a decoding step) it is the same, with seq > 1 the queries and keys are not q_norm(q_proj(x)), "
        "against _whole's docstring ('norm over every head of x at once, as over the projection before the split "
        "... transformers' q_norm(q_proj(x))') and docs/lm_blocks.md ('one RMSNorm over all the query heads at "
        "once ... over the n_heads x d_k features of the projection'). Input: CausalSelfAttention(4, 32, "
        "kv_heads=2, qk_norm=True, qk_norm_scope='projection') on a 3-position x: prepare_heads' queries != "
        "q_norm(q_proj(x)) split into heads.",
    ),
    Mutant(
        "blind-g46-rms-wide-gain-cast-first",
        "transformer/lm/rms_norm.py",
        (
            (
                "            return (self.weight * normalised).to(x.dtype)\n",
                "            return self.weight * normalised.to(x.dtype)\n",
            ),
        ),
        "RMSNorm(wide_gain=True) casts the float32 statistics back before multiplying the gain (Llama's order): the "
        "same in float32, but a bfloat16 input gives a different rounding than (weight * normalised).to(bfloat16), "
        "against RMSNorm's docstring ('wide_gain (OLMo 2's Olmo2RMSNorm): (weight * normalised).to(x.dtype), the gain "
        "multiplied before the cast back') and LMConfig's float32_gain_and_rotation ('OLMo 2's rounding in "
        "bfloat16'). Input: a bfloat16 RMSNorm(64, wide_gain=True) with a random gain on random rows.",
    ),
    Mutant(
        "blind-g46-blocks-qk-norm-not-wide-gain",
        "transformer/lm/blocks.py",
        (
            (
                "        qk_norm_wide_gain=config.float32_gain_and_rotation,\n",
                "        qk_norm_wide_gain=False,\n",
            ),
        ),
        "float32_gain_and_rotation no longer reaches QK-norm: the q_norm and k_norm of an OLMo 2 model are Llama's "
        "(cast, then gain) while its other norms are OLMo 2's, so a bfloat16 OLMo 2 rounds its queries and keys "
        "differently from Olmo2RMSNorm, against LMConfig's docstring ('float32_gain_and_rotation: every RMSNorm "
        "multiplies its gain before the cast back') and docs/lm_blocks.md. Input: docs/lm_blocks.md's OLMo config: "
        "model.layers[0].self_attn.q_norm.wide_gain is False, and the bfloat16 logits change.",
    ),
    Mutant(
        "blind-g46-blocks-layer-norms-not-wide-gain",
        "transformer/lm/blocks.py",
        (
            (
                "        pre_norm=config.pre_sublayer_norm,\n        wide_gain=config.float32_gain_and_rotation,\n",
                "        pre_norm=config.pre_sublayer_norm,\n",
            ),
        ),
        "float32_gain_and_rotation no longer reaches the layers' norms: the post-sub-layer norms (post_norms) of an "
        "OLMo 2 model multiply the gain after the cast back, so bfloat16 OLMo 2 logits are no longer OLMo 2's "
        "rounding, against LMConfig's docstring ('every RMSNorm multiplies its gain before the cast back') and "
        "docs/pretrained.md (bfloat16 logits bit for bit). Input: docs/lm_blocks.md's OLMo config: "
        "model.layers[0].post_norms[0].wide_gain is False and the bfloat16 logits change.",
    ),
    # ------------------------------------------------------------------ gpt-oss
    Mutant(
        "blind-g46-gpt-oss-odd-layers-slide",
        "transformer/lm/pretrained/gpt_oss.py",
        (
            (
                '            return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n_layers)]\n',
                '            return ["sliding_attention" if i % 2 else "full_attention" for i in range(n_layers)]\n',
            ),
        ),
        "A gpt-oss config.json without layer_types gives the window to the odd-indexed layers: window_layers "
        "(False, True, False, True) instead of (True, False, True, False), against layer_types' docstring "
        "('transformers' default: layer i slides when i is even'), gpt_oss.py's module docstring and "
        "docs/pretrained.md ('absent: every even-indexed layer'). Input: a 4-layer gpt_oss config without layer_types.",
    ),
    Mutant(
        "blind-g46-clamped-gate-clamped-below",
        "transformer/lm/moe/clamped_experts.py",
        (
            (
                "gate, up = h[..., 0::2].clamp(max=self.limit), ",
                "gate, up = h[..., 0::2].clamp(min=-self.limit, max=self.limit), ",
            ),
        ),
        "The experts' gate is clamped from below too (as the up half is): g = clamp(gate, -L, L) instead of min(gate, "
        "L), so a gate below -L gives g * sigmoid(alpha g) at -L instead of at the gate, against the module docstring "
        "('g = min(g, L); u = clamp(u, -L, L)'), LMConfig's docstring and docs/moe.md ('g = min(h[0::2], L)'). Input: "
        "ClampedSwiGLUExperts(1, 2, 1, limit=1.0) with a gate of -3 gives a different output.",
    ),
    Mutant(
        "blind-g46-clamped-gate-up-columns-swapped",
        "transformer/lm/moe/clamped_experts.py",
        (
            (
                "gate, up = h[..., 0::2].clamp(max=self.limit), h[..., 1::2].clamp(min=-self.limit, max=self.limit)",
                "gate, up = h[..., 1::2].clamp(max=self.limit), h[..., 0::2].clamp(min=-self.limit, max=self.limit)",
            ),
        ),
        "Gate and up are read from the wrong interleaved columns (gate from the odd ones), so a gpt-oss checkpoint's "
        "gate_up_proj is misread, against the module docstring ('g = h[..., 0::2], u = h[..., 1::2]') and "
        "docs/moe.md / gpt_oss.py ('gate in the even columns'). Input: any ClampedSwiGLUExperts with random weights "
        "and biases: expert(x, 0) differs.",
    ),
    Mutant(
        "blind-g46-clamped-traced-boundary-row",
        "transformer/lm/moe/clamped_experts.py",
        (
            (
                "torch.searchsorted(ends, torch.arange(x.size(0), device=x.device), right=True)",
                "torch.searchsorted(ends, torch.arange(x.size(0), device=x.device), right=False)",
            ),
        ),
        "Traced (torch.compile / export), the row that opens each expert's block after the first (row index = the "
        "cumulative count) is given to the previous expert: an off-by-one at each block boundary, so a compiled "
        "gpt-oss model's outputs differ from the eager ones, against the module docstring ('traced (compile, export), "
        "every expert on every row, each row keeping its own expert's output') and forward's ('each block through its "
        "expert'). Input: counts [2, 2] on 4 rows with is_compiling true: row 2 takes expert 0's output.",
    ),
    Mutant(
        "blind-g46-router-softmax-topk-float32",
        "transformer/lm/moe/router.py",
        (
            (
                "            return values.softmax(dim=-1), experts\n",
                "            return values.float().softmax(dim=-1), experts\n",
            ),
        ),
        "router_softmax_topk computes its softmax in float32 whatever the logits' dtype: a float64 gpt-oss model's "
        "routing weights are float32 (rounded), against the router's docstrings ('the weights then in the logits' "
        "dtype, as theirs: float64 models keep float64 weights'; Routing: 'the logits' dtype with softmax_topk') and "
        "docs/moe.md ('the softmax of the k largest logits alone, in the logits' dtype'). Input: "
        "TopKRouter(8, 4, 2, norm_topk=False, bias=True, softmax_topk=True).double() on float64 rows.",
    ),
    # ------------------------------------------------------------------ yarn's truncate
    Mutant(
        "blind-g46-yarn-truncate-default-false",
        "transformer/lm/rotary.py",
        (('        truncate = rule.get("truncate", True)\n', '        truncate = rule.get("truncate", False)\n'),),
        "inverse_frequencies(..., 'yarn', ...) without a truncate keeps the correction range real instead of "
        "flooring and ceiling it, against its docstring ('truncate (yarn; default True)') and _yarn's (Hugging Face's "
        "truncate=True by default). Input: inverse_frequencies(64, 10000.0, 'yarn', factor=8.0, "
        "original_max_len=4096, beta_fast=32.0, beta_slow=1.0) differs from the same call with truncate=True.",
    ),
    Mutant(
        "blind-g46-rotary-from-config-drops-truncate",
        "transformer/lm/rotary.py",
        (("            truncate=config.rope_yarn_truncate,\n", ""),),
        "RotaryEmbedding.from_config no longer passes rope_yarn_truncate: an LMConfig with rope_scaling='yarn' and "
        "rope_yarn_truncate=False (gpt-oss's truncate: false) rotates with the truncated range, against LMConfig's "
        "docstring ('rope_yarn_truncate: yarn's correction range ... kept real (False: gpt-oss's truncate: false)') "
        "and docs/moe.md (gpt-oss's yarn with the correction range kept real). Input: such a config's inv_freq equals "
        "the truncate=True one.",
    ),
    # ------------------------------------------------------------------ attention sinks, torch paths
    Mutant(
        "blind-g46-torch-backend-softcap-drops-sinks",
        "transformer/backends/torch_backend.py",
        (
            (
                '        modifiers = {"softcap": softcap, "alibi_slopes": alibi_slopes, "sinks": sinks}\n',
                '        modifiers = {"softcap": softcap, "alibi_slopes": alibi_slopes}\n',
            ),
        ),
        "On the torch backend a softcap sends the call to torch's math definition without the sinks: softcap and "
        "sinks together attend as if there were no sinks, against docs/attention.md's backend table ('torch ... with "
        "a softcap, torch's math definition in plain PyTorch with the column') and its promise 'no backend ever drops "
        "the sinks'. Input: run_backend('torch', q, k, v, None, 0.0, softcap=5.0, sinks=z) != the eager backend's.",
    ),
    Mutant(
        "blind-g46-torch-sink-causal-bottom-right",
        "transformer/backends/torch_backend.py",
        (
            (
                "        mask = torch.ones(q_len, k_len, dtype=torch.bool, device=query.device).tril()\n",
                "        mask = torch.ones(q_len, k_len, dtype=torch.bool, device=query.device).tril(k_len - q_len)\n",
            ),
        ),
        "With sinks, is_causal on the torch backend becomes bottom-right aligned when the queries are fewer than the "
        "keys (query i sees keys up to k_len - q_len + i), while torch's is_causal, the eager backend and the "
        "reference are top-left, against sink_column_inputs' docstring ('is_causal, top-left') and docs/attention.md "
        "(every backend equal to the reference with queries shorter than the keys). Input: the drop-in with "
        "is_causal=True, q_len 2, k_len 5 and sinks under use_backend('torch') != use_backend('eager').",
    ),
    # ------------------------------------------------------------------ attention sinks, the kernel
    Mutant(
        "blind-g46-kernel-sink-not-base-two",
        "kernels/_forward.py",
        (
            (
                "        sink = tl.load(SINKS + h).to(LSE.dtype.element_ty) * 1.4426950408889634\n",
                "        sink = tl.load(SINKS + h).to(LSE.dtype.element_ty)\n",
            ),
        ),
        "The kernel's online softmax (which works in base 2) starts from the sink's logit without converting it to "
        "base 2: the sink weighs as exp(z_h ln 2) instead of exp(z_h), so out and lse differ from the reference for any "
        "z_h != 0, against _fwd_kernel's docstring ('m = z_h and l = 1 ... base 2, as the running max'), "
        "flash_attention's ('lse_i = log(exp(z_h) + sum_j exp(s_ij))') and docs/attention.md. Input: "
        "flash_attention_with_lse(q, k, v, sinks=[0.5, -1.0]) under TRITON_INTERPRET=1 vs the reference.",
        _KERNEL_TESTS,
    ),
    Mutant(
        "blind-g46-kernel-sink-grad-lse-sign",
        "kernels/_op.py",
        (("        delta = delta - grad_lse\n", "        delta = delta + grad_lse\n"),),
        "The sinks' gradient adds the logsumexp's incoming gradient instead of subtracting it: when the returned lse "
        "is used (flash_attention_with_lse, split-KV combines), d z_h is wrong, against sink_grad's docstring "
        "('d z_h = -sum over batch and queries of p_i (delta_i - d lse_i)'). Input: z.grad of (out.sum() + "
        "lse.sum()) from flash_attention_with_lse(q, k, v, sinks=z) vs the reference's autograd.",
        _KERNEL_TESTS,
    ),
]


# The suites each mutant runs (chosen by the lead after the blind review, by the file a mutant edits)
_OLMO = ("tests/test_pretrained_olmo2.py", "tests/test_pretrained_olmoe.py", "tests/test_lm_config_sweep.py",
         "tests/test_lm_blocks.py", "tests/test_export.py")  # fmt: skip
_GPT_OSS = ("tests/test_moe_gpt_oss_blocks.py", "tests/test_pretrained_gpt_oss.py", "tests/test_moe.py",
            "tests/test_export.py")  # fmt: skip
_TESTS = {
    "transformer/lm/pretrained/olmo2.py": _OLMO,
    "transformer/lm/pretrained/olmoe.py": _OLMO,
    "transformer/lm/config_checks.py": _OLMO,
    "transformer/lm/attention.py": _OLMO,
    "transformer/lm/rms_norm.py": _OLMO,
    "transformer/lm/blocks.py": _OLMO,
    "transformer/lm/pretrained/gpt_oss.py": _GPT_OSS,
    "transformer/lm/moe/clamped_experts.py": _GPT_OSS,
    "transformer/lm/moe/router.py": _GPT_OSS,
    "transformer/lm/rotary.py": (
        "tests/test_lm_rotary.py",
        "tests/test_pretrained_gpt_oss.py",
        "tests/test_pretrained_parity.py",
    ),  # fmt: skip
    "transformer/backends/torch_backend.py": (
        "tests/test_attention_sinks_backends.py",
        "tests/test_attention_sinks.py",
        "tests/test_sdpa_dropin.py",
    ),  # fmt: skip
}
MUTANTS = [m if m.tests else dataclasses.replace(m, tests=_TESTS[m.file]) for m in MUTANTS]
