"""Blind review of issue 47's newest code (2026-12-02), by a reviewer who did not read the tests: the decode weight
layout (transformer/lm/decode_layout.py, its use in transformer/lm/generation.py's ``weight_layout`` and the CLI's
``--weight-layout`` in transformer/cli/generate_flags.py and checkpoint_commands.py), the drop-in's reference moved
into transformer/backends/sdpa_reference.py (and its callers in torch_backend.py and sdpa.py), and the one writer of
config.json's common fields (transformer/lm/pretrained/written_fields.py, and the writers that call it: gpt2.py,
gpt_neox.py, llama.py, gemma.py, gpt_oss.py). Docs read: docs/lm.md (weight_layout), docs/cli.md (generate),
docs/attention.md (the drop-in), docs/pretrained.md (saving) and the docstrings."""

import dataclasses

from .base import Mutant

MUTANTS = [
    # ------------------------------------------------------------------ the decode weight layout
    Mutant(
        "blind-l47-pays-batch-strictly-below",
        "transformer/lm/decode_layout.py",
        (
            (
                "        if any(batch <= largest and ratio >= smallest for largest, smallest in PAYS):\n",
                "        if any(batch < largest and ratio >= smallest for largest, smallest in PAYS):\n",
            ),
        ),
        "A rule of PAYS only applies to batches strictly below its batch: at batch 1 the (1, 2.0) rule never fires, "
        "so a gated network's gate and up maps (out/in = 4) are no longer relaid (only maps with ratio >= 16), and at "
        "batch 8 the head is not relaid either, against decode_layout.py's PAYS comment ('a weight is relaid for a "
        "batch when a rule with a batch at least as large allows its ratio') and docs/lm.md ('the output head, gate "
        "and up at batch 1; up to batch 8 the head alone'). Input: decode_layout_weights(nn.Linear(64, 256), 1) is "
        "[] (was [weight]); decode_layout_weights(nn.Linear(8, 256), 8) is [].",
    ),
    Mutant(
        "blind-l47-min-new-tokens-exclusive",
        "transformer/lm/decode_layout.py",
        (
            (
                '    if check_weight_layout(who, weight_layout) == "as_loaded" or max_new_tokens < MIN_NEW_TOKENS:\n',
                '    if check_weight_layout(who, weight_layout) == "as_loaded" or max_new_tokens <= MIN_NEW_TOKENS:\n',
            ),
        ),
        "A request of exactly MIN_NEW_TOKENS (32) new tokens decodes with the weights as loaded, against "
        "laid_out_for_decoding's docstring ('at least :data:`MIN_NEW_TOKENS` new tokens'), generate's ('a request "
        "of at least 32 new tokens') and docs/cli.md ('a continuation of at least 32 tokens'). Input: with "
        "laid_out_for_decoding(lm, 1, 32) as relaid: relaid is [] for a float32 CPU model whose head is "
        "vocab >= 2 d_model (33 tokens still relays it).",
    ),
    Mutant(
        "blind-l47-half-precision-relaid",
        "transformer/lm/decode_layout.py",
        (
            (
                'data.dtype != torch.float32 or data.device.type != "cpu":\n',
                'not data.dtype.is_floating_point or data.device.type != "cpu":\n',
            ),
        ),
        "Every floating CPU weight is relaid, float16, bfloat16 and float64 included (a generalisation from float32 "
        "to 'floating'), against decode_layout.py's docstring ('Half precision is never relaid (its rounding is kept "
        "bit for bit equal to transformers')'; decode_layout_weights: 'each distinct float32 ... weight'), docs/lm.md "
        "('Half precision ..., float64, CUDA tensors and tensor subclasses are never relaid') and generate's "
        "docstring. Input: decode_layout_weights(nn.Linear(8, 256).to(torch.bfloat16), 1) (or .double()) returns "
        "the weight (was []); a bfloat16 model's 64-token generate no longer matches as_loaded's logits bit for bit.",
    ),
    Mutant(
        "blind-l47-cli-beam-drops-weight-layout",
        "transformer/cli/checkpoint_commands.py",
        (
            (
                "                    end_symbols=ends[1:],\n                    weight_layout=args.weight_layout,\n"
                "                )\n",
                "                    end_symbols=ends[1:],\n                )\n",
            ),
        ),
        "`typed-transformer generate --beam-size K` no longer passes --weight-layout on to generate: beam search "
        "always decodes with weight_layout='auto', so `--beam-size 2 --weight-layout as_loaded --max-new-tokens 40` "
        "still relays the head (generate called with weight_layout defaulted), against docs/cli.md "
        "('as_loaded: the weights as loaded, logits bit for bit a forward call's') and docs/lm.md ('The CLI's "
        "`--weight-layout as_loaded` turns it off'). Input: the generate command on a tiny checkpoint with "
        "--beam-size 2 --weight-layout as_loaded, with generate spied on: its weight_layout is 'auto', not "
        "'as_loaded'.",
    ),
    # ------------------------------------------------------------------ the drop-in's reference
    Mutant(
        "blind-l47-reference-causal-bottom-right",
        "transformer/backends/sdpa_reference.py",
        (
            (
                "        attn_mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()\n",
                "        attn_mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril(\n"
                "            k.size(-2) - q.size(-2)\n"
                "        )\n",
            ),
        ),
        "The reference's is_causal is aligned bottom-right (query i attends keys j <= i + S - L, as a decode step "
        "would want) instead of top-left, against sdpa.py's promise ('is_causal: query i attends key j iff j <= i "
        "(top-left aligned when L != S, as torch)') and sdpa_reference.py's ('torch's definition (its math "
        "backend)'). Equal lengths are unchanged. Input: scaled_dot_product_attention(q (1,1,2,8), k/v (1,1,5,8), "
        "is_causal=True, backend='eager') differs from torch's function (query 0 now attends keys 0-3, not key 0); "
        "the 'torch' backend's softcap path (reference) differs the same way.",
    ),
    Mutant(
        "blind-l47-reference-empty-row-not-zero",
        "transformer/backends/sdpa_reference.py",
        (
            (
                "        probs = scores.masked_fill(empty, 0.0).softmax(dim=-1).masked_fill(empty, 0.0)\n",
                "        probs = scores.masked_fill(empty, 0.0).softmax(dim=-1)\n",
            ),
        ),
        "A fully masked row (every score -inf, no sinks) is filled with 0 before the softmax but not zeroed after "
        "it: it outputs the mean of the values (uniform probabilities) and passes gradients to them, against "
        "reference's docstring ('Rows whose every score is -inf (a fully masked row) output 0 with zero gradients, "
        "as torch's safe softmax') and sdpa.py's ('a query row that may attend no key ... outputs 0 with zero "
        "gradients'). Input: scaled_dot_product_attention(q, k, v, attn_mask=torch.zeros(L, S, dtype=torch.bool), "
        "backend='eager') is v.mean(-2) per row, not zeros.",
    ),
    Mutant(
        "blind-l47-reference-modifiers-after-mask",
        "transformer/backends/sdpa_reference.py",
        (
            (
                "    scores = modify_scores(scores, softcap, alibi_slopes)\n"
                "    if is_causal:\n"
                "        attn_mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()\n"
                "    if attn_mask is not None:\n"
                "        if attn_mask.dtype == torch.bool:\n"
                '            scores = scores.masked_fill(attn_mask.logical_not(), float("-inf"))\n'
                "        else:\n"
                "            scores = scores + attn_mask.to(acc)\n",
                "    if is_causal:\n"
                "        attn_mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()\n"
                "    if attn_mask is not None:\n"
                "        if attn_mask.dtype == torch.bool:\n"
                '            scores = scores.masked_fill(attn_mask.logical_not(), float("-inf"))\n'
                "        else:\n"
                "            scores = scores + attn_mask.to(acc)\n"
                "    scores = modify_scores(scores, softcap, alibi_slopes)\n",
            ),
        ),
        "The score modifiers act after the mask: a softcap maps the masked -inf to c * tanh(-inf) = -c, so masked "
        "keys are attended again, against reference's docstring ('The score modifiers (softcap, then "
        "alibi_slopes ...) act on the scaled scores before the mask, as in the reference') and sdpa.py's ('applied "
        "before the mask'). Input: scaled_dot_product_attention(q, k, v (1,2,4,8), is_causal=True, softcap=5.0, "
        "backend='eager'): row 0 attends all 4 keys (not key 0 alone); the 'torch' backend's float32 softcap path "
        "(reference) gives the same wrong rows.",
    ),
    # ------------------------------------------------------------------ the written config.json fields
    Mutant(
        "blind-l47-written-attention-dropout-is-dropout",
        "transformer/lm/pretrained/written_fields.py",
        (
            (
                '        "attention_dropout": config.attention_dropout,\n',
                '        "attention_dropout": config.dropout,\n',
            ),
        ),
        "standard_fields writes the residual dropout as config.json's attention_dropout (a swapped field), against "
        "standard_fields' docstring ('and the attention's dropout (``attention_dropout``)'). Input: "
        "save_pretrained of an LMConfig that GPT-NeoX writes with dropout=0.0 and attention_dropout=0.1 (or a Llama "
        "one with attention_dropout=0.1, whose dropout is 0): config.json's attention_dropout is 0.0 and the read "
        "back differs (refused by writable, or a folder whose attention dropout was lost).",
    ),
    Mutant(
        "blind-l47-written-layer-kinds-default-flipped",
        "transformer/lm/pretrained/written_fields.py",
        (
            (
                "        layers = (config.sliding_window is not None,) * config.n_layers\n",
                "        layers = (config.sliding_window is None,) * config.n_layers\n",
            ),
        ),
        "With no window_layers, layer_kind_fields marks every layer full_attention when there is a window and "
        "sliding_attention when there is none (a flipped comparison), against its docstring ('absent: every layer "
        "slides when there is a window, none when there is not'). Input: layer_kind_fields(LMConfig(vocab=50, "
        "n_layers=2, ..., sliding_window=4)) gives layer_types ['full_attention', 'full_attention'] (was "
        "['sliding_attention'] * 2); with sliding_window None it gives sliding_attention layers and a null window, "
        "which Gemma's reader refuses.",
    ),
    Mutant(
        "blind-l47-written-gelu-tanh-as-gelu-new",
        "transformer/lm/pretrained/written_fields.py",
        (('    "gelu_tanh": "gelu_pytorch_tanh",\n', '    "gelu_tanh": "gelu_new",\n'),),
        "The fused tanh GELU is written as transformers' gelu_new instead of gelu_pytorch_tanh, against "
        "WRITTEN_ACTIVATIONS' comment ('the fused tanh GELU is transformers' gelu_pytorch_tanh, the written out one "
        "its gelu_new (equal in float32; in half precision each rounds its own way)'). Input: "
        "written_activation('gelu_tanh') == 'gelu_new'; a Gemma 2 model (hidden_activation gelu_pytorch_tanh, "
        "activation 'gelu_tanh') saved with save_pretrained writes hidden_activation 'gelu_new', which reads back "
        "as activation 'gelu_new' (refused by writable, or a half-precision model that rounds differently).",
    ),
]


_TESTS = {
    "transformer/lm/decode_layout.py": ("tests/test_lm_decode_layout.py",),
    "transformer/cli/checkpoint_commands.py": ("tests/test_cli_generate_flags.py",),
    "transformer/backends/sdpa_reference.py": (
        "tests/test_sdpa_dropin.py",
        "tests/test_sdpa_torch_parity.py",
        "tests/test_sdpa_differential.py",
    ),
    "transformer/lm/pretrained/written_fields.py": (
        "tests/test_pretrained_written_fields.py",
        "tests/test_pretrained_export.py",
        "tests/test_pretrained_gemma.py",
    ),
}
MUTANTS = [dataclasses.replace(m, tests=_TESTS[m.file]) for m in MUTANTS]
