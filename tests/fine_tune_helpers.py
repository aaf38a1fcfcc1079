"""Fine-tuning a checkpoint folder the way a user does (``typed-transformer train lm --init FOLDER``), for the tests
that check it on each architecture (tests/test_pretrained_every_architecture.py, the OLMo 2 and OLMoE tests): the
tiny corpus and tokenizer, a run interrupted and resumed that must equal an uninterrupted one bit for bit, the first
batch ``train lm`` trains on, and ``typed-transformer export`` read back by transformers' own class."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from pretrained_helpers import assert_logits_close, hf_logits, left_padded_batch, our_logits

LINES = ["def add ( a , b ) : return a + b", "the box is the value of the self"]


def write_corpus(directory: Path) -> Path:
    """The text every fine-tune here trains on (one document: one file)."""
    corpus = directory / "text.txt"
    corpus.write_text("\n".join(LINES * 40) + "\n")
    return corpus


def with_tokenizer(folder: Path) -> Path:
    """``folder`` given the word-level tokenizer of tests/test_cli_pretrained.py and an end-of-sequence id."""
    from test_cli_pretrained import _write_tokenizer

    _write_tokenizer(folder)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 1}))
    return folder


def train_argv(folder: Path, corpus: Path, steps: int, out: Path, *extra: str) -> list[str]:
    from test_cli_pretrained import TRAIN

    base = ["train", "lm", "--init", str(folder), "--text", str(corpus), "--eval-every", "2", *TRAIN, "--lr", "1e-3"]
    return [*base, "--steps", str(steps), "--out", str(out), *extra]


def assert_resumes_exactly(folder: Path, corpus: Path, tmp_path: Path, capsys, architecture: str) -> Path:
    """``train lm --init folder`` 4 steps straight, and 2 steps then ``--resume`` to 4: the weights bit for bit and
    the logged histories equal, every tensor of the folder moved. Returns the straight run's directory."""
    from safetensors.torch import load_file

    from transformer.cli import main
    from transformer.lm import TransformerLM

    straight, split = tmp_path / "straight", tmp_path / "split"
    assert main(train_argv(folder, corpus, 4, straight)) == 0
    assert f"pretrained {architecture}" in capsys.readouterr().out
    assert main(train_argv(folder, corpus, 2, split)) == 0
    assert main(train_argv(folder, corpus, 4, split, "--resume")) == 0
    assert f"resumed from {split} at step 2" in capsys.readouterr().out
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    histories = [json.loads((d / "state.json").read_text())["history"] for d in (straight, split)]
    assert histories[0] == histories[1] and len(histories[0]["train_loss"]) == 4
    pretrained = TransformerLM.from_pretrained(folder).state_dict()
    unmoved = [k for k in a if torch.equal(a[k], pretrained[k])]
    assert not unmoved, f"not trained: {unmoved}"
    return straight


def first_batch(folder: Path, corpus: Path, tmp_path: Path):
    """The first batch ``train lm --init folder`` trains on (its windows packed, the seed and budget of ``TRAIN``)."""
    from transformer.data.token_batches import token_budget_batches
    from transformer.tasks.pretrained_lm import IGNORED_LABEL, pretrained_text_tokenizer
    from transformer.tasks.text_lm import prepare_lm_data

    data = prepare_lm_data(
        [str(corpus)], str(tmp_path / "first-batch-data"), tokenizer=pretrained_text_tokenizer(folder), block=16,
        pack=True, ignore_index=IGNORED_LABEL,
    )  # fmt: skip
    batches, _ = token_budget_batches(data.train, data.valid, 64, seed=0, what="window")
    return next(batches(torch.Generator().manual_seed(0)))


def assert_exports_as(transformers, checkpoint: Path, hf_dir: Path, model_class: str, prepare=None) -> None:
    """``typed-transformer export --checkpoint checkpoint --to hf_dir``: its ``architectures`` is ``model_class``,
    and transformers' class (``AutoModelForCausalLM``, its default attention; ``prepare`` edits it, for an
    implementation choice) computes the checkpoint's logits on a left-padded batch (float32 within 1e-5 x max)."""
    from transformer.checkpoint import load_checkpoint
    from transformer.cli import main

    assert main(["export", "--checkpoint", str(checkpoint), "--to", str(hf_dir)]) == 0
    assert json.loads((hf_dir / "config.json").read_text())["architectures"] == [model_class]
    theirs = transformers.AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    if prepare is not None:
        prepare(theirs)
    assert type(theirs).__name__ == model_class
    ours = load_checkpoint(checkpoint).model.eval()
    tokens, mask = left_padded_batch()
    tokens = tokens % ours.config.vocab
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask)


def assert_fine_tune_exports_as(transformers, model_class: str, folder: Path, tmp_path: Path, prepare=None) -> None:
    """``train lm --init folder`` for two steps, then ``typed-transformer export`` (:func:`assert_exports_as`)."""
    from transformer.cli import main

    out = tmp_path / "run"
    assert main(train_argv(folder, write_corpus(tmp_path), 2, out)) == 0
    assert_exports_as(transformers, out, tmp_path / "hf", model_class, prepare)
