"""Bad input files get an error naming the file and the line: missing or empty files, lines without a tab, invalid
UTF-8 (refused, or replaced and counted), JSON lines without their fields, pairs longer than max_len (refused, or
truncated or skipped and counted, as docs/data.md says)."""

import json

import pytest

from transformer.data.corpora import CorpusReport, build_pair_stores, build_text_store
from transformer.data.text_files import ReadReport, TextFileError, read_lines, read_pairs, read_text
from transformer.data.tokenizers import train_tokenizer


@pytest.fixture(scope="module")
def char_tokenizer():
    return train_tokenizer(["abcdefghijklmnopqrstuvwxyz 0123456789-,\ufffd\n"], "char", min_frequency=1)


def test_a_missing_a_directory_and_an_empty_file_are_named(tmp_path):
    with pytest.raises(TextFileError, match=f"^{tmp_path / 'nope.txt'}: no such file$"):
        list(read_lines(tmp_path / "nope.txt"))
    with pytest.raises(TextFileError, match="is a directory, expected a text file"):
        read_text(tmp_path)
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(TextFileError, match=f"^{tmp_path / 'empty.txt'}: the file is empty$"):
        read_text(tmp_path / "empty.txt")
    (tmp_path / "blank.txt").write_text("  \n\n\t\n")
    with pytest.raises(TextFileError, match="blank.txt: the file holds no text"):
        read_text(tmp_path / "blank.txt")
    (tmp_path / "blank.tsv").write_text("\n\n")
    with pytest.raises(TextFileError, match="blank.tsv: no tab-separated pairs"):
        read_pairs(tmp_path / "blank.tsv")


def test_a_line_without_exactly_one_tab_is_named_with_its_number(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("a b\tc d\n\nno tab here\ne\tf\n")
    with pytest.raises(
        TextFileError,
        match=rf"^{path}:3: expected 'source<TAB>target' \(exactly one tab\), found "
        r"no tab: 'no tab here'$",
    ):
        read_pairs(path)
    path.write_text("a\tb\nx\ty\tz\n")
    with pytest.raises(TextFileError, match=rf"^{path}:2: .* found 2 tabs"):
        read_pairs(path)
    path.write_text("a\tb\n \tz\n")
    with pytest.raises(TextFileError, match=rf"^{path}:2: the source side is empty"):
        read_pairs(path)


def test_good_pairs_come_back_with_their_line_numbers_and_blank_lines_are_counted(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("one\t1\n\ntwo \t 2\r\nthree\t3")
    report = ReadReport()
    assert read_pairs(path, report=report) == (["one", "two", "three"], ["1", "2", "3"], [1, 3, 4])
    assert report.lines == 4 and report.blank_lines == 1


def test_json_lines_need_src_and_tgt_strings(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"src": "a", "tgt": "b"}) + "\n" + '{"src": "a"\n')
    with pytest.raises(TextFileError, match=rf"^{path}:2: invalid JSON \(Expecting ',' delimiter at column 12\)"):
        read_pairs(path)
    path.write_text(json.dumps({"src": "a", "tgt": 3}) + "\n")
    with pytest.raises(TextFileError, match=rf"^{path}:1: expected a string field 'tgt', got int"):
        read_pairs(path)
    path.write_text(json.dumps({"src": "a"}) + "\n")
    with pytest.raises(TextFileError, match=rf"^{path}:1: expected a string field 'tgt', got nothing"):
        read_pairs(path)
    path.write_text(json.dumps(["a", "b"]) + "\n")
    with pytest.raises(TextFileError, match="expected a JSON object"):
        read_pairs(path)
    path.write_text(json.dumps({"src": "x y", "tgt": "z"}) + "\n")
    assert read_pairs(path) == (["x y"], ["z"], [1])


def test_invalid_utf8_is_refused_naming_line_and_column_or_replaced_and_counted(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"first line\n" + "caf\xe9 au lait\n".encode("latin-1") + b"ok\n")
    with pytest.raises(
        TextFileError,
        match=rf"^{path}:2: invalid UTF-8 \(byte 0xe9 at column 4: invalid "
        r"continuation byte\); .*--encoding-errors replace",
    ):
        read_text(path)
    report = ReadReport()
    text = read_text(path, encoding_errors="replace", report=report)
    assert text == "first line\ncaf\ufffd au lait\nok\n" and report.replaced_lines == [(str(path), 2)]
    assert "invalid UTF-8 replaced by U+FFFD on 1 lines" in report.summary()


def _pairs(tmp_path, lines):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{a}\t{b}\n" for a, b in lines))
    return str(path)


def test_pairs_longer_than_max_len_are_refused_naming_file_line_and_lengths(tmp_path, char_tokenizer):
    path = _pairs(tmp_path, [("abc", "de"), ("abcdefghij", "xy"), ("ab", "abcdefghi")])
    with pytest.raises(
        TextFileError,
        match=rf"^{path}:2: the pair is too long for max_len=8: source 10 tokens \(at "
        r"most 8\), target 2 tokens \(at most 6, with <s> and </s>\)",
    ):
        build_pair_stores(str(tmp_path / "data"), [path], char_tokenizer, 8)
    assert not (tmp_path / "data" / "src").exists()  # nothing half-written is left


@pytest.mark.parametrize("policy", ["truncate", "skip"])
def test_pairs_longer_than_max_len_are_truncated_or_skipped_and_counted(tmp_path, char_tokenizer, policy):
    path = _pairs(
        tmp_path, [("abc", "de"), ("abcdefghij", "xy"), ("ab", "abcdefghi"), ("abcdefgh", "abcdef"), ("a", "abcdefg")]
    )  # the last: 7 + <s> + </s> = 9 > 8 positions
    report = CorpusReport()
    src, tgt = build_pair_stores(str(tmp_path / policy), [path], char_tokenizer, 8, too_long=policy, report=report)
    where = [(path, 2), (path, 3), (path, 5)]
    if policy == "skip":
        assert report.skipped == where and report.truncated == [] and len(src) == 2
        assert [char_tokenizer.decode(src[i]) for i in range(2)] == ["abc", "abcdefgh"]
    else:
        assert report.truncated == where and report.skipped == [] and len(src) == 5
        assert char_tokenizer.decode(src[1]) == "abcdefgh" and char_tokenizer.decode(tgt[2]) == "abcdef"
        assert char_tokenizer.decode(tgt[3]) == "abcdef"  # fits exactly: untouched
    assert all(len(src[i]) <= 8 and len(tgt[i]) <= 6 for i in range(len(src)))
    assert f"3 pairs longer than max_len {'skipped' if policy == 'skip' else 'truncated'}" in report.summary()
    again, _ = build_pair_stores(str(tmp_path / policy), [path], char_tokenizer, 8, too_long=policy)
    assert again.info["report"]["skipped" if policy == "skip" else "truncated"] == 3  # reused, counts kept


def test_the_text_store_rebuilds_when_its_file_changes_and_is_reused_otherwise(tmp_path, char_tokenizer):
    path = tmp_path / "a.txt"
    path.write_text("abc\n")
    first = build_text_store(str(tmp_path / "store"), [str(path)], char_tokenizer)
    assert first[0].tolist() == char_tokenizer.encode("abc\n") + [char_tokenizer.eos_id]
    again = build_text_store(str(tmp_path / "store"), [str(path)], char_tokenizer)
    assert again.info == first.info
    path.write_text("abcd e\n")
    changed = build_text_store(str(tmp_path / "store"), [str(path)], char_tokenizer)
    assert char_tokenizer.decode(changed[0]) == "abcd e\n"
