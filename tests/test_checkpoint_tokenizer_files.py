"""Issue 43: a ``train lm`` checkpoint's ``tokenizer.json`` is a file the ``tokenizers`` library and transformers read
(our fields are in ``tokenizer_extra.json`` beside it), and checkpoints of before, whose one ``tokenizer.json``
holds our fields inline (which both libraries refuse), are still read, to the same tokenizer and fingerprint."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from transformer.checkpoint import load_checkpoint, save_checkpoint
from transformer.cli import main
from transformer.data.tokenizers import (
    PretrainedTextTokenizer,
    load_tokenizer,
    train_tokenizer,
)
from transformer.lm import LMConfig, build_lm
from transformer.tasks.tokenizer_assets import attach_tokenizer, tokenizer_from_checkpoint, tokenizer_metadata

tokenizers = pytest.importorskip("tokenizers")

LINES = ["def add(a, b):", "    return a + b", "class Box:", "    def __init__(self, value):"]
TEXT = "def box(value): return value + a  # ünïcode"
TINY = [
    "--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "32", "--vocab-size", "300", "--block-len", "16",
    "--max-tokens", "64", "--warmup", "2", "--steps", "2", "--no-progress",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _restore_threads():
    previous = torch.get_num_threads()
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    text = root / "code.py"
    text.write_text("\n".join(LINES * 40) + "\n")
    assert main(["train", "lm", "--text", str(text), *TINY, "--out", str(root / "run")]) == 0
    return root / "run"


def test_the_tokenizer_of_a_train_lm_checkpoint_is_read_by_tokenizers_and_transformers(run):
    ckpt = load_checkpoint(run)
    ours = tokenizer_from_checkpoint(ckpt)
    ids = ours.encode(TEXT)
    library = tokenizers.Tokenizer.from_file(str(run / "tokenizer.json"))
    assert library.encode(TEXT, add_special_tokens=False).ids == ids and library.decode(ids) == ours.decode(ids)
    assert json.loads((run / "tokenizer_extra.json").read_text()) == {"typed_transformer_kind": "bpe"}
    assert ckpt.metadata["tokenizer"]["sha256"] == ours.fingerprint
    transformers = pytest.importorskip("transformers")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(run / "tokenizer.json"))
    assert fast(TEXT, add_special_tokens=False)["input_ids"] == ids
    # the checkpoint directory itself, with its tokenizer_config.json (AutoTokenizer reads our config.json first, which
    # is no transformers config: the exported folder is for AutoTokenizer)
    auto = transformers.PreTrainedTokenizerFast.from_pretrained(run)
    assert auto(TEXT)["input_ids"] == ids and auto.decode(ids) == ours.decode(ids)
    assert (auto.pad_token_id, auto.bos_token_id, auto.eos_token_id, auto.unk_token_id) == (0, 1, 2, 3)


def _model(vocab):
    torch.manual_seed(0)
    return build_lm(LMConfig(vocab=vocab, n_layers=1, d_model=16, d_ff=32, n_heads=2, max_len=64, dropout=0.0))


def _old_checkpoint(path, tokenizer):
    """A checkpoint as written before 2026-12-02: one tokenizer.json with our fields inline."""
    save_checkpoint(
        path,
        _model(tokenizer.vocab_size),
        metadata={"task": "lm", "tokenizer": tokenizer_metadata(tokenizer), "data": {"pack": False}},
        assets={"tokenizer.json": tokenizer.to_json()},
    )


def _new_checkpoint(path, tokenizer):
    model = _model(tokenizer.vocab_size)
    attach_tokenizer(model, tokenizer)
    meta = {"task": "lm", "tokenizer": tokenizer_metadata(tokenizer), "data": {"pack": False}}
    save_checkpoint(path, model, metadata=meta)


def _tokenizers(tmp_path):
    bpe = train_tokenizer(LINES * 20, "bpe", vocab_size=300, min_frequency=2)
    char = train_tokenizer(LINES * 20, "char", min_frequency=1)
    bpe.save(tmp_path)  # a byte-level BPE as a pretrained model's own tokenizer: special ids of the model's
    library = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    pretrained = PretrainedTextTokenizer(library, eos_ids=[2, 3], pad_id=0, bos_id=1)
    return {"bpe": bpe, "char": char, "pretrained": pretrained}


@pytest.mark.parametrize("kind", ["bpe", "char", "pretrained"])
def test_an_old_checkpoint_with_our_fields_inside_tokenizer_json_still_reads_the_same(tmp_path, kind, capsys):
    tokenizer = _tokenizers(tmp_path)[kind]
    _old_checkpoint(tmp_path / "old", tokenizer)
    _new_checkpoint(tmp_path / "new", tokenizer)
    # what the issue met: the library refuses the old file (it raises a plain Exception)
    with pytest.raises(Exception, match="expected `,` or `}` at line 1 column"):  # noqa: B017
        tokenizers.Tokenizer.from_file(str(tmp_path / "old" / "tokenizer.json"))
    tokenizers.Tokenizer.from_file(str(tmp_path / "new" / "tokenizer.json"))
    old, new = (tokenizer_from_checkpoint(load_checkpoint(tmp_path / d)) for d in ("old", "new"))
    assert old.fingerprint == new.fingerprint == tokenizer.fingerprint  # the recorded fingerprint still matches
    assert old.encode(TEXT) == new.encode(TEXT) == tokenizer.encode(TEXT)
    assert (old.kind, old.eos_ids, old.pad_id, old.bos_id) == (new.kind, new.eos_ids, new.pad_id, new.bos_id)
    printed = []
    for d in ("old", "new"):
        assert main(["generate", "--checkpoint", str(tmp_path / d), "--max-new-tokens", "5", "def "]) == 0
        printed.append(capsys.readouterr().out)
    assert printed[0] == printed[1] and printed[0].startswith("def ")


def test_load_tokenizer_reads_both_files_an_old_single_file_and_names_what_is_missing(tmp_path):
    bpe = _tokenizers(tmp_path)["bpe"]
    saved = tmp_path / "saved"
    saved.mkdir()
    path = bpe.save(saved)
    assert sorted(p.name for p in saved.iterdir()) == ["tokenizer.json", "tokenizer_extra.json"]
    assert load_tokenizer(path).fingerprint == load_tokenizer(saved).fingerprint == bpe.fingerprint
    (tmp_path / "old.json").write_text(bpe.to_json())  # a file of before: one file, our fields inline
    assert load_tokenizer(tmp_path / "old.json").fingerprint == bpe.fingerprint
    (saved / "tokenizer_extra.json").unlink()
    with pytest.raises(ValueError, match="tokenizer.json .with no tokenizer_extra.json beside it. is not a typed"):
        load_tokenizer(saved)


@pytest.mark.parametrize("kind", ["bpe", "char", "pretrained"])
def test_the_fingerprint_is_the_sha256_of_the_one_file_tokenizers_were_saved_as_before(tmp_path, kind):
    """The fingerprint checkpoints and data caches of before 2026-12-02 recorded: the SHA-256 of the one
    tokenizer.json then written, the library's JSON with our fields inside and its keys sorted (built here from the
    library's text and the documented fields, not from our code's to_json), so those records still match."""
    tokenizer = _tokenizers(tmp_path)[kind]
    library = json.loads(tokenizer.tokenizer.to_str())
    fields = {"typed_transformer_kind": tokenizer.kind}
    if kind == "pretrained":
        fields["typed_transformer_special_ids"] = tokenizer.special_ids
    old_file = json.dumps({**library, **fields}, sort_keys=True, ensure_ascii=False)
    assert tokenizer.fingerprint == hashlib.sha256(old_file.encode()).hexdigest()
    (tmp_path / "old.json").write_text(old_file)
    assert load_tokenizer(tmp_path / "old.json").fingerprint == hashlib.sha256(old_file.encode()).hexdigest()
