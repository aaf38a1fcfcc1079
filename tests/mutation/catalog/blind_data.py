"""Blind review of data and tasks (2026-11-24), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-data-store-id-bound",
        "transformer/data/token_store.py",
        (
            (
                "        if array.size and (array.min() < 0 or array.max() >= self.vocab_size):\n",
                "        if array.size and (array.min() < 0 or array.max() > self.vocab_size):\n",
            ),
        ),
        "TokenStoreWriter.add accepts a token id equal to vocab_size (one past the vocabulary) instead of "
        "refusing it; at vocab_size 65536 that id silently wraps to 0 in the uint16 file",
    ),
    Mutant(
        "blind-data-json-suffix",
        "transformer/data/text_files.py",
        (
            (
                '    return "jsonl" if path.endswith((".jsonl", ".json")) else "tsv"\n',
                '    return "jsonl" if path.endswith(".jsonl") else "tsv"\n',
            ),
        ),
        "a pair file named *.json is read as TSV instead of JSON lines: every line is refused with "
        "'expected source<TAB>target (exactly one tab), found no tab'",
    ),
    Mutant(
        "blind-data-identity-no-mtime",
        "transformer/data/corpora.py",
        (
            (
                "        identity.append([os.path.abspath(p), stat.st_size, stat.st_mtime_ns, digest.hexdigest()])\n",
                "        identity.append([os.path.abspath(p), stat.st_size])\n",
            ),
        ),
        "the cached token store ignores the files' modification time and content: a file edited to the same size is not "
        "re-tokenized and training silently uses the stale text",
    ),
    Mutant(
        "blind-data-windows-count",
        "transformer/data/corpora.py",
        (("        self.count = (end - start - 1) // block\n", "        self.count = (end - start) // block\n"),),
        "TextWindows makes one window too many when the span is a multiple of block: its last window reads one "
        "token past the span (the first held-out token becomes a training label; at the end of the store the "
        "window is short), and labels() runs past end",
    ),
    Mutant(
        "blind-data-resume-repeats-batch",
        "transformer/data/token_batches.py",
        (
            (
                "            position += 1\n            generator.manual_seed(POSITION_BASE + position)\n",
                "            generator.manual_seed(POSITION_BASE + position)\n            position += 1\n",
            ),
        ),
        "ResumableBatches writes the position into the generator before counting the batch it hands out: a "
        "run resumed from a checkpoint repeats the last batch it had already trained on (and is one behind)",
    ),
    Mutant(
        "blind-data-bpe-prefix-space",
        "transformer/data/tokenizers.py",
        (
            (
                "    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)\n",
                "    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)\n",
            ),
        ),
        "the byte-level BPE tokenizer adds a space in front of every text: decode(encode(text)) no longer "
        "round-trips ('abc' comes back as ' abc'), and generate's output gains a stray space",
    ),
    Mutant(
        "blind-data-unigram-from-heldout",
        "transformer/tasks/text_lm.py",
        (
            (
                "    counts = np.bincount(data.train.labels(), minlength=vocab).astype(np.float64) + 1.0\n",
                "    counts = np.bincount(data.valid.labels(), minlength=vocab).astype(np.float64) + 1.0\n",
            ),
        ),
        "the unigram baseline is fitted on the held-out labels it is scored on instead of the training labels: "
        "its loss/perplexity is too low (the baseline the LM must beat is leaked)",
    ),
    Mutant(
        "blind-data-tokenizer-source-only",
        "transformer/tasks/translation_files.py",
        (("            for text in (src, tgt)\n", "            for text in (src,)\n"),),
        "the joint translation tokenizer is trained on the source column only: target-only characters become "
        "<unk> with --tokenizer char (dropped on decoding) and BPE merges ignore the target language",
    ),
    Mutant(
        "blind-data-resume-tokenizer-by-size",
        "transformer/tasks/tokenizer_assets.py",
        (
            (
                "    if checkpoint_tokenizer.fingerprint != given.fingerprint:\n",
                "    if (checkpoint_tokenizer.kind, checkpoint_tokenizer.vocab_size) != (given.kind, given.vocab_size):\n",
            ),
        ),
        "check_same_tokenizer compares kind and vocabulary size instead of the fingerprint: --resume with a "
        "different --tokenizer-file of the same kind and size (trained on other text) is accepted",
    ),
    Mutant(
        "blind-data-dates-two-forms",
        "transformer/tasks/dates.py",
        (
            (
                "        forms = torch.randint(0, 3, (batch_size,), generator=generator).tolist()\n",
                "        forms = torch.randint(0, 2, (batch_size,), generator=generator).tolist()\n",
            ),
        ),
        "DatesTask.sample draws only two of the three word orders (randint's upper bound is exclusive): "
        "'fifth june 1912' (day month year) is never trained on or evaluated",
    ),
]

# The tests that kill them (each survivor of the first run got one in tests/test_data_promises.py).
SUITE = ("tests/test_data_promises.py", "tests/test_data_batches.py", "tests/test_data_tokenizers.py")
MUTANTS = [dataclasses.replace(m, tests=SUITE) for m in MUTANTS]
