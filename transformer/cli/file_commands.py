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

from ..checkpoint import CheckpointError, ConfigMismatchError, find_checkpoint, load_checkpoint
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
from ..tasks.tokenizer_assets import check_same_tokenizer, tokenizer_from_checkpoint

__all__ = ["FILE_TASKS", "CommandError", "add_lm_flags", "add_translate_flags", "add_generate_parser",
           "train_file_task", "generate_command", "decode_translation", "schedule_settings", "schedule_given",
           "describe_schedule", "resume_schedule", "require_finite"]

FILE_TASKS = ("lm", "translate")


class CommandError(ValueError):
    """A problem with a file task's input, reported in one line (exit status 2)."""


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}") from None
        if not value > 0 or value == float("inf"):
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


def _data_flags(g: argparse._ArgumentGroup, d: dict[str, Any]) -> None:
    """The tokenizer and reading flags both file tasks take (after each task's own files)."""
    g.add_argument("--tokenizer", choices=TOKENIZER_KINDS, default="bpe",
                   help="train a bpe or a char tokenizer on the training files (default: %(default)s)")
    g.add_argument("--tokenizer-file", metavar="PATH", help="use this tokenizer.json instead of training one")
    g.add_argument("--vocab-size", type=_positive(int), default=d["vocab_size"],
                   help="tokenizer vocabulary, special tokens (and bpe's 256 bytes) included (default: %(default)s)")
    g.add_argument("--min-frequency", type=_positive(int),
                   help="tokenizer: least count of a merge/character (default: 2 for bpe, 1 for char)")
    g.add_argument("--encoding-errors", choices=ENCODING_ERRORS, default="strict",
                   help="invalid UTF-8: strict refuses, naming file and line; replace puts U+FFFD in place of bad "
                        "bytes and counts the lines (default: %(default)s)")
    g.add_argument("--max-tokens", type=_positive(int), default=d["max_tokens"],
                   help="batch budget in (padded) tokens; under torchrun each rank's (default: %(default)s)")
    g.add_argument("--data-dir", metavar="DIR", help="where the tokenized data is kept (default: OUT.data)")


def _model_flags(p: argparse.ArgumentParser, d: dict[str, Any], layers: str) -> argparse._ArgumentGroup:
    g = p.add_argument_group("model")
    g.add_argument("--d-model", type=_positive(int), default=d["d_model"], help="model width (default: %(default)s)")
    g.add_argument("--layers", type=_positive(int), default=d["n_layers"], help=f"{layers} (default: %(default)s)")
    g.add_argument("--heads", type=_positive(int), default=d["n_heads"], help="attention heads (default: %(default)s)")
    g.add_argument("--d-ff", type=_positive(int), default=d["d_ff"], help="feed-forward width (default: %(default)s)")
    g.add_argument("--dropout", type=_fraction, default=d["dropout"],
                   help="dropout, on the sub-layers and the attention weights (default: %(default)s)")
    return g


def add_lm_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``train lm`` (the training flags every task takes are the CLI's)."""
    from ..tasks.text_lm import LM_DEFAULTS as d

    g = p.add_argument_group("data (see docs/data.md)")
    g.add_argument("--text", nargs="+", metavar="FILE", required=True, help="training text files (UTF-8)")
    g.add_argument("--valid", nargs="+", metavar="FILE",
                   help="held-out text files (default: the last --valid-fraction of the text)")
    g.add_argument("--valid-fraction", type=_fraction, default=d["valid_fraction"],
                   help="held-out share of the text without --valid (default: %(default)s)")
    g.add_argument("--block-len", type=_positive(int), default=d["block_len"],
                   help="tokens per training window (default: %(default)s)")
    _data_flags(g, d)
    m = _model_flags(p, d, "decoder layers")
    m.add_argument("--formulation", choices=("paper", "functional"), default="paper",
                   help="the paper's formulation or the functional transformer's (docs/lm.md) (default: %(default)s)")
    m.add_argument("--max-len", type=_positive(int), help="longest sequence the model takes, in positions "
                                                          "(default: the larger of 256 and --block-len)")


def add_translate_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``train translate`` (the training flags every task takes are the CLI's)."""
    from ..tasks.translation_files import TRANSLATE_DEFAULTS as d

    g = p.add_argument_group("data (see docs/data.md)")
    g.add_argument("--train", metavar="FILE", required=True,
                   help="training pairs: source<TAB>target lines, or JSON lines with src and tgt")
    g.add_argument("--valid", metavar="FILE", required=True, help="held-out pairs, in the same format")
    g.add_argument("--format", choices=PAIR_FORMATS, help="tsv or jsonl (default: from the file name: .jsonl and "
                                                          ".json are JSON lines, anything else tsv)")
    g.add_argument("--too-long", choices=TOO_LONG_POLICIES, default="refuse",
                   help="pairs longer than --max-len: refuse, truncate or skip (counted) (default: %(default)s)")
    _data_flags(g, d)
    m = _model_flags(p, d, "layers of each stack, encoder and decoder")
    m.add_argument("--max-len", type=_positive(int), default=d["max_len"],
                   help="longest source, and target with <s> and </s>, in tokens (default: %(default)s)")
    e = p.add_argument_group("evaluation")
    e.add_argument("--label-smoothing", type=_fraction, default=d["label_smoothing"],
                   help="label smoothing of the training loss (default: %(default)s)")
    e.add_argument("--beam-size", type=_positive(int), default=1,
                   help="beam size for decoding the held-out sources (1: greedy) (default: %(default)s)")
    e.add_argument("--eval-examples", type=_positive(int), default=500,
                   help="held-out lines decoded for BLEU, chrF and exact match (default: %(default)s)")


def schedule_settings(args: argparse.Namespace, d_model: int, defaults: dict[str, Any]) -> tuple[float, int]:
    """The Noam ``(factor, warmup)`` the flags ask for: ``--warmup`` (else the task's), and ``--lr`` (the schedule's
    peak) converted with ``d_model`` and the warm-up (:func:`transformer.training.noam_factor`), else
    ``--lr-factor``, else the task's factor (``defaults``: ``"factor"`` and ``"warmup"``)."""
    from ..training.losses import noam_factor

    warmup = defaults["warmup"] if args.warmup is None else args.warmup
    if args.lr is not None:
        return noam_factor(args.lr, d_model, warmup), warmup
    return (defaults["factor"] if args.lr_factor is None else args.lr_factor), warmup


def schedule_given(args: argparse.Namespace) -> bool:
    """Whether the command line sets the learning rate (``--lr``, ``--lr-factor`` or ``--warmup``)."""
    return any(getattr(args, name, None) is not None for name in ("lr", "lr_factor", "warmup"))


def describe_schedule(schedule) -> str:
    """One line on the learning rate a run uses: the Noam schedule's warm-up, peak and factor."""
    return (f"learning rate: Noam schedule, {schedule.warmup} warm-up steps to a peak of {schedule.peak:.3g} "
            f"(factor {schedule.factor:.4g})")


def resume_schedule(trainer, args: argparse.Namespace) -> str | None:
    """After ``trainer`` resumed: keep the checkpoint's learning-rate schedule, unless the command line sets some of
    it (``--lr``, ``--lr-factor``, ``--warmup``; what it does not set stays the checkpoint's), which then applies
    from the resumed step on (e.g. a lower ``--lr`` after a divergence). Returns a line saying what changed, or
    None."""
    from ..training.losses import NoamSchedule

    scheduler = trainer.scheduler
    saved = scheduler.lr_lambdas[0]
    if not schedule_given(args):
        return None
    factor, warmup = schedule_settings(args, saved.model_size, {"factor": saved.factor, "warmup": saved.warmup})
    if (saved.factor, saved.warmup) == (factor, warmup):
        return None
    new = NoamSchedule(saved.model_size, factor, warmup)
    scheduler.lr_lambdas = [new for _ in scheduler.lr_lambdas]
    for group, base in zip(trainer.optimizer.param_groups, scheduler.base_lrs):
        group["lr"] = base * new(scheduler.last_epoch)
    scheduler._last_lr = [group["lr"] for group in trainer.optimizer.param_groups]
    return (f"learning rate changed on resume: factor {saved.factor:.4g} -> {factor:.4g}, warm-up {saved.warmup} -> "
            f"{warmup} (peak {saved.peak:.3g} -> {new.peak:.3g})")


def require_finite(eval_loss: float, step: int) -> float:
    """``eval_loss``, or :class:`~transformer.training.trainer.TrainingDiverged` when it is NaN or infinite: a run never
    reports a non-finite loss (or perplexity, or BLEU of a broken model) as its result."""
    import math

    from ..training.trainer import TrainingDiverged

    if not math.isfinite(eval_loss):
        raise TrainingDiverged(f"the held-out loss after step {step} is {eval_loss}: the model is broken (a loss or "
                               "a weight became NaN or inf); no results are reported; lower the learning rate (--lr "
                               "or --lr-factor) or lengthen the warm-up (--warmup)", step, eval_loss)
    return eval_loss


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

    def check_same_data(self, settings: dict[str, Any]) -> None:
        """A resumed run continues the checkpoint's batches: its data settings (``--seed``, ``--max-tokens``,
        ``--block-len``, as recorded in the checkpoint's metadata) must be the command line's, or the plan of batches
        (and so what the position in it means) would silently change."""
        if not self.resumes:
            return
        found = find_checkpoint(self.out)
        try:
            with open(os.path.join(found, "meta.json")) as f:
                recorded = json.load(f)["metadata"].get("data", {})
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return
        for name, value in settings.items():
            if name in recorded and recorded[name] != value:
                flag = "--" + name.replace("_", "-")
                raise CommandError(f"{flag} {value} differs from the checkpoint's {recorded[name]} (in {found}): a "
                                   f"resumed run continues the checkpoint's plan of batches; give {flag} "
                                   f"{recorded[name]}")

    def start(self, trainer) -> None:
        """Spread ``trainer`` over the job's ranks (DDP or FSDP), and resume it from ``--out`` if asked or restarted
        (with the learning rate the command line sets, if it sets one: :func:`resume_schedule`)."""
        trainer.distribute(self.strategy)
        if self.resumes:
            trainer.resume(self.out)
            restarts = self.strategy.world.restart_count
            print(f"{f'restart {restarts}: ' if self.restarted and not self.args.resume else ''}resumed from {self.out} "
                  f"at step {trainer.step}")
            changed = resume_schedule(trainer, self.args)
            if changed:
                print(changed)

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
    from ..tasks.text_lm import LM_DEFAULTS, lm_config, lm_results, make_lm_trainer, prepare_lm_data

    d, out = LM_DEFAULTS, run.out
    block = _pick(args, "block_len", d)
    run.check_same_data({"seed": args.seed, "max_tokens": _pick(args, "max_tokens", d), "block_len": block})
    data = run.prepare(lambda tokenizer: prepare_lm_data(
        args.text, data_dir, tokenizer=tokenizer, kind=args.tokenizer or "bpe", vocab_size=_pick(args, "vocab_size", d),
        min_frequency=args.min_frequency, block=block, valid_files=args.valid or (),
        valid_fraction=_pick(args, "valid_fraction", d), encoding_errors=args.encoding_errors or "strict"), tokenizer)
    fields = _model_fields(args, d)
    fields["attention_dropout"] = fields["dropout"]
    if args.max_len is not None:
        fields["max_len"] = args.max_len
    config = lm_config(data.tokenizer, formulation=args.formulation or "paper", block=block, **fields)
    factor, warmup = schedule_settings(args, config.d_model, d)
    trainer = make_lm_trainer(data, config, max_tokens=_pick(args, "max_tokens", d), steps=args.steps or d["steps"],
                              warmup=warmup, factor=factor,
                              seed=args.seed, device=run.device, progress=not args.no_progress,
                              eval_every=d["eval_every"] if args.eval_every is None else args.eval_every, out_dir=out)
    run.start(trainer)
    print(f"lm: {data.describe()}; {data.report.summary()}")
    print(f"model: {sum(p.numel() for p in trainer.model.parameters()):,} parameters ({args.formulation or 'paper'} "
          f"formulation, {config.n_layers} layers, d_model={config.d_model}, h={config.n_heads}, d_ff={config.d_ff}), "
          f"{trainer.config.steps} steps, {run.describe()}")
    print(describe_schedule(trainer.scheduler.lr_lambdas[0]), flush=True)
    start = time.perf_counter()
    trainer.train()
    results = run.results(lm_results(trainer, data, time.perf_counter() - start), data)  # every rank: evaluate()
    require_finite(results["eval_loss"], trainer.step)
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
    from ..lm.generation import generate

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
    from ..tasks.translation_files import (
        TRANSLATE_DEFAULTS,
        make_translation_trainer,
        prepare_translation_data,
        translation_config,
        translation_results,
    )

    d, out = TRANSLATE_DEFAULTS, run.out
    max_len = _pick(args, "max_len", d)
    run.check_same_data({"seed": args.seed, "max_tokens": _pick(args, "max_tokens", d)})
    data = run.prepare(lambda tokenizer: prepare_translation_data(
        args.train, args.valid, data_dir, max_len=max_len, tokenizer=tokenizer, kind=args.tokenizer or "bpe",
        vocab_size=_pick(args, "vocab_size", d), min_frequency=args.min_frequency, format=args.format,
        encoding_errors=args.encoding_errors or "strict", too_long=args.too_long or "refuse"), tokenizer)
    config = translation_config(data.tokenizer, max_len=max_len, **_model_fields(args, d))
    factor, warmup = schedule_settings(args, config.d_model, d)
    trainer = make_translation_trainer(
        data, config, max_tokens=_pick(args, "max_tokens", d), steps=args.steps or d["steps"],
        warmup=warmup, factor=factor,
        label_smoothing=_pick(args, "label_smoothing", d), seed=args.seed, device=run.device,
        progress=not args.no_progress, eval_every=d["eval_every"] if args.eval_every is None else args.eval_every,
        out_dir=out)
    run.start(trainer)
    print(f"translate: {data.describe()}; {data.report.summary()}")
    print(f"model: {sum(p.numel() for p in trainer.model.parameters()):,} parameters (N={config.n_encoder_layers}, "
          f"d_model={config.d_model}, h={config.n_heads}, d_ff={config.d_ff}), {trainer.config.steps} steps, "
          f"{run.describe()}")
    print(describe_schedule(trainer.scheduler.lr_lambdas[0]), flush=True)
    start = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - start
    eval_loss = require_finite(trainer.evaluate(), trainer.step)  # every rank: split between the ranks, reduced
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
    if results["bleu_note"]:
        print(f"note: {results['bleu_note']}")
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
    from ..lm.generation import beam_generate, generate

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
    from ..tasks.translation_files import translate

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
