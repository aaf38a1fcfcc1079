"""Blind review of data, training, checkpoints and resume (2026-11-27), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-train31-store-id-at-vocab",
        "transformer/data/token_store.py",
        (
            (
                "if array.size and (array.min() < 0 or array.max() >= self.vocab_size):",
                "if array.size and (array.min() < 0 or array.max() > self.vocab_size):",
            ),
        ),
        "TokenStoreWriter.add / write_token_store accept a token id equal to vocab_size (one past the last id) and "
        "store it, instead of refusing it as outside [0, vocab_size).",
    ),
    Mutant(
        "blind-train31-pair-blank-side",
        "transformer/data/text_files.py",
        (
            (
                '    for side, text in (("source", src), ("target", tgt)):\n        if not text.strip():',
                '    for side, text in (("source", src), ("target", tgt)):\n        if not text:',
            ),
        ),
        "A pair line whose source or target side holds only whitespace ('two<TAB>   ') is accepted and yields an "
        "empty target, instead of being refused with 'FILE:LINE: the target side is empty'.",
    ),
    Mutant(
        "blind-train31-rank-share-floor",
        "transformer/data/token_batches.py",
        (
            (
                "return len(range(self.rank, self.n_batches, self.world_size))",
                "return self.n_batches // self.world_size",
            ),
        ),
        "When the epoch's batch count is not a multiple of world_size (e.g. 7 batches on 3 ranks), the low ranks' "
        "batches_per_epoch is one short, so ResumableBatches skips each epoch's last batch of those ranks: some "
        "examples are never trained on and the ranks' shares no longer cover the epoch.",
    ),
    Mutant(
        "blind-train31-cache-ignores-mtime",
        "transformer/data/corpora.py",
        (
            (
                # re-placed after issue 31 added the content digest: the identity keeps path and size only
                "identity.append([os.path.abspath(p), stat.st_size, stat.st_mtime_ns, digest.hexdigest()])",
                "identity.append([os.path.abspath(p), stat.st_size])",
            ),
        ),
        "The token store cache no longer records the files' modification time: a file edited to new text of the "
        "same size is not re-tokenized, and training (or --resume) silently runs on the stale tokens of the old text.",
    ),
    Mutant(
        "blind-train31-train-zero-steps",
        "transformer/training/trainer.py",
        (
            (
                "target = self.config.steps if steps is None else steps",
                "target = steps or self.config.steps",
            ),
        ),
        "Trainer.train(0) (train up to 0 steps in total: nothing to do) trains config.steps steps instead, as if "
        "no step count had been given.",
    ),
    Mutant(
        "blind-train31-resume-last-loss",
        "transformer/training/trainer.py",
        (
            (
                '        self.last_train_loss = float(state.get("last_train_loss", float("nan")))\n        self._batches = None',
                "        self._batches = None",
            ),
        ),
        "Trainer.resume does not restore the saved last training loss: a resumed run with no step left to do "
        "returns (and reports as final_train_loss) NaN, and a divergence on the first step after a resume no longer "
        "says what the loss was at the saved step.",
    ),
    Mutant(
        "blind-train31-sigint-user-handler",
        "transformer/training/stops.py",
        (
            (
                "                if signal.getsignal(signum) is python_default:\n",
                "                if signal.getsignal(signum) is not signal.SIG_IGN:\n",
            ),
        ),
        "Trainer.train replaces a SIGINT handler the user had installed: during training Ctrl-C no longer reaches "
        "the user's handler but stops the run at the step boundary, although the docs say the stop applies only "
        "when no other handler than Python's is installed.",
    ),
    Mutant(
        "blind-train31-nonfinite-fp32-only",
        "transformer/checkpoint/nonfinite.py",
        (
            (
                "if not isinstance(tensor, torch.Tensor) or not (tensor.is_floating_point() or tensor.is_complex()):",
                "if not isinstance(tensor, torch.Tensor) or tensor.dtype not in (torch.float32, torch.float64):",
            ),
        ),
        "NaN or infinite weights are only looked for in float32/float64 tensors: a bfloat16 or float16 model "
        "holding NaN is saved by save_checkpoint / Trainer.save and loaded by load_checkpoint without "
        "NonFiniteWeightsError (or TrainingDiverged).",
    ),
    Mutant(
        "blind-train31-aside-oldest",
        "transformer/checkpoint/locate.py",
        (
            (
                'aside = sorted(glob.glob(glob.escape(path) + ".old-*"), key=os.path.getmtime, reverse=True)',
                'aside = sorted(glob.glob(glob.escape(path) + ".old-*"), key=os.path.getmtime)',
            ),
        ),
        "When a checkpoint directory is missing and several DIR.old-* copies were left by interrupted saves, "
        "find_checkpoint (so load_checkpoint, --resume, a torchrun restart) picks the oldest copy instead of the "
        "newest: a resume silently goes back to an earlier step.",
    ),
    Mutant(
        "blind-train31-bleu-note-half",
        "transformer/tasks/translation_files.py",
        (
            (
                "if not lengths or short * 2 <= len(lengths):",
                "if not lengths or short * 2 < len(lengths):",
            ),
        ),
        "bleu_note (the 'bleu_note' of train translate's results) warns when exactly half of the references are "
        "shorter than 4 tokens, though the docs say it speaks only when most of them are.",
    ),
]

# The before rate ran on commit eb200ba against the files after the issue-31 ones (the areas' suites of that morning);
# the files issue 31 added, which catch the survivors, come first.
_TESTS = (
    "tests/test_training_edges.py",
    "tests/test_checkpoint_durability.py",
    "tests/test_resume_promises.py",
    "tests/test_data_store_edges.py",
    "tests/test_data_promises.py",
    "tests/test_data_files.py",
    "tests/test_data_batches.py",
    "tests/test_data_packing.py",
    "tests/test_data_tokenizers.py",
    "tests/test_training.py",
    "tests/test_training_promises.py",
    "tests/test_checkpoint.py",
    "tests/test_run_safety_disk.py",
    "tests/test_run_safety_resume.py",
    "tests/test_run_safety_divergence.py",
    "tests/test_step_checks.py",
    "tests/test_tasks.py",
    "tests/test_distributed_laws.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
