"""Language modelling on your own text files: data, trainer, held-out perplexity and the unigram baseline.

``typed-transformer train lm --text FILE...`` runs :func:`prepare_lm_data` (train or reuse a tokenizer, tokenize
the files into a memory-mapped store, cut it into windows), :func:`make_lm_trainer` (the model, Adam with the Noam
schedule, token-budget batches that resume exactly) and reports :func:`lm_results`: held-out loss and perplexity
next to a unigram model's on the same held-out tokens with the same tokenizer.

Held-out text is ``valid_files`` when given, else the last ``valid_fraction`` of the token stream (the files are
read in the order given, so that is the end of the last files: text the model never trains on).

Each file is a document. Packed (``pack=True``, the default of ``train lm``: ``--pack``/``--no-pack``), a window's
documents are kept apart: no token attends to another document, positions restart at each, and a document's first
token is not a label (``ignore_index``, which the loss leaves out: the tokenizer's padding id for a new model's
label-smoothing loss, :data:`~transformer.tasks.pretrained_lm.IGNORED_LABEL` for a continued model's). Unpacked,
windows run across documents (the previous behaviour, GPT-2's).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data.corpora import CorpusReport, TextWindows, build_text_store
from ..data.text_files import check_files, read_text
from ..data.token_store import TokenStore
from ..data.tokenizers import TextTokenizer, train_tokenizer
from ..lm.config import LMConfig
from ..lm.model import TransformerLM, build_lm
from ..training import LabelSmoothing, Trainer
from .file_trainer import file_task_trainer
from .tokenizer_assets import tokenizer_metadata

__all__ = [
    "LMData",
    "prepare_lm_data",
    "lm_config",
    "make_lm_trainer",
    "unigram_cross_entropy",
    "lm_results",
    "LM_DEFAULTS",
]

#: The model and data defaults of ``train lm``: a small model a CPU trains in minutes.
LM_DEFAULTS: dict[str, Any] = dict(
    vocab_size=2000,
    block_len=128,
    max_tokens=2048,
    d_model=128,
    n_layers=2,
    n_heads=4,
    d_ff=512,
    dropout=0.1,
    steps=900,
    warmup=200,
    factor=1.0,
    valid_fraction=0.05,
    eval_every=200,
)


@dataclass
class LMData:
    """A tokenized corpus cut into training and held-out windows."""

    tokenizer: TextTokenizer
    train: TextWindows
    valid: TextWindows
    stores: list[TokenStore]
    report: CorpusReport = field(default_factory=CorpusReport)

    def describe(self) -> str:
        return (
            f"{self.train.count * self.train.block:,} training tokens in {len(self.train):,} windows of "
            f"{self.train.block}, {self.valid.count * self.valid.block:,} held-out tokens; tokenizer "
            f"{self.tokenizer.kind} with {self.tokenizer.vocab_size:,} tokens"
        )


def prepare_lm_data(
    text_files: Sequence[str],
    data_dir: str,
    *,
    tokenizer: TextTokenizer | None = None,
    kind: str = "bpe",
    vocab_size: int = 4000,
    min_frequency: int | None = None,
    block: int = 128,
    valid_files: Sequence[str] = (),
    valid_fraction: float = 0.05,
    encoding_errors: str = "strict",
    pack: bool = False,
    ignore_index: int | None = None,
) -> LMData:
    """Tokenize ``text_files`` (and ``valid_files``) into stores under ``data_dir``; train a ``kind`` tokenizer
    on the training files first unless ``tokenizer`` is given (a resumed run passes the checkpoint's). ``pack``:
    windows keep their documents apart, the labels that begin one becoming ``ignore_index`` (default: the
    tokenizer's padding id, which the new model's loss leaves out)."""
    files = check_files(text_files, "--text")
    valid_files = [os.fspath(f) for f in valid_files]
    if not valid_files and not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must be in (0, 1) when no held-out files are given, got {valid_fraction}")
    if tokenizer is None:
        if min_frequency is None:
            min_frequency = 2 if kind == "bpe" else 1
        texts = (read_text(f, encoding_errors=encoding_errors) for f in files)
        tokenizer = train_tokenizer(texts, kind, vocab_size=vocab_size, min_frequency=min_frequency)
    if pack and ignore_index is None:
        ignore_index = tokenizer.pad_id
    windows = {"pack": pack, "ignore_index": ignore_index}
    report = CorpusReport()
    train = build_text_store(
        os.path.join(data_dir, "train"), files, tokenizer, encoding_errors=encoding_errors, report=report
    )
    if valid_files:
        valid = build_text_store(
            os.path.join(data_dir, "valid"), valid_files, tokenizer, encoding_errors=encoding_errors, report=report
        )
        train_windows, valid_windows = TextWindows(train, block, **windows), TextWindows(valid, block, **windows)
        return LMData(tokenizer, train_windows, valid_windows, [train, valid], report)
    total = int(train.offsets[-1])
    cut = int(total * (1.0 - valid_fraction))
    train_windows = TextWindows(train, block, 0, cut, **windows)
    return LMData(tokenizer, train_windows, TextWindows(train, block, cut, total, **windows), [train], report)


def lm_config(tokenizer: TextTokenizer, *, formulation: str = "paper", block: int = 128, **fields: Any) -> LMConfig:
    """The model for ``tokenizer``'s vocabulary: the paper's formulation (``"paper"``) or the functional
    transformer's (``"functional"``); ``max_len`` is at least the window length."""
    fields.setdefault("max_len", max(block, 256))
    fields["pad_id"] = tokenizer.pad_id
    if formulation == "functional":
        return LMConfig.functional(tokenizer.vocab_size, **fields)
    if formulation != "paper":
        raise ValueError(f"formulation must be 'paper' or 'functional', got {formulation!r}")
    return LMConfig(vocab=tokenizer.vocab_size, **fields)


def make_lm_trainer(
    data: LMData,
    config: LMConfig,
    *,
    max_tokens: int,
    steps: int,
    warmup: int = 200,
    factor: float = 1.0,
    seed: int = 0,
    device: str | torch.device = "cpu",
    progress: bool = False,
    eval_every: int = 100,
    out_dir: str | None = None,
    clip_grad: float | None = 1.0,
    metadata: dict[str, Any] | None = None,
    model: TransformerLM | None = None,
    criterion: nn.Module | None = None,
) -> Trainer:
    """A Trainer for the language model: Adam(betas 0.9/0.98, eps 1e-9) on the Noam schedule, cross-entropy
    (``LabelSmoothing`` at 0, or ``criterion``), token-budget batches of training windows (resumable, shardable), the
    held-out windows for evaluation; every checkpoint carries the tokenizer. ``model``: a model to continue (a
    pretrained one, :mod:`~transformer.tasks.pretrained_lm`) instead of a new ``build_lm(config)``."""
    torch.manual_seed(seed)
    return file_task_trainer(
        build_lm(config) if model is None else model,
        data,
        LabelSmoothing(config.vocab, config.pad_id or 0, 0.0) if criterion is None else criterion,
        task="lm",
        what="window",
        data_settings={"block_len": data.train.block, "pack": data.train.pack},
        max_tokens=max_tokens,
        steps=steps,
        warmup=warmup,
        factor=factor,
        seed=seed,
        device=device,
        progress=progress,
        eval_every=eval_every,
        out_dir=out_dir,
        clip_grad=clip_grad,
        metadata=metadata,
    )


def unigram_cross_entropy(data: LMData) -> float:
    """Nats per held-out label of a unigram model (token frequencies of the training labels, add-one smoothed)
    on the same held-out labels the model is scored on: the baseline a language model must beat."""
    vocab = data.tokenizer.vocab_size
    counts = np.bincount(data.train.labels(), minlength=vocab).astype(np.float64) + 1.0
    log_p = np.log(counts / counts.sum())
    return float(-log_p[data.valid.labels()].mean())


def lm_results(trainer: Trainer, data: LMData, train_seconds: float) -> dict[str, Any]:
    """Held-out loss and perplexity, the unigram baseline's, tokens/s, sizes."""
    eval_loss = trainer.evaluate()
    unigram = unigram_cross_entropy(data)
    model: TransformerLM = trainer.model
    return {
        "task": "lm",
        "steps": trainer.step,
        "train_seconds": round(train_seconds, 2),
        "tokens_per_second": round(trainer.tokens_this_run / max(train_seconds, 1e-9), 1),
        "final_train_loss": trainer.last_train_loss,
        "eval_loss": eval_loss,
        "perplexity": math.exp(eval_loss),
        "unigram_loss": unigram,
        "unigram_perplexity": math.exp(unigram),
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokenizer": tokenizer_metadata(data.tokenizer),
        "train_tokens": data.train.count * data.train.block,
        "valid_tokens": data.valid.count * data.valid.block,
    }
