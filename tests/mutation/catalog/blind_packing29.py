"""Blind review of issue 29 packed training and windowed decoding (2026-11-27), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-p29-drop-first-refuses-all",
        "transformer/cache.py",
        (("or n > self._length:", "or n >= self._length:"),),
        "KVCache.drop_first refuses to drop every held position, so a windowed model with sliding_window=1 (whose "
        "rolling cache keeps W - 1 = 0 positions) raises ValueError at its first cached call instead of decoding.",
    ),
    Mutant(
        "blind-p29-doc-positions-shifted",
        "transformer/lm/positions.py",
        (
            (
                "    starts = (documents != documents.roll(1, dims=-1)) | (slots == 0)\n",
                "    starts = (documents != documents.roll(-1, dims=-1)) | (slots == 0)\n",
            ),
        ),
        "positions_from_documents marks the last token of each document as the start of the next, so positions in a "
        "packed row restart one token early ([0,0,1,1,1] gives [0,0,1,2,0]) and a packed row no longer computes what "
        "its documents compute alone.",
    ),
    Mutant(
        "blind-p29-trim-real-keys-wrong-end",
        "transformer/lm/positions.py",
        (("self.real_keys = self.real_keys[:, drop:]", "self.real_keys = self.real_keys[:, :-drop]"),),
        "A windowed cache trims a left-padded prompt's pad marks from the wrong end (keeps the oldest, drops the "
        "newest), so held real keys are hidden as pads and padded windowed generation diverges from the unpadded one.",
    ),
    Mutant(
        "blind-p29-window-one-wider",
        "transformer/lm/model.py",
        (("            left = window - 1\n", "            left = window\n"),),
        "A full (uncached) forward with sliding_window W lets each position see W + 1 keys (window_left = W instead "
        "of W - 1): outputs differ from Mistral's window and from cached decoding, which still uses W - 1.",
    ),
    Mutant(
        "blind-p29-batch-mask-on-targets",
        "transformer/data/lm_batch.py",
        (("documents=documents[:, :-1])", "documents=documents[:, 1:])"),),
        "A packed LMBatch gives the model the document ids of the targets instead of the inputs, so each document's "
        "last token (its </s>) is grouped with the next document: it attends to the wrong text and positions restart "
        "one token early.",
    ),
    Mutant(
        "blind-p29-window-docs-left",
        "transformer/data/corpora.py",
        (
            (
                'np.arange(first, first + self.block + 1), side="right") - 1',
                'np.arange(first, first + self.block + 1), side="left") - 1',
            ),
        ),
        "TextWindows.documents assigns each document's first token to the previous document, so a packed window "
        "keeps the boundary label in the loss, ignores the label after it (and the window's first label) instead, "
        "and the mask puts each document's first token with the previous document.",
    ),
    Mutant(
        "blind-p29-heldout-labels-shifted",
        "transformer/data/corpora.py",
        (
            (
                "positions = np.arange(self.start + 1, self.start + 1 + labels.size)",
                "positions = np.arange(self.start, self.start + labels.size)",
            ),
        ),
        "Packed TextWindows.labels() (the held-out labels the unigram baseline counts) leaves out the label after "
        "each document's first token instead of that first token, so the baseline keeps the boundary labels the loss "
        "ignores and drops labels the loss scores.",
    ),
    Mutant(
        "blind-p29-valid-files-unpacked",
        "transformer/tasks/text_lm.py",
        (("TextWindows(valid, block, **windows)", "TextWindows(valid, block)"),),
        "With --valid files, the held-out windows are never packed: the held-out loss runs across documents and "
        "scores document-start labels that training leaves out, while the --valid-fraction path stays packed.",
    ),
    Mutant(
        "blind-p29-resume-pack-unchecked",
        "transformer/cli/train_files.py",
        (('"block_len": block, "pack": args.pack}', '"block_len": block}'),),
        "train lm --resume no longer compares --pack/--no-pack with the checkpoint's setting: resuming a packed run "
        "with --no-pack (or the reverse) is accepted silently instead of refused.",
    ),
    Mutant(
        "blind-p29-pack-default-off",
        "transformer/cli/file_flags.py",
        (
            (
                '        default=True,\n        help="keep the documents',
                '        default=False,\n        help="keep the documents',
            ),
        ),
        "train lm without --pack/--no-pack trains unpacked (windows across documents), though --help and docs/data.md "
        "say --pack is the default; the checkpoint records pack=False.",
    ),
]

# Run against the test files of the code reviewed (the before rate, 9/10: on commit 762f5d5, before the tests the
# review prompted).
_TESTS = (
    "tests/test_lm_packing.py",
    "tests/test_lm_window_cache.py",
    "tests/test_data_packing.py",
    "tests/test_cli_lm.py",
    "tests/test_cache.py",
    "tests/test_lm_positions.py",
    "tests/test_data_promises.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
