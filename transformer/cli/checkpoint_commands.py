"""The commands that read a checkpoint written by ``train``: ``decode`` (a synthetic task's, or a ``train translate``
checkpoint's: text in, text out), ``generate`` (a ``train lm`` checkpoint continues prompts: greedy, sampled or beam
search) and ``consolidate`` (gather a sharded checkpoint into one that ``decode`` and ``generate`` read).

    typed-transformer decode --checkpoint DIR "1 2 3 4 5 6 7 8 9 10"
    typed-transformer generate --checkpoint DIR [--sample --temperature T --top-k K --top-p P --seed S] "prompt"
    typed-transformer generate --model HF_FOLDER [--dtype bfloat16] [the same options] "prompt"
    typed-transformer generate --model HF_FOLDER --chat [--system TEXT] "question" ["question" ...]
    typed-transformer consolidate SHARDED_DIR OUT_DIR
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from ..checkpoint import Checkpoint, load_checkpoint, read_config
from ..data.tokenizers import TokenizerMismatchError
from ..decoding import StopStrings, TextStreamer, token_bytes
from ..distributed import consolidate_checkpoint
from ..lm.generation import generate
from ..lm.model import TransformerLM
from ..lm.pretrained import PretrainedTokenizer
from ..lm.pretrained.chat_template import ChatTemplateError
from ..tasks import task_from_metadata
from ..tasks.tokenizer_assets import tokenizer_from_checkpoint
from ..tasks.translation_files import translate
from .errors import UsageError
from .parser import FILE_TASKS, PROG
from .runtime import attention_backend, checkpoint_device

__all__ = ["run_decode", "run_generate", "run_consolidate", "generate_command", "decode_translation"]


def run_decode(args: argparse.Namespace) -> int:
    """``decode``: print the decoding of each text (``TEXT -> OUTPUT`` when there are several)."""
    device = checkpoint_device(args)
    ckpt = load_checkpoint(args.checkpoint, map_location=device, load_trainer_state=False)
    if ckpt.metadata.get("task") in FILE_TASKS:
        with attention_backend(args.attention_backend):
            return decode_translation(args, ckpt)
    try:
        task = task_from_metadata(ckpt.metadata)
    except (ValueError, TypeError) as error:
        raise UsageError(f"checkpoint {args.checkpoint}: {error}") from None
    model = ckpt.model.eval()
    with attention_backend(args.attention_backend):
        outputs = task.translate(model, args.text, beam_size=args.beam_size)
    _print_outputs(args.text, outputs)
    return 0


def run_generate(args: argparse.Namespace) -> int:
    """``generate``, from the device flags on."""
    device = checkpoint_device(args)
    with attention_backend(args.attention_backend):
        return generate_command(args, device)


def run_consolidate(args: argparse.Namespace) -> int:
    """``consolidate``: gather the shards, then name the command that reads the result."""
    path = consolidate_checkpoint(args.src, args.out)
    command = "generate" if read_config(path, with_kind=True)[0] == "lm" else "decode"  # an LM continues text
    print(f'consolidated {args.src} into {path}  ({PROG} {command} --checkpoint {path} "...")')
    return 0


def _print_outputs(texts: list[str], outputs: list[str]) -> None:
    for text, output in zip(texts, outputs, strict=True):
        print(output if len(texts) == 1 else f"{text} -> {output}")


def _load_task_checkpoint(path: str, device: torch.device, task: str, command: str) -> tuple[Checkpoint, object]:
    """The checkpoint at ``path`` and its tokenizer, refused unless ``train {task}`` wrote it."""
    ckpt = load_checkpoint(path, map_location=device, load_trainer_state=False)
    found = ckpt.metadata.get("task")
    if found != task:
        hint = {"lm": "generate", "translate": "decode"}.get(found, "decode")
        raise UsageError(
            f"checkpoint {path} was trained by `train {found}`; {command} needs a `train {task}` "
            f"checkpoint (use `{hint}`)"
        )
    try:
        return ckpt, tokenizer_from_checkpoint(ckpt)
    except (TokenizerMismatchError, ValueError) as error:
        raise UsageError(str(error)) from None


def generate_command(args: argparse.Namespace, device: torch.device) -> int:
    """``generate`` on ``device``: print each prompt followed by its continuation (as its tokens come unless
    ``--no-stream``), from ``--checkpoint`` (a ``train lm`` checkpoint) or ``--model`` (a Hugging Face checkpoint
    folder, :meth:`TransformerLM.from_pretrained`, with its ``tokenizer.json``; the end-of-sequence ids of its
    ``generation_config.json`` end a continuation). ``--chat``: each prompt a user message (after ``--system``'s),
    rendered with the folder's chat template; the answer alone is printed."""
    seeds = _check_generate_flags(args)
    if getattr(args, "model", None) is not None:
        if not os.path.isdir(args.model):
            raise UsageError(f"--model {args.model}: no such directory (a Hugging Face checkpoint folder)")
        tokenizer = PretrainedTokenizer.from_folder(args.model)  # cheap: a bad folder is named before any weight
        chat = [_chat_prompt(tokenizer, args, text) for text in args.prompt] if args.chat else None
        model = TransformerLM.from_pretrained(args.model, dtype=args.dtype, device=device)
        metadata = {}
    else:
        if getattr(args, "dtype", None) is not None:
            raise UsageError(
                f"--dtype {args.dtype} is for --model (a Hugging Face folder): a --checkpoint model runs in the "
                "dtype it was trained in"
            )
        if args.chat:
            raise UsageError("--chat is for --model (a Hugging Face folder with a chat template); a `train lm` "
                             "checkpoint has none")  # fmt: skip
        ckpt, tokenizer = _load_task_checkpoint(args.checkpoint, device, "lm", "generate")
        model, metadata, chat = ckpt.model, ckpt.metadata, None
    model.eval()
    ends = list(tokenizer.eos_ids)
    stops = StopStrings(args.stop, token_bytes(tokenizer)) if args.stop else None
    stream = not args.no_stream and args.beam_size == 1
    for n, prompt_text in enumerate(args.prompt):
        ids = chat[n] if chat is not None else (tokenizer.encode(prompt_text) or _document_start(args, metadata, ends))
        shown = "" if chat is not None else prompt_text
        prompt = torch.tensor([ids], device=device)
        end = ends[0] if ends else None
        streamer = None
        if stream:
            print(shown, end="", flush=True)
            streamer = TextStreamer(_Decoder(tokenizer), skip_prompt=True, end_ids=ends, on_text=_write)
        try:
            if args.beam_size > 1:
                out = generate(
                    model,
                    prompt,
                    args.max_new_tokens,
                    num_beams=args.beam_size,
                    length_penalty=1.0 if args.length_penalty is None else args.length_penalty,
                    early_stopping={"true": True, "never": "never"}.get(args.early_stopping, False),
                    end_symbol=end,
                    end_symbols=ends[1:],
                    weight_layout=args.weight_layout,
                )
            else:
                out = generate(
                    model,
                    prompt,
                    args.max_new_tokens,
                    sample=args.sample,
                    temperature=args.temperature or 1.0,
                    top_k=args.top_k,
                    top_p=args.top_p,
                    seed=seeds[n],
                    end_symbol=end,
                    end_symbols=ends[1:],
                    stop_strings=list(args.stop),
                    tokenizer=tokenizer if args.stop else None,
                    compile=args.compile == "on",
                    weight_layout=args.weight_layout,
                    **({"streamer": streamer} if streamer is not None else {}),
                )
        except ValueError as error:
            raise UsageError(str(error)) from None
        new = out[0, len(ids) :].tolist()
        cut = [new.index(i) for i in ends if i in new]
        if stops is not None:  # the padding after a stop string is no text
            cut += [t + 1 for t in range(len(new)) if stops.row_stops(ids + new[: t + 1])][:1]
        if streamer is not None:
            print(flush=True)
        else:
            print(shown + _continuation(tokenizer, ids, new[: min(cut)] if cut else new))
    return 0


def _check_generate_flags(args: argparse.Namespace) -> list[int]:
    """The flags of ``generate`` that exclude each other, refused by name; each prompt's seed (``--seed`` once for
    all, or once per prompt; default 0)."""
    sampling = [
        flag
        for flag, value in (
            ("--temperature", args.temperature),
            ("--top-k", args.top_k),
            ("--top-p", args.top_p),
            ("--seed", args.seed),
        )
        if value is not None
    ]
    if sampling and not args.sample:
        raise UsageError(f"{sampling[0]} is a sampling option: add --sample")
    if args.sample and args.beam_size > 1:
        raise UsageError("--sample and --beam-size > 1 exclude each other")
    if args.stop and args.beam_size > 1:
        raise UsageError("--stop ends greedy and --sample continuations; beam search (--beam-size > 1) takes none")
    beam = [flag for flag, value in (("--length-penalty", args.length_penalty), ("--early-stopping",
            args.early_stopping)) if value is not None]  # fmt: skip
    if beam and args.beam_size == 1:
        raise UsageError(f"{beam[0]} is a beam search option: add --beam-size K (K > 1)")
    if args.system is not None and not args.chat:
        raise UsageError("--system is the system message of --chat: add --chat")
    seeds = args.seed or [0]
    if len(seeds) not in (1, len(args.prompt)):
        raise UsageError(
            f"--seed was given {len(seeds)} times for {len(args.prompt)} prompts: give it once (every prompt) or "
            "once per prompt"
        )
    return seeds * len(args.prompt) if len(seeds) == 1 else list(seeds)


def _chat_prompt(tokenizer: PretrainedTokenizer, args: argparse.Namespace, text: str) -> list[int]:
    """The ids of ``text`` as a user message (after ``--system``'s), rendered by the folder's chat template with
    the assistant's turn opened, encoded without a second start token (transformers' ``apply_chat_template``)."""
    messages = ([{"role": "system", "content": args.system}] if args.system is not None else []) + [
        {"role": "user", "content": text}
    ]
    try:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    except ChatTemplateError as error:
        raise UsageError(f"--chat: {error}") from None


class _Decoder:
    """A tokenizer's ``decode(ids)`` as the streamer calls it: the text the command prints at the end, the same."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(ids)


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def _document_start(args: argparse.Namespace, metadata: dict, ends: list[int]) -> list[int]:
    """The prompt of an empty text: the end token, which precedes every document of the training stream (``train
    lm --no-pack``; a pretrained model's own tokenizer adds its start token to the text itself). A packed new model
    (``--pack``, the default) never learned a document's start: each document begins at position 0 with nothing
    before it, its first token is no label, and the end token only closes documents (its embedding gets no gradient):
    refused, rather than continuing a token the model never saw."""
    if not ends:
        raise UsageError(f"{args.model}: an empty prompt needs a start token, and the tokenizer has none")
    if metadata.get("data", {}).get("pack") and "init" not in metadata:
        raise UsageError(
            f"checkpoint {args.checkpoint} was trained packed (`train lm --pack`, the default): a document starts "
            "with nothing before it, so the model never learned what starts one and an empty prompt has nothing to "
            "continue; give a prompt, or train with --no-pack"
        )
    return ends[:1]


def _continuation(tokenizer, prompt: list[int], new: list[int]) -> str:
    """The text ``new`` adds after ``prompt``: decoded together, less the prompt's own text, so that a tokenizer
    that drops a leading space of a text it decodes alone (SentencePiece's) keeps the space between them."""
    head, whole = tokenizer.decode(prompt), tokenizer.decode(prompt + new)
    return whole[len(head) :] if whole.startswith(head) else tokenizer.decode(new)


def decode_translation(args: argparse.Namespace, ckpt) -> int:
    """``decode`` on a ``train translate`` checkpoint: plain text in, plain text out (a ``train lm`` checkpoint is
    refused: it generates)."""
    if ckpt.metadata.get("task") != "translate":
        raise UsageError(
            f"checkpoint {args.checkpoint} was trained by `train {ckpt.metadata.get('task')}`: "
            f'continue text with `{PROG} generate --checkpoint {args.checkpoint} "..."`'
        )
    try:
        tokenizer = tokenizer_from_checkpoint(ckpt)
    except (TokenizerMismatchError, ValueError) as error:
        raise UsageError(str(error)) from None
    outputs = translate(ckpt.model.eval(), tokenizer, args.text, beam_size=args.beam_size)
    _print_outputs(args.text, outputs)
    return 0
