"""The command line's options: none may be abbreviated, each task shows its own with their defaults, every flag's
value (and every default) reaches the object it configures, ``--lr`` is the schedule's peak, ``--version``."""

from __future__ import annotations

import json
import re

import pytest
import torch

from transformer.cli import build_parser, main
from transformer.tasks import CopyTask, DatesTask
from transformer.training import Trainer
from transformer.training import NoamSchedule, noam_factor

LINES = ["def add(a, b):", "    return a + b", "class Box:", "    def __init__(self, value):",
         "        self.value = value", "for i in range(3):", "    print(add(i, i))"]


@pytest.fixture(autouse=True)
def _restore_threads():
    previous = torch.get_num_threads()
    yield
    torch.set_num_threads(previous)


def _status(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code


# ---------------------------------------------------------------------------- no abbreviations
def _parsers():
    """(name, parser, the arguments it requires) for every command and task."""
    parser = build_parser()
    required = {"decode": ["--checkpoint", "c", "x"], "generate": ["--checkpoint", "c", "x"], "consolidate": ["a", "b"],
                "train lm": ["--text", "t"], "train translate": ["--train", "t", "--valid", "v"]}
    found = [("typed-transformer", parser, [])]
    for name, sub in parser.command_parsers.items():
        found.append((name, sub, required.get(name, [])))
    for name, sub in parser.task_parsers.items():
        found.append((f"train {name}", sub, required.get(f"train {name}", [])))
    return found


def _prefix(option: str, options: set[str]) -> str | None:
    """The longest proper prefix of ``option`` that is no option itself (what argparse would have expanded)."""
    for end in range(len(option) - 1, 3, -1):
        if option[:end] not in options and not option[:end].endswith("-"):
            return option[:end]
    return None


def test_no_option_of_any_command_or_task_may_be_abbreviated(capsys):
    """Every parser refuses every prefix of every one of its options (argparse's allow_abbrev is off on each, sub-parsers
    included), and the command line says what the prefix abbreviates. ``--lr-fac 2`` is never ``--lr-factor 2``."""
    checked = 0
    for name, parser, required in _parsers():
        assert parser.allow_abbrev is False, name
        options = {o for o in parser._option_string_actions if o.startswith("--")}
        for option in sorted(options - {"--help", "--version"}):
            prefix = _prefix(option, options)
            if prefix is None:
                continue
            args, extras = parser.parse_known_args([*required, prefix, "1"])
            assert prefix in extras, f"{name}: {prefix} was read as {option}"
            words = [] if name == "typed-transformer" else name.split()
            assert _status([*words, *required, prefix, "1"]) == 2, (name, prefix)
            err = capsys.readouterr().err
            assert f"unrecognized argument {prefix}: options cannot be abbreviated; did you mean" in err, (name, err)
            assert option in err.splitlines()[-1], (name, prefix, err)
            checked += 1
    assert checked >= 80
    assert _status(["train", "lm", "--text", "t", "--lr-fac", "2"]) == 2
    assert "did you mean --lr-factor?" in capsys.readouterr().err
    assert _status(["decode", "--check", "c", "x"]) == 2  # an abbreviated required option: named, not "required"
    assert capsys.readouterr().err.splitlines()[-1] == ("typed-transformer decode: error: unrecognized argument "
                                                        "--check: options cannot be abbreviated; did you mean "
                                                        "--checkpoint?")


# ---------------------------------------------------------------------------- help, defaults, version
def _help(argv) -> str:
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    return info.value


@pytest.mark.parametrize("task, own, others", [
    ("copy", {"--batch-size": "(default: 80)", "--steps": "(default: 600)", "--eval-every": "(default: 100)",
              "--eval-examples": "(default: 500)", "--warmup": "(default: 200)", "--lr-factor": "(default: 1.0)",
              "--out": "(default: runs/copy)"}, ["--text", "--d-model", "--max-tokens"]),
    ("dates", {"--batch-size": "(default: 64)", "--steps": "(default: 1000)", "--eval-every": "(default: 200)",
               "--lr-factor": "(default: 2.0)", "--out": "(default: runs/dates)"}, ["--text", "--train"]),
    ("lm", {"--text": "training text files", "--block-len": "(default: 128)", "--d-model": "(default: 128)",
            "--layers": "(default: 2)", "--heads": "(default: 4)", "--d-ff": "(default: 512)",
            "--dropout": "(default: 0.1)", "--vocab-size": "(default: 2000)", "--max-tokens": "(default: 2048)",
            "--steps": "(default: 900)", "--formulation": "(default: paper)", "--valid-fraction": "(default: 0.05)"},
     ["--batch-size", "--train", "--beam-size", "--label-smoothing", "--eval-examples"]),
    ("translate", {"--train": "training pairs", "--d-model": "(default: 64)", "--d-ff": "(default: 128)",
                   "--vocab-size": "(default: 1000)", "--max-len": "(default: 128)", "--lr-factor": "(default: 2.0)",
                   "--beam-size": "(default: 1)", "--label-smoothing": "(default: 0.0)", "--too-long": "(default: refuse)"},
     ["--batch-size", "--text", "--block-len", "--formulation"]),
])
def test_every_task_shows_its_own_options_with_their_defaults(task, own, others, capsys):
    _help(["train", task])
    shown_help = capsys.readouterr().out
    assert "synthetic task" not in shown_help
    parser = build_parser().task_parsers[task]
    formatter = parser._get_formatter()
    flat = re.sub(r"\s+", "", shown_help)  # argparse wraps lines (and breaks words at hyphens)
    for option, shown in own.items():
        action = parser._option_string_actions[option]
        entry = formatter._format_action_invocation(action) + formatter._expand_help(action)
        assert re.sub(r"\s+", "", entry) in flat, option  # the option, then its help, as --help prints them
        assert shown in entry, (option, entry)
    for option in others:
        assert option not in parser._option_string_actions and f"[{option}" not in shown_help, option


def test_version_names_the_package_torch_and_python(capsys):
    import sys

    import transformer

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == (f"typed-transformer {transformer.__version__} (torch {torch.__version__}, "
                                               f"Python {sys.version.split()[0]})")


def test_lr_and_lr_factor_exclude_each_other(capsys):
    assert _status(["train", "copy", "--lr", "1e-3", "--lr-factor", "2"]) == 2
    assert "argument --lr-factor: not allowed with argument --lr" in capsys.readouterr().err
    for bad in ("0", "-1e-3", "inf", "nan", "fast"):
        assert _status(["train", "copy", f"--lr={bad}"]) == 2
        assert "argument --lr: expected a positive number" in capsys.readouterr().err


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


def _corpus(tmp_path):
    path = tmp_path / "code.py"
    path.write_text("\n".join(LINES * 60) + "\n")
    return str(path)


def test_the_synthetic_tasks_flags_reach_the_trainer(tmp_path, capture, monkeypatch):
    seen = capture(stop=False)
    asked = []
    monkeypatch.setattr(CopyTask, "exact_match", lambda self, model, n: asked.append(n) or 0.0)
    out = tmp_path / "run"
    assert main(["train", "copy", "--steps", "7", "--batch-size", "6", "--seed", "3", "--eval-every", "3",
                 "--warmup", "50", "--lr", "0.002", "--eval-examples", "9", "--no-progress", "--threads", "2",
                 "--attention-backend", "eager", "--out", str(out)]) == 0
    trainer = seen["trainer"]
    cfg = trainer.config
    assert (cfg.steps, cfg.eval_every, cfg.checkpoint_every, cfg.out_dir, cfg.progress) == (7, 3, 3, str(out), False)
    assert len(next(trainer.make_batches(torch.Generator()))) == 6
    assert trainer.data_generator.initial_seed() == 3
    from transformer.tasks import make_trainer

    reference = make_trainer(CopyTask(), seed=3)
    assert all(torch.equal(a, b) for a, b in zip(trainer.model.parameters(), reference.model.parameters()))
    schedule = _schedule(trainer)
    assert schedule.warmup == 50 and schedule.peak == pytest.approx(0.002, rel=1e-12)
    assert schedule.factor == pytest.approx(noam_factor(0.002, 64, 50))
    lrs = [schedule(step) for step in range(200)]
    assert max(lrs) == pytest.approx(0.002, rel=1e-12) and lrs.index(max(lrs)) == 50
    assert (seen["backend"], seen["threads"], trainer.device.type) == ("eager", 2, "cpu")
    assert asked == [9]
    assert json.loads((out / "meta.json").read_text())["metadata"]["results"]["eval_examples"] == 9


@pytest.mark.parametrize("task, defaults", [
    ("copy", dict(steps=600, batch_size=80, eval_every=100, warmup=200, factor=1.0, d_model=64)),
    ("dates", dict(steps=1000, batch_size=64, eval_every=200, warmup=200, factor=2.0, d_model=64)),
])
def test_the_synthetic_tasks_defaults_are_the_documented_ones(task, defaults, tmp_path, capture, monkeypatch):
    seen = capture(stop=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(_Captured):
        main(["train", task])
    trainer = seen["trainer"]
    cfg = trainer.config
    assert (cfg.steps, cfg.eval_every, cfg.checkpoint_every) == (defaults["steps"], defaults["eval_every"],
                                                                defaults["eval_every"])
    assert cfg.out_dir == f"runs/{task}" and cfg.progress and cfg.checks == "always"
    assert len(next(trainer.make_batches(torch.Generator()))) == defaults["batch_size"]
    schedule = _schedule(trainer)
    assert (schedule.warmup, schedule.factor, schedule.model_size) == (defaults["warmup"], defaults["factor"],
                                                                       defaults["d_model"])
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
    tokenizer = trainer.model.checkpoint_assets and __import__("transformer").data.TextTokenizer.from_json(
        trainer.model.checkpoint_assets["tokenizer.json"])
    assert tokenizer.kind == "bpe" and tokenizer.vocab_size <= d["vocab_size"]
    assert trainer.model.config == lm_config(tokenizer, block=d["block_len"], d_model=d["d_model"],
                                             n_layers=d["n_layers"], n_heads=d["n_heads"], d_ff=d["d_ff"],
                                             dropout=d["dropout"], attention_dropout=d["dropout"])
    assert trainer.model.config.max_len == 256
    cfg = trainer.config
    assert (cfg.steps, cfg.eval_every, cfg.checkpoint_every, cfg.checks, cfg.out_dir) == (
        d["steps"], d["eval_every"], d["eval_every"], "first", "runs/lm")
    assert (trainer.make_batches.max_tokens, trainer.make_batches.seed) == (d["max_tokens"], 0)
    assert next(trainer.make_batches(torch.Generator())).tokens.size(1) == d["block_len"]
    assert (_schedule(trainer).factor, _schedule(trainer).warmup) == (d["factor"], d["warmup"])
    assert (tmp_path / "runs" / "lm.data" / "train").is_dir()  # --data-dir: OUT.data

    (tmp_path / "pairs.tsv").write_text("".join(f"{a} {b}\t{b} {a}\n" for a in words for b in words))
    with pytest.raises(_Captured):
        main(["train", "translate", "--train", "pairs.tsv", "--valid", "pairs.tsv"])
    trainer, d = seen["trainer"], TRANSLATE_DEFAULTS
    tokenizer = __import__("transformer").data.TextTokenizer.from_json(trainer.model.checkpoint_assets["tokenizer.json"])
    assert trainer.model.config == translation_config(tokenizer, max_len=d["max_len"], d_model=d["d_model"],
                                                      n_layers=d["n_layers"], n_heads=d["n_heads"], d_ff=d["d_ff"],
                                                      dropout=d["dropout"])
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
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name, **k: calls.setdefault(_name, k) and
                            _real(*a, **k))
    corpus = _corpus(tmp_path)
    out, data_dir = tmp_path / "lm", tmp_path / "cache"
    with pytest.raises(_Captured):
        main(["train", "lm", "--text", corpus, "--tokenizer", "char", "--vocab-size", "30", "--min-frequency", "3",
              "--encoding-errors", "replace", "--valid-fraction", "0.25", "--block-len", "12", "--max-tokens", "96",
              "--d-model", "24", "--layers", "1", "--heads", "3", "--d-ff", "40", "--dropout", "0.2", "--max-len", "48",
              "--formulation", "functional", "--warmup", "7", "--lr-factor", "0.7", "--steps", "5", "--eval-every",
              "4", "--seed", "2", "--data-dir", str(data_dir), "--out", str(out), "--no-progress"])
    assert calls["train_tokenizer"] == dict(vocab_size=30, min_frequency=3)
    prep = calls["prepare_lm_data"]
    assert (prep["kind"], prep["vocab_size"], prep["min_frequency"], prep["block"], prep["valid_fraction"],
            prep["encoding_errors"]) == ("char", 30, 3, 12, 0.25, "replace")
    trainer = seen["trainer"]
    config = trainer.model.config
    assert (config.d_model, config.n_layers, config.n_heads, config.d_ff, config.dropout, config.attention_dropout,
            config.max_len) == (24, 1, 3, 40, 0.2, 0.2, 48)
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
    assert trainer.metadata["data"] == {"block_len": 12, "max_tokens": 96, "seed": 2}


def test_the_translation_flags_reach_the_data_the_model_the_trainer_and_the_report(tmp_path, capture, monkeypatch):
    import transformer.cli.train_files as train_files  # where the CLI looks these up

    seen = capture(stop=False)
    calls = {}
    for name in ("prepare_translation_data", "translation_results"):
        real = getattr(train_files, name)
        monkeypatch.setattr(train_files, name, lambda *a, _real=real, _name=name, **k: calls.setdefault(
            _name, k) and _real(*a, **k))
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("".join(f"{w} {v}\t{v} {w}\n" for w in ("one", "two", "three") for v in ("four", "five", "six")) * 4)
    out = tmp_path / "mt"
    assert main(["train", "translate", "--train", str(pairs), "--valid", str(pairs), "--format", "tsv", "--tokenizer",
                 "char", "--too-long", "skip", "--max-len", "30", "--d-model", "16", "--layers", "1", "--heads", "2",
                 "--d-ff", "24", "--dropout", "0.05", "--label-smoothing", "0.15", "--beam-size", "2",
                 "--eval-examples", "3", "--max-tokens", "120", "--lr", "0.01", "--warmup", "9", "--steps", "3",
                 "--out", str(out), "--no-progress"]) == 0
    prep = calls["prepare_translation_data"]
    assert (prep["format"], prep["kind"], prep["too_long"], prep["max_len"]) == ("tsv", "char", "skip", 30)
    assert calls["translation_results"]["beam_size"] == 2 and calls["translation_results"]["examples"] == 3
    trainer = seen["trainer"]
    config = trainer.model.config
    assert (config.d_model, config.n_encoder_layers, config.n_decoder_layers, config.n_heads, config.d_ff,
            config.dropout, config.attention_dropout, config.max_len) == (16, 1, 1, 2, 24, 0.05, 0.05, 30)
    assert trainer.criterion.smoothing == 0.15 and trainer.make_batches.max_tokens == 120
    assert _schedule(trainer).warmup == 9 and _schedule(trainer).peak == pytest.approx(0.01, rel=1e-12)
    results = json.loads((out / "meta.json").read_text())["metadata"]["results"]
    assert (results["eval_lines"], results["beam_size"]) == (3, 2)


# ---------------------------------------------------------------------------- --lr on resume, the data of a resume
def test_a_resume_keeps_the_checkpoints_schedule_unless_the_command_line_sets_one(tmp_path, capsys):
    out = tmp_path / "run"
    base = ["train", "copy", "--steps", "2", "--out", str(out), "--no-progress", "--eval-examples", "2", "--batch-size",
            "8"]
    assert main([*base, "--lr", "0.004", "--warmup", "10"]) == 0
    assert main([*base[:2], "--steps", "3", *base[4:], "--resume"]) == 0
    printed = capsys.readouterr().out
    assert "learning rate changed" not in printed and "10 warm-up steps to a peak of 0.004" in printed
    state = json.loads((out / "state.json").read_text())
    lr_at_3 = state["optimizer"]["param_groups"][0]["lr"]
    assert lr_at_3 == pytest.approx(noam_factor(0.004, 64, 10) * 64 ** -0.5 * 3 * 10 ** -1.5)
    assert main([*base[:2], "--steps", "4", *base[4:], "--resume", "--lr", "0.001"]) == 0
    printed = capsys.readouterr().out
    assert "learning rate changed on resume: factor" in printed and "(peak 0.004 -> 0.001)" in printed
    state = json.loads((out / "state.json").read_text())
    schedule = NoamSchedule(64, noam_factor(0.001, 64, 10), 10)
    assert state["scheduler"]["lr_lambdas"][0]["factor"] == pytest.approx(schedule.factor)
    assert state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(schedule(4))


def test_a_resumed_file_task_refuses_other_data_settings(tmp_path, capsys):
    corpus = _corpus(tmp_path)
    base = ["train", "lm", "--text", corpus, "--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "16",
            "--vocab-size", "280", "--block-len", "16", "--max-tokens", "64", "--no-progress", "--out",
            str(tmp_path / "lm")]
    assert main([*base, "--steps", "1", "--eval-every", "0"]) == 0
    for flag, value, recorded in (("--seed", "4", "0"), ("--max-tokens", "128", "64"), ("--block-len", "8", "16")):
        argv = [*base, "--steps", "2", "--resume", flag, value]
        if flag != "--seed":
            argv[argv.index(flag)] = flag  # the later value wins in argparse
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{flag} {value} differs from the checkpoint's {recorded}" in err and f"give {flag} {recorded}" in err, err


def test_bleu_says_when_it_cannot_mean_anything(tmp_path, capsys):
    from transformer.tasks.translation_files import bleu_note, corpus_scores

    one_token = ["un", "deux", "trois", "quatre"]
    scores = corpus_scores(one_token, one_token)
    assert scores["exact_match"] == 1.0 and scores["bleu"] == 0.0 and scores["chrf"] == 100.0
    assert scores["bleu_note"].startswith("BLEU cannot mean anything here: none of the 4 references has 4 tokens")
    assert bleu_note(["a b c d", "x", "y"]) == ("BLEU counts only the 1 of 3 references that have 4 tokens or more "
                                                "(the 2 shorter ones have no 4-grams); read it with chrF and exact match")
    assert bleu_note(["a b c d", "e f g h", "x"]) is None and bleu_note(["1912-06-05"]) is None  # 13a: 5 tokens
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("one\tun\ntwo\tdeux\nthree\ttrois\nfour\tquatre\n")
    assert main(["train", "translate", "--train", str(pairs), "--valid", str(pairs), "--tokenizer", "char",
                 "--steps", "1", "--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "16", "--no-progress",
                 "--out", str(tmp_path / "mt")]) == 0
    printed = capsys.readouterr().out
    assert "note: BLEU cannot mean anything here: none of the 4 references has 4 tokens" in printed
    results = json.loads(printed.split("RESULTS ", 1)[1])
    assert results["bleu_note"].startswith("BLEU cannot mean anything")
