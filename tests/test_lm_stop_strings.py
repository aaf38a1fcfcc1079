"""Stop strings (``generate(stop_strings=..., tokenizer=...)``, ``typed-transformer generate --stop``) stop where
transformers' ``StopStringCriteria`` stops: at the token whose text completes the string, inside one token, across
tokens, with a byte-level BPE's leading space, per row of a batch; the token is kept."""

from __future__ import annotations

import json

import pytest
import torch
from pretrained_helpers import hf_model

from transformer.decoding import StopStrings, search, token_bytes
from transformer.lm import TransformerLM, generate
from transformer.lm.pretrained import PretrainedTokenizer

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

TEXT = "the cat will sit and the dog is willing to wait; we will see what the weather will do at the wall. " * 30
#: A hand-made vocabulary: each id's bytes.
TABLE = [b"<pad>", b"<eos>", b" willing", b"wi", b"ll", b" will", b"x", b" the", b"w", b"i", b"l"]


def _bpe(folder=None):
    """A byte-level BPE (GPT-2's scheme; the bytes of TEXT only, so that a random model writes merges), saved as a
    Hugging Face tokenizer folder if ``folder``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=120, special_tokens=["<pad>", "<eos>"])  # TEXT's bytes, merges
    tok.train_from_iterator([TEXT], trainer)
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        tok.save(str(folder / "tokenizer.json"))
        settings = {"eos_token": "<eos>", "pad_token": "<pad>", "tokenizer_class": "PreTrainedTokenizerFast"}
        (folder / "tokenizer_config.json").write_text(json.dumps(settings))
        (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 1, "pad_token_id": 0}))
    return tok


@pytest.mark.parametrize(
    ("ids", "stops"),
    [
        ([7, 2], True),  # " willing": "will" inside one token
        ([7, 3, 4], True),  # "wi" + "ll": across two tokens
        ([3, 4, 6], False),  # "will" ended a token ago: not at the last token
        ([8, 9, 10, 10], True),  # one byte a token
        ([7, 6, 6], False),  # never reached
        ([3], False),
    ],
)
def test_a_string_stops_at_the_token_that_completes_it(ids, stops):
    assert StopStrings(["will"], TABLE).row_stops(ids) is stops


def test_the_leading_space_is_part_of_the_text():
    assert StopStrings([" will"], TABLE).row_stops([6, 5])
    assert StopStrings([" will"], TABLE).row_stops([6, 2])
    assert not StopStrings([" will"], TABLE).row_stops([6, 3, 4])  # "xwill": no space before it
    assert StopStrings(["the will"], TABLE).row_stops([7, 5])  # across a space the tokenizer put in front


def test_rows_of_a_batch_stop_at_their_own_step_and_keep_the_token():
    """Row 0 completes "will" at its second token, row 1 at its fourth, row 2 never: scripted steps."""
    script = torch.tensor([[6, 2, 6, 6, 6], [3, 6, 3, 4, 6], [6, 6, 6, 6, 6]])

    class Steps:
        def __call__(self, ys):
            out = torch.full((ys.size(0), len(TABLE)), float("-inf"))
            out[torch.arange(ys.size(0)), script[:, ys.size(1) - 1]] = 0.0
            return out

        def reorder(self, index):
            pass

    prompt = torch.full((3, 1), 7)
    stopped = StopStrings(["will"], TABLE)
    out = search(Steps(), prompt, 6, None, 0, lambda lp: lp.argmax(-1), (), stopped)
    assert out[:, 1:].tolist() == [[6, 2, 0, 0, 0], [3, 6, 3, 4, 0], [6, 6, 6, 6, 6]]
    free = search(Steps(), prompt, 6, None, 0, lambda lp: lp.argmax(-1))
    assert free[:, 1:].tolist() == script.tolist()


def test_a_string_may_begin_in_the_prompt_but_not_lie_wholly_in_it():
    stops = StopStrings(["will"], TABLE)
    assert stops.row_stops([7, 3, 4])  # prompt [7, 3], then 4
    assert not stops.row_stops([5, 6])  # prompt " will", then "x"


def test_the_bytes_of_a_byte_level_bpe_are_its_tokens_bytes():
    tok = _bpe()
    table = token_bytes(tok)
    for text in (" willing", " will", "the", "; we"):
        assert b"".join(table[i] for i in tok.encode(text).ids) == text.encode()
    assert table[tok.token_to_id("<eos>")] == b"<eos>"


def _hf_and_ours(tmp_path):
    tok = _bpe(tmp_path)
    theirs = hf_model(transformers, "llama", seed=1, vocab_size=tok.get_vocab_size(), eos_token_id=1)
    theirs.save_pretrained(tmp_path)
    return theirs, TransformerLM.from_pretrained(tmp_path), PretrainedTokenizer.from_folder(tmp_path)


def test_greedy_generation_stops_where_transformers_stop_strings_stop(tmp_path):
    theirs, ours, tokenizer = _hf_and_ours(tmp_path)
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    prompts = [tokenizer.encode(t) for t in ("the cat will", " the dog is", "we", "wait", " see the")]
    width, new = max(map(len, prompts)), 16
    tokens = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    free = generate(ours, tokens, new, attention_mask=mask, end_symbol=1, pad_symbol=0)[:, width:].tolist()
    free = [row[: row.index(1)] if 1 in row else row for row in free]
    table = token_bytes(tokenizer)
    # stop strings cut from what the rows generate: one inside a token of a row, one across two tokens of another,
    # each the first place its row holds it, at different steps
    inside = [_first_new_text(table, p, row, lambda t: t[-1][1:-1], 1) for p, row in zip(prompts, free, strict=True)]
    across = [
        _first_new_text(table, p, row, lambda t: t[-2][-1:] + t[-1][:1], 2)
        for p, row in zip(prompts, free, strict=True)
    ]
    r0, r1 = next((a, b) for a in range(5) for b in range(5) if a != b and inside[a] and across[b])
    (one, at0), (two, at1) = inside[r0], across[r1]
    assert at0 != at1
    strings = [one, two]
    expected = theirs.generate(
        input_ids=tokens, attention_mask=mask, do_sample=False, max_new_tokens=new, pad_token_id=0,
        eos_token_id=1, stop_strings=strings, tokenizer=hf_tok,
    )[:, width:]  # fmt: skip
    got = generate(
        ours, tokens, new, attention_mask=mask, end_symbol=1, pad_symbol=0, stop_strings=strings, tokenizer=tokenizer
    )[:, width:]
    assert torch.equal(got[:, : expected.size(1)], expected)
    assert (got[:, expected.size(1) :] == 0).all()
    for row, at in ((r0, at0), (r1, at1)):  # each row stops at its string, keeping the token
        assert got[row, : at + 1].tolist() == free[row][: at + 1] and got[row, at + 1 :].eq(0).all()


def _first_new_text(table, prompt, row, cut, tokens):
    """The first text ``cut(the last tokens' bytes)`` (two or more letters and inner spaces, no special token) at a
    step ``t`` of ``row`` that is nowhere in the text before that step's token: (text, t), or None."""
    for t in range(tokens - 1, len(row)):
        last = [table[i] for i in row[t - tokens + 1 : t + 1]]
        text = cut(last)
        before = b"".join(table[i] for i in prompt + row[:t])
        letters = text.replace(b" ", b"").isalpha() and text.strip() == text and min(row[t - tokens + 1 : t + 1]) > 1
        if len(text) >= 2 and letters and text not in before:
            return text.decode(), t
    return None


def test_stop_strings_need_a_tokenizer_and_text(tmp_path):
    _, ours, tokenizer = _hf_and_ours(tmp_path)
    prompt = torch.tensor([tokenizer.encode("the cat")])
    with pytest.raises(ValueError, match=r"stop_strings need the tokenizer .*tokenizer=\.\.\."):
        generate(ours, prompt, 3, stop_strings=["will"])
    with pytest.raises(ValueError, match=r"stop_strings\[1\] must be a non-empty str, got ''"):
        generate(ours, prompt, 3, stop_strings=["will", ""], tokenizer=tokenizer)
    with pytest.raises(TypeError, match="stop_strings need a tokenizer of the `tokenizers` library.*got int"):
        generate(ours, prompt, 3, stop_strings=["will"], tokenizer=3)


def test_the_command_line_stops_at_a_word_the_tokenizer_writes_with_its_space(tmp_path, capsys):
    """``--stop will``: the byte-level BPE writes " will" / " willing" (space first), one token; the text stops."""
    from transformer.cli import main

    theirs, ours, tokenizer = _hf_and_ours(tmp_path)
    hf_tok = transformers.AutoTokenizer.from_pretrained(tmp_path)
    for prompt in ("the cat", " the dog is", "we"):
        ids = tokenizer.encode(prompt)
        free = generate(ours, torch.tensor([ids]), 12, end_symbol=1)[0, len(ids) :].tolist()
        words = [tokenizer.decode([i]) for i in free[: free.index(1) if 1 in free else None]]
        word = next((w for w in words[1:] if w.startswith(" ") and len(w) > 3), None)
        if word is None:
            continue
        stop = word[1:3]  # inside the word, without its space
        expected = theirs.generate(
            input_ids=torch.tensor([ids]), max_new_tokens=12, do_sample=False, eos_token_id=1, pad_token_id=0,
            stop_strings=[stop], tokenizer=hf_tok,
        )[0, len(ids) :].tolist()  # fmt: skip
        assert len(expected) < 12 and 1 not in expected  # the stop string ended it
        assert main(["generate", "--model", str(tmp_path), "--max-new-tokens", "12", "--stop", stop, prompt]) == 0
        assert capsys.readouterr().out == prompt + tokenizer.decode(expected) + "\n"
        break
    else:
        raise AssertionError("no prompt generated a spaced word")
    assert main(["generate", "--model", str(tmp_path), "--beam-size", "2", "--stop", "x", "we"]) == 2
    assert "--stop ends greedy and --sample continuations" in capsys.readouterr().err
