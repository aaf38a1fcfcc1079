"""Streaming (``generate(..., streamer=TextStreamer(tokenizer))``): the text comes out as the tokens come, at valid
UTF-8 boundaries (a character whose bytes a byte-level BPE splits across tokens is held until its last byte), and
the pieces joined are the final text, as transformers' ``TextStreamer`` prints it in the end."""

from __future__ import annotations

import pytest
import torch
from chat_helpers import EOS, chat_folder, chat_model, chat_tokenizer

from transformer.decoding import TextStreamer
from transformer.lm import TransformerLM, generate
from transformer.lm.pretrained import PretrainedTokenizer

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")


def _byte_tokens(tok, text: str) -> list[int]:
    """``text`` one token per byte (the BPE's byte alphabet), so that every multi-byte character is split."""
    from transformer.decoding.stop_strings import _byte_alphabet  # GPT-2's: the character that stands for a byte

    char_of = {byte: char for char, byte in _byte_alphabet().items()}
    return [tok.token_to_id(char_of[b]) for b in text.encode("utf-8")]


@pytest.mark.parametrize("text", ["é", "a🙂b", "€ naïve", "🙂🙂"])
def test_a_character_split_across_tokens_is_held_until_complete(text):
    tok = chat_tokenizer()
    ids = _byte_tokens(tok, text)
    assert len(ids) > len(text)  # some character is several tokens
    pieces, given_after = [], []
    streamer = TextStreamer(tok, skip_prompt=True, on_text=pieces.append)
    streamer.put(torch.tensor([[tok.token_to_id("<s>")]]))
    for i in ids:
        streamer.put(torch.tensor([i]))
        given_after.append("".join(pieces))
    streamer.end()
    assert "".join(pieces) == text == streamer.text
    assert all("\ufffd" not in piece for piece in pieces)
    whole = text.encode()
    for n, given in enumerate(given_after, start=1):  # after n bytes: every complete character, nothing more
        assert given == whole[:n].decode("utf-8", errors="ignore")


def test_bytes_that_never_complete_a_character_come_out_at_the_end():
    tok = chat_tokenizer()
    ids = _byte_tokens(tok, "ab🙂")[:-1]  # the emoji's last byte never comes
    pieces = []
    streamer = TextStreamer(tok, skip_prompt=True, on_text=pieces.append)
    streamer.put([])
    for i in ids:
        streamer.put(i)
    assert "".join(pieces) == "ab"
    streamer.end()
    assert "".join(pieces) == tok.decode(ids) and pieces[-1].endswith("\ufffd")


def test_the_prompt_is_given_out_unless_skip_prompt_and_one_row_only():
    tok = chat_tokenizer()
    pieces = []
    streamer = TextStreamer(tok, on_text=pieces.append)
    streamer.put(torch.tensor([tok.encode("the cat").ids]))
    streamer.put(torch.tensor(tok.encode(" sat", add_special_tokens=False).ids))
    streamer.end()
    assert pieces == ["the cat", " sat"]
    with pytest.raises(ValueError, match=r"one row \(batch size 1, as transformers'\), got shape \(2, 3\)"):
        TextStreamer(tok).put(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(RuntimeError, match="put after end"):
        streamer.put(3)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    folder = chat_folder(tmp_path_factory.mktemp("stream") / "model")
    theirs = chat_model(transformers, folder, seed=3)
    return folder, theirs, TransformerLM.from_pretrained(folder), PretrainedTokenizer.from_folder(folder)


@pytest.mark.parametrize("prompt", ["the cat", " héllo wörld", "naïve café €", "🙂"])
@pytest.mark.parametrize("sample", [False, True])
def test_streamed_text_is_the_final_text_and_transformers_streamers(pretrained, prompt, sample):
    folder, theirs, ours, tokenizer = pretrained
    ids = torch.tensor([tokenizer.encode(prompt)])
    pieces = []
    options = dict(sample=True, seed=5, top_k=40) if sample else {}
    out = generate(ours, ids, 40, end_symbol=EOS, streamer=TextStreamer(tokenizer, skip_prompt=True,
                                                                       on_text=pieces.append), **options)  # fmt: skip
    new = out[0, ids.size(1) :].tolist()
    new = new[: new.index(EOS) + 1] if EOS in new else new
    assert "".join(pieces) == tokenizer.decode(new)
    # a random model writes bytes that are no character (the final text has U+FFFD there too); a piece given out
    # before the end never ends with one: it was held until the next byte said whether a character completed
    assert all(not piece.endswith("\ufffd") for piece in pieces[:-1]) and len(pieces) > 5
    if not sample:  # transformers' TextStreamer on its own generation prints the same text in the end
        printed = []

        class Recorder(transformers.TextStreamer):
            def on_finalized_text(self, text, stream_end=False):
                printed.append(text)

        hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
        streamer = Recorder(hf_tok, skip_prompt=True, skip_special_tokens=True)
        theirs.generate(input_ids=ids, max_new_tokens=40, do_sample=False, eos_token_id=EOS, pad_token_id=0,
                        streamer=streamer)  # fmt: skip
        assert "".join(printed) == "".join(pieces)


def test_a_streamer_follows_one_row(pretrained):
    _, _, ours, tokenizer = pretrained
    with pytest.raises(ValueError, match="generate: a streamer follows one row .* a prompt of 2 rows"):
        generate(ours, torch.tensor([[3, 4], [5, 6]]), 3, streamer=TextStreamer(tokenizer))
    with pytest.raises(TypeError, match=r"streamer must have put\(ids\) and end\(\)"):
        generate(ours, torch.tensor([[3, 4]]), 3, streamer=print)


def test_a_sentencepiece_continuation_keeps_its_leading_space():
    """A SentencePiece-style tokenizer (Llama's: Metaspace, the first word's space dropped on decoding) decodes
    a continuation alone without its leading space: the streamer decodes it after its prompt, as transformers'
    TextStreamer does, so the pieces are the whole text's continuation."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"<unk>": 0, "▁hello": 1, "▁world": 2, "▁again": 3}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    assert tok.decode([2]) == "world" and tok.decode([1, 2]) == "hello world"  # the premise
    pieces = []
    streamer = TextStreamer(tok, skip_prompt=True, on_text=pieces.append)
    streamer.put(torch.tensor([[1]]))
    for i in (2, 3):
        streamer.put(torch.tensor([i]))
    streamer.end()
    assert "".join(pieces) == " world again" == tok.decode([1, 2, 3])[len(tok.decode([1])) :]
