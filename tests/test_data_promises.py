"""Promises of the data layer and the file tasks that no other test checks by value (see docs/promises/data.md)."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import transformer as T
from transformer.data.corpora import TextWindows, build_text_store
from transformer.data.text_files import pair_format, read_pairs
from transformer.data.token_store import TokenStore, write_token_store
from transformer.data.tokenizers import train_tokenizer
from transformer.tasks.dates import MONTHS, DatesTask
from transformer.tasks.text_lm import unigram_cross_entropy
from transformer.tasks.translation_files import prepare_translation_data


def test_text_windows_refuse_spans_and_blocks_that_make_no_window(tmp_path):
    store = write_token_store(tmp_path / "s", [list(range(1, 11))], vocab_size=20)
    assert len(TextWindows(store, 3)) == 3 and len(TextWindows(store, 9)) == 1  # 10 tokens: (10 - 1) // block
    with pytest.raises(ValueError, match="10 tokens make no window of 11 tokens; use a shorter block"):
        TextWindows(store, 10)
    with pytest.raises(ValueError, match=r"span \[4, 12\) is not inside the 10 tokens"):
        TextWindows(store, 2, 4, 12)
    with pytest.raises(ValueError, match="block must be a positive int, got 0"):
        TextWindows(store, 0)
    with pytest.raises(IndexError, match="index 1 is out of range for 1 sequences"):
        store[1]
    assert store[-1].tolist() == list(range(1, 11)) and isinstance(TokenStore.open(tmp_path / "s"), TokenStore)


def test_the_pair_format_comes_from_the_file_name_unless_given():
    assert [pair_format(name, None) for name in ("a.tsv", "a.txt", "a.jsonl", "a.json", "a")] == [
        "tsv",
        "tsv",
        "jsonl",
        "jsonl",
        "tsv",
    ]
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
    with pytest.raises(
        TokenizerMismatchError,
        match=f"the tokenizer has {tokenizer.vocab_size} tokens but the "
        f"model's vocabulary is {tokenizer.vocab_size + 1}",
    ):
        attach_tokenizer(model, tokenizer)


def test_load_tokenizer_reads_a_file_or_its_directory_and_names_a_missing_one(tmp_path):
    from transformer.data.tokenizers import load_tokenizer, train_tokenizer

    tokenizer = train_tokenizer(["hello world"], "char", vocab_size=20, min_frequency=1)
    path = tokenizer.save(tmp_path)
    assert load_tokenizer(path).fingerprint == load_tokenizer(tmp_path).fingerprint == tokenizer.fingerprint
    with pytest.raises(FileNotFoundError, match="nothing/tokenizer.json: no such tokenizer file"):
        load_tokenizer(tmp_path / "nothing" / "tokenizer.json")
    assert (
        tokenizer.decode([tokenizer.bos_id, *tokenizer.encode("hello"), tokenizer.eos_id, tokenizer.pad_id]) == "hello"
    )  # special tokens dropped
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.unk_id) == (0, 1, 2, 3)
    assert np.array_equal(tokenizer.encode_batch(["he", "lo"]), [tokenizer.encode("he"), tokenizer.encode("lo")])


# ------------------------------------------------------------------ found missing by a blind review
# Each test below kills a bug that a reviewer who never read the tests planted and the tests missed
# (tests/mutation/catalog/blind_*.py).


def test_a_json_named_pair_file_is_read_as_json_lines(tmp_path):
    """docs/data.md and pair_format: `.jsonl` and `.json` files are JSON lines, anything else TSV."""
    rows = '{"src": "one\\ttab", "tgt": "un"}\n{"src": "two", "tgt": "deux"}\n'
    for name in ("pairs.json", "pairs.jsonl"):
        (tmp_path / name).write_text(rows)
        sources, targets, numbers = read_pairs(tmp_path / name)
        assert (sources, targets, numbers) == (["one\ttab", "two"], ["un", "deux"], [1, 2]), name


def test_a_changed_file_of_the_same_size_is_tokenized_again(tmp_path):
    """The cached store is reused only when nothing changed: an edit that keeps the size changes the mtime."""
    text = tmp_path / "corpus.txt"
    text.write_text("hello world")
    tokenizer = train_tokenizer(["hello world", "abcde xyz"], "char", vocab_size=64, min_frequency=1)
    first = build_text_store(str(tmp_path / "store"), [str(text)], tokenizer)
    assert tokenizer.decode(first.window(0, len("hello world"))) == "hello world"
    text.write_text("abcde xyzab")  # the same 11 characters' worth of bytes
    stat = text.stat()
    os.utime(text, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    second = build_text_store(str(tmp_path / "store"), [str(text)], tokenizer)
    assert tokenizer.decode(second.window(0, len("abcde xyzab"))) == "abcde xyzab"


def test_windows_never_read_past_their_span_when_it_is_a_multiple_of_the_block(tmp_path):
    """TextWindows: window i holds tokens start + i*block ... + block (block + 1 tokens), all inside [start, end);
    labels() is every label once, inside the span. A span of exactly k*block tokens holds k - 1 whole windows."""
    store = write_token_store(tmp_path / "s", [list(range(1, 25))], vocab_size=30)  # ids 1..24
    windows = TextWindows(store, block=4, start=0, end=12)  # ids 1..12: 12 = 3 * block
    assert len(windows) == 2  # windows [1..5] and [5..9]; a third would need id 13
    assert [windows.window(i).tolist() for i in range(len(windows))] == [[1, 2, 3, 4, 5], [5, 6, 7, 8, 9]]
    assert windows.labels().tolist() == [2, 3, 4, 5, 6, 7, 8, 9]
    assert int(windows.labels().max()) <= 12
    held_out = TextWindows(store, block=4, start=12, end=24)
    assert set(windows.labels().tolist()).isdisjoint(held_out.labels().tolist())  # no held-out token is trained on


def test_the_unigram_baseline_is_fitted_on_the_training_labels_only(tmp_path):
    """unigram_cross_entropy: token frequencies of the TRAINING labels (add-one smoothed), scored on the held-out
    labels: a held-out text unlike the training text gets a high loss, computed here by hand."""
    vocab = 6
    train = write_token_store(tmp_path / "train", [[1, 1, 1, 1, 1, 1, 1, 2, 1]], vocab_size=vocab)
    valid = write_token_store(tmp_path / "valid", [[3, 4, 4, 4, 4]], vocab_size=vocab)
    data = SimpleNamespace(
        tokenizer=SimpleNamespace(vocab_size=vocab), train=TextWindows(train, 4), valid=TextWindows(valid, 4)
    )
    train_labels = data.train.labels().tolist()
    assert train_labels == [1, 1, 1, 1, 1, 1, 2, 1]
    counts = np.ones(vocab) + np.bincount(train_labels, minlength=vocab)
    expected = -np.mean(np.log(counts / counts.sum())[[4, 4, 4, 4]])
    assert unigram_cross_entropy(data) == np.float64(expected).item()
    assert expected > np.log(vocab)  # worse than uniform: the held-out tokens were rare in training


def test_the_joint_translation_tokenizer_learns_both_sides(tmp_path):
    """prepare_translation_data trains ONE tokenizer on both sides of the training file: characters that occur only
    in the targets are in it, so targets round-trip."""
    (tmp_path / "train.tsv").write_text("one\tun\ntwo\tdeux\nthree\ttrois\n")
    (tmp_path / "valid.tsv").write_text("two\tdeux\n")
    data = prepare_translation_data(
        tmp_path / "train.tsv", tmp_path / "valid.tsv", str(tmp_path / "data"), max_len=16, kind="char", vocab_size=100
    )
    for text in ("deux", "trois", "un"):
        assert data.tokenizer.decode(data.tokenizer.encode(text)) == text
    assert set("deuxtrois") - set("onetwothree")  # the data is built so that it matters: x, d, ... are target-only


def test_the_dates_task_draws_every_word_order():
    """DatesTask (docs: three orders, "twenty-first of march 1 9 8 7", "march twenty-first , 2 0 0 4", "fifth june
    1 9 1 2"): training batches hold all three."""
    task = DatesTask()
    src, _ = task.sample(torch.Generator().manual_seed(0), 300)
    orders = set()
    for row in src.tolist():
        words = [task.src_vocab.tokens[i] for i in row if i != task.pad]
        if words[1] == "of":
            orders.add("day of month year")
        elif words[2] == ",":
            orders.add("month day , year")
        else:
            assert words[1] in MONTHS, words
            orders.add("day month year")
    assert orders == {"day of month year", "month day , year", "day month year"}
