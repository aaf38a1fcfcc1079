"""``typed-transformer train lm`` and ``train translate``: training on your own files (the recipes are
:mod:`transformer.tasks.text_lm` and :mod:`transformer.tasks.translation_files`; this is their command line: the
flags read, the data prepared once, resuming, what is printed).

    typed-transformer train lm --text FILE... [--valid FILE...] [--tokenizer bpe|char] [--formulation paper|functional]
    typed-transformer train lm --init HF_FOLDER --text FILE...   (continue a pretrained model: its tokenizer, config)
    typed-transformer train translate --train FILE --valid FILE [--format tsv|jsonl] [--too-long refuse|truncate|skip]

Problems with the input (files, flags, checkpoints, tokenizers) raise :class:`~transformer.cli.errors.UsageError`,
which the CLI prints as one line on stderr with exit status 2.

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
from typing import Any

import torch

from ..checkpoint import CheckpointError, ConfigMismatchError, load_checkpoint
from ..common.optional import require
from ..data.text_files import TextFileError
from ..data.tokenizers import TokenizerMismatchError, load_tokenizer
from ..distributed import (
    SingleProcess,
    Strategy,
    is_sharded_checkpoint,
    read_sharded_checkpoint,
)
from ..lm.generation import generate
from ..tasks.pretrained_lm import (
    FINE_TUNE_PEAK_LR,
    IGNORED_LABEL,
    check_block_fits,
    fine_tune_criterion,
    load_pretrained_lm,
    pretrained_text_tokenizer,
)
from ..tasks.text_lm import LM_DEFAULTS, lm_config, lm_results, make_lm_trainer, prepare_lm_data
from ..tasks.tokenizer_assets import check_same_tokenizer, tokenizer_from_checkpoint
from ..tasks.translation_files import (
    BLEU_FEATURE,
    TRANSLATE_DEFAULTS,
    make_translation_trainer,
    prepare_translation_data,
    translation_config,
    translation_results,
)
from ..training import NoamSchedule, WarmupDecaySchedule
from .errors import UsageError
from .file_run import FileRun
from .messages import saved_message
from .train_setup import (
    apply_schedule,
    loss_lines,
    recorded_flags,
    require_finite,
    schedule_line,
    trained_line,
    training_schedule,
)

__all__ = ["train_file_task"]


def _pick(args: argparse.Namespace, name: str, defaults: dict[str, Any], default_name: str | None = None):
    value = getattr(args, name, None)
    return defaults[default_name or name] if value is None else value


def _given_tokenizer(args: argparse.Namespace):
    if args.tokenizer_file is None:
        return None
    try:
        return load_tokenizer(args.tokenizer_file)
    except FileNotFoundError as error:
        raise UsageError(f"--tokenizer-file: {error}") from None


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
    torchrun restart (``--max-restarts``) the run resumes from the checkpoint in ``--out`` as ``--resume`` does.
    The packages of the ``text`` extra are required before anything runs (``MissingDependencyError``, exit 2)."""
    require("tokenizers", f"train {args.task}")
    if args.task == "translate":
        require("sacrebleu", BLEU_FEATURE)
    out = args.out or os.path.join("runs", args.task)
    data_dir = args.data_dir or out.rstrip(os.sep) + ".data"
    run = FileRun(args, out, strategy or SingleProcess(device=device), torchrun=strategy is not None)
    try:
        if getattr(args, "init", None) is not None:
            _refuse_with_init(args)
        elif getattr(args, "dtype", None) is not None:
            raise UsageError(
                f"--dtype {args.dtype} is for --init (a pretrained model's folder): a new model trains in float32"
            )
        run.check_same_init()
        given = pretrained_text_tokenizer(args.init) if getattr(args, "init", None) else _given_tokenizer(args)
        tokenizer = _resume_tokenizer(out, given) if run.resumes else given
        train = _train_lm if args.task == "lm" else _train_translate
        return train(args, run, data_dir, tokenizer)
    except (TextFileError, TokenizerMismatchError, ConfigMismatchError, CheckpointError) as error:
        raise UsageError(str(error)) from None
    except ValueError as error:  # impossible configs and budgets, a bad --init folder, named by their own messages
        if isinstance(error, UsageError):
            raise
        raise UsageError(str(error)) from None


def _store_stamps(data_dir: str) -> dict[str, tuple[int, int]]:
    """Each token store under ``data_dir`` (a directory per store, replaced whole when rebuilt), by its identity."""
    if not os.path.isdir(data_dir):
        return {}
    stamps = {}
    for name in sorted(os.listdir(data_dir)):
        path = os.path.join(data_dir, name)
        if os.path.isdir(path):
            info = os.stat(path)
            stamps[name] = (info.st_ino, info.st_mtime_ns)
    return stamps


def _token_stores(data) -> list:
    """Every token store of ``data``: a language model's (``stores``), or translation's source and target stores
    of the training and held-out pairs."""
    stores = getattr(data, "stores", None)
    if stores is not None:
        return list(stores)
    return [store for split in (data.train, data.valid) for store in (split.src, split.tgt)]


def _data_line(data, data_dir: str, reused: bool) -> str:
    """What was read: the corpus report of a fresh tokenization, or the tokens of the stores reused (a reused store
    read no line)."""
    if not reused:
        return data.report.summary()
    tokens = sum(int(store.offsets[-1]) for store in _token_stores(data))
    return f"reused {tokens:,} tokens from {data_dir} (tokenized before; the files are unchanged)"


def _stored_report(results: dict, data, reused: bool) -> dict:
    """``results`` with the corpus report the reused stores recorded when they were built (the last store's: the
    report of every file), not this run's (which read no line)."""
    report = _token_stores(data)[-1].info.get("report") if reused else None
    if isinstance(report, dict):
        results["corpus"] = {**results["corpus"], **report}
    return results


#: The flags that define a new model or its tokenizer: ``--init`` takes both from its folder.
_FRESH_MODEL_FLAGS = (
    "d_model", "layers", "heads", "d_ff", "dropout", "formulation", "max_len",
    "tokenizer", "tokenizer_file", "vocab_size", "min_frequency",
)  # fmt: skip


def _refuse_with_init(args: argparse.Namespace) -> None:
    given = ["--" + name.replace("_", "-") for name in _FRESH_MODEL_FLAGS if getattr(args, name, None) is not None]
    if given:
        raise UsageError(
            f"{', '.join(given)} cannot be given with --init: the pretrained model in {args.init} brings its own "
            "architecture, dropout and tokenizer (its config.json and tokenizer.json)"
        )


def _model_fields(args: argparse.Namespace, defaults: dict[str, Any]) -> dict[str, Any]:
    return dict(
        d_model=_pick(args, "d_model", defaults),
        n_layers=_pick(args, "layers", defaults, "n_layers"),
        n_heads=_pick(args, "heads", defaults, "n_heads"),
        d_ff=_pick(args, "d_ff", defaults),
        dropout=_pick(args, "dropout", defaults),
    )


def _trainer_settings(
    args: argparse.Namespace, run: FileRun, defaults: dict[str, Any], d_model: int, fine_tune: bool = False
) -> tuple[dict[str, Any], NoamSchedule | WarmupDecaySchedule]:
    """The settings both file tasks' trainers take from the command line (else the task's ``defaults``): batch
    budget, steps, seed, device, progress bar, evaluation period and ``--out``; and the learning-rate schedule
    (:func:`~transformer.cli.train_setup.training_schedule`), which the recipe's Noam schedule is replaced by
    (:func:`~transformer.cli.train_setup.apply_schedule`) when it is another."""
    steps = args.steps or defaults["steps"]
    schedule = training_schedule(args, d_model, defaults, steps, fine_tune)
    noam = isinstance(schedule, NoamSchedule)
    settings = dict(
        max_tokens=_pick(args, "max_tokens", defaults),
        steps=steps,
        warmup=schedule.warmup if noam else defaults["warmup"],
        factor=schedule.factor if noam else defaults["factor"],
        seed=args.seed,
        device=run.device,
        progress=not args.no_progress,
        eval_every=defaults["eval_every"] if args.eval_every is None else args.eval_every,
        out_dir=run.out,
    )
    return settings, schedule


def _train_lm(args, run: FileRun, data_dir: str, tokenizer) -> int:
    d, out = LM_DEFAULTS, run.out
    block = _pick(args, "block_len", d)
    settings = {"seed": args.seed, "max_tokens": _pick(args, "max_tokens", d), "block_len": block, "pack": args.pack}
    run.check_same_data(settings)
    init = getattr(args, "init", None)
    if init is not None:  # before anything is tokenized: a refused run leaves no OUT.data
        check_block_fits(init, block)
    before = _store_stamps(data_dir)
    data = run.prepare(
        lambda tokenizer: prepare_lm_data(
            args.text,
            data_dir,
            tokenizer=tokenizer,
            kind=args.tokenizer or "bpe",
            vocab_size=_pick(args, "vocab_size", d),
            min_frequency=args.min_frequency,
            block=block,
            valid_files=args.valid or (),
            valid_fraction=_pick(args, "valid_fraction", d),
            encoding_errors=args.encoding_errors or "strict",
            pack=args.pack,
            ignore_index=None if getattr(args, "init", None) is None else IGNORED_LABEL,
        ),
        tokenizer,
    )
    reused = bool(before) and _store_stamps(data_dir) == before
    if init is None:
        fields = _model_fields(args, d)
        fields["attention_dropout"] = fields["dropout"]
        if args.max_len is not None:
            fields["max_len"] = args.max_len
        config = lm_config(data.tokenizer, formulation=args.formulation or "paper", block=block, **fields)
        settings, schedule = _trainer_settings(args, run, d, config.d_model)
        trainer = make_lm_trainer(data, config, **settings)
        what = f"{args.formulation or 'paper'} formulation"
    else:
        dtype = torch.float32 if args.dtype is None else args.dtype
        model = load_pretrained_lm(init, run.device, block, dtype)
        config = model.config
        settings, schedule = _trainer_settings(args, run, {**d, "peak": FINE_TUNE_PEAK_LR}, config.d_model, True)
        trainer = make_lm_trainer(
            data,
            config,
            **settings,
            model=model,
            criterion=fine_tune_criterion(model),
            metadata={"init": os.path.abspath(init)},
        )
        what = f"pretrained {model.pretrained_origin.architecture} from {init}"
    apply_schedule(trainer, schedule)
    trainer.metadata["flags"] = recorded_flags(args)
    trainer.metadata["dtype"] = str(next(trainer.model.parameters()).dtype).removeprefix("torch.")
    run.start(trainer)
    first_step = trainer.step
    print(f"lm: {data.describe()}; {_data_line(data, data_dir, reused)}")
    print(
        f"model: {sum(p.numel() for p in trainer.model.parameters()):,} parameters ({what}, "
        f"{config.n_layers} layers, d_model={config.d_model}, h={config.n_heads}, d_ff={config.d_ff}), "
        f"{trainer.config.steps} steps, {run.describe()}"
    )
    print(schedule_line(trainer.scheduler.lr_lambdas[0]), flush=True)
    start = time.perf_counter()
    trainer.train(on_eval=loss_lines(trainer, args))
    results = run.results(lm_results(trainer, data, time.perf_counter() - start), data)  # every rank: evaluate()
    _stored_report(results, data, reused)  # what the files held when tokenized
    require_finite(results["eval_loss"], trainer.step)
    trainer.metadata["results"] = results
    model = run.strategy.full_model(trainer.model)  # every rank takes part (FSDP gathers the shards on rank 0)
    sample = _sample_text(model, data) if run.strategy.is_main else None
    trainer.save(out)  # every rank: a collective
    if not run.strategy.is_main:
        return 0
    print(
        f"{trained_line(trainer, first_step)} in {results['train_seconds']:.1f} s "
        f"({results['tokens_per_second']:,.0f} tokens/s); final train loss {trainer.last_train_loss:.4f}"
    )
    print(
        f"held-out loss {results['eval_loss']:.4f} nats/token, perplexity {results['perplexity']:.2f} "
        f"(unigram baseline {results['unigram_perplexity']:.2f}) on {results['valid_tokens']:,} tokens"
    )
    print(f"sample: {sample!r}")
    print(saved_message(out, "generate"))
    print("RESULTS " + json.dumps(results))
    return 0


def _sample_text(model, data, new_tokens: int = 40) -> str:
    """A greedy continuation of the first held-out tokens (what the model makes of unseen text)."""
    prompt = torch.from_numpy(data.valid.window(0)[:16]).unsqueeze(0).to(next(model.parameters()).device)
    was_training = model.training
    model.eval()
    try:
        new = min(new_tokens, model.config.max_len - prompt.size(1))
        out = generate(model, prompt, new, end_symbol=data.tokenizer.eos_id)
    finally:
        model.train(was_training)
    return (
        data.tokenizer.decode(prompt[0].tolist()) + " ||| " + data.tokenizer.decode(out[0, prompt.size(1) :].tolist())
    )


def _train_translate(args, run: FileRun, data_dir: str, tokenizer) -> int:
    d, out = TRANSLATE_DEFAULTS, run.out
    max_len = _pick(args, "max_len", d)
    run.check_same_data({"seed": args.seed, "max_tokens": _pick(args, "max_tokens", d)})
    before = _store_stamps(data_dir)
    data = run.prepare(
        lambda tokenizer: prepare_translation_data(
            args.train,
            args.valid,
            data_dir,
            max_len=max_len,
            tokenizer=tokenizer,
            kind=args.tokenizer or "bpe",
            vocab_size=_pick(args, "vocab_size", d),
            min_frequency=args.min_frequency,
            format=args.format,
            encoding_errors=args.encoding_errors or "strict",
            too_long=args.too_long or "refuse",
        ),
        tokenizer,
    )
    reused = bool(before) and _store_stamps(data_dir) == before
    config = translation_config(data.tokenizer, max_len=max_len, **_model_fields(args, d))
    settings, schedule = _trainer_settings(args, run, d, config.d_model)
    trainer = make_translation_trainer(data, config, label_smoothing=_pick(args, "label_smoothing", d), **settings)
    apply_schedule(trainer, schedule)
    trainer.metadata["flags"] = recorded_flags(args)
    run.start(trainer)
    first_step = trainer.step
    print(f"translate: {data.describe()}; {_data_line(data, data_dir, reused)}")
    print(
        f"model: {sum(p.numel() for p in trainer.model.parameters()):,} parameters (N={config.n_encoder_layers}, "
        f"d_model={config.d_model}, h={config.n_heads}, d_ff={config.d_ff}), {trainer.config.steps} steps, "
        f"{run.describe()}"
    )
    print(schedule_line(trainer.scheduler.lr_lambdas[0]), flush=True)
    start = time.perf_counter()
    trainer.train(on_eval=loss_lines(trainer, args))
    train_seconds = time.perf_counter() - start
    eval_loss = require_finite(trainer.evaluate(), trainer.step)  # every rank: split between the ranks, reduced
    model = run.strategy.full_model(trainer.model)  # every rank takes part (FSDP gathers the shards on rank 0)
    if run.strategy.is_main:  # decoding the held-out sources for BLEU: rank 0 alone, with the gathered model
        results, examples = translation_results(
            model, trainer, eval_loss, data, train_seconds, examples=args.eval_examples, beam_size=args.beam_size or 1
        )
        trainer.metadata["results"] = _stored_report(run.results(results, data), data, reused)
    trainer.save(out)  # every rank: a collective
    if not run.strategy.is_main:
        return 0
    print(
        f"{trained_line(trainer, first_step)} in {results['train_seconds']:.1f} s; held-out loss "
        f"{results['eval_loss']:.4f}"
    )
    for source, reference, output in examples:
        print(f"  {source!r} -> {output!r} (reference {reference!r})")
    print(
        f"on {results['eval_lines']} held-out lines: BLEU {results['bleu']:.2f}, chrF {results['chrf']:.2f}, "
        f"exact match {results['exact_match']:.1%}"
    )
    if results["bleu_note"]:
        print(f"note: {results['bleu_note']}")
    print(saved_message(out, "decode"))
    print("RESULTS " + json.dumps(results))
    return 0
