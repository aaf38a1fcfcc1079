"""``typed-transformer export --checkpoint DIR --to HF_DIR``: a ``train lm`` checkpoint as a Hugging Face folder
that transformers' ``AutoModelForCausalLM`` and ``AutoTokenizer`` load (the work is
:func:`transformer.tasks.hf_export.export_pretrained`; this is its command line)."""

from __future__ import annotations

import argparse

from ..tasks.hf_export import ExportError, export_pretrained
from .arguments import positive_int
from .errors import EXIT_STATUSES, UsageError

__all__ = ["add_export_parser", "run_export"]


def add_export_parser(sub) -> argparse.ArgumentParser:
    """The ``export`` command on the sub-parsers ``sub``."""
    p = sub.add_parser(
        "export",
        help="write a `train lm` checkpoint as a Hugging Face folder transformers loads",
        description="Write the language model of a `train lm` checkpoint as a Hugging Face folder (config.json, "
        "model.safetensors, generation_config.json, tokenizer.json, tokenizer_config.json) that transformers' "
        "AutoModelForCausalLM and AutoTokenizer load: a --init fine-tune as the architecture, token ids and chat "
        "template of its pretrained folder (docs/pretrained.md).",
        epilog=EXIT_STATUSES,
    )
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint directory written by `train lm`")
    p.add_argument("--to", required=True, metavar="HF_DIR", help="the folder to write (new or empty)")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --to whole when it exists and is not empty (without it, refused)",
    )
    p.add_argument("--threads", type=positive_int, default=1, help="CPU threads for torch (default 1)")
    return p


def run_export(args: argparse.Namespace) -> int:
    """``export``: write the folder, then say how transformers loads it."""
    try:
        folder = export_pretrained(args.checkpoint, args.to, overwrite=args.overwrite)
    except ExportError as error:
        raise UsageError(str(error)) from None
    print(f"exported {args.checkpoint} to {folder}  (AutoModelForCausalLM.from_pretrained({str(folder)!r}))")
    return 0
