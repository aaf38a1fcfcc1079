"""Generation and the tokenizer of a checkpoint folder, against transformers: greedy generation with our key/value
cache gives transformers' ``generate`` tokens (its cache, left-padded prompts, bfloat16 and float16 folders), and
stops at the end-of-sequence ids of ``generation_config.json`` exactly where transformers stops; ``tokenizer.json``
encodes and decodes as transformers' own tokenizer of the folder.
"""

from __future__ import annotations

import json

import pytest
import torch
from pretrained_helpers import VOCAB, hf_model, left_padded_batch

from transformer.lm import TransformerLM, generate
from transformer.lm.pretrained import PretrainedFormatError, PretrainedTokenizer

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

NEW = 8


def _hf_generate(model, tokens, mask, eos):
    model.generation_config.eos_token_id = eos
    out = model.generate(
        input_ids=tokens, attention_mask=mask.long(), do_sample=False, max_new_tokens=NEW, pad_token_id=0,
        min_new_tokens=0,
    )  # fmt: skip
    return out[:, tokens.size(1) :]


def _stopped_rows(generated, eos_ids):
    """Each row's tokens up to and including its first id of ``eos_ids`` (all of them if none)."""
    rows = []
    for row in generated.tolist():
        ends = [i for i, t in enumerate(row) if t in eos_ids]
        rows.append(row[: ends[0] + 1] if ends else row)
    return rows


@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen3", "mistral"])
def test_greedy_generation_with_our_cache_gives_transformers_tokens(tmp_path, kind):
    theirs = hf_model(transformers, kind)
    theirs.save_pretrained(tmp_path)
    ours = TransformerLM.from_pretrained(tmp_path)
    tokens, mask = left_padded_batch(steps=7, pads=(0, 2, 4))
    free = _hf_generate(theirs, tokens, mask, None)
    got = generate(ours, tokens, NEW, prompt_mask=mask, pad_symbol=0)[:, tokens.size(1) :]
    assert torch.equal(got, free)
    # an end token that row 0 generates at its fourth step (and maybe elsewhere): both stop there
    eos = int(free[0, 3])
    stopped = _hf_generate(theirs, tokens, mask, eos)
    ours_stopped = generate(ours, tokens, NEW, prompt_mask=mask, end_symbol=eos, pad_symbol=0)[:, tokens.size(1) :]
    assert _stopped_rows(ours_stopped, {eos}) == _stopped_rows(stopped, {eos})
    assert len(_stopped_rows(stopped, {eos})[0]) <= 4


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_low_precision_greedy_generation_gives_transformers_tokens(tmp_path, kind, dtype):
    """A bfloat16 or float16 folder, loaded as it is (its config.json's dtype): our greedy tokens are transformers'
    token for token on 8 left-padded rows of 24 steps. The tiny random models' logits lie within about 0.05 of each
    other, so deciding on log-probabilities rounded to the model's dtype diverged on most rows within a few steps
    (bfloat16: every row, mostly at the first); transformers decides on the logits cast to float32."""
    theirs = hf_model(transformers, kind).to(dtype)
    theirs.save_pretrained(tmp_path)
    ours = TransformerLM.from_pretrained(tmp_path)
    assert ours.weights_dtype() == dtype
    tokens = torch.randint(3, VOCAB, (8, 6), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(tokens, dtype=torch.bool)
    for row in range(8):
        mask[row, : row % 4] = False  # rows padded on the left by 0 to 3
    tokens = tokens.masked_fill(~mask, 0)
    new = 24
    expected = theirs.generate(
        input_ids=tokens, attention_mask=mask.long(), do_sample=False, max_new_tokens=new, min_new_tokens=new,
        pad_token_id=0, eos_token_id=None,
    )[:, tokens.size(1) :]  # fmt: skip
    got = generate(ours, tokens, new, prompt_mask=mask, pad_symbol=0)[:, tokens.size(1) :]
    diverged = [row for row in range(8) if not torch.equal(got[row], expected[row])]
    assert not diverged, f"rows {diverged} diverge from transformers' generate"


def _tokenizer_folder(folder, eos_ids=None, config_eos=None):
    """A WordLevel tokenizer over '<pad>', '<s>', '</s>', 'w3'..'w96' that adds '<s>' in front, as Llama's."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tokenizer.add_special_tokens(["<pad>", "<s>", "</s>"])
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    eos = {"__type": "AddedToken", "content": "</s>", "lstrip": False, "normalized": False, "rstrip": False}
    settings = {
        "bos_token": "<s>",
        "eos_token": eos,
        "pad_token": "<pad>",
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    if eos_ids is not None:
        (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": eos_ids, "bos_token_id": 1}))
    if config_eos is not None:
        config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").exists() else {}
        (folder / "config.json").write_text(json.dumps({**config, "eos_token_id": config_eos}))
    return folder


def test_the_tokenizer_encodes_and_decodes_as_transformers_does(tmp_path):
    folder = _tokenizer_folder(tmp_path / "tok", eos_ids=[2, 7])
    ours = PretrainedTokenizer.from_folder(folder)
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    text = "w5 w17 w96 w3"
    assert ours.encode(text) == theirs(text)["input_ids"] == [1, 5, 17, 96, 3]
    assert ours.decode(ours.encode(text)) == theirs.decode(theirs(text)["input_ids"], skip_special_tokens=True) == text
    assert ours.decode([1, 5, 2], skip_special_tokens=False) == "<s> w5 </s>"
    assert ours.special_tokens == {"bos_token": ("<s>", 1), "eos_token": ("</s>", 2), "pad_token": ("<pad>", 0)}
    assert ours.pad_id == 0 and ours.vocab_size == VOCAB
    assert ours.eos_ids == (2, 7)
    assert ours.generation_arguments() == {"end_symbol": 2, "end_symbols": [7]}


def test_eos_ids_come_from_generation_config_then_config_json(tmp_path):
    folder = _tokenizer_folder(tmp_path / "a", config_eos=9)
    assert PretrainedTokenizer.from_folder(folder).eos_ids == (9,)
    folder = _tokenizer_folder(tmp_path / "b", eos_ids=5, config_eos=9)
    assert PretrainedTokenizer.from_folder(folder).eos_ids == (5,)
    folder = _tokenizer_folder(tmp_path / "c")
    assert PretrainedTokenizer.from_folder(folder).eos_ids == ()
    assert PretrainedTokenizer.from_folder(folder).generation_arguments() == {}


def test_tokenizer_errors_name_the_file_and_field(tmp_path):
    with pytest.raises(PretrainedFormatError, match="tokenizer.json: no such file"):
        PretrainedTokenizer.from_folder(tmp_path)
    folder = _tokenizer_folder(tmp_path / "t")
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<eos>"}))
    with pytest.raises(PretrainedFormatError, match=r"tokenizer_config.json: field eos_token='<eos>'"):
        PretrainedTokenizer.from_folder(folder)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, "x"]}))
    (folder / "tokenizer_config.json").write_text("{}")
    with pytest.raises(PretrainedFormatError, match=r"generation_config.json: field eos_token_id"):
        PretrainedTokenizer.from_folder(folder)
    (folder / "tokenizer.json").write_text("{}")
    with pytest.raises(PretrainedFormatError, match="tokenizer.json: not a tokenizers tokenizer.json"):
        PretrainedTokenizer.from_folder(folder)


def test_generation_stops_at_every_eos_id_where_transformers_stops(tmp_path):
    theirs = hf_model(transformers, "llama", seed=4)
    theirs.save_pretrained(tmp_path)
    ours = TransformerLM.from_pretrained(tmp_path)
    tokens, mask = left_padded_batch(seed=2, steps=6, pads=(0, 1, 3))
    free = _hf_generate(theirs, tokens, mask, None)
    eos_ids = [int(free[0, 2]), int(free[1, 4])]  # two rows stop at two different ids (if not earlier)
    _tokenizer_folder(tmp_path, eos_ids=eos_ids)
    tokenizer = PretrainedTokenizer.from_folder(tmp_path)
    assert list(tokenizer.eos_ids) == eos_ids
    got = generate(ours, tokens, NEW, prompt_mask=mask, pad_symbol=0, **tokenizer.generation_arguments())
    expected = _hf_generate(theirs, tokens, mask, eos_ids)
    ours_rows = _stopped_rows(got[:, tokens.size(1) :], set(eos_ids))
    assert ours_rows == _stopped_rows(expected, set(eos_ids))
    assert {row[-1] for row in ours_rows[:2]} == set(eos_ids)
    # token for token, the padding after each row's end included (transformers stops once every row has ended)
    generated = got[:, tokens.size(1) :]
    assert torch.equal(generated[:, : expected.size(1)], expected)
    assert (generated[:, expected.size(1) :] == 0).all()
