"""Batch tokenization (``tokenizer(texts, padding=True)``): the ids and attention mask equal transformers' for the
same tokenizer and padding side (the side ``tokenizer_config.json`` names, or the one passed), and a left-padded
batch generates what each prompt generates alone, and what transformers' ``generate`` does on the same batch."""

from __future__ import annotations

import pytest
import torch
from chat_helpers import EOS, PAD, chat_folder, chat_model

from transformer.lm import TransformerLM, generate
from transformer.lm.pretrained import PretrainedTokenizer

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

TEXTS = ["the cat", " héllo wörld, naïve café € 🙂 the dog", "we", "the mat. the dog will wait"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    root = tmp_path_factory.mktemp("batches")
    folder = chat_folder(root / "model")
    theirs = chat_model(transformers, folder, seed=2)
    return folder, theirs, TransformerLM.from_pretrained(folder), PretrainedTokenizer.from_folder(folder)


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("special", [True, False])
def test_ids_and_mask_equal_transformers(pretrained, side, special):
    folder, _, _, ours = pretrained
    theirs = transformers.AutoTokenizer.from_pretrained(folder, padding_side=side)
    got = ours(TEXTS, padding=True, padding_side=side, add_special_tokens=special, return_tensors="pt")
    expected = theirs(TEXTS, padding=True, add_special_tokens=special, return_tensors="pt")
    assert set(got) == {"input_ids", "attention_mask"}
    assert torch.equal(got["input_ids"], expected["input_ids"])
    assert torch.equal(got["attention_mask"], expected["attention_mask"])
    assert len({len(ours.encode(t)) for t in TEXTS}) > 1  # the padding matters
    lists = ours(TEXTS, padding=True, padding_side=side, add_special_tokens=special)
    assert lists == {k: v.tolist() for k, v in expected.items()}
    unpadded = ours(TEXTS, add_special_tokens=special)
    assert unpadded["input_ids"] == theirs(TEXTS, add_special_tokens=special)["input_ids"]


def test_the_folders_padding_side_is_the_default(tmp_path):
    folder = chat_folder(tmp_path / "left", padding_side="left")
    ours, theirs = PretrainedTokenizer.from_folder(folder), transformers.AutoTokenizer.from_pretrained(folder)
    assert ours.padding_side == theirs.padding_side == "left"
    assert ours(TEXTS, padding=True)["input_ids"] == theirs(TEXTS, padding=True)["input_ids"]
    assert PretrainedTokenizer.from_folder(chat_folder(tmp_path / "plain")).padding_side == "right"  # as transformers


def test_refusals_name_the_argument(pretrained):
    *_, ours = pretrained
    with pytest.raises(ValueError, match=r"make no tensor without padding; pass padding=True"):
        ours(TEXTS, return_tensors="pt")
    with pytest.raises(ValueError, match=r"padding_side must be 'left' or 'right', got 'middle'"):
        ours(TEXTS, padding=True, padding_side="middle")
    with pytest.raises(TypeError, match=r"texts\[1\] must be a str, got int"):
        ours(["a", 3])
    no_pad = PretrainedTokenizer(ours.tokenizer, {}, ours.eos_ids)
    with pytest.raises(ValueError, match="padding needs a pad token"):
        no_pad(TEXTS, padding=True)
    assert ours("the cat") == {"input_ids": ours.encode("the cat"), "attention_mask": [1] * len(ours.encode("the cat"))}


def test_a_left_padded_batch_generates_each_prompts_tokens_and_transformers(pretrained):
    folder, theirs, model, ours = pretrained
    batch = ours(TEXTS, padding=True, padding_side="left", return_tensors="pt")
    out = generate(
        model, batch["input_ids"], 12, attention_mask=batch["attention_mask"], end_symbol=EOS, pad_symbol=PAD
    )
    width = batch["input_ids"].size(1)
    expected = theirs.generate(**batch, max_new_tokens=12, do_sample=False, eos_token_id=EOS, pad_token_id=PAD)
    assert torch.equal(out[:, width : expected.size(1)], expected[:, width:])
    for row, text in enumerate(TEXTS):
        ids = torch.tensor([ours.encode(text)])
        alone = generate(model, ids, 12, end_symbol=EOS, pad_symbol=PAD)[0, ids.size(1) :]
        assert torch.equal(out[row, width:], alone)
