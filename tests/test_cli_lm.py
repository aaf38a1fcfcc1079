"""The command line on your own files: train lm / generate, train translate / decode, end to end on tiny corpora the
test writes; resume is exact; bad input exits 2 with one line naming the file and line (no traceback)."""

import json
import os

import pytest
import torch
from safetensors.torch import load_file

from transformer.checkpoint import load_checkpoint
from transformer.cli import main

LINES = [
    "def add(a, b):",
    "    return a + b",
    "",
    "class Box:",
    "    def __init__(self, value):",
    "        self.value = value",
    "for i in range(3):",
    "    print(add(i, i))",
]
TINY_LM = [
    "--d-model",
    "32",
    "--layers",
    "1",
    "--heads",
    "2",
    "--d-ff",
    "32",
    "--vocab-size",
    "300",
    "--block-len",
    "16",
    "--max-tokens",
    "64",
    "--warmup",
    "10",
    "--no-progress",
]
TINY_TRANSLATE = [
    "--d-model",
    "32",
    "--layers",
    "1",
    "--heads",
    "2",
    "--d-ff",
    "32",
    "--tokenizer",
    "char",
    "--max-tokens",
    "256",
    "--max-len",
    "40",
    "--warmup",
    "20",
    "--no-progress",
]


@pytest.fixture(autouse=True)
def _restore_threads():
    previous = torch.get_num_threads()
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    paths = []
    for i in range(2):
        path = root / f"part{i}.py"
        path.write_text("\n".join(LINES * (30 + 10 * i)) + "\n")
        paths.append(str(path))
    return paths


def _results(out: str) -> dict:
    return json.loads(next(line for line in out.splitlines() if line.startswith("RESULTS "))[8:])


@pytest.fixture(scope="module")
def lm_run(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("lm") / "run"
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(
            ["train", "lm", "--text", *corpus, "--steps", "6", "--eval-every", "3", "--out", str(out), *TINY_LM]
        )
    assert code == 0
    return out, buffer.getvalue()


def test_train_lm_saves_the_tokenizer_with_the_model_and_reports_perplexity(lm_run):
    out, printed = lm_run
    assert sorted(os.listdir(out)) == [
        "config.json",
        "meta.json",
        "model.safetensors",
        "state.json",
        "state.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "tokenizer_extra.json",
    ]
    results = _results(printed)
    assert results["steps"] == 6 and results["perplexity"] > 1 and results["unigram_perplexity"] > 1
    assert abs(results["perplexity"] - 2.718281828 ** results["eval_loss"]) < 1e-6 * results["perplexity"]
    assert "held-out loss" in printed and "unigram baseline" in printed and results["tokens_per_second"] > 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["metadata"]["task"] == "lm" and "tokenizer.json" in meta["sha256"]
    assert os.path.isdir(str(out) + ".data")  # the tokenized corpus, memory-mapped, beside the checkpoint
    # --no-progress (in TINY_LM) keeps a loss line per evaluation, with the values the checkpoint's history holds
    history = load_checkpoint(out).trainer_state["history"]
    train, held_out = dict(history["train_loss"]), dict(history["eval_loss"])
    for step in (3, 6):
        assert f"step {step}: train loss {train[step]:.4f}, eval loss {held_out[step]:.4f}\n" in printed


def test_generate_continues_a_prompt_greedy_or_sampled_from_a_seed(lm_run, capsys):
    out, _ = lm_run
    assert main(["generate", "--checkpoint", str(out), "--max-new-tokens", "12", "def "]) == 0
    greedy = capsys.readouterr().out
    assert greedy.startswith("def ")
    args = [
        "generate",
        "--checkpoint",
        str(out),
        "--max-new-tokens",
        "12",
        "--sample",
        "--seed",
        "3",
        "--top-k",
        "20",
        "for i",
        "class",  # an empty prompt to this packed model exits 2: tests/test_cli_generate_flags.py
    ]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert main(args) == 0 and capsys.readouterr().out == first and first.startswith("for i")
    assert main(["generate", "--checkpoint", str(out), "--max-new-tokens", "12", "--beam-size", "2", "def "]) == 0
    assert capsys.readouterr().out.startswith("def ")


def test_generate_stops_after_a_stop_text(lm_run, capsys):
    from transformer.checkpoint import load_checkpoint
    from transformer.tasks.tokenizer_assets import tokenizer_from_checkpoint

    out, _ = lm_run
    tokenizer = tokenizer_from_checkpoint(load_checkpoint(out, load_trainer_state=False))
    assert main(["generate", "--checkpoint", str(out), "--max-new-tokens", "8", "class"]) == 0
    greedy = capsys.readouterr().out[len("class") :].rstrip("\n")
    first = tokenizer.decode(tokenizer.encode(greedy)[:1])  # the first generated token's text
    assert len(tokenizer.encode(first)) == 1 and len(greedy) > len(first)
    assert main(["generate", "--checkpoint", str(out), "--max-new-tokens", "8", "--stop", first, "class"]) == 0
    assert capsys.readouterr().out == "class" + first + "\n"


def test_generate_refuses_too_long_requests_and_wrong_checkpoints(lm_run, capsys):
    out, _ = lm_run
    assert main(["generate", "--checkpoint", str(out), "--max-new-tokens", "300", "def "]) == 2
    err = capsys.readouterr().err
    assert "plus max_new_tokens=300" in err and "more than the model's max_len=256" in err and "Traceback" not in err
    assert main(["generate", "--checkpoint", str(out), "--top-k", "3", "x"]) == 2
    assert "--top-k is a sampling option: add --sample" in capsys.readouterr().err
    assert main(["decode", "--checkpoint", str(out), "def "]) == 2
    assert "was trained by `train lm`: continue text with `typed-transformer generate" in capsys.readouterr().err


def test_resume_is_exact(corpus, tmp_path, capsys):
    straight, split = tmp_path / "straight", tmp_path / "split"
    base = ["train", "lm", "--text", *corpus, "--eval-every", "3", *TINY_LM, "--dropout", "0.1"]
    assert main([*base, "--steps", "6", "--out", str(straight)]) == 0
    assert main([*base, "--steps", "3", "--out", str(split)]) == 0
    assert main([*base, "--steps", "6", "--out", str(split), "--resume"]) == 0
    printed = capsys.readouterr().out
    assert f"resumed from {split} at step 3" in printed
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    losses = [json.loads((d / "state.json").read_text())["history"]["train_loss"] for d in (straight, split)]
    assert losses[0] == losses[1]


def test_resume_with_another_tokenizer_is_refused(lm_run, corpus, tmp_path, capsys):
    out, _ = lm_run
    from transformer.data.tokenizers import train_tokenizer

    other = train_tokenizer(["something else entirely " * 30], "char")
    other.save(tmp_path)
    code = main(
        [
            "train",
            "lm",
            "--text",
            *corpus,
            "--steps",
            "7",
            "--out",
            str(out),
            "--resume",
            "--tokenizer-file",
            str(tmp_path / "tokenizer.json"),
            *TINY_LM,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "was trained with another tokenizer" in err and "Traceback" not in err


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    """Twelve short files of 3 to 14 lines: most training windows of 16 tokens cross a document boundary."""
    root = tmp_path_factory.mktemp("documents")
    paths = []
    for i in range(12):
        path = root / f"doc{i:02d}.py"
        path.write_text("\n".join(LINES[i % 4 :] + LINES[: 3 + i % 7]) + "\n")
        paths.append(str(path))
    return paths


def test_packing_is_on_by_default_recorded_and_changes_what_is_trained(documents, tmp_path, capsys):
    base = ["train", "lm", "--text", *documents, "--steps", "3", "--eval-every", "3", *TINY_LM, "--dropout", "0"]
    assert main([*base, "--out", str(tmp_path / "packed")]) == 0
    assert main([*base, "--out", str(tmp_path / "unpacked"), "--no-pack"]) == 0
    runs = [tmp_path / "packed", tmp_path / "unpacked"]
    meta = [json.loads((d / "meta.json").read_text())["metadata"]["data"] for d in runs]
    assert meta[0]["pack"] is True and meta[1]["pack"] is False
    losses = [json.loads((d / "state.json").read_text())["history"]["train_loss"] for d in runs]
    assert losses[0][0] != losses[1][0]  # the same windows, the boundaries masked in one run only


def test_resume_is_exact_with_packing_and_refuses_another_pack_setting(documents, tmp_path, capsys):
    straight, split = tmp_path / "straight", tmp_path / "split"
    base = ["train", "lm", "--text", *documents, "--eval-every", "3", *TINY_LM, "--dropout", "0.1", "--pack"]
    assert main([*base, "--steps", "6", "--out", str(straight)]) == 0
    assert main([*base, "--steps", "3", "--out", str(split)]) == 0
    assert main([*base, "--steps", "6", "--out", str(split), "--resume", "--no-pack"]) == 2
    assert "--no-pack differs from the checkpoint's --pack" in capsys.readouterr().err
    assert main([*base, "--steps", "6", "--out", str(split), "--resume"]) == 0
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    losses = [json.loads((d / "state.json").read_text())["history"]["train_loss"] for d in (straight, split)]
    assert losses[0] == losses[1]


def _dates(tmp_path, n, name, held_out):
    import datetime

    from transformer.tasks.dates import _FIRST, DatesTask

    task, g = DatesTask(), torch.Generator().manual_seed(len(name))
    lines = []
    for ordinal, form in zip(
        torch.randint(_FIRST, _FIRST + 20000, (n,), generator=g).tolist(),
        torch.randint(0, 3, (n,), generator=g).tolist(),
        strict=True,
    ):
        date = datetime.date.fromordinal(ordinal - ordinal % 10 if held_out else ordinal)
        lines.append(task.source_text(task.src_vocab.encode(task.words(date, form))) + "\t" + "".join(task.iso(date)))
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_train_translate_then_decode_plain_text(tmp_path, capsys):
    train, valid = _dates(tmp_path, 400, "train.tsv", False), _dates(tmp_path, 30, "valid.tsv", True)
    out = tmp_path / "tr"
    assert (
        main(
            [
                "train",
                "translate",
                "--train",
                train,
                "--valid",
                valid,
                "--steps",
                "8",
                "--eval-every",
                "4",
                "--eval-examples",
                "10",
                "--out",
                str(out),
                *TINY_TRANSLATE,
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    results = _results(printed)
    assert results["eval_lines"] == 10 and 0 <= results["bleu"] <= 100 and 0 <= results["chrf"] <= 100
    assert "tok:13a" in results["bleu_signature"] and "BLEU" in printed and "chrF" in printed
    assert [line.split(":")[0] for line in printed.splitlines() if ": train loss " in line] == ["step 4", "step 8"]
    assert "tokenizer.json" in os.listdir(out)
    assert main(["decode", "--checkpoint", str(out), "fifth of june 1912", "--beam-size", "2"]) == 0
    decoded = capsys.readouterr().out.strip()
    assert len(decoded) <= 40 and "\t" not in decoded
    assert main(["generate", "--checkpoint", str(out), "x"]) == 2
    assert "generate needs a `train lm` checkpoint (use `decode`)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content, message",
    [
        ("fifth of june 1912 1912-06-05\n", ":1: expected 'source<TAB>target' (exactly one tab), found no tab"),
        ("a\tb\n" + "x" * 60 + "\ty\n", ":2: the pair is too long for max_len=40: source 60 tokens"),
    ],
)
def test_bad_translation_files_exit_2_naming_file_and_line(tmp_path, capsys, content, message):
    train = tmp_path / "train.tsv"
    train.write_text(content)
    code = main(
        [
            "train",
            "translate",
            "--train",
            str(train),
            "--valid",
            str(train),
            "--steps",
            "1",
            "--out",
            str(tmp_path / "o"),
            *TINY_TRANSLATE,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and f"{train}{message}" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def _status(argv) -> int:
    """``main``'s exit status, whether it returns it or argparse exits with it."""
    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code


def test_bad_text_files_and_misused_flags_exit_2(corpus, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\n\xff\xfe broken\n")
    for args, message in [
        (["train", "lm", "--text", str(tmp_path / "missing.txt")], "missing.txt: no such file"),
        (["train", "lm", "--text", str(bad)], "bad.txt:2: invalid UTF-8 (byte 0xff at column 1"),
        (["train", "lm"], "train lm: error: the following arguments are required: --text"),
        (["train", "copy", "--text", corpus[0]], "train copy: error: --text is for train lm, not train copy"),
        (["train", "copy", "--valid", corpus[0]], "--valid is for train lm or train translate, not train copy"),
        (["train", "lm", "--text", corpus[0], "--train", corpus[0]], "--train is for train translate, not train lm"),
        (
            ["train", "translate", "--train", corpus[0], "--valid", corpus[0], "--block-len", "8"],
            "--block-len is for train lm, not train translate",
        ),
        (["train", "lm", "--text", corpus[0], "--batch-size", "8"], "use --max-tokens instead of --batch-size"),
        (["train", "translate", "--train", corpus[0]], "the following arguments are required: --valid"),
        (
            ["train", "translate", "--train", corpus[0], "--valid", corpus[0], corpus[1]],
            f"unrecognized arguments: {corpus[1]}",
        ),
        (
            ["train", "lm", "--text", corpus[0], "--max-tokens", "8", "--block-len", "16"],
            "window 0 has 16 tokens, more than the batch budget max_tokens=8",
        ),
    ]:
        code = _status([*args, "--out", str(tmp_path / "o"), "--no-progress"])
        err = capsys.readouterr().err
        assert code == 2 and message in err and "Traceback" not in err, (args, err)
        assert not (tmp_path / "o").exists()


def test_invalid_utf8_with_the_replace_policy_is_counted(tmp_path, capsys):
    text = tmp_path / "mixed.txt"
    text.write_bytes(("\n".join(LINES * 20) + "\n").encode() + b"caf\xe9\n" + ("\n".join(LINES * 20) + "\n").encode())
    assert (
        main(
            [
                "train",
                "lm",
                "--text",
                str(text),
                "--steps",
                "1",
                "--eval-every",
                "0",
                "--encoding-errors",
                "replace",
                "--out",
                str(tmp_path / "o"),
                *TINY_LM,
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "invalid UTF-8 replaced by U+FFFD on 1 lines" in printed
    assert _results(printed)["corpus"]["replaced_utf8_lines"] == 1
