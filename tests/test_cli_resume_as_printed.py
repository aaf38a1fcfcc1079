"""The resume hint works as printed (issue 43): after Ctrl-C or SIGTERM, the command the last line of stderr gives
(``continue it with: typed-transformer train TASK --resume --out DIR``, the directory quoted for a shell), run as it
is, continues the run exactly (in this process, and once through the installed console script): the checkpoint
records the flags that define it (``--text``, ``--init``, ``--block-len``, ``--dtype``, ``--steps``, ``--seed``, the
schedule...) and the resume reads back each one left out; one given with another value is refused naming both. The
summary after a resume says the steps of this run and the total, and the tokens of the store it reused (train lm and
train translate), with the corpus report the store recorded; a ``--block-len`` longer than a pretrained model's
context is refused before anything is tokenized."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from transformer.cli import main
from transformer.training import Trainer

pytest.importorskip("tokenizers")

TRAIN = ["--block-len", "16", "--max-tokens", "64", "--no-progress", "--eval-every", "0", "--seed", "3"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from test_cli_pretrained import write_folder

    return write_folder(tmp_path_factory.mktemp("pretrained") / "model")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from test_cli_pretrained import LINES

    path = tmp_path_factory.mktemp("text") / "text.txt"
    path.write_text("\n".join(LINES * 40) + "\n")
    return str(path)


@pytest.fixture
def interrupt_at(monkeypatch):
    """``interrupt_at(k, signum)``: the signal arrives during optimizer step ``k`` of the next run (Python's own
    SIGINT handler and SIGTERM's default in place, as an interactive run and a batch job have them)."""
    previous = {
        s: signal.signal(s, h)
        for s, h in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL))
    }
    real = Trainer.train_step
    at: list[tuple[int, int]] = []

    def train_step(self):
        if at and self.step == at[0][0] - 1:
            os.kill(os.getpid(), at.pop()[1])
        return real(self)

    monkeypatch.setattr(Trainer, "train_step", train_step)
    yield lambda step, signum=signal.SIGINT: at.append((step, signum))
    for s, h in previous.items():
        signal.signal(s, h)


def _store_tokens(folder, corpus) -> int:
    """The tokens of the store of ``corpus``: the file's tokens, then its ``</s>``."""
    from transformer.tasks.pretrained_lm import pretrained_text_tokenizer

    with open(corpus, encoding="utf-8") as file:
        return len(pretrained_text_tokenizer(folder).encode(file.read())) + 1


def _hint(err: str, task: str) -> list[str]:
    """The command the last line of stderr says to continue with, as a shell splits it, less the program name (what
    ``main`` takes): it must be ``typed-transformer train TASK ...``."""
    last = err.strip().splitlines()[-1]
    assert "; continue it with: " in last, last
    argv = shlex.split(last.split("; continue it with: ", 1)[1])
    assert argv[:3] == ["typed-transformer", "train", task], argv
    return argv[1:]


def _console_script() -> list[str]:
    """``typed-transformer`` as installed beside this Python (``python -m transformer`` where it is not)."""
    script = os.path.join(os.path.dirname(sys.executable), "typed-transformer")
    return [script] if os.path.isfile(script) else [sys.executable, "-m", "transformer"]


@pytest.mark.parametrize("signum,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_fine_tune_interrupted_then_resumed_with_the_printed_flags_alone_is_the_uninterrupted_run(
    signum, status, folder, corpus, tmp_path, capsys, interrupt_at
):
    straight, split = tmp_path / "straight", tmp_path / "split run"  # a space: the printed command quotes it
    flags = ["--init", str(folder), "--text", corpus, *TRAIN, "--steps", "8", "--dtype", "bfloat16"]
    flags += ["--lr-schedule", "cosine", "--lr", "1e-3", "--warmup-ratio", "0.25"]
    assert main(["train", "lm", *flags, "--out", str(straight)]) == 0
    capsys.readouterr()
    interrupt_at(4, signum)
    assert main(["train", "lm", *flags, "--out", str(split)]) == status
    hint = _hint(capsys.readouterr().err, "lm")
    assert hint == ["train", "lm", "--resume", "--out", str(split)]
    assert main(hint) == 0  # as printed: nothing else
    printed = capsys.readouterr().out
    assert f"resumed from {split} at step 4" in printed
    assert "trained 4 steps (resumed at step 4; 8 in all)" in printed
    assert f"from {folder}" in printed and "learning rate changed" not in printed
    assert f"reused {_store_tokens(folder, corpus):,} tokens from {split}.data" in printed and " 0 lines" not in printed
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert {t.dtype for t in b.values()} == {torch.bfloat16}  # the recorded --dtype, read back
    corpora = [json.loads((d / "meta.json").read_text())["metadata"]["results"]["corpus"] for d in (straight, split)]
    assert corpora[0] == corpora[1] and corpora[1]["lines"] == 120  # the store's lines, not 0
    states = [json.loads((d / "state.json").read_text()) for d in (straight, split)]
    for key in ("step", "tokens", "scheduler", "history", "optimizer"):
        assert states[0][key] == states[1][key], key
    meta = json.loads((split / "meta.json").read_text())["metadata"]
    assert meta["dtype"] == "bfloat16" and meta["flags"]["dtype"] == "bfloat16"
    assert meta["flags"]["text"] == [os.path.abspath(corpus)] and meta["flags"]["block_len"] == 16


def test_the_store_reused_is_counted_in_tokens_from_the_store(folder, corpus, tmp_path, capsys):
    """The token count the resumed summary gives is the store's (training and held-out tokens of the text)."""
    out = tmp_path / "run"
    assert (
        main(["train", "lm", "--init", str(folder), "--text", corpus, *TRAIN, "--steps", "1", "--out", str(out)]) == 0
    )
    first = capsys.readouterr().out
    assert "; 120 lines\n" in first and "reused " not in first  # tokenized in this run: the lines read
    assert main(["train", "lm", "--resume", "--out", str(out), "--steps", "2"]) == 0
    assert f"reused {_store_tokens(folder, corpus):,} tokens from {out}.data" in capsys.readouterr().out


def test_a_resume_from_another_directory_reads_the_same_files(folder, corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(os.path.dirname(corpus))
    out = tmp_path / "run"
    argv = ["train", "lm", "--init", str(folder), "--text", os.path.basename(corpus), *TRAIN, "--steps", "2"]
    assert main([*argv, "--out", str(out)]) == 0
    monkeypatch.chdir(tmp_path)
    assert main(["train", "lm", "--resume", "--out", str(out), "--steps", "3"]) == 0
    assert "trained 1 steps (resumed at step 2; 3 in all)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--block-len", "8"], "--block-len 8 differs from the checkpoint's 16"),
        (["--dtype", "float32"], "--dtype float32 differs from the checkpoint's bfloat16"),
        (["--seed", "4"], "--seed 4 differs from the checkpoint's 3"),
        (["--no-pack"], "--no-pack differs from the checkpoint's --pack"),
    ],
)
def test_a_flag_given_on_resume_that_contradicts_the_checkpoint_is_refused_naming_both(
    flags, message, folder, corpus, tmp_path, capsys
):
    out = tmp_path / "run"
    base = ["train", "lm", "--init", str(folder), "--text", corpus, *TRAIN, "--dtype", "bfloat16"]
    assert main([*base, "--steps", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["train", "lm", "--resume", "--out", str(out), "--steps", "2", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and str(out) in err and err.count("\n") == 1


def test_other_text_on_resume_is_refused_naming_both(folder, corpus, tmp_path, capsys):
    other = tmp_path / "other.txt"
    other.write_text("the box\n")
    out = tmp_path / "run"
    assert (
        main(["train", "lm", "--init", str(folder), "--text", corpus, *TRAIN, "--steps", "1", "--out", str(out)]) == 0
    )
    capsys.readouterr()
    assert main(["train", "lm", "--resume", "--out", str(out), "--text", str(other)]) == 2
    err = capsys.readouterr().err
    assert f"--text {other} differs from the checkpoint's {os.path.abspath(corpus)}" in err


def test_a_synthetic_task_resumed_with_the_printed_flags_alone_keeps_its_steps_and_seed(tmp_path, capsys, interrupt_at):
    straight, split = tmp_path / "straight", tmp_path / "split"
    flags = ["--steps", "12", "--batch-size", "8", "--seed", "5", "--eval-every", "0", "--eval-examples", "2"]
    flags += ["--no-progress", "--lr-schedule", "linear", "--lr", "0.002"]
    assert main(["train", "copy", *flags, "--out", str(straight)]) == 0
    interrupt_at(5)
    assert main(["train", "copy", *flags, "--out", str(split)]) == 130
    hint = _hint(capsys.readouterr().err, "copy")
    assert main(hint) == 0
    assert "trained 7 steps (resumed at step 5; 12 in all)" in capsys.readouterr().out  # not the default 600 steps
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_block_len_past_the_pretrained_context_is_refused_before_tokenizing(
    folder, corpus, tmp_path, capsys, monkeypatch
):
    import transformer.cli.train_files as train_files

    def never(*args, **kwargs):
        raise AssertionError("the text was tokenized before the refusal")

    monkeypatch.setattr(train_files, "prepare_lm_data", never)
    out = tmp_path / "run"
    argv = ["train", "lm", "--init", str(folder), "--text", corpus, "--block-len", "65", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--block-len 65 is longer than the pretrained model's context, max_len=64" in err
    assert "give --block-len 64 or less" in err and err.count("\n") == 1
    assert not (tmp_path / "run.data").exists()


def test_a_checkpoint_without_recorded_flags_asks_for_the_text_by_name(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    tiny = ["--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "32", "--vocab-size", "300"]
    argv = ["train", "lm", "--text", corpus, *TRAIN, *tiny, "--steps", "1", "--out", str(out)]
    assert main(argv) == 0
    meta = json.loads((out / "meta.json").read_text())
    del meta["metadata"]["flags"]  # as every checkpoint written before issue 43
    (out / "meta.json").write_text(json.dumps(meta))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["train", "lm", "--resume", "--out", str(out)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "train lm: error: the following arguments are required: --text" in err
    assert "written before the flags were recorded" in err


def test_train_translate_resumes_with_the_printed_flags_alone(tmp_path, capsys, interrupt_at):
    pytest.importorskip("sacrebleu")
    from test_cli_lm import TINY_TRANSLATE, _dates

    train, valid = _dates(tmp_path, 200, "train.tsv", False), _dates(tmp_path, 20, "valid.tsv", True)
    straight, split = tmp_path / "straight", tmp_path / "split"
    flags = ["--train", train, "--valid", valid, "--steps", "6", "--eval-every", "0", "--eval-examples", "4"]
    flags += [*TINY_TRANSLATE, "--no-progress", "--seed", "2"]
    assert main(["train", "translate", *flags, "--out", str(straight)]) == 0
    interrupt_at(3)
    assert main(["train", "translate", *flags, "--out", str(split)]) == 130
    hint = _hint(capsys.readouterr().err, "translate")
    assert main(hint) == 0
    printed = capsys.readouterr().out
    assert "trained 3 steps (resumed at step 3; 6 in all)" in printed
    assert (
        f"reused {_pair_tokens(split, [train, valid]):,} tokens from {split}.data" in printed
        and " 0 lines" not in printed
    )
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    corpora = [json.loads((d / "meta.json").read_text())["metadata"]["results"]["corpus"] for d in (straight, split)]
    assert corpora[0] == corpora[1] and corpora[1]["lines"] == 220  # the stores' lines (200 + 20), not 0


def _pair_tokens(checkpoint, files) -> int:
    """The source and target tokens of every pair of ``files`` under the checkpoint's tokenizer (the stores hold
    the targets without ``<s>`` and ``</s>``, added per batch)."""
    from transformer.data.tokenizers import load_tokenizer

    tokenizer = load_tokenizer(checkpoint)
    pairs = [line.split("\t") for file in files for line in open(file, encoding="utf-8").read().splitlines()]
    return sum(len(tokenizer.encode(source)) + len(tokenizer.encode(target)) for source, target in pairs)


def test_a_longer_steps_on_resume_stretches_the_fine_tune_s_default_decay_and_says_so(folder, corpus, tmp_path, capsys):
    """training.md: a resume with a longer --steps and no schedule flag (a --init fine-tune's default, linear)
    decays to 0 at the new last step, not the checkpoint's (past which every step would train at a rate of 0), and
    prints the change."""
    out = tmp_path / "run"
    assert (
        main(["train", "lm", "--init", str(folder), "--text", corpus, *TRAIN, "--steps", "2", "--out", str(out)]) == 0
    )
    before = json.loads((out / "state.json").read_text())["scheduler"]["lr_lambdas"][0]
    assert (before["schedule"], before["total"]) == ("linear", 2)
    capsys.readouterr()
    assert main(["train", "lm", "--resume", "--out", str(out), "--steps", "5"]) == 0
    printed = capsys.readouterr().out
    after = json.loads((out / "state.json").read_text())["scheduler"]["lr_lambdas"][0]
    assert (after["schedule"], after["total"], after["warmup"]) == ("linear", 5, before["warmup"])
    assert "learning rate changed on resume" in printed and "to 0 at step 2" in printed and "at step 5" in printed


def test_the_printed_command_runs_as_printed_in_a_shell_after_sigterm(folder, corpus, tmp_path, capsys, interrupt_at):
    """The last line of stderr, pasted into a shell: the installed console script continues the run to its end."""
    out = tmp_path / "run"
    flags = ["--init", str(folder), "--text", corpus, *TRAIN, "--steps", "4"]
    interrupt_at(2, signal.SIGTERM)
    assert main(["train", "lm", *flags, "--out", str(out)]) == 143
    last = capsys.readouterr().err.strip().splitlines()[-1]
    command = last.split("; continue it with: ", 1)[1]
    assert command == f"typed-transformer train lm --resume --out {shlex.quote(str(out))}"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    argv = [*_console_script(), *shlex.split(command)[1:]]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trained 2 steps (resumed at step 2; 4 in all)" in done.stdout


def test_under_torchrun_the_printed_command_is_a_torchrun_launch_of_the_same_ranks():
    from transformer.cli.messages import resume_command

    alone = resume_command("lm", "runs/my run", {})
    assert alone == "typed-transformer train lm --resume --out 'runs/my run'"
    one_node = resume_command("copy", "runs/c", {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"})
    assert one_node == "torchrun --standalone --nproc-per-node 2 -m transformer train copy --resume --out runs/c"
    nodes = resume_command("copy", "runs/c", {"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"})
    assert nodes.startswith("torchrun --nnodes 2 --nproc-per-node 4 -m transformer train copy --resume --out runs/c")
    assert "rendezvous" in nodes
