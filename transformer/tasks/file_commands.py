"""The command-line side of training on your own files and generating with the result.

``transformer.cli`` adds these flags and sub-commands to ``typed-transformer`` and calls the functions here:

    typed-transformer train lm --text FILE... [--valid FILE...] [--tokenizer bpe|char] [--formulation paper|functional]
    typed-transformer train translate --train FILE --valid FILE [--format tsv|jsonl] [--too-long refuse|truncate|skip]
    typed-transformer generate --checkpoint DIR [--sample --temperature T --top-k K --top-p P --seed S] "prompt"
    typed-transformer decode --checkpoint DIR "source text"        (a translate checkpoint)

Problems with the input (files, flags, checkpoints, tokenizers) raise :class:`CommandError`, which the CLI prints as
one line on stderr with exit status 2.

Under torchrun (``torchrun --nproc_per_node=N -m transformer train lm|translate [--strategy ddp|fsdp]``) the CLI
passes the job's strategy (:mod:`transformer.distributed`): rank 0 trains the tokenizer and tokenizes the files into
the cache, the other ranks then take rank 0's tokenizer and read that cache; every rank trains on its own share of
each epoch's token-budget batches and takes part in evaluation, in gathering the model and in saving; rank 0 alone
samples or decodes with the gathered model and prints.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from ..checkpoint import CheckpointError, ConfigMismatchError, load_checkpoint
from ..data.corpora import TOO_LONG_POLICIES
from ..data.text_files import ENCODING_ERRORS, PAIR_FORMATS, TextFileError
from ..data.tokenizers import TOKENIZER_KINDS, TextTokenizer, TokenizerMismatchError, load_tokenizer
from ..distributed import (
    SingleProcess,
    Strategy,
    is_sharded_checkpoint,
    read_sharded_checkpoint,
    restarted_with_checkpoint,
)
from .tokenizer_assets import check_same_tokenizer, tokenizer_from_checkpoint

__all__ = ["FILE_TASKS", "CommandError", "add_file_flags", "add_generate_parser", "file_flags_misused",
           "train_file_task", "generate_command", "decode_translation"]

FILE_TASKS = ("lm", "translate")
_LM_ONLY = ("text", "block_len", "valid_fraction", "formulation")
_TRANSLATE_ONLY = ("train", "format", "too_long", "beam_size", "label_smoothing")
_BOTH = ("valid", "tokenizer", "tokenizer_file", "vocab_size", "min_frequency", "encoding_errors", "max_len",
         "max_tokens", "d_model", "layers", "heads", "d_ff", "dropout", "warmup", "lr_factor", "data_dir")


class CommandError(ValueError):
    """A problem with a file task's input, reported in one line (exit status 2)."""


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text}")
        return value

    return parse


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text}")
    return value


def add_file_flags(train: argparse.ArgumentParser) -> None:
    """The flags of ``train lm`` and ``train translate`` (all default None: given or not is checked per task)."""
    g = train.add_argument_group("your own data (train lm, train translate); see docs/data.md")
    g.add_argument("--text", nargs="+", metavar="FILE", help="lm: training text files (UTF-8)")
    g.add_argument("--train", metavar="FILE", help="translate: training pairs, source<TAB>target lines or JSON lines")
    g.add_argument("--valid", nargs="+", metavar="FILE",
                   help="held-out data: lm: text files (default: the last --valid-fraction of the text); "
                        "translate: one file of pairs (required)")
    g.add_argument("--format", choices=PAIR_FORMATS, help="translate: tsv or jsonl (default: from the file name)")
    g.add_argument("--tokenizer", choices=TOKENIZER_KINDS, help="train a bpe (default) or char tokenizer")
    g.add_argument("--tokenizer-file", metavar="PATH", help="use this tokenizer.json instead of training one")
    g.add_argument("--vocab-size", type=_positive(int), help="tokenizer vocabulary (default lm 2000, translate 1000)")
    g.add_argument("--min-frequency", type=_positive(int), help="tokenizer: least count of a merge/character")
    g.add_argument("--encoding-errors", choices=ENCODING_ERRORS,
                   help="invalid UTF-8: strict (default: refuse, naming file and line) or replace (U+FFFD, counted)")
    g.add_argument("--too-long", choices=TOO_LONG_POLICIES,
                   help="translate: pairs longer than --max-len: refuse (default), truncate or skip (counted)")
    g.add_argument("--max-len", type=_positive(int), help="longest sequence the model takes (positions)")
    g.add_argument("--block-len", type=_positive(int), help="lm: tokens per training window (default 128)")
    g.add_argument("--max-tokens", type=_positive(int), help="batch budget in (padded) tokens (default 2048)")
    g.add_argument("--valid-fraction", type=_fraction, help="lm: held-out share of the text without --valid (0.05)")
    g.add_argument("--formulation", choices=("paper", "functional"),
                   help="lm: the paper's formulation (default) or the functional transformer's")
    g.add_argument("--d-model", type=_positive(int), help="model width")
    g.add_argument("--layers", type=_positive(int), help="layers (lm) or layers per stack (translate)")
    g.add_argument("--heads", type=_positive(int), help="attention heads")
    g.add_argument("--d-ff", type=_positive(int), help="feed-forward width")
    g.add_argument("--dropout", type=_fraction, help="dropout")
    g.add_argument("--warmup", type=_positive(int), help="Noam warmup steps")
    g.add_argument("--lr-factor", type=_positive(float), help="Noam factor")
    g.add_argument("--label-smoothing", type=_fraction, help="translate: label smoothing (default 0)")
    g.add_argument("--beam-size", type=_positive(int), help="translate: beam size for the held-out BLEU (default 1)")
    g.add_argument("--data-dir", metavar="DIR", help="where the tokenized data is kept (default: OUT.data)")


def file_flags_misused(args: argparse.Namespace) -> str | None:
    """A sentence when a flag of one kind of task was given to another, else None."""
    given = lambda names: [n for n in names if getattr(args, n, None) is not None]  # noqa: E731
    flag = lambda name: "--" + name.replace("_", "-")  # noqa: E731
    if args.task not in FILE_TASKS:
        wrong = given(_LM_ONLY + _TRANSLATE_ONLY + _BOTH)
        return f"{flag(wrong[0])} is for train lm or train translate, not train {args.task}" if wrong else None
    other = _TRANSLATE_ONLY if args.task == "lm" else _LM_ONLY
    wrong = given(other)
    if wrong:
        return f"{flag(wrong[0])} is for train {'translate' if args.task == 'lm' else 'lm'}, not train {args.task}"
    if args.batch_size is not None:
        return f"train {args.task} batches by tokens: use --max-tokens instead of --batch-size"
    if args.task == "lm" and not args.text:
        return "train lm needs --text FILE... (the training text)"
    if args.task == "translate" and (not args.train or not args.valid):
        return "train translate needs --train FILE and --valid FILE (pairs: source<TAB>target lines or JSON lines)"
    if args.task == "translate" and len(args.valid) != 1:
        return f"train translate takes one --valid file, got {len(args.valid)}"
    return None


def _pick(args: argparse.Namespace, name: str, defaults: dict[str, Any], default_name: str | None = None):
    value = getattr(args, name, None)
    return defaults[default_name or name] if value is None else value


def _given_tokenizer(args: argparse.Namespace):
    if args.tokenizer_file is None:
        return None
    try:
        return load_tokenizer(args.tokenizer_file)
    except FileNotFoundError as error:
        raise CommandError(f"--tokenizer-file: {error}") from None


def _resume_tokenizer(out: str, given):
    """The checkpoint's tokenizer (a resumed run never trains another); refuse a different ``--tokenizer-file``.
    A sharded (FSDP) checkpoint keeps its tokenizer beside the shards."""
    sharded = is_sharded_checkpoint(out)
    ckpt = read_sharded_checkpoint(out) if sharded else load_checkpoint(out, load_trainer_state=False)
    tokenizer = tokenizer_from_checkpoint(ckpt)
    if given is not None:
        check_same_tokenizer(tokenizer, given, f"checkpoint {out}", f"--tokenizer-file {given.fingerprint[:12]}")
    return tokenizer


def train_file_task(args: argparse.Namespace, device: torch.device, strategy: Strategy | None = None) -> int:
    """``train lm`` / ``train translate``: prepare the data, train, report, save (see the module docstring).

    ``strategy``: the torchrun job's (``transformer.distributed.setup``), on ``device``; None: one process. After a
    torchrun restart (``--max-restarts``) the run resumes from the checkpoint in ``--out`` as ``--resume`` does."""
    out = args.out or os.path.join("runs", args.task)
    data_dir = args.data_dir or out.rstrip(os.sep) + ".data"
    run = _FileRun(args, out, strategy or SingleProcess(device=device), torchrun=strategy is not None)
    try:
        given = _given_tokenizer(args)
        tokenizer = _resume_tokenizer(out, given) if run.resumes else given
        train = _train_lm if args.task == "lm" else _train_translate
        return train(args, run, data_dir, tokenizer)
    except (TextFileError, TokenizerMismatchError, ConfigMismatchError, CheckpointError) as error:
        raise CommandError(str(error)) from None
    except ValueError as error:  # impossible configs and budgets, named by their own messages
        if isinstance(error, CommandError):
            raise
        raise CommandError(str(error)) from None


_Data = TypeVar("_Data")


class _FileRun:
    """What ``train lm`` and ``train translate`` share: where to save, the strategy (one process, or this rank of a
    torchrun job), preparing the data once, resuming, and the end of training every rank takes part in."""

    def __init__(self, args: argparse.Namespace, out: str, strategy: Strategy, *, torchrun: bool) -> None:
        self.args, self.out, self.strategy, self.torchrun = args, out, strategy, torchrun
        self.restarted = restarted_with_checkpoint(strategy.world, out)  # torchrun --max-restarts
        self.resumes = args.resume or self.restarted

    @property
    def device(self) -> torch.device:
        return self.strategy.device

    def prepare(self, prepare: Callable[[TextTokenizer | None], _Data], tokenizer: TextTokenizer | None) -> _Data:
        """``prepare(tokenizer)`` on rank 0 first (it trains the tokenizer unless one is given, and tokenizes the files
        into the cache), then on the other ranks with rank 0's tokenizer, so that they read rank 0's cache."""
        data = prepare(tokenizer) if self.strategy.is_main else None
        shared = self.strategy.broadcast(None if data is None else data.tokenizer.to_json())  # the others wait here
        return data if data is not None else prepare(TextTokenizer.from_json(shared, source="rank 0's tokenizer"))

    def start(self, trainer) -> None:
        """Spread ``trainer`` over the job's ranks (DDP or FSDP), and resume it from ``--out`` if asked or restarted."""
        trainer.distribute(self.strategy)
        if self.resumes:
            trainer.resume(self.out)
            restarts = self.strategy.world.restart_count
            print(f"{f'restart {restarts}: ' if self.restarted and not self.args.resume else ''}resumed from {self.out} "
                  f"at step {trainer.step}")

    def describe(self) -> str:
        return f"device {self.device}, {torch.get_num_threads()} thread(s)" + (
            f", {self.strategy.describe()}" if self.torchrun else "")

    def saved(self, command: str) -> str:
        """Where the checkpoint is, and the command that reads it (after ``consolidate`` when it is sharded)."""
        if is_sharded_checkpoint(self.out):
            return (f"sharded checkpoint saved to {self.out}  (for {command}: typed-transformer consolidate {self.out} "
                    f"{self.out}-consolidated)")
        return f"checkpoint saved to {self.out}  (typed-transformer {command} --checkpoint {self.out} \"...\")"

    def results(self, results: dict[str, Any], data) -> dict[str, Any]:
        results.update(seed=self.args.seed, device=str(self.device), threads=torch.get_num_threads(),
                       torch=torch.__version__, corpus=data.report.to_json())
        if self.torchrun:
            results.update(strategy=self.strategy.name, world_size=self.strategy.world_size)
        return results


def _model_fields(args: argparse.Namespace, defaults: dict[str, Any]) -> dict[str, Any]:
    return dict(d_model=_pick(args, "d_model", defaults), n_layers=_pick(args, "layers", defaults, "n_layers"),
                n_heads=_pick(args, "heads", defaults, "n_heads"), d_ff=_pick(args, "d_ff", defaults),
                dropout=_pick(args, "dropout", defaults))


def _train_lm(args, run: _FileRun, data_dir: str, tokenizer) -> int:
    from .text_lm import LM_DEFAULTS, lm_config, lm_results, make_lm_trainer, prepare_lm_data

    d, out = LM_DEFAULTS, run.out
    block = _pick(args, "block_len", d)
    data = run.prepare(lambda tokenizer: prepare_lm_data(
        args.text, data_dir, tokenizer=tokenizer, kind=args.tokenizer or "bpe", vocab_size=_pick(args, "vocab_size", d),
        min_frequency=args.min_frequency, block=block, valid_files=args.valid or (),
        valid_fraction=_pick(args, "valid_fraction", d), encoding_errors=args.encoding_errors or "strict"), tokenizer)
    fields = _model_fields(args, d)
    fields["attention_dropout"] = fields["dropout"]
    if args.max_len is not None:
        fields["max_len"] = args.max_len
    config = lm_config(data.tokenizer, formulation=args.formulation or "paper", block=block, **fields)
    trainer = make_lm_trainer(data, config, max_tokens=_pick(args, "max_tokens", d), steps=args.steps or d["steps"],
                              warmup=_pick(args, "warmup", d), factor=_pick(args, "lr_factor", d, "factor"),
                              seed=args.seed, device=run.device, progress=not args.no_progress,
                              eval_every=d["eval_every"] if args.eval_every is None else args.eval_every, out_dir=out)
    run.start(trainer)
    print(f"lm: {data.describe()}; {data.report.summary()}")
    print(f"model: {sum(p.numel() for p in trainer.model.parameters()):,} parameters ({args.formulation or 'paper'} "
          f"formulation, {config.n_layers} layers, d_model={config.d_model}, h={config.n_heads}, d_ff={config.d_ff}), "
          f"{trainer.config.steps} steps, {run.describe()}", flush=True)
    start = time.perf_counter()
    trainer.train()
    results = run.results(lm_results(trainer, data, time.perf_counter() - start), data)  # every rank: evaluate()
    trainer.metadata["results"] = results
    model = run.strategy.full_model(trainer.model)  # every rank takes part (FSDP gathers the shards on rank 0)
    sample = _sample_text(model, data) if run.strategy.is_main else None
    trainer.save(out)  # every rank: a collective
    if not run.strategy.is_main:
        return 0
    print(f"trained {trainer.step} steps in {results['train_seconds']:.1f} s ({results['tokens_per_second']:,.0f} "
          f"tokens/s); final train loss {trainer.last_train_loss:.4f}")
    print(f"held-out loss {results['eval_loss']:.4f} nats/token, perplexity {results['perplexity']:.2f} "
          f"(unigram baseline {results['unigram_perplexity']:.2f}) on {results['valid_tokens']:,} tokens")
    print(f"sample: {sample!r}")
    print(run.saved("generate"))
    print("RESULTS " + json.dumps(results))
    return 0


def _sample_text(model, data, new_tokens: int = 40) -> str:
    """A greedy continuation of the first held-out tokens (what the model makes of unseen text)."""
    from ..lm_generate import generate

    prompt = torch.from_numpy(data.valid.window(0)[:16]).unsqueeze(0).to(next(model.parameters()).device)
    was_training = model.training
    model.eval()
    try:
        new = min(new_tokens, model.config.max_len - prompt.size(1))
        out = generate(model, prompt, new, end_symbol=data.tokenizer.eos_id)
    finally:
        model.train(was_training)
    return data.tokenizer.decode(prompt[0].tolist()) + " ||| " + data.tokenizer.decode(out[0, prompt.size(1):].tolist())


def _train_translate(args, run: _FileRun, data_dir: str, tokenizer) -> int:
    from .translation_files import (
        TRANSLATE_DEFAULTS,
        make_translation_trainer,
        prepare_translation_data,
        translation_config,
        translation_results,
    )

    d, out = TRANSLATE_DEFAULTS, run.out
    max_len = _pick(args, "max_len", d)
    data = run.prepare(lambda tokenizer: prepare_translation_data(
        args.train, args.valid[0], data_dir, max_len=max_len, tokenizer=tokenizer, kind=args.tokenizer or "bpe",
        vocab_size=_pick(args, "vocab_size", d), min_frequency=args.min_frequency, format=args.format,
        encoding_errors=args.encoding_errors or "strict", too_long=args.too_long or "refuse"), tokenizer)
    config = translation_config(data.tokenizer, max_len=max_len, **_model_fields(args, d))
    trainer = make_translation_trainer(
        data, config, max_tokens=_pick(args, "max_tokens", d), steps=args.steps or d["steps"],
        warmup=_pick(args, "warmup", d), factor=_pick(args, "lr_factor", d, "factor"),
        label_smoothing=_pick(args, "label_smoothing", d), seed=args.seed, device=run.device,
        progress=not args.no_progress, eval_every=d["eval_every"] if args.eval_every is None else args.eval_every,
        out_dir=out)
    run.start(trainer)
    print(f"translate: {data.describe()}; {data.report.summary()}")
    print(f"model: {sum(p.numel() for p in trainer.model.parameters()):,} parameters (N={config.n_encoder_layers}, "
          f"d_model={config.d_model}, h={config.n_heads}, d_ff={config.d_ff}), {trainer.config.steps} steps, "
          f"{run.describe()}", flush=True)
    start = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - start
    eval_loss = trainer.evaluate()  # every rank: the held-out batches are split between the ranks and reduced
    model = run.strategy.full_model(trainer.model)  # every rank takes part (FSDP gathers the shards on rank 0)
    if run.strategy.is_main:  # decoding the held-out sources for BLEU: rank 0 alone, with the gathered model
        results, examples = translation_results(model, trainer, eval_loss, data, train_seconds,
                                                examples=args.eval_examples, beam_size=args.beam_size or 1)
        trainer.metadata["results"] = run.results(results, data)
    trainer.save(out)  # every rank: a collective
    if not run.strategy.is_main:
        return 0
    print(f"trained {trainer.step} steps in {results['train_seconds']:.1f} s; held-out loss {results['eval_loss']:.4f}")
    for source, reference, output in examples:
        print(f"  {source!r} -> {output!r} (reference {reference!r})")
    print(f"on {results['eval_lines']} held-out lines: BLEU {results['bleu']:.2f}, chrF {results['chrf']:.2f}, "
          f"exact match {results['exact_match']:.1%}")
    print(run.saved("decode"))
    print("RESULTS " + json.dumps(results))
    return 0


# ---------------------------------------------------------------------------- generate and decode
def add_generate_parser(sub, add_runtime_flags) -> argparse.ArgumentParser:
    p = sub.add_parser("generate", help="continue a prompt with a language model trained by `train lm`",
                       description="Continue each PROMPT with a checkpoint written by `train lm`: greedy by default, "
                                   "or --sample (temperature, top-k, top-p, from --seed); --stop ends at a text.")
    p.add_argument("--checkpoint", required=True, help="checkpoint directory written by `train lm`")
    p.add_argument("--max-new-tokens", type=_positive(int), default=100, help="tokens to add (default 100)")
    p.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--temperature", type=_positive(float), default=None, help="--sample: softmax temperature (1.0)")
    p.add_argument("--top-k", type=_positive(int), default=None, help="--sample: keep the k most probable tokens")
    p.add_argument("--top-p", type=_positive(float), default=None, help="--sample: nucleus mass in (0, 1]")
    p.add_argument("--seed", type=int, default=None, help="--sample: random seed (default 0): same seed, same text")
    p.add_argument("--beam-size", type=_positive(int), default=1, help="beam search with K beams (greedy: 1)")
    p.add_argument("--stop", action="append", default=[], metavar="TEXT",
                   help="end a continuation once it has produced TEXT (repeatable)")
    p.add_argument("prompt", nargs="+", help='prompt text ("" starts a new document)')
    add_runtime_flags(p)
    return p


def _load_task_checkpoint(path: str, device: torch.device, task: str, command: str):
    ckpt = load_checkpoint(path, map_location=device, load_trainer_state=False)
    found = ckpt.metadata.get("task")
    if found != task:
        hint = {"lm": "generate", "translate": "decode"}.get(found, "decode")
        raise CommandError(f"checkpoint {path} was trained by `train {found}`; {command} needs a `train {task}` "
                           f"checkpoint (use `{hint}`)")
    try:
        return ckpt, tokenizer_from_checkpoint(ckpt)
    except (TokenizerMismatchError, ValueError) as error:
        raise CommandError(str(error)) from None


def generate_command(args: argparse.Namespace, device: torch.device) -> int:
    """``generate``: print each prompt followed by its continuation."""
    from ..lm_generate import beam_generate, generate

    sampling = [flag for flag, value in (("--temperature", args.temperature), ("--top-k", args.top_k),
                                         ("--top-p", args.top_p), ("--seed", args.seed)) if value is not None]
    if sampling and not args.sample:
        raise CommandError(f"{sampling[0]} is a sampling option: add --sample")
    if args.sample and args.beam_size > 1:
        raise CommandError("--sample and --beam-size > 1 exclude each other")
    ckpt, tokenizer = _load_task_checkpoint(args.checkpoint, device, "lm", "generate")
    model = ckpt.model.eval()
    stops = [tokenizer.encode(text) for text in args.stop]
    for prompt_text in args.prompt:
        ids = tokenizer.encode(prompt_text) or [tokenizer.eos_id]  # an empty prompt: the start of a document
        prompt = torch.tensor([ids], device=device)
        try:
            if args.beam_size > 1:
                out, _ = beam_generate(model, prompt, args.max_new_tokens, beam_size=args.beam_size,
                                       end_symbol=tokenizer.eos_id)
            else:
                out = generate(model, prompt, args.max_new_tokens, sample=args.sample,
                               temperature=args.temperature or 1.0, top_k=args.top_k, top_p=args.top_p,
                               seed=0 if args.seed is None else args.seed, end_symbol=tokenizer.eos_id,
                               stop_sequences=stops)
        except ValueError as error:
            raise CommandError(str(error)) from None
        new = out[0, len(ids):].tolist()
        if tokenizer.eos_id in new:
            new = new[: new.index(tokenizer.eos_id)]
        print(prompt_text + tokenizer.decode(new))
    return 0


def decode_translation(args: argparse.Namespace, ckpt) -> int:
    """``decode`` on a ``train translate`` checkpoint: plain text in, plain text out (a ``train lm`` checkpoint is
    refused: it generates)."""
    from .translation_files import translate

    if ckpt.metadata.get("task") != "translate":
        raise CommandError(f"checkpoint {args.checkpoint} was trained by `train {ckpt.metadata.get('task')}`: "
                           f"continue text with `typed-transformer generate --checkpoint {args.checkpoint} \"...\"`")
    try:
        tokenizer = tokenizer_from_checkpoint(ckpt)
    except (TokenizerMismatchError, ValueError) as error:
        raise CommandError(str(error)) from None
    outputs = translate(ckpt.model.eval(), tokenizer, args.text, beam_size=args.beam_size)
    for text, output in zip(args.text, outputs):
        print(output if len(args.text) == 1 else f"{text} -> {output}")
    return 0
