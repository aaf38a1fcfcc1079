"""Tokenizers trained offline on a corpus the test writes: byte-level BPE and characters round-trip text, keep the
special ids, save into and load from a checkpoint (covered by its SHA-256 manifest); a checkpoint and a tokenizer
that do not belong together are refused. Checkpoints of the language model load by their kind; old ones still load."""

import json
import os

import pytest
import torch

import transformer as T
from transformer.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from transformer.data.tokenizers import (
    SPECIAL_TOKENS,
    TokenizerMismatchError,
    load_tokenizer,
    train_tokenizer,
)
from transformer.lm import build_lm
from transformer.lm.config import LMConfig
from transformer.tasks.tokenizer_assets import attach_tokenizer, check_same_tokenizer, tokenizer_from_checkpoint

CORPUS = [
    "def greet(name):\n    return f'hello {name}'\n",
    "for i in range(10):\n    print(greet(str(i)))\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n",
] * 20
UNSEEN = "def point_sum(p):\n    return p.x + p.y  # ünïcode, tabs\tand emoji 🐍\n"


@pytest.fixture(scope="module")
def bpe():
    return train_tokenizer(CORPUS, "bpe", vocab_size=300, min_frequency=2)


@pytest.fixture(scope="module")
def char():
    return train_tokenizer(CORPUS, "char", vocab_size=1000, min_frequency=1)


def test_bpe_round_trips_any_text_and_learns_merges(bpe):
    assert [bpe.tokenizer.id_to_token(i) for i in range(4)] == list(SPECIAL_TOKENS)
    assert 256 + 4 < bpe.vocab_size <= 300
    for text in CORPUS[:3] + [UNSEEN, ""]:
        assert bpe.decode(bpe.encode(text)) == text  # byte level: nothing is unknown
    assert len(bpe.encode(CORPUS[0])) < len(CORPUS[0]) / 2  # merges: far fewer tokens than bytes
    assert bpe.unk_id not in bpe.encode(UNSEEN)


def test_char_tokenizer_is_one_token_per_character_and_drops_the_unknown(char):
    text = CORPUS[1]
    ids = char.encode(text)
    assert len(ids) == len(text) and char.decode(ids) == text
    ids = char.encode("xyz🐍")  # z and the snake never appear in the corpus
    assert ids.count(char.unk_id) == 2 and char.decode(ids) == "xy"
    with_specials = [char.bos_id] + char.encode("def") + [char.eos_id, char.pad_id]
    assert char.decode(with_specials) == "def"


def test_training_is_deterministic_and_the_fingerprint_tells_tokenizers_apart(bpe, char):
    again = train_tokenizer(CORPUS, "bpe", vocab_size=300, min_frequency=2)
    assert again.fingerprint == bpe.fingerprint and again.encode(UNSEEN) == bpe.encode(UNSEEN)
    other = train_tokenizer(CORPUS[:2], "bpe", vocab_size=280, min_frequency=2)
    assert other.fingerprint != bpe.fingerprint and char.fingerprint != bpe.fingerprint


def test_save_and_load_give_the_same_tokenizer(tmp_path, bpe, char):
    for tokenizer in (bpe, char):
        path = tokenizer.save(tmp_path)
        loaded = load_tokenizer(path)
        assert (loaded.kind, loaded.fingerprint) == (tokenizer.kind, tokenizer.fingerprint)
        assert loaded.encode(UNSEEN) == tokenizer.encode(UNSEEN) and load_tokenizer(tmp_path).kind == tokenizer.kind
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="bad.json is not a typed-transformer tokenizer"):
        load_tokenizer(tmp_path / "bad.json")
    with pytest.raises(FileNotFoundError, match="no such tokenizer file"):
        load_tokenizer(tmp_path / "missing.json")


@pytest.mark.parametrize(
    "kind, vocab, message",
    [
        ("bpe", 100, "vocab_size must be an int >= 260 for a bpe"),
        ("word", 300, "tokenizer kind must be one of bpe, char"),
    ],
)
def test_impossible_tokenizer_settings_are_refused(kind, vocab, message):
    with pytest.raises(ValueError, match=message):
        train_tokenizer(CORPUS, kind, vocab_size=vocab)


def _lm(tokenizer):
    torch.manual_seed(0)
    return build_lm(LMConfig(vocab=tokenizer.vocab_size, n_layers=1, d_model=16, d_ff=32, n_heads=2, max_len=32))


def _save_with(tokenizer, path, model=None):
    model = model or _lm(tokenizer)
    attach_tokenizer(model, tokenizer)
    meta = {"task": "lm", "tokenizer": {"kind": tokenizer.kind, "sha256": tokenizer.fingerprint}}
    save_checkpoint(path, model, metadata=meta)
    return model


def test_the_tokenizer_is_saved_inside_the_checkpoint_and_loaded_from_it(tmp_path, bpe):
    model = _save_with(bpe, tmp_path / "ck")
    assert sorted(os.listdir(tmp_path / "ck")) == [
        "config.json", "meta.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
        "tokenizer_extra.json",
    ]  # fmt: skip
    meta = json.loads((tmp_path / "ck" / "meta.json").read_text())
    assert {"tokenizer.json", "tokenizer_extra.json"} <= set(meta["sha256"])  # in the manifest
    assert json.loads((tmp_path / "ck" / "config.json").read_text())["kind"] == "lm"
    ckpt = load_checkpoint(tmp_path / "ck")
    assert ckpt.kind == "lm" and ckpt.assets == ["tokenizer.json", "tokenizer_config.json", "tokenizer_extra.json"]
    assert isinstance(ckpt.config, LMConfig)
    assert tokenizer_from_checkpoint(ckpt).fingerprint == bpe.fingerprint
    x = torch.tensor([bpe.encode(UNSEEN)[:20]])
    torch.testing.assert_close(ckpt.model.eval()(x), model.eval()(x))
    data = bytearray((tmp_path / "ck" / "tokenizer.json").read_bytes())
    data[100] ^= 1
    (tmp_path / "ck" / "tokenizer.json").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt: tokenizer.json does not match its recorded SHA-256"):
        load_checkpoint(tmp_path / "ck")


def test_a_tokenizer_that_does_not_belong_to_the_checkpoint_is_refused(tmp_path, bpe, char):
    with pytest.raises(
        TokenizerMismatchError,
        match=f"the tokenizer has {char.vocab_size} tokens but the model's vocabulary is {bpe.vocab_size}",
    ):
        attach_tokenizer(_lm(bpe), char)
    _save_with(bpe, tmp_path / "ck")
    other = train_tokenizer(CORPUS[:2], "bpe", vocab_size=bpe.vocab_size, min_frequency=1)
    assert other.vocab_size == bpe.vocab_size and other.fingerprint != bpe.fingerprint
    with pytest.raises(TokenizerMismatchError, match="was trained with another tokenizer"):
        check_same_tokenizer(
            tokenizer_from_checkpoint(load_checkpoint(tmp_path / "ck")), other, "checkpoint", "--tokenizer-file"
        )
    # a checkpoint whose metadata records another tokenizer than the one it holds
    model = _lm(bpe)
    attach_tokenizer(model, bpe)
    save_checkpoint(tmp_path / "wrong", model, metadata={"task": "lm", "tokenizer": {"sha256": other.fingerprint}})
    with pytest.raises(TokenizerMismatchError, match="is not the one the model was trained with"):
        tokenizer_from_checkpoint(load_checkpoint(tmp_path / "wrong"))
    # a checkpoint holding no tokenizer at all
    save_checkpoint(tmp_path / "none", _lm(bpe), metadata={"task": "lm"})
    with pytest.raises(CheckpointError, match="holds no tokenizer.json"):
        tokenizer_from_checkpoint(load_checkpoint(tmp_path / "none"))


def test_old_checkpoints_without_a_kind_load_and_kinds_are_not_mixed(tmp_path, bpe):
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=2)
    save_checkpoint(tmp_path / "old", model)
    config = json.loads((tmp_path / "old" / "config.json").read_text())
    assert config.pop("kind") == "encoder_decoder"
    (tmp_path / "old" / "config.json").write_text(json.dumps(config))  # as written before kinds existed
    meta = json.loads((tmp_path / "old" / "meta.json").read_text())
    import hashlib

    meta["sha256"]["config.json"] = hashlib.sha256((tmp_path / "old" / "config.json").read_bytes()).hexdigest()
    (tmp_path / "old" / "meta.json").write_text(json.dumps(meta))
    loaded = load_checkpoint(tmp_path / "old")
    assert loaded.kind == "encoder_decoder" and loaded.config == model.config and loaded.assets == []
    with pytest.raises(
        CheckpointError, match="holds a model of kind 'encoder_decoder'; the model given is of kind 'lm'"
    ):
        load_checkpoint(tmp_path / "old", model=_lm(bpe))
    _save_with(bpe, tmp_path / "lm")
    with pytest.raises(T.ConfigMismatchError, match=r"n_layers \(model 2, checkpoint 1\)"):
        load_checkpoint(tmp_path / "lm", model=build_lm(_lm(bpe).config.replace(n_layers=2)))
    with pytest.raises(ValueError, match="asset name 'model.safetensors' must be a plain file name other than"):
        save_checkpoint(tmp_path / "x", _lm(bpe), assets={"model.safetensors": b""})
