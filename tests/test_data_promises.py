"""Promises of the data layer and the file tasks that no other test checks by value (see docs/promises/data.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import transformer as T
from transformer.data.corpora import TextWindows
from transformer.data.text_files import pair_format
from transformer.data.token_store import TokenStore, write_token_store


def test_text_windows_refuse_spans_and_blocks_that_make_no_window(tmp_path):
    store = write_token_store(tmp_path / "s", [list(range(1, 11))], vocab_size=20)
    assert len(TextWindows(store, 3)) == 3 and len(TextWindows(store, 9)) == 1  # 10 tokens: (10 - 1) // block
    with pytest.raises(ValueError, match="10 tokens make no window of 11 tokens; use a shorter block"):
        TextWindows(store, 10)
    with pytest.raises(ValueError, match=r"span \[4, 12\) is not inside the 10 tokens"):
        TextWindows(store, 2, 4, 12)
    with pytest.raises(ValueError, match="block must be a positive int, got 0"):
        TextWindows(store, 0)
    with pytest.raises(IndexError, match=r"sequence 1 out of range \[0, 1\)"):
        store[1]
    assert store[-1].tolist() == list(range(1, 11)) and isinstance(TokenStore.open(tmp_path / "s"), TokenStore)


def test_the_pair_format_comes_from_the_file_name_unless_given():
    assert [pair_format(name, None) for name in ("a.tsv", "a.txt", "a.jsonl", "a.json", "a")] == \
        ["tsv", "tsv", "jsonl", "jsonl", "tsv"]
    assert pair_format("a.jsonl", "tsv") == "tsv"
    with pytest.raises(ValueError, match="format must be one of tsv, jsonl; got 'csv'"):
        pair_format("a.tsv", "csv")


def test_the_unigram_baseline_is_the_add_one_cross_entropy_of_the_held_out_labels(tmp_path):
    """Training labels 2, 2, 2, 3 over a vocabulary of 5 (add-one: counts 1, 1, 4, 2, 1 of 9); held-out labels 2, 4:
    the baseline is -(log 4/9 + log 1/9) / 2."""
    from types import SimpleNamespace

    from transformer.tasks.text_lm import LMData, unigram_cross_entropy

    store = write_token_store(tmp_path / "s", [[1, 2, 2, 2, 3], [1, 2, 4]], vocab_size=5)
    data = LMData(SimpleNamespace(vocab_size=5), TextWindows(store, 4, 0, 5), TextWindows(store, 2, 5, 8), [store])
    assert data.train.labels().tolist() == [2, 2, 2, 3] and data.valid.labels().tolist() == [2, 4]
    assert unigram_cross_entropy(data) == pytest.approx(-(math.log(4 / 9) + math.log(1 / 9)) / 2, rel=1e-12)


def test_translate_cuts_sources_to_max_len_and_decodes_in_batches(monkeypatch):
    """Sources longer than the model's max_len are cut to it (never an error), an empty source becomes <unk>, and
    batches of ``batch_size`` keep the order."""
    from transformer.data.tokenizers import train_tokenizer
    from transformer.tasks import translation_files
    from transformer.tasks.translation_files import translate, translation_config

    tokenizer = train_tokenizer(["abcdef "], "char", vocab_size=20)
    config = translation_config(tokenizer, max_len=6, d_model=16, n_layers=1, n_heads=2, d_ff=16, dropout=0.0)
    assert config.tie_weights == "all" and config.src_vocab == config.tgt_vocab == tokenizer.vocab_size
    model = T.make_model(config)
    seen = []

    def greedy(model, src, mask, length, start, end, pad):
        seen.append((src.tolist(), length))
        return torch.full((src.size(0), 3), tokenizer.eos_id)

    monkeypatch.setattr(translation_files, "greedy_decode", greedy)
    outputs = translate(model, tokenizer, ["abcdefabcdef", "", "ab"], batch_size=2)
    assert outputs == ["", "", ""]
    (first, first_length), (second, second_length) = seen
    assert len(first[0]) == 6 and first[1][0] == tokenizer.unk_id  # cut to max_len; empty -> <unk>
    assert first_length == 6 and second_length == min(6, 2 * 2 + 10) and len(second) == 1


def test_attach_tokenizer_refuses_a_tokenizer_of_another_size():
    from transformer.data.tokenizers import TokenizerMismatchError, train_tokenizer
    from transformer.tasks.tokenizer_assets import attach_tokenizer, model_vocab

    tokenizer = train_tokenizer(["abc"], "char", vocab_size=10)
    model = T.make_model(tokenizer.vocab_size + 1, tokenizer.vocab_size + 1, N=1, d_model=16, d_ff=16, h=2)
    assert model_vocab(model.config) == tokenizer.vocab_size + 1
    with pytest.raises(TokenizerMismatchError, match=f"the tokenizer has {tokenizer.vocab_size} tokens but the "
                                                     f"model's vocabulary is {tokenizer.vocab_size + 1}"):
        attach_tokenizer(model, tokenizer)


def test_load_tokenizer_reads_a_file_or_its_directory_and_names_a_missing_one(tmp_path):
    from transformer.data.tokenizers import load_tokenizer, train_tokenizer

    tokenizer = train_tokenizer(["hello world"], "char", vocab_size=20, min_frequency=1)
    path = tokenizer.save(tmp_path)
    assert load_tokenizer(path).fingerprint == load_tokenizer(tmp_path).fingerprint == tokenizer.fingerprint
    with pytest.raises(FileNotFoundError, match="nothing/tokenizer.json: no such tokenizer file"):
        load_tokenizer(tmp_path / "nothing" / "tokenizer.json")
    assert tokenizer.decode([tokenizer.bos_id, *tokenizer.encode("hello"), tokenizer.eos_id, tokenizer.pad_id]) == \
        "hello"  # special tokens dropped
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.unk_id) == (0, 1, 2, 3)
    assert np.array_equal(tokenizer.encode_batch(["he", "lo"]), [tokenizer.encode("he"), tokenizer.encode("lo")])
