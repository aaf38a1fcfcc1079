"""Blind review (2026-12-02, tag p46) of: issue 42's proofs and what they prove (positions_from_documents in
transformer/lm/positions.py, the windowed LMCache, LMCache.reorder, the DecoderCache input and the structured
inputs' leaf names in transformer/proofs/structures.py; docs/proved-shapes.md, docs/promises/proofs.md); issue 43's
chat templates for batches (PretrainedTokenizer.apply_chat_template with a batch of conversations, padding and
continue_final_message: transformer/lm/pretrained/tokenizer.py and chat_template.py; docs/pretrained.md); the CLI's
resume hint and resumed token counts (transformer/cli/messages.py, train_files.py; docs/training.md,
docs/troubleshooting.md); issue 45's fused Adam choice of noam_adam (transformer/training/schedule.py,
fused_supported; docs/training.md) and the gelu_new activation (transformer/layers.py, the pretrained activation
maps; docs/lm_blocks.md). By a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    # ---- issue 42: the proofs and what they prove ----
    Mutant(
        "blind-p46-document-starts-rolled-over-batch",
        "transformer/lm/positions.py",
        (
            (
                "    starts = (documents != documents.roll(1, dims=-1)) | (slots == 0)\n",
                "    starts = (documents != documents.roll(1, dims=0)) | (slots == 0)\n",
            ),
        ),
        "positions_from_documents compares each id with the same slot of the previous batch row (roll over the "
        "batch axis) instead of the previous slot of its own row: a single row [[0, 0, 1, 1, 1]] gives positions "
        "[0, 1, 2, 3, 4] instead of the docstring's [0, 1, 0, 1, 2] (and with several rows a new document starts "
        "wherever rows differ), so each document no longer sees the positions it would alone (positions.py module "
        "docstring; docs/proved-shapes.md, packed documents: each document's own positions).",
    ),
    Mutant(
        "blind-p46-window-trim-keeps-window",
        "transformer/lm/positions.py",
        (
            (
                "        drop = self.held - (self.window - 1) if self.window is not None else 0\n",
                "        drop = self.held - self.window if self.window is not None else 0\n",
            ),
        ),
        "LMCache.trim keeps the last `window` positions instead of `window - 1`: after a prompt of 10 through a "
        "window-4 model the cache holds 4 keys (held == 4, not 3), against the LMCache docstring and "
        "docs/proved-shapes.md ('keeps min(held, window - 1) keys'; the windowed cache input 'keeps at most window "
        "- 1 positions', whose step drops one exactly when the cache holds window - 1: now it drops none there).",
    ),
    Mutant(
        "blind-p46-reorder-pads-along-keys",
        "transformer/lm/positions.py",
        (
            (
                "            self.real_keys = self.real_keys.index_select(0, index.to(self.real_keys.device))\n",
                "            self.real_keys = self.real_keys.index_select(1, index.to(self.real_keys.device))\n",
            ),
        ),
        "LMCache.reorder selects the beam index along the held-keys axis of real_keys instead of the batch axis: "
        "after a left-padded prompt (batch 2, 5 positions) reorder(tensor([1, 0])) leaves real_keys (2, 2) columns "
        "1 and 0 instead of rows 1 and 0 (2, 5), and the next step fails with a TypeCheckError: the pads no longer "
        "follow the index (LMCache docstring: "
        "'reorder keeps them with the keys'; docs/proved-shapes.md: 'a left-padded prompt's pads (real_keys) and "
        "next positions kept with the keys').",
    ),
    Mutant(
        "blind-p46-dropped-not-fixed-at-export",
        "transformer/lm/positions.py",
        (
            (
                'register_pytree(LMCache, ("layers", "real_keys", "next_positions"), ("window", "dropped"), _lm_cache)\n',
                'register_pytree(LMCache, ("layers", "real_keys", "next_positions"), ("window",), _lm_cache)\n',
            ),
            ("    cache = LMCache.__new__(LMCache)\n", "    cache = LMCache.__new__(LMCache)\n    cache.dropped = 0\n"),
        ),
        "The count of positions a window dropped is left out of LMCache's pytree context (a rebuilt cache counts "
        "from 0): after a 10-token prompt through a window-4 model, the cache flattened and rebuilt (torch.export's "
        "input and output) has length 3 instead of 10, so an exported windowed step continues the positions from "
        "3 (the rotary/learned positions count from dropped) and a cache with another dropped count is no longer "
        "refused, against docs/proved-shapes.md ('Fixed at export: the count of positions a window dropped ... the "
        "program exported for one count refuses a cache with another'; 'its window and the positions a window "
        "dropped are fixed').",
    ),
    Mutant(
        "blind-p46-documents-sorted-across-batch",
        "transformer/proofs/structures.py",
        (
            (
                "                made[-1] = made[-1].sort(dim=-1).values\n",
                "                made[-1] = made[-1].sort(dim=0).values\n",
            ),
        ),
        "The eager runs of a proof resize a packed-documents mask and sort its ids across the batch instead of "
        "along each row, so the ids at other sizes are not non-decreasing along a row (resized's own comment; "
        "docs/proved-shapes.md: 'The eager runs at other sizes make document ids non-decreasing, as a mask "
        "requires'): the proof of the rotary language model with AttentionMask(documents=...) named (batch, seq) "
        "no longer reports PROVED: its eager rerun builds a mask whose row decreases and prove raises "
        "'ValueError: AttentionMask: documents must be non-decreasing along each row ...'.",
    ),
    Mutant(
        "blind-p46-cross-attention-values-named-cache-len",
        "transformer/proofs/structures.py",
        (
            (
                '    if part in ("_keys", "_values") and ".src_attn." in leaf:\n',
                '    if part == "_keys" and ".src_attn." in leaf:\n',
            ),
        ),
        "Only a cross-attention cache's keys are named src_len: its values keep the self-attention's names (batch, "
        "heads, cache_len, d_k), against docs/proved-shapes.md ('a cross-attention cache's (batch, heads, src_len, "
        "d_k)'): leaf_axes('cache.layers[0].src_attn._values', ...) names axis 2 cache_len, and the DecoderCache "
        "proof of EncoderDecoder.decode(memory, src_mask, token, None, cache=cache) over batch 1..8, src_len 1..32, "
        "cache_len 1..31 is NOT PROVED (could not be traced; 'holds only when src_len <= cache_len') instead of "
        "PROVED for every batch, source length and cache length.",
    ),
    Mutant(
        "blind-p46-real-keys-axis-named-k-len",
        "transformer/proofs/structures.py",
        (('    "real_keys": ("batch", "cache_len"),\n', '    "real_keys": ("batch", "k_len"),\n'),),
        "A language model cache's real_keys are named (batch, k_len) instead of (batch, cache_len) "
        "(docs/proved-shapes.md, 'Named by their documented axes': real_keys (batch, cache_len)): a padded cache's "
        "pads get another size name than its keys, so k_len stays the example's: the one-token step after a "
        "left-padded cache (rotary, batch 1..16, cache_len 1..30) is NOT PROVED ('the model's code holds only when "
        "cache_len == 6', the example's length) instead of PROVED.",
    ),
    Mutant(
        "blind-p46-decoder-reorder-keeps-memory",
        "transformer/cache.py",
        (
            (
                "        self.self_attn.reorder(index)\n        self.src_attn.reorder(index)\n",
                "        self.self_attn.reorder(index)\n",
            ),
        ),
        "LayerCache.reorder no longer reorders the cross-attention cache (as if every beam shared one memory): a "
        "DecoderCache of batch 2 reordered by tensor([1, 0]) keeps row 0's encoder memory in row 0, and reordered "
        "by tensor([0, 0, 1]) its src_attn still has batch 2, against the cache module's docstring ('All can be "
        "reordered along the batch for beam search') and StackCache.reorder ('Keep batch rows index in every "
        "layer').",
    ),
    # ---- issue 43: chat templates for batches ----
    Mutant(
        "blind-p46-tuple-conversations-not-a-batch",
        "transformer/lm/pretrained/tokenizer.py",
        (
            (
                "    return isinstance(messages, (list, tuple)) and len(messages) > 0 and isinstance(messages[0], (list, tuple))\n",
                "    return isinstance(messages, (list, tuple)) and len(messages) > 0 and isinstance(messages[0], list)\n",
            ),
        ),
        "A batch whose conversations are tuples ([(msg, msg), (msg,)]) is no longer taken as a batch: it is rendered "
        "as one conversation and refused (ChatTemplateError 'messages[0] must be a dict'), against _is_batch's "
        "docstring ('its first item a list or tuple', transformers' test).",
    ),
    Mutant(
        "blind-p46-chat-padding-side-ignored",
        "transformer/lm/pretrained/tokenizer.py",
        (
            (
                "            padding_side=padding_side,\n            add_special_tokens=False,\n",
                "            padding_side=None,\n            add_special_tokens=False,\n",
            ),
        ),
        "apply_chat_template drops its padding_side: a batch of conversations with padding=True, "
        "padding_side='left' is padded on the tokenizer's side (right by default), so the docs' example "
        "attention_mask [[0, 0, 0, 0, 1, 1, 1], ...] comes out [[1, 1, 1, 0, 0, 0, 0], ...] (docs/pretrained.md: "
        "'padding_side=\"left\" or \"right\" (default the tokenizer's padding_side)'; the method's docstring).",
    ),
    Mutant(
        "blind-p46-continue-first-text-block",
        "transformer/lm/pretrained/chat_template.py",
        (("        for block in reversed(blocks):\n", "        for block in blocks:\n"),),
        "continue_final_message on a final message whose content is a list of text blocks opens the first text "
        "block instead of the last: the text is cut after the first block, so the last block's text (the one to "
        "continue) is missing from the prompt (render_chat's docstring: 'a tag is appended ... to its last text "
        "block when the content is a list'; transformers' rule).",
    ),
    Mutant(
        "blind-p46-return-dict-default-true",
        "transformer/lm/pretrained/tokenizer.py",
        (("        return_dict: bool = False,\n", "        return_dict: bool = True,\n"),),
        "apply_chat_template's return_dict defaults to True (transformers 5's default): a plain "
        "apply_chat_template(messages) returns {'input_ids', 'attention_mask'} instead of the ids, against "
        "docs/pretrained.md ('ours is False, the ids alone, so that code written for one conversation keeps "
        "working') and the method's docstring.",
    ),
    Mutant(
        "blind-p46-untokenized-single-as-list",
        "transformer/lm/pretrained/tokenizer.py",
        (("            return texts if batched else texts[0]\n", "            return texts\n"),),
        "apply_chat_template(messages, tokenize=False) on one conversation returns a one-item list instead of the "
        "text (docstring: 'the text (tokenize=False; a list of texts for a batch)'; docs/pretrained.md's example "
        "prints the string 'w2 w5 w6 w3 w7 w9').",
    ),
    Mutant(
        "blind-p46-continue-keeps-trimmed-space",
        "transformer/lm/pretrained/chat_template.py",
        (
            (
                "    return text[:at] if text[at : at + len(CONTINUE_TAG)] == CONTINUE_TAG else text[:at].rstrip()\n",
                "    return text[:at]\n",
            ),
        ),
        "continue_final_message keeps the final message's trailing space where the template trims the content "
        "(`{{ message['content'] | trim }}` with content 'Sure, ' gives '... Sure, ' instead of '... Sure,'), "
        "against docs/pretrained.md ('the text ends with that message's content (without its trailing space where "
        "the template trims it, as transformers cuts it)') and _cut_at_tag's docstring.",
    ),
    # ---- the CLI's resume hint and resumed token counts ----
    Mutant(
        "blind-p46-resume-dir-unquoted",
        "transformer/cli/messages.py",
        (
            (
                '    command = f"{PROG} train {task} --resume --out {shlex.quote(out)}"\n',
                '    command = f"{PROG} train {task} --resume --out {out}"\n',
            ),
        ),
        "The printed resume command leaves the directory unquoted: resume_command('lm', 'runs/my run', {}) gives "
        "'... --out runs/my run', which a shell splits, against docs/training.md ('the directory quoted for a "
        "shell where it needs it') and the docstring ('exactly as it can be pasted').",
    ),
    Mutant(
        "blind-p46-resume-nproc-world-size",
        "transformer/cli/messages.py",
        (
            (
                "    ranks = f\"--nproc-per-node {local} -m transformer {command.removeprefix(PROG + ' ')}\"\n",
                "    ranks = f\"--nproc-per-node {world} -m transformer {command.removeprefix(PROG + ' ')}\"\n",
            ),
        ),
        "On several nodes the resume hint asks for WORLD_SIZE processes per node (WORLD_SIZE=8, LOCAL_WORLD_SIZE=2: "
        "'torchrun --nnodes 4 --nproc-per-node 8 ...', 32 ranks) instead of LOCAL_WORLD_SIZE, so the sharded "
        "checkpoint's rank count is not kept (docstring: 'the same number of ranks, which a sharded checkpoint "
        "needs'; docs/training.md). One node (world == local) is unchanged.",
    ),
    Mutant(
        "blind-p46-reused-translate-counts-source-only",
        "transformer/cli/train_files.py",
        (
            (
                "    return [store for split in (data.train, data.valid) for store in (split.src, split.tgt)]\n",
                "    return [store for split in (data.train, data.valid) for store in (split.src,)]\n",
            ),
        ),
        "A resumed `train translate` reports only the source tokens as reused (and takes the corpus report from the "
        "held-out source store, not the last store): 'reused N tokens' counts half the stores, against "
        "docs/training.md and docs/troubleshooting.md ('for train translate the source and target tokens of both "
        "splits') and _token_stores's docstring.",
    ),
    Mutant(
        "blind-p46-reused-count-sequences",
        "transformer/cli/train_files.py",
        (
            (
                "    tokens = sum(int(store.offsets[-1]) for store in _token_stores(data))\n",
                "    tokens = sum(len(store.offsets) - 1 for store in _token_stores(data))\n",
            ),
        ),
        "The resumed summary counts the stores' sequences (offsets has n + 1 entries) instead of their tokens: "
        "'reused 3 tokens from ...' for a store of 3 lines of 1,481 tokens, against docs/troubleshooting.md "
        "('the count is the store's tokens') and docs/training.md ('reused 123,456 tokens').",
    ),
    # ---- issue 45: the fused Adam choice of noam_adam ----
    Mutant(
        "blind-p46-fused-false-still-fused",
        "transformer/training/schedule.py",
        (("    if fused is None:\n", "    if not fused:\n"),),
        "noam_adam(..., fused=False) is treated as the default and fuses where fused_supported says it runs: "
        "noam_adam(cpu float params, 32, 1, 10, fused=False)[0].defaults['fused'] is True, against the docstring "
        "('False: torch's default (the package's before issue 45)') and docs/training.md ('fused=False the loop of "
        "before').",
    ),
    Mutant(
        "blind-p46-fused-cuda-only",
        "transformer/training/schedule.py",
        (
            (
                '        type(p) in (torch.Tensor, torch.nn.Parameter) and p.device.type in ("cpu", "cuda") and p.dtype in FUSED_DTYPES\n',
                '        type(p) in (torch.Tensor, torch.nn.Parameter) and p.device.type == "cuda" and p.dtype in FUSED_DTYPES\n',
            ),
        ),
        "fused_supported says no for CPU parameters, so noam_adam never fuses on the CPU (fused_supported([cpu "
        "float32 Parameter]) is False; the optimizer's defaults['fused'] None), against the docstring ('of a "
        "floating dtype on the CPU or CUDA') and docs/training.md ('plain float tensors on the CPU or CUDA').",
    ),
    Mutant(
        "blind-p46-fused-any-parameter",
        "transformer/training/schedule.py",
        (("    return all(\n", "    return any(\n"),),
        "fused_supported is True when any parameter is supported, not all: a float32 CPU parameter with a float32 "
        "meta-device one (or an integer buffer made a parameter, or a DTensor) gives True, and noam_adam then asks "
        "torch's fused Adam for tensors it does not run on, against the docstring ('runs on all of parameters').",
    ),
    # ---- issue 45: gelu_new ----
    Mutant(
        "blind-p46-gelu-new-on-fused-kernel",
        "transformer/layers.py",
        (
            (
                '    "gelu_new": lambda x: 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0)))),\n',
                '    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),\n',
            ),
        ),
        "'gelu_new' computed on torch's fused tanh kernel (equal in float32 within rounding) instead of the "
        "formula written out: in bfloat16 it no longer equals transformers' NewGELUActivation bit for bit, against "
        "docs/lm_blocks.md ('\"gelu_new\" (the same formula written out operation by operation, as transformers' "
        "NewGELUActivation)'; 'its half-precision outputs are then transformers' bit for bit') and the ACTIVATIONS "
        "comment in layers.py.",
    ),
    Mutant(
        "blind-p46-gpt2-folder-loads-gelu-tanh",
        "transformer/lm/pretrained/architectures.py",
        (
            (
                '    "gelu_new": "gelu_new",  # written out: its half-precision rounding is not the fused kernel\'s\n',
                '    "gelu_new": "gelu_tanh",  # written out: its half-precision rounding is not the fused kernel\'s\n',
            ),
        ),
        "A folder whose activation is gelu_new (GPT-2's default) loads with activation='gelu_tanh' (the fused "
        'kernel) again, against docs/lm_blocks.md (\'a GPT-2 folder loads with "gelu_new" (its half-precision '
        "outputs are then transformers' bit for bit)'): the loaded config's activation is 'gelu_tanh', and in "
        "bfloat16 the outputs differ from transformers'.",
    ),
    Mutant(
        "blind-p46-gpt2-writes-gelu-new-as-pytorch-tanh",
        "transformer/lm/pretrained/written_fields.py",  # GPT-2's map, shared by every writer since issue 44
        (('    "gelu_new": "gelu_new",\n', '    "gelu_new": "gelu_pytorch_tanh",\n'),),
        "A GPT-2 model with activation='gelu_new' is written with activation_function 'gelu_pytorch_tanh': "
        "GPT2().config_json(config)['activation_function'] is not 'gelu_new', so the exported folder no longer "
        "round-trips (it loads back as 'gelu_tanh') and transformers computes it with the fused kernel, against the "
        "map's comment ('the written out one its gelu_new') and docs/lm_blocks.md (GPT-2's gelu_new is \"gelu_new\").",
    ),
]


# The suites each mutant runs (chosen by the lead after the blind review, by the file a mutant edits)
_PROOFS = ("tests/test_lm_positions.py", "tests/test_prove.py", "tests/test_prove_inputs.py", "tests/test_export.py",
           "tests/test_lm_window_cache.py", "tests/test_cache.py", "tests/test_lm_beam_transformers.py",
           "tests/test_mask_documents.py", "tests/test_lm_packing.py")  # fmt: skip
_CHAT = ("tests/test_chat_batches.py", "tests/test_chat_templates.py", "tests/test_cli_chat_stream.py")
_RESUME = ("tests/test_cli_resume_as_printed.py", "tests/test_resume_promises.py", "tests/test_cli_resume_schedule.py",
           "tests/test_run_safety_resume.py", "tests/test_cli_lm.py", "tests/test_distributed_cli.py")  # fmt: skip
_GELU = ("tests/test_lm_gpt2.py", "tests/test_pretrained_parity.py", "tests/test_lm_config_sweep.py",
         "tests/test_pretrained_low_precision.py")  # fmt: skip
_TESTS = {
    "transformer/lm/positions.py": _PROOFS,
    "transformer/proofs/structures.py": _PROOFS,
    "transformer/cache.py": _PROOFS,
    "transformer/lm/pretrained/tokenizer.py": _CHAT,
    "transformer/lm/pretrained/chat_template.py": _CHAT,
    "transformer/cli/messages.py": _RESUME,
    "transformer/cli/train_files.py": _RESUME,
    "transformer/training/schedule.py": ("tests/test_training_fused_adam.py", "tests/test_training.py"),
    "transformer/layers.py": _GELU,
    "transformer/lm/pretrained/architectures.py": _GELU,
    "transformer/lm/pretrained/gpt2.py": _GELU,
    "transformer/lm/pretrained/written_fields.py": _GELU,
}
MUTANTS = [m if m.tests else dataclasses.replace(m, tests=_TESTS[m.file]) for m in MUTANTS]
