"""The command line's options: none may be abbreviated, each task shows its own with their defaults, ``--version``;
``--lr`` on a resume, and the data settings a resumed file task keeps. (Every flag reaching the object it configures:
test_cli_flags_reach.py.)"""

from __future__ import annotations

import json
import re

import pytest
import torch
from cli_helpers import (
    restore_threads,  # noqa: F401  (an autouse fixture: active where imported)
    write_corpus,
)

from transformer.cli import build_parser, main
from transformer.training import NoamSchedule, noam_factor


def _status(argv) -> int:
    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code


# ---------------------------------------------------------------------------- no abbreviations
def _parsers():
    """(name, parser, the arguments it requires) for every command and task."""
    parser = build_parser()
    required = {
        "decode": ["--checkpoint", "c", "x"],
        "generate": ["--checkpoint", "c", "x"],
        "consolidate": ["a", "b"],
        "export": ["--checkpoint", "c", "--to", "d"],
        "train lm": ["--text", "t"],
        "train translate": ["--train", "t", "--valid", "v"],
    }
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
    """Every parser refuses every prefix of every one of its options (argparse's allow_abbrev is off on each,
    sub-parsers included), and the command line says what the prefix abbreviates. ``--lr-fac 2`` is never
    ``--lr-factor 2``."""
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
    assert capsys.readouterr().err.splitlines()[-1] == (
        "typed-transformer decode: error: unrecognized argument "
        "--check: options cannot be abbreviated; did you mean "
        "--checkpoint?"
    )


# ---------------------------------------------------------------------------- help, defaults, version
def _help(argv) -> str:
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    return info.value


@pytest.mark.parametrize(
    "task, own, others",
    [
        (
            "copy",
            {
                "--batch-size": "(default: 80)",
                "--steps": "(default: 600)",
                "--eval-every": "(default: 100)",
                "--eval-examples": "(default: 500)",
                "--warmup": "(default: 200)",
                "--lr-factor": "(default: 1.0)",
                "--out": "(default: runs/copy)",
            },
            ["--text", "--d-model", "--max-tokens"],
        ),
        (
            "dates",
            {
                "--batch-size": "(default: 64)",
                "--steps": "(default: 1000)",
                "--eval-every": "(default: 200)",
                "--lr-factor": "(default: 2.0)",
                "--out": "(default: runs/dates)",
            },
            ["--text", "--train"],
        ),
        (
            "lm",
            {
                "--text": "training text files",
                "--block-len": "(default: 128)",
                "--d-model": "(default: 128)",
                "--layers": "(default: 2)",
                "--heads": "(default: 4)",
                "--d-ff": "(default: 512)",
                "--dropout": "(default: 0.1)",
                "--vocab-size": "(default: 2000)",
                "--max-tokens": "(default: 2048)",
                "--steps": "(default: 900)",
                "--formulation": "(default: paper)",
                "--valid-fraction": "(default: 0.05)",
            },
            ["--batch-size", "--train", "--beam-size", "--label-smoothing", "--eval-examples"],
        ),
        (
            "translate",
            {
                "--train": "training pairs",
                "--d-model": "(default: 64)",
                "--d-ff": "(default: 128)",
                "--vocab-size": "(default: 1000)",
                "--max-len": "(default: 128)",
                "--lr-factor": "(default: 2.0)",
                "--beam-size": "(default: 1)",
                "--label-smoothing": "(default: 0.0)",
                "--too-long": "(default: refuse)",
            },
            ["--batch-size", "--text", "--block-len", "--formulation"],
        ),
    ],
)
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
    assert capsys.readouterr().out.strip() == (
        f"typed-transformer {transformer.__version__} (torch {torch.__version__}, Python {sys.version.split()[0]})"
    )


def test_lr_and_lr_factor_exclude_each_other(capsys):
    assert _status(["train", "copy", "--lr", "1e-3", "--lr-factor", "2"]) == 2
    assert "argument --lr-factor: not allowed with argument --lr" in capsys.readouterr().err
    for bad in ("0", "-1e-3", "inf", "nan", "fast"):
        assert _status(["train", "copy", f"--lr={bad}"]) == 2
        assert "argument --lr: expected a positive number" in capsys.readouterr().err


# ---------------------------------------------------------------------------- --lr on resume, the data of a resume
def test_a_resume_keeps_the_checkpoints_schedule_unless_the_command_line_sets_one(tmp_path, capsys):
    out = tmp_path / "run"
    base = [
        "train",
        "copy",
        "--steps",
        "2",
        "--out",
        str(out),
        "--no-progress",
        "--eval-examples",
        "2",
        "--batch-size",
        "8",
    ]
    assert main([*base, "--lr", "0.004", "--warmup", "10"]) == 0
    assert main([*base[:2], "--steps", "3", *base[4:], "--resume"]) == 0
    printed = capsys.readouterr().out
    assert "learning rate changed" not in printed and "10 warm-up steps to a peak of 0.004" in printed
    state = json.loads((out / "state.json").read_text())
    lr_at_3 = state["optimizer"]["param_groups"][0]["lr"]
    assert lr_at_3 == pytest.approx(noam_factor(0.004, 64, 10) * 64**-0.5 * 3 * 10**-1.5)
    assert main([*base[:2], "--steps", "4", *base[4:], "--resume", "--lr", "0.001"]) == 0
    printed = capsys.readouterr().out
    assert "learning rate changed on resume: factor" in printed and "(peak 0.004 -> 0.001)" in printed
    state = json.loads((out / "state.json").read_text())
    schedule = NoamSchedule(64, noam_factor(0.001, 64, 10), 10)
    assert state["scheduler"]["lr_lambdas"][0]["factor"] == pytest.approx(schedule.factor)
    assert state["optimizer"]["param_groups"][0]["lr"] == pytest.approx(schedule(4))


def test_a_resumed_file_task_refuses_other_data_settings(tmp_path, capsys):
    corpus = write_corpus(tmp_path)
    base = [
        "train",
        "lm",
        "--text",
        corpus,
        "--d-model",
        "16",
        "--layers",
        "1",
        "--heads",
        "2",
        "--d-ff",
        "16",
        "--vocab-size",
        "280",
        "--block-len",
        "16",
        "--max-tokens",
        "64",
        "--no-progress",
        "--out",
        str(tmp_path / "lm"),
    ]
    assert main([*base, "--steps", "1", "--eval-every", "0"]) == 0
    for flag, value, recorded in (("--seed", "4", "0"), ("--max-tokens", "128", "64"), ("--block-len", "8", "16")):
        argv = [*base, "--steps", "2", "--resume", flag, value]
        if flag != "--seed":
            argv[argv.index(flag)] = flag  # the later value wins in argparse
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{flag} {value} differs from the checkpoint's {recorded}" in err and f"give {flag} {recorded}" in err, (
            err
        )


def test_bleu_says_when_it_cannot_mean_anything(tmp_path, capsys):
    from transformer.tasks.translation_files import bleu_note, corpus_scores

    one_token = ["un", "deux", "trois", "quatre"]
    scores = corpus_scores(one_token, one_token)
    assert scores["exact_match"] == 1.0 and scores["bleu"] == 0.0 and scores["chrf"] == 100.0
    assert scores["bleu_note"].startswith("BLEU cannot mean anything here: none of the 4 references has 4 tokens")
    assert bleu_note(["a b c d", "x", "y"]) == (
        "BLEU counts only the 1 of 3 references that have 4 tokens or more "
        "(the 2 shorter ones have no 4-grams); read it with chrF and exact match"
    )
    assert bleu_note(["a b c d", "e f g h", "x"]) is None and bleu_note(["1912-06-05"]) is None  # 13a: 5 tokens
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("one\tun\ntwo\tdeux\nthree\ttrois\nfour\tquatre\n")
    assert (
        main(
            [
                "train",
                "translate",
                "--train",
                str(pairs),
                "--valid",
                str(pairs),
                "--tokenizer",
                "char",
                "--steps",
                "1",
                "--d-model",
                "16",
                "--layers",
                "1",
                "--heads",
                "2",
                "--d-ff",
                "16",
                "--no-progress",
                "--out",
                str(tmp_path / "mt"),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "note: BLEU cannot mean anything here: none of the 4 references has 4 tokens" in printed
    results = json.loads(printed.split("RESULTS ", 1)[1])
    assert results["bleu_note"].startswith("BLEU cannot mean anything")
