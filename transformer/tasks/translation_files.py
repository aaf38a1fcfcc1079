"""Translation from your own files: tab-separated ``source<TAB>target`` lines (or JSON lines), a joint tokenizer,
the encoder-decoder, and BLEU and chrF (sacrebleu) on decoded held-out text.

``typed-transformer train translate --train FILE --valid FILE`` runs :func:`prepare_translation_data` (train or
reuse one tokenizer over both sides, tokenize both files into memory-mapped stores), :func:`make_translation_trainer`
and reports :func:`translation_results`; ``typed-transformer decode`` on its checkpoint runs :func:`translate`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..common.optional import require
from ..config import TransformerConfig
from ..data.corpora import CorpusReport, PairDataset, build_pair_stores, iter_pairs
from ..data.text_files import read_pairs
from ..data.tokenizers import TextTokenizer, train_tokenizer
from ..decoding import beam_search, greedy_decode
from ..masks import AttentionMask
from ..model import make_model
from ..training import LabelSmoothing, Trainer
from .file_trainer import file_task_trainer
from .tokenizer_assets import tokenizer_metadata

__all__ = [
    "TranslationData",
    "prepare_translation_data",
    "translation_config",
    "make_translation_trainer",
    "translate",
    "corpus_scores",
    "bleu_note",
    "translation_results",
    "TRANSLATE_DEFAULTS",
    "BLEU_FEATURE",
]

#: What needs sacrebleu, as a missing one is reported (``train translate`` checks it before training).
BLEU_FEATURE = "the BLEU and chrF scores of train translate"

#: The model and data defaults of ``train translate`` (the dates task's model size: a CPU trains it in minutes).
TRANSLATE_DEFAULTS: dict[str, Any] = dict(
    vocab_size=1000,
    max_len=128,
    max_tokens=2048,
    d_model=64,
    n_layers=2,
    n_heads=4,
    d_ff=128,
    dropout=0.1,
    steps=1000,
    warmup=200,
    factor=2.0,
    label_smoothing=0.0,
    eval_every=200,
)


@dataclass
class TranslationData:
    """Tokenized training and held-out pairs, and the held-out text itself (for BLEU)."""

    tokenizer: TextTokenizer
    train: PairDataset
    valid: PairDataset
    valid_sources: list[str]
    valid_targets: list[str]
    report: CorpusReport = field(default_factory=CorpusReport)

    def describe(self) -> str:
        return (
            f"{len(self.train):,} training pairs, {len(self.valid):,} held-out pairs; tokenizer "
            f"{self.tokenizer.kind} with {self.tokenizer.vocab_size:,} tokens"
        )


def prepare_translation_data(
    train_file: str,
    valid_file: str,
    data_dir: str,
    *,
    max_len: int,
    tokenizer: TextTokenizer | None = None,
    kind: str = "bpe",
    vocab_size: int = 1000,
    min_frequency: int | None = None,
    format: str | None = None,
    encoding_errors: str = "strict",
    too_long: str = "refuse",
) -> TranslationData:
    """Train (unless given) one tokenizer on both sides of ``train_file``, then tokenize both files into stores."""
    train_file, valid_file = os.fspath(train_file), os.fspath(valid_file)
    if tokenizer is None:
        if min_frequency is None:
            min_frequency = 2 if kind == "bpe" else 1
        texts = (
            text
            for _, src, tgt in iter_pairs(train_file, format=format, encoding_errors=encoding_errors)
            for text in (src, tgt)
        )
        tokenizer = train_tokenizer(texts, kind, vocab_size=vocab_size, min_frequency=min_frequency)
    report = CorpusReport()
    options = dict(format=format, encoding_errors=encoding_errors, too_long=too_long, report=report)
    pads = dict(pad=tokenizer.pad_id, bos=tokenizer.bos_id, eos=tokenizer.eos_id)
    train = PairDataset(
        *build_pair_stores(os.path.join(data_dir, "train"), [train_file], tokenizer, max_len, **options), **pads
    )
    valid = PairDataset(
        *build_pair_stores(os.path.join(data_dir, "valid"), [valid_file], tokenizer, max_len, **options), **pads
    )
    sources, targets, _ = read_pairs(valid_file, format=format, encoding_errors=encoding_errors)
    return TranslationData(tokenizer, train, valid, sources, targets, report)


def translation_config(
    tokenizer: TextTokenizer, *, max_len: int, d_model: int, n_layers: int, n_heads: int, d_ff: int, dropout: float
) -> TransformerConfig:
    """An encoder-decoder over the joint vocabulary, every embedding tied (section 3.4)."""
    v = tokenizer.vocab_size
    return TransformerConfig(
        src_vocab=v,
        tgt_vocab=v,
        n_encoder_layers=n_layers,
        n_decoder_layers=n_layers,
        d_model=d_model,
        d_ff=d_ff,
        n_heads=n_heads,
        dropout=dropout,
        attention_dropout=dropout,
        max_len=max_len,
        pad_id=tokenizer.pad_id,
        tie_weights="all",
    )


def make_translation_trainer(
    data: TranslationData,
    config: TransformerConfig,
    *,
    max_tokens: int,
    steps: int,
    warmup: int = 200,
    factor: float = 2.0,
    label_smoothing: float = 0.0,
    seed: int = 0,
    device: str | torch.device = "cpu",
    progress: bool = False,
    eval_every: int = 200,
    out_dir: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Trainer:
    """A Trainer as the tasks' (Adam on the Noam schedule, label smoothing) over token-budget batches of pairs."""
    torch.manual_seed(seed)
    return file_task_trainer(
        make_model(config),
        data,
        LabelSmoothing(config.tgt_vocab, config.pad_id, label_smoothing),
        task="translate",
        what="pair",
        data_settings={},
        max_tokens=max_tokens,
        steps=steps,
        warmup=warmup,
        factor=factor,
        seed=seed,
        device=device,
        progress=progress,
        eval_every=eval_every,
        out_dir=out_dir,
        metadata=metadata,
    )


def translate(
    model: nn.Module,
    tokenizer: TextTokenizer,
    texts: Sequence[str],
    *,
    beam_size: int = 1,
    batch_size: int = 64,
    length_penalty: float = 0.6,
) -> list[str]:
    """Greedy (or beam) translations of ``texts``; sources longer than the model's ``max_len`` are cut to it."""
    limit = model.config.max_len
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    outputs: list[str] = []
    try:
        for start in range(0, len(texts), batch_size):
            rows = [
                ids[:limit] or [tokenizer.unk_id] for ids in tokenizer.encode_batch(texts[start : start + batch_size])
            ]
            width = max(len(r) for r in rows)
            src = torch.tensor([r + [tokenizer.pad_id] * (width - len(r)) for r in rows], device=device)
            mask = AttentionMask.padding(src, tokenizer.pad_id)
            length = min(limit, 2 * width + 10)
            if beam_size == 1:
                out = greedy_decode(model, src, mask, length, tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id)
            else:
                out = beam_search(
                    model,
                    src,
                    mask,
                    length,
                    tokenizer.bos_id,
                    tokenizer.eos_id,
                    beam_size=beam_size,
                    length_penalty=length_penalty,
                    pad_symbol=tokenizer.pad_id,
                ).tokens
            outputs.extend(tokenizer.decode(_until_end(row.tolist(), tokenizer.eos_id)) for row in out)
    finally:
        model.train(was_training)
    return outputs


def _until_end(ids: list[int], eos: int) -> list[int]:
    return ids[: ids.index(eos)] if eos in ids else ids


def bleu_note(references: Sequence[str], tokenize=None, order: int = 4) -> str | None:
    """A sentence when corpus BLEU cannot mean much on ``references``, else None.

    BLEU multiplies the precisions of 1- to ``order``-grams (sacrebleu: 4), counted over the corpus in ``tokenize``'s
    tokens (sacrebleu's 13a). When no reference has ``order`` tokens there is no 4-gram to count and BLEU is 0 for
    any output, exact copies included; when most references are shorter, it scores only the few long ones."""
    if tokenize is None:
        require("sacrebleu", BLEU_FEATURE)
        from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

        tokenize = Tokenizer13a()
    lengths = [len(tokenize(r).split()) for r in references]
    short = sum(n < order for n in lengths)
    if not lengths or short * 2 <= len(lengths):
        return None
    if short == len(lengths):
        return (
            f"BLEU cannot mean anything here: none of the {len(lengths)} references has {order} tokens (BLEU "
            f"multiplies the 1- to {order}-gram precisions, and these references have no {order}-grams), so it "
            "is 0 even for exact copies; read chrF and exact match"
        )
    return (
        f"BLEU counts only the {len(lengths) - short} of {len(lengths)} references that have {order} tokens or "
        f"more (the {short} shorter ones have no {order}-grams); read it with chrF and exact match"
    )


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """Corpus BLEU and chrF (sacrebleu's defaults: 13a tokenization, chrF with character 6-grams, beta 2), exact
    match, and ``bleu_note``: a sentence when BLEU cannot mean much on these references (see :func:`bleu_note`)."""
    require("sacrebleu", BLEU_FEATURE)
    from sacrebleu.metrics import BLEU, CHRF

    bleu, chrf = BLEU(), CHRF()
    hypotheses, references = list(hypotheses), list(references)
    exact = sum(h == r for h, r in zip(hypotheses, references, strict=True)) / max(len(references), 1)
    return {
        "bleu": round(bleu.corpus_score(hypotheses, [references]).score, 2),
        "chrf": round(chrf.corpus_score(hypotheses, [references]).score, 2),
        "exact_match": exact,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "bleu_note": bleu_note(references, bleu.tokenizer, bleu.max_ngram_order),
    }


def translation_results(
    model: nn.Module,
    trainer: Trainer,
    eval_loss: float,
    data: TranslationData,
    train_seconds: float,
    *,
    examples: int,
    beam_size: int = 1,
) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """The run's figures (``trainer``'s steps, tokens and last loss; the held-out loss ``eval_loss``, which under
    torchrun every rank computes together) and BLEU/chrF/exact match of ``model`` (the full model: under FSDP the
    one gathered on rank 0) decoding the first ``examples`` held-out sources; with three (source, reference, output)
    examples."""
    sources, references = data.valid_sources[:examples], data.valid_targets[:examples]
    outputs = translate(model, data.tokenizer, sources, beam_size=beam_size)
    scores = corpus_scores(outputs, references)
    results = {
        "task": "translate",
        "steps": trainer.step,
        "train_seconds": round(train_seconds, 2),
        "tokens_per_second": round(trainer.tokens_this_run / max(train_seconds, 1e-9), 1),
        "eval_loss": eval_loss,
        "final_train_loss": trainer.last_train_loss,
        "eval_lines": len(sources),
        "beam_size": beam_size,
        **scores,
        "tokenizer": tokenizer_metadata(data.tokenizer),
    }
    return results, list(zip(sources, references, outputs, strict=True))[:3]
