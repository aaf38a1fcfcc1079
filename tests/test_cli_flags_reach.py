"""The command line's options reach their objects: every flag's value (and every default) reaches the object it
configures (the Trainer, the model, the data, the report), for the synthetic tasks and the file tasks."""

from __future__ import annotations

import json

import pytest
import torch
from cli_helpers import (
    restore_threads,  # noqa: F401  (an autouse fixture: active where imported)
    write_corpus,
)

from transformer.cli import main
from transformer.data.tokenizers import tokenizer_from_texts
from transformer.tasks import CopyTask, DatesTask
from transformer.training import NoamSchedule, Trainer, noam_factor


# ---------------------------------------------------------------------------- every flag reaches its object
class _Captured(Exception):
    pass


@pytest.fixture
def capture(monkeypatch):
    """Record the Trainer the CLI built (and the attention backend inside ``train``); with ``stop``, end the command
    there; else skip the training and let the command go on (evaluation, report, save)."""
    seen = {}

    def make(stop: bool):
        def train(self, *args, **kwargs):
            from transformer.attention import current_backend

            seen.update(trainer=self, backend=current_backend(), threads=torch.get_num_threads())
            if stop:
                raise _Captured
            return self.last_train_loss

        monkeypatch.setattr(Trainer, "train", train)
        return seen

    return make


def _schedule(trainer) -> NoamSchedule:
    (schedule,) = trainer.scheduler.lr_lambdas
    return schedule


def test_the_synthetic_tasks_flags_reach_the_trainer(tmp_path, capture, monkeypatch):
    seen = capture(stop=False)
    asked = []
    monkeypatch.setattr(CopyTask, "exact_match", lambda self, model, n: asked.append(n) or 0.0)
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "copy",
                "--steps",
                "7",
                "--batch-size",
                "6",
                "--seed",
                "3",
                "--eval-every",
                "3",
                "--warmup",
                "50",
                "--lr",
                "0.002",
                "--eval-examples",
                "9",
                "--no-progress",
                "--threads",
                "2",
                "--attention-backend",
                "eager",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    trainer = seen["trainer"]
    cfg = trainer.config
    assert (cfg.steps, cfg.eval_every, cfg.checkpoint_every, cfg.out_dir, cfg.progress) == (7, 3, 3, str(out), False)
    assert len(next(trainer.make_batches(torch.Generator()))) == 6
    assert trainer.data_generator.initial_seed() == 3
    from transformer.tasks import make_trainer

    reference = make_trainer(CopyTask(), seed=3)
    assert all(torch.equal(a, b) for a, b in zip(trainer.model.parameters(), reference.model.parameters(), strict=True))
    schedule = _schedule(trainer)
    assert schedule.warmup == 50 and schedule.peak == pytest.approx(0.002, rel=1e-12)
    assert schedule.factor == pytest.approx(noam_factor(0.002, 64, 50))
    lrs = [schedule(step) for step in range(200)]
    assert max(lrs) == pytest.approx(0.002, rel=1e-12) and lrs.index(max(lrs)) == 50
    assert (seen["backend"], seen["threads"], trainer.device.type) == ("eager", 2, "cpu")
    assert asked == [9]
    assert json.loads((out / "meta.json").read_text())["metadata"]["results"]["eval_examples"] == 9


@pytest.mark.parametrize(
    "task, defaults",
    [
        ("copy", dict(steps=600, batch_size=80, eval_every=100, warmup=200, factor=1.0, d_model=64)),
        ("dates", dict(steps=1000, batch_size=64, eval_every=200, warmup=200, factor=2.0, d_model=64)),
    ],
)
def test_the_synthetic_tasks_defaults_are_the_documented_ones(task, defaults, tmp_path, capture, monkeypatch):
    seen = capture(stop=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(_Captured):
        main(["train", task])
    trainer = seen["trainer"]
    cfg = trainer.config
    assert (cfg.steps, cfg.eval_every, cfg.checkpoint_every) == (
        defaults["steps"],
        defaults["eval_every"],
        defaults["eval_every"],
    )
    assert cfg.out_dir == f"runs/{task}" and cfg.progress and cfg.checks == "always"
    assert len(next(trainer.make_batches(torch.Generator()))) == defaults["batch_size"]
    schedule = _schedule(trainer)
    assert (schedule.warmup, schedule.factor, schedule.model_size) == (
        defaults["warmup"],
        defaults["factor"],
        defaults["d_model"],
    )
    assert trainer.data_generator.initial_seed() == 0 and seen["backend"] is None and seen["threads"] == 1
    task_object = CopyTask() if task == "copy" else DatesTask()
    assert trainer.model.config == task_object.default_config()
    assert trainer.criterion.smoothing == task_object.default_training().smoothing


def test_the_file_tasks_defaults_are_the_documented_ones(tmp_path, capture, monkeypatch):
    import random

    from transformer.tasks.text_lm import LM_DEFAULTS, lm_config
    from transformer.tasks.translation_files import TRANSLATE_DEFAULTS, translation_config

    seen = capture(stop=True)
    monkeypatch.chdir(tmp_path)
    g = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta"]
    (tmp_path / "text.txt").write_text("\n".join(" ".join(g.choice(words) for _ in range(12)) for _ in range(600)))
    with pytest.raises(_Captured):
        main(["train", "lm", "--text", "text.txt"])
    trainer, d = seen["trainer"], LM_DEFAULTS
    assets = trainer.model.checkpoint_assets
    tokenizer = assets and tokenizer_from_texts(assets["tokenizer.json"], assets["tokenizer_extra.json"])
    assert tokenizer.kind == "bpe" and tokenizer.vocab_size <= d["vocab_size"]
    assert trainer.model.config == lm_config(
        tokenizer,
        block=d["block_len"],
        d_model=d["d_model"],
        n_layers=d["n_layers"],
        n_heads=d["n_heads"],
        d_ff=d["d_ff"],
        dropout=d["dropout"],
        attention_dropout=d["dropout"],
    )
    assert trainer.model.config.max_len == 256
    cfg = trainer.config
    assert (cfg.steps, cfg.eval_every, cfg.checkpoint_every, cfg.checks, cfg.out_dir) == (
        d["steps"],
        d["eval_every"],
        d["eval_every"],
        "first",
        "runs/lm",
    )
    assert (trainer.make_batches.max_tokens, trainer.make_batches.seed) == (d["max_tokens"], 0)
    batch = next(trainer.make_batches(torch.Generator()))
    assert batch.tokens.size(1) == d["block_len"] and batch.mask.documents is not None  # --pack: the default
    assert trainer.metadata["data"]["pack"] is True
    assert (_schedule(trainer).factor, _schedule(trainer).warmup) == (d["factor"], d["warmup"])
    assert (tmp_path / "runs" / "lm.data" / "train").is_dir()  # --data-dir: OUT.data

    (tmp_path / "pairs.tsv").write_text("".join(f"{a} {b}\t{b} {a}\n" for a in words for b in words))
    with pytest.raises(_Captured):
        main(["train", "translate", "--train", "pairs.tsv", "--valid", "pairs.tsv"])
    trainer, d = seen["trainer"], TRANSLATE_DEFAULTS
    assets = trainer.model.checkpoint_assets
    tokenizer = tokenizer_from_texts(assets["tokenizer.json"], assets["tokenizer_extra.json"])
    assert trainer.model.config == translation_config(
        tokenizer,
        max_len=d["max_len"],
        d_model=d["d_model"],
        n_layers=d["n_layers"],
        n_heads=d["n_heads"],
        d_ff=d["d_ff"],
        dropout=d["dropout"],
    )
    cfg = trainer.config
    assert (cfg.steps, cfg.eval_every, cfg.out_dir) == (d["steps"], d["eval_every"], "runs/translate")
    assert trainer.criterion.smoothing == d["label_smoothing"] and trainer.make_batches.max_tokens == d["max_tokens"]
    assert (_schedule(trainer).factor, _schedule(trainer).warmup) == (d["factor"], d["warmup"])


def test_the_language_models_flags_reach_the_data_the_model_and_the_trainer(tmp_path, capture, monkeypatch):
    import transformer.cli.train_files as train_files  # where the CLI looks prepare_lm_data up
    import transformer.tasks.text_lm as text_lm

    seen = capture(stop=True)
    calls = {}
    for module, name in ((text_lm, "train_tokenizer"), (train_files, "prepare_lm_data")):
        real = getattr(module, name)
        monkeypatch.setattr(
            module, name, lambda *a, _real=real, _name=name, **k: calls.setdefault(_name, k) and _real(*a, **k)
        )
    corpus = write_corpus(tmp_path)
    out, data_dir = tmp_path / "lm", tmp_path / "cache"
    with pytest.raises(_Captured):
        main(
            [
                "train",
                "lm",
                "--text",
                corpus,
                "--tokenizer",
                "char",
                "--vocab-size",
                "30",
                "--min-frequency",
                "3",
                "--encoding-errors",
                "replace",
                "--valid-fraction",
                "0.25",
                "--block-len",
                "12",
                "--no-pack",
                "--max-tokens",
                "96",
                "--d-model",
                "24",
                "--layers",
                "1",
                "--heads",
                "3",
                "--d-ff",
                "40",
                "--dropout",
                "0.2",
                "--max-len",
                "48",
                "--formulation",
                "functional",
                "--warmup",
                "7",
                "--lr-factor",
                "0.7",
                "--steps",
                "5",
                "--eval-every",
                "4",
                "--seed",
                "2",
                "--data-dir",
                str(data_dir),
                "--out",
                str(out),
                "--no-progress",
            ]
        )
    assert calls["train_tokenizer"] == dict(vocab_size=30, min_frequency=3)
    prep = calls["prepare_lm_data"]
    assert (
        prep["kind"],
        prep["vocab_size"],
        prep["min_frequency"],
        prep["block"],
        prep["valid_fraction"],
        prep["encoding_errors"],
        prep["pack"],
    ) == ("char", 30, 3, 12, 0.25, "replace", False)
    trainer = seen["trainer"]
    config = trainer.model.config
    assert (
        config.d_model,
        config.n_layers,
        config.n_heads,
        config.d_ff,
        config.dropout,
        config.attention_dropout,
        config.max_len,
    ) == (24, 1, 3, 40, 0.2, 0.2, 48)
    assert (config.norm, config.value_projection, config.init) == ("std", "per_head", "functional")
    assert config.vocab <= 30 and trainer.model.checkpoint_assets  # the tokenizer travels with the model
    batch = next(trainer.make_batches(torch.Generator()))
    assert batch.tokens.size(1) == 12 and batch.tokens.numel() <= 96
    assert trainer.make_batches.max_tokens == 96 and trainer.make_batches.seed == 2
    assert trainer.data_generator.initial_seed() == 2
    assert (trainer.config.steps, trainer.config.eval_every, trainer.config.checkpoint_every) == (5, 4, 4)
    assert trainer.config.out_dir == str(out) and not trainer.config.progress
    assert (_schedule(trainer).warmup, _schedule(trainer).factor) == (7, 0.7)
    assert sorted(p.name for p in data_dir.iterdir()) == ["train"]
    assert trainer.metadata["data"] == {"block_len": 12, "max_tokens": 96, "seed": 2, "pack": False}
    assert batch.mask.documents is None


def test_the_translation_flags_reach_the_data_the_model_the_trainer_and_the_report(tmp_path, capture, monkeypatch):
    import transformer.cli.train_files as train_files  # where the CLI looks these up

    seen = capture(stop=False)
    calls = {}
    for name in ("prepare_translation_data", "translation_results"):
        real = getattr(train_files, name)
        monkeypatch.setattr(
            train_files, name, lambda *a, _real=real, _name=name, **k: calls.setdefault(_name, k) and _real(*a, **k)
        )
    pairs = tmp_path / "pairs.txt"
    pairs.write_text(
        "".join(f"{w} {v}\t{v} {w}\n" for w in ("one", "two", "three") for v in ("four", "five", "six")) * 4
    )
    out = tmp_path / "mt"
    assert (
        main(
            [
                "train",
                "translate",
                "--train",
                str(pairs),
                "--valid",
                str(pairs),
                "--format",
                "tsv",
                "--tokenizer",
                "char",
                "--too-long",
                "skip",
                "--max-len",
                "30",
                "--d-model",
                "16",
                "--layers",
                "1",
                "--heads",
                "2",
                "--d-ff",
                "24",
                "--dropout",
                "0.05",
                "--label-smoothing",
                "0.15",
                "--beam-size",
                "2",
                "--eval-examples",
                "3",
                "--max-tokens",
                "120",
                "--lr",
                "0.01",
                "--warmup",
                "9",
                "--steps",
                "3",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        == 0
    )
    prep = calls["prepare_translation_data"]
    assert (prep["format"], prep["kind"], prep["too_long"], prep["max_len"]) == ("tsv", "char", "skip", 30)
    assert calls["translation_results"]["beam_size"] == 2 and calls["translation_results"]["examples"] == 3
    trainer = seen["trainer"]
    config = trainer.model.config
    assert (
        config.d_model,
        config.n_encoder_layers,
        config.n_decoder_layers,
        config.n_heads,
        config.d_ff,
        config.dropout,
        config.attention_dropout,
        config.max_len,
    ) == (16, 1, 1, 2, 24, 0.05, 0.05, 30)
    assert trainer.criterion.smoothing == 0.15 and trainer.make_batches.max_tokens == 120
    assert _schedule(trainer).warmup == 9 and _schedule(trainer).peak == pytest.approx(0.01, rel=1e-12)
    results = json.loads((out / "meta.json").read_text())["metadata"]["results"]
    assert (results["eval_lines"], results["beam_size"]) == (3, 2)


@pytest.mark.parametrize("task", ["lm", "translate"])
def test_a_zero_given_on_the_command_line_is_zero_not_the_default(tmp_path, capture, task):
    """``--dropout P``: a value given is the value used, 0 included; only an absent flag takes the task's default
    (0.1 for both tasks)."""
    seen = capture(stop=True)
    tiny = ["--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "24", "--max-tokens", "64", "--no-progress"]
    if task == "lm":
        data = ["--text", write_corpus(tmp_path), "--tokenizer", "char", "--block-len", "12"]
    else:
        pairs = tmp_path / "pairs.txt"
        pairs.write_text("".join(f"{w} {v}\t{v} {w}\n" for w in ("one", "two") for v in ("four", "five")) * 4)
        data = ["--train", str(pairs), "--valid", str(pairs), "--tokenizer", "char"]
    for given, expected in ((["--dropout", "0"], 0.0), ([], 0.1)):
        with pytest.raises(_Captured):
            main(["train", task, *data, *tiny, *given, "--steps", "1", "--out", str(tmp_path / f"run{len(given)}")])
        config = seen["trainer"].model.config
        assert (config.dropout, config.attention_dropout) == (expected, expected), given
