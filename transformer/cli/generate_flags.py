"""The flags of ``typed-transformer generate`` (besides the runtime flags): the model (``--checkpoint`` or
``--model``), the search (greedy, ``--sample``, ``--beam-size``), the stops, the prompts (``--chat``, ``--system``),
each prompt's ``--seed``, ``--compile``, ``--weight-layout`` and the output (streamed unless ``--no-stream``)."""

from __future__ import annotations

import argparse

from ..common.dtypes import DTYPE_ARGUMENT_NAMES
from .arguments import positive_float, positive_int

__all__ = ["add_generate_flags"]


def add_generate_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``generate`` (besides the runtime flags)."""
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("--checkpoint", help="checkpoint directory written by `train lm`")
    model.add_argument(
        "--model",
        metavar="DIR",
        help="a Hugging Face checkpoint folder (config.json, model.safetensors, tokenizer.json; "
        "generation_config.json's eos_token_id ends a continuation), e.g. a snapshot in ~/.cache/huggingface/hub",
    )
    p.add_argument(
        "--dtype",
        choices=DTYPE_ARGUMENT_NAMES,
        default=None,
        help="--model: the dtype the weights are loaded in, as transformers names it; auto: the folder's "
        "(config.json's dtype) (default: auto); float16 and bfloat16 choose tokens in float32 (docs/lm.md)",
    )
    p.add_argument("--max-new-tokens", type=positive_int, default=100, help="tokens to add (default 100)")
    p.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--temperature", type=positive_float, default=None, help="--sample: softmax temperature (1.0)")
    p.add_argument("--top-k", type=positive_int, default=None, help="--sample: keep the k most probable tokens")
    p.add_argument("--top-p", type=positive_float, default=None, help="--sample: nucleus mass in (0, 1]")
    p.add_argument(
        "--seed",
        type=int,
        action="append",
        default=None,
        help="--sample: random seed (default 0); once for every prompt, or once per prompt in their order: a prompt "
        "and its seed give the same text alone or among other prompts",
    )
    p.add_argument(
        "--beam-size",
        type=positive_int,
        default=1,
        help="beam search with K beams, as transformers' generate(num_beams=K) (greedy: 1)",
    )
    p.add_argument(
        "--length-penalty",
        type=float,
        default=None,
        help="--beam-size: transformers' length_penalty, score = sum log p / length ** P (default 1.0)",
    )
    p.add_argument(
        "--early-stopping",
        choices=("false", "true", "never"),
        default=None,
        help="--beam-size: transformers' early_stopping (default false)",
    )
    p.add_argument(
        "--stop",
        action="append",
        default=[],
        metavar="TEXT",
        help="end a continuation at the token whose text completes TEXT, as transformers' stop_strings: inside a "
        "token or across tokens, a leading space or none (the token is kept; repeatable)",
    )
    p.add_argument(
        "--chat",
        action="store_true",
        help="--model: each PROMPT is a user message, rendered with the folder's chat template and "
        "add_generation_prompt (as transformers' apply_chat_template); prints the answer alone",
    )
    p.add_argument("--system", metavar="TEXT", default=None, help="--chat: a system message before each prompt")
    p.add_argument(
        "--compile",
        choices=("off", "on"),
        default="off",
        help="on: decode over a static cache with a step compiled by torch.compile once per batch size (the same "
        "tokens; compiling takes seconds, paid again by every run of the command; beam search and models it cannot "
        "take decode eagerly); off: eager, faster for one run of a few hundred tokens, which does not repay the "
        "compile (docs/benchmarks.md) (default: off)",
    )
    p.add_argument(
        "--weight-layout",
        choices=("auto", "as_loaded"),
        default="auto",
        help="auto: a continuation of at least 32 tokens decodes with the float32 CPU weights whose products it "
        "speeds up (the output head; at batch 1 the wide maps) stored transposed, laid back after (the same tokens up "
        "to float32 rounding; docs/benchmarks.md); as_loaded: the weights as loaded, logits bit for bit a forward "
        "call's (default: auto)",
    )
    p.add_argument(
        "--no-stream",
        action="store_true",
        help="print each continuation once it is complete (default: as its tokens come, at whole characters; "
        "beam search always prints at the end)",
    )
    p.add_argument(
        "prompt",
        nargs="+",
        help='prompt text ("" starts a new document after the end token; refused for a model trained by '
        "`train lm --pack`, which never learned what starts a document)",
    )
