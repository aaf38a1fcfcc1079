"""Promises of the data layer and the text tasks that a blind review showed untested (tests/mutation/catalog/
blind_data.py): each test builds data on which the promise matters and checks the promised value."""

import os
from types import SimpleNamespace

import numpy as np
import torch

from transformer.data.corpora import TextWindows, build_text_store
from transformer.data.text_files import read_pairs
from transformer.data.token_store import write_token_store
from transformer.data.tokenizers import train_tokenizer
from transformer.tasks.dates import MONTHS, DatesTask
from transformer.tasks.text_lm import unigram_cross_entropy
from transformer.tasks.translation_files import prepare_translation_data


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
    data = SimpleNamespace(tokenizer=SimpleNamespace(vocab_size=vocab), train=TextWindows(train, 4),
                           valid=TextWindows(valid, 4))
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
    data = prepare_translation_data(tmp_path / "train.tsv", tmp_path / "valid.tsv", str(tmp_path / "data"), max_len=16,
                                    kind="char", vocab_size=100)
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
