"""The flags of the ``train`` tasks that read your files (``train lm`` and ``train translate``, docs/data.md): their
files, the tokenizer and reading flags both take, the model flags, ``--init``/``--dtype`` of a fine-tune and the
evaluation flags of translation, with their defaults and help (the types: :mod:`transformer.cli.arguments`)."""

from __future__ import annotations

import argparse
from typing import Any

from ..common.dtypes import DTYPE_ARGUMENT_NAMES
from ..data.corpora import TOO_LONG_POLICIES
from ..data.text_files import ENCODING_ERRORS, PAIR_FORMATS
from ..data.tokenizers import TOKENIZER_KINDS
from ..tasks.pretrained_lm import FINE_TUNE_PEAK_LR
from ..tasks.text_lm import LM_DEFAULTS
from ..tasks.translation_files import TRANSLATE_DEFAULTS
from .arguments import fraction, positive_int

__all__ = ["add_lm_flags", "add_translate_flags"]


def _data_flags(g: argparse._ArgumentGroup, d: dict[str, Any]) -> None:
    """The tokenizer and reading flags both file tasks take (after each task's own files)."""
    g.add_argument(
        "--tokenizer",
        choices=TOKENIZER_KINDS,
        default=None,
        help="train a bpe or a char tokenizer on the training files (default: bpe)",
    )
    g.add_argument("--tokenizer-file", metavar="PATH", help="use this tokenizer.json instead of training one")
    g.add_argument(
        "--vocab-size",
        type=positive_int,
        default=None,
        help=f"tokenizer vocabulary, special tokens (and bpe's 256 bytes) included (default: {d['vocab_size']})",
    )
    g.add_argument(
        "--min-frequency",
        type=positive_int,
        help="tokenizer: least count of a merge/character (default: 2 for bpe, 1 for char)",
    )
    g.add_argument(
        "--encoding-errors",
        choices=ENCODING_ERRORS,
        default="strict",
        help="invalid UTF-8: strict refuses, naming file and line; replace puts U+FFFD in place of bad "
        "bytes and counts the lines (default: %(default)s)",
    )
    g.add_argument(
        "--max-tokens",
        type=positive_int,
        default=d["max_tokens"],
        help="batch budget in (padded) tokens; under torchrun each rank's (default: %(default)s)",
    )
    g.add_argument("--data-dir", metavar="DIR", help="where the tokenized data is kept (default: OUT.data)")


def _model_flags(p: argparse.ArgumentParser, d: dict[str, Any], layers: str) -> argparse._ArgumentGroup:
    # no argparse defaults: None says "not given" (train lm --init refuses these), the task's default applies
    g = p.add_argument_group("model")
    g.add_argument("--d-model", type=positive_int, help=f"model width (default: {d['d_model']})")
    g.add_argument("--layers", type=positive_int, help=f"{layers} (default: {d['n_layers']})")
    g.add_argument("--heads", type=positive_int, help=f"attention heads (default: {d['n_heads']})")
    g.add_argument("--d-ff", type=positive_int, help=f"feed-forward width (default: {d['d_ff']})")
    g.add_argument(
        "--dropout",
        type=fraction,
        help=f"dropout, on the sub-layers and the attention weights (default: {d['dropout']})",
    )
    return g


def add_lm_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``train lm`` (besides the training flags every task takes)."""
    d = LM_DEFAULTS
    g = p.add_argument_group("data (see docs/data.md)")
    g.add_argument(
        "--text",
        nargs="+",
        metavar="FILE",
        help="training text files (UTF-8); required, but with --resume (read from the checkpoint)",
    )
    g.add_argument(
        "--valid",
        nargs="+",
        metavar="FILE",
        help="held-out text files (default: the last --valid-fraction of the text)",
    )
    g.add_argument(
        "--valid-fraction",
        type=fraction,
        default=d["valid_fraction"],
        help="held-out share of the text without --valid (default: %(default)s)",
    )
    g.add_argument(
        "--block-len",
        type=positive_int,
        default=d["block_len"],
        help="tokens per training window (default: %(default)s)",
    )
    g.add_argument(
        "--pack",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the documents (the text files) of a window apart: no token attends to another document, "
        "positions restart at each, and a document's first token is not predicted from the one before; exact for "
        "every model train lm builds or continues (each document trains as if alone in its row). --no-pack: windows "
        "run across documents, as before (docs/data.md) (default: --pack)",
    )
    _data_flags(g, d)
    m = _model_flags(p, d, "decoder layers")
    m.add_argument(
        "--formulation",
        choices=("paper", "functional"),
        default=None,
        help="the paper's formulation or the functional transformer's (docs/lm.md) (default: paper)",
    )
    m.add_argument(
        "--max-len",
        type=positive_int,
        help="longest sequence the model takes, in positions (default: the larger of 256 and --block-len)",
    )
    m.add_argument(
        "--init",
        metavar="DIR",
        help="continue the pretrained model of this Hugging Face checkpoint folder (config.json, model.safetensors, "
        "tokenizer.json) on the text: its architecture and tokenizer, so no model or tokenizer option; the peak "
        f"learning rate defaults to {FINE_TUNE_PEAK_LR:g} (docs/data.md)",
    )
    m.add_argument(
        "--dtype",
        choices=DTYPE_ARGUMENT_NAMES,
        default=None,
        help="--init: the dtype the pretrained weights are loaded and trained in, as transformers names it; auto: "
        "the folder's (config.json's dtype) (default: float32: training in bfloat16 loses the small updates)",
    )


def add_translate_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``train translate`` (besides the training flags every task takes)."""
    d = TRANSLATE_DEFAULTS
    g = p.add_argument_group("data (see docs/data.md)")
    g.add_argument(
        "--train",
        metavar="FILE",
        help="training pairs: source<TAB>target lines, or JSON lines with src and tgt; required, but with --resume "
        "(read from the checkpoint)",
    )
    g.add_argument(
        "--valid", metavar="FILE", help="held-out pairs, in the same format; required, but with --resume (as --train)"
    )
    g.add_argument(
        "--format",
        choices=PAIR_FORMATS,
        help="tsv or jsonl (default: from the file name: .jsonl and .json are JSON lines, anything else tsv)",
    )
    g.add_argument(
        "--too-long",
        choices=TOO_LONG_POLICIES,
        default="refuse",
        help="pairs longer than --max-len: refuse, truncate or skip (counted) (default: %(default)s)",
    )
    _data_flags(g, d)
    m = _model_flags(p, d, "layers of each stack, encoder and decoder")
    m.add_argument(
        "--max-len",
        type=positive_int,
        default=d["max_len"],
        help="longest source, and target with <s> and </s>, in tokens (default: %(default)s)",
    )
    e = p.add_argument_group("evaluation")
    e.add_argument(
        "--label-smoothing",
        type=fraction,
        default=d["label_smoothing"],
        help="label smoothing of the training loss (default: %(default)s)",
    )
    e.add_argument(
        "--beam-size",
        type=positive_int,
        default=1,
        help="beam size for decoding the held-out sources (1: greedy) (default: %(default)s)",
    )
    e.add_argument(
        "--eval-examples",
        type=positive_int,
        default=500,
        help="held-out lines decoded for BLEU, chrF and exact match (default: %(default)s)",
    )
