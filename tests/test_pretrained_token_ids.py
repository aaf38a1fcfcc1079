"""Which file a checkpoint's end-of-sequence ids come from, on folders whose files disagree, against transformers:
``generation_config.json`` decides alone when it is there (an absent or null ``eos_token_id`` in it means none,
whatever ``config.json`` says: transformers' ``from_pretrained`` builds the generation config from ``config.json``
only when the file is missing), else ``config.json``; ``tokenizer_config.json``'s ``eos_token`` never stops
generation. The oracle is ``AutoModelForCausalLM.from_pretrained(folder).generation_config.eos_token_id`` and where
its ``generate`` stops.
"""

from __future__ import annotations

import json

import pytest
import torch
from pretrained_helpers import hf_model
from test_pretrained_generation import _tokenizer_folder

from transformer.lm import TransformerLM, generate
from transformer.lm.pretrained import PretrainedTokenizer

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

#: generation_config.json's contents (None: no such file) and config.json's eos_token_id; what transformers reads
FOLDERS = [
    pytest.param(None, 9, (9,), id="no-generation-config:config.json"),
    pytest.param({"eos_token_id": 5}, 9, (5,), id="both:generation-config-wins"),
    pytest.param({"eos_token_id": [5, 11]}, 9, (5, 11), id="a-list-wins"),
    pytest.param({"bos_token_id": 1}, 9, (), id="generation-config-without-eos:none"),
    pytest.param({"eos_token_id": None}, 9, (), id="generation-config-null:none"),
    pytest.param({"_from_model_config": True, "bos_token_id": 1}, 9, (), id="from-model-config-flag:still-none"),
    pytest.param(None, None, (), id="neither:none"),
]


def _folder(tmp_path, generation, config_eos):
    model = hf_model(transformers, "llama", seed=4)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["eos_token_id"] = config_eos
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "generation_config.json").unlink()
    if generation is not None:
        (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    _tokenizer_folder(tmp_path)  # tokenizer_config.json names eos_token '</s>' (id 2): never read for stopping
    return tmp_path


def _transformers_eos(folder) -> tuple[int, ...]:
    eos = transformers.AutoModelForCausalLM.from_pretrained(folder).generation_config.eos_token_id
    return () if eos is None else tuple(eos) if isinstance(eos, list) else (eos,)


@pytest.mark.parametrize(("generation", "config_eos", "expected"), FOLDERS)
def test_eos_ids_are_the_file_transformers_reads(tmp_path, generation, config_eos, expected):
    folder = _folder(tmp_path, generation, config_eos)
    assert _transformers_eos(folder) == expected  # the oracle, on this very folder
    tokenizer = PretrainedTokenizer.from_folder(folder)
    assert tokenizer.eos_ids == expected
    assert tokenizer.special_tokens["eos_token"] == ("</s>", 2)  # known, and still not an id generation stops at
    arguments = tokenizer.generation_arguments()
    assert arguments == ({"end_symbol": expected[0], "end_symbols": list(expected[1:])} if expected else {})


def test_generation_stops_where_transformers_stops_when_generation_config_has_no_eos(tmp_path):
    """config.json's eos id is a token the model generates; generation_config.json names none: transformers does
    not stop at it, and neither do we (reading config.json's id, we stopped there)."""
    model = hf_model(transformers, "llama", seed=4)
    prompt = torch.tensor([[5, 6, 7]])
    free = model.generate(input_ids=prompt, max_new_tokens=6, min_new_tokens=6, do_sample=False, eos_token_id=None)
    eos = int(free[0, 4])  # generated at the second step
    folder = _folder(tmp_path, {"bos_token_id": 1}, eos)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()
    expected = theirs.generate(input_ids=prompt, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert expected.size(1) == 9  # not stopped at config.json's id
    ours = TransformerLM.from_pretrained(folder)
    got = generate(ours, prompt, 6, pad_symbol=0, **PretrainedTokenizer.from_folder(folder).generation_arguments())
    assert torch.equal(got, expected)
