"""Mutants of the decoder-only language model, its generation, tokenizers and file corpora.

Each runs the LM and data test files only (``tests=``): they are the ones that state these laws.
"""

from .base import Mutant

LM_TESTS = ("tests/test_lm.py", "tests/test_lm_generate.py")
DATA_TESTS = ("tests/test_data_batches.py", "tests/test_data_files.py", "tests/test_data_tokenizers.py")
CLI_TESTS = ("tests/test_cli_lm.py",)


def L(id: str, file: str, old: str, new: str, what: str, tests: tuple[str, ...] = LM_TESTS) -> Mutant:
    return Mutant(id, file, ((old, new),), what, tests)


_ATT, _LAY, _LM, _GEN = (
    "transformer/lm/attention.py",
    "transformer/lm/layers.py",
    "transformer/lm/model.py",
    "transformer/lm/generation.py",
)
_BAT, _COR, _TXT = "transformer/data/token_batches.py", "transformer/data/corpora.py", "transformer/data/text_files.py"

MUTANTS = [
    # --- the functional transformer's formulation (tests/test_lm.py: the head-by-head reference)
    L(
        "lm-std-unbiased",
        _LAY,
        "        std = x.std(-1, correction=0, keepdim=True)\n",
        "        std = x.std(-1, correction=1, keepdim=True)\n",
        "the std-plus-eps normalisation uses the unbiased std",
    ),
    L(
        "lm-std-eps-inside-sqrt",
        _LAY,
        "        return self.weight * (x - mean) / (std + self.eps) + self.bias\n",
        "        return self.weight * (x - mean) / torch.sqrt(std * std + self.eps) + self.bias\n",
        "eps inside the square root (LayerNorm's arithmetic) instead of added to the std",
    ),
    L(
        "lm-embedding-scale-dropped",
        _LAY,
        "        return self.lut(x) * self.scale\n",
        "        return self.lut(x)\n",
        "token embeddings are not multiplied by lambda_e",
    ),
    L(
        "lm-positional-scale-dropped",
        _LAY,
        "        return self.scale * self.pe[:, offset:end]\n",
        "        return self.pe[:, offset:end]\n",
        "learned positions are not multiplied by lambda_pe",
    ),
    L(
        "lm-tau-ignored",
        "transformer/lm/blocks.py",  # the attention of each layer is built there since the model's split
        "        scale=config.tau,\n",
        "        scale=None,\n",
        "the attention temperature tau is ignored (always 1/sqrt(d_k))",
    ),
    L(
        "lm-value-bias-unweighted",
        _ATT,
        '        return out + torch.einsum("bis,ie->bse", u[..., self.d_model], self.value_bias)\n',
        "        return out + self.value_bias.sum(0)\n",
        "per-head value biases added as a constant instead of weighted by each row's attention mass",
    ),
    L(
        "lm-kernel-chunks-misordered",
        _ATT,
        "            u = u.view(batch, h, h + 1, -1, d_k).transpose(2, 3).reshape(batch, h, -1, (h + 1) * d_k)\n",
        "            u = u.view(batch, h + 1, h, -1, d_k).transpose(1, 2).transpose(2, 3).reshape(batch, h, -1, (h + 1) * d_k)\n",
        "on the kernel, the (head, value chunk) problems are put back together in the wrong order",
    ),
    # --- causality and the cache
    L(
        "lm-not-causal",
        _LM,
        "            return AttentionMask(causal=True)\n",
        "            return AttentionMask()\n",
        "the language model attends to later positions",
    ),
    L(
        "lm-given-mask-not-made-causal",
        _LM,
        "            return mask.replace(causal=True)\n",
        "            return mask\n",
        "a structured mask given to the model is used without the causal flag",
    ),
    L(
        "lm-cache-no-offset",
        _LM,
        "        offset = 0 if cache is None else cache.length\n",
        "        offset = 0\n",
        "cached positions get position 0's encoding",
    ),
    # --- generation
    L(
        "gen-stop-sequences-ignored",
        _GEN,
        "                stopped |= (ys[:, -n:] == stop.to(ys.device)).all(dim=1)\n",
        "                pass\n",
        "stop sequences never end a row",
    ),
    L(
        "gen-max-len-off-by-one",
        "transformer/decoding/requests.py",
        "    if total > config.max_len:\n",
        "    if total > config.max_len + 1:\n",
        "a request one position longer than max_len is let through",
    ),
    L(
        "gen-stop-in-prompt-counts",
        _GEN,
        "            if ys.size(1) > self.prompt_len and ys.size(1) >= n:  # ends with a generated token\n",
        "            if ys.size(1) >= n:  # ends with a generated token\n",
        "a prompt that ends with a stop sequence is stopped before generating anything",
    ),
    # --- batching by tokens (tests/test_data_batches.py)
    L(
        "data-budget-not-greedy",
        _BAT,
        "if (position - start + 1) * longest_with > self.max_tokens:",
        "if (position - start + 1) * longest_with >= self.max_tokens:",
        "batches are cut one example early (the budget is never filled)",
        DATA_TESTS,
    ),
    L(
        "data-no-length-buckets",
        _BAT,
        "order = np.lexsort((rng.random(self.lengths.size), self.lengths))",
        "order = rng.permutation(self.lengths.size)",
        "examples are batched in random order, not by length (no buckets: padding everywhere)",
        DATA_TESTS,
    ),
    L(
        "data-shards-overlap",
        _BAT,
        "        return self.all_batches(epoch)[self.rank :: self.world_size]\n",
        "        return self.all_batches(epoch)[self.rank :][: self.batches_per_epoch]\n",
        "ranks take overlapping runs of batches instead of every world_size-th",
        DATA_TESTS,
    ),
    L(
        "data-same-order-every-epoch",
        _BAT,
        "rng = np.random.default_rng([self.seed, epoch])",
        "rng = np.random.default_rng([self.seed, 0])",
        "every epoch has the same batches in the same order",
        DATA_TESTS,
    ),
    L(
        "data-resume-repeats-a-batch",
        _BAT,
        "generator.manual_seed(POSITION_BASE + position)",
        "generator.manual_seed(POSITION_BASE + position - 1)",
        "the saved position lags one batch (a resumed run repeats one)",
        DATA_TESTS,
    ),
    L(
        "data-windows-do-not-overlap",
        _COR,
        "return self.start + (int(index) % self.count) * self.block",
        "return self.start + (int(index) % self.count) * (self.block + 1)",
        "language-model windows skip a token between them (it is never a label)",
        DATA_TESTS,
    ),
    L(
        "data-target-room-for-one-special",
        _COR,
        "if len(src) <= max_len and len(tgt) + 2 <= max_len:",
        "if len(src) <= max_len and len(tgt) + 1 <= max_len:",
        "a target that fits only without </s> is let through",
        DATA_TESTS,
    ),
    L(
        "data-replaced-utf8-not-counted",
        _TXT,
        "report.replaced_lines.append((path, number))",
        "pass",
        "lines whose invalid UTF-8 was replaced are not counted",
        DATA_TESTS,
    ),
    L(
        "data-tab-count-unchecked",
        _TXT,
        "if tabs != 1:",
        "if tabs == 0:",
        "a line with two tabs is read as a pair",
        DATA_TESTS,
    ),
    L(
        "tok-fingerprint-unchecked",
        "transformer/tasks/tokenizer_assets.py",
        "if recorded != tokenizer.fingerprint:",
        "if False:",
        "a checkpoint's tokenizer is used even when it is not the recorded one",
        DATA_TESTS,
    ),
    L(
        "ckpt-assets-outside-manifest",
        "transformer/checkpoint/save.py",
        "            files.append(name)\n",
        "",
        "saved assets (the tokenizer) are not covered by the SHA-256 manifest",
        DATA_TESTS,
    ),
    L(
        "lm-batch-labels-not-shifted",
        "transformer/data/lm_batch.py",
        "self.targets = tokens[:, 1:]",
        "self.targets = tokens[:, :-1]",
        "the language model is trained to predict the current token",
        DATA_TESTS,
    ),
    # --- issue 29: packed rows, the packed data, the windowed cache
    L(
        "lm-packed-positions-do-not-restart",
        "transformer/lm/positions.py",
        "    return slots - torch.where(starts, slots, 0).cummax(-1).values\n",
        "    return slots\n",
        "in a packed row the positions run on across documents instead of restarting at each",
        ("tests/test_lm_packing.py",),
    ),
    L(
        "lm-packed-batch-drops-its-documents",
        "transformer/data/lm_batch.py",
        "        self.mask = AttentionMask(causal=True, documents=documents[:, :-1])\n",
        "        self.mask = AttentionMask(causal=True)\n",
        "a packed window's tokens attend across its documents",
        ("tests/test_data_packing.py",),
    ),
    L(
        "lm-packed-boundary-label-kept",
        "transformer/data/lm_batch.py",
        "        self.targets = self.targets.masked_fill(starts, ignore_index)\n",
        "        self.targets = self.targets\n",
        "a document's first token is predicted from the previous document's last token",
        ("tests/test_data_packing.py",),
    ),
    L(
        "lm-packed-held-out-labels-keep-boundaries",
        _COR,
        "        return labels[~np.isin(positions, self.store.offsets)]\n",
        "        return labels\n",
        "the unigram baseline of a packed run scores labels the model's loss leaves out",
        ("tests/test_data_packing.py",),
    ),
    L(
        "lm-packing-not-recorded",
        "transformer/tasks/text_lm.py",
        'data_settings={"block_len": data.train.block, "pack": data.train.pack},',
        'data_settings={"block_len": data.train.block},',
        "a resume with the other packing setting is not refused (the checkpoint does not say which it trained with)",
        CLI_TESTS,
    ),
    L(
        "lm-window-cache-keeps-too-little",
        "transformer/lm/positions.py",
        "        drop = self.held - (self.window - 1) if self.window is not None else 0\n",
        "        drop = self.held - (self.window - 2) if self.window is not None else 0\n",
        "the windowed cache drops a key the next position may still attend",
        ("tests/test_lm_window_cache.py",),
    ),
    L(
        "lm-window-cache-length-counts-held-only",
        "transformer/lm/positions.py",
        "        return self.held + self.dropped\n",
        "        return self.held\n",
        "after the window drops keys, new positions get the positions (RoPE) of held slots, not absolute ones",
        ("tests/test_lm_window_cache.py",),
    ),
]
