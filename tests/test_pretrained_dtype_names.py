"""The dtype of a loaded checkpoint folder, named as transformers names it: ``from_pretrained(dtype=...)`` takes a
torch dtype, the names ``getattr(torch, name)`` gives a weight's dtype for (``"bfloat16"``, ``"half"``, ...) and
``"auto"`` (the folder's own: ``config.json``'s ``dtype``, else the tensors'), as transformers' ``from_pretrained``
does; ``"fp16"``, ``"bf16"`` (transformers refuses them too), an integer dtype or any other value is refused with a
ValueError naming the argument, the value and the accepted names, before the folder is read. The command line's
``generate --model DIR --dtype`` and ``train lm --init DIR --dtype`` take the same names."""

from __future__ import annotations

import json

import pytest
import torch

from transformer.common.dtypes import DTYPE_ARGUMENT_NAMES, WEIGHT_DTYPE_NAMES, dtype_argument
from transformer.lm import LMConfig, TransformerLM, build_lm
from transformer.lm.pretrained import load_pretrained

CONFIG = dict(
    vocab=23, n_layers=1, d_model=16, d_ff=32, n_heads=2, n_kv_heads=1, max_len=32, positional_encoding="rotary",
    norm="rms", activation="silu", ffn_gated=True, qkv_bias=False, out_bias=False, ffn_bias=False,
    lm_head_bias=False, tie_weights=False, embedding_scale=1.0, pad_id=None, dropout=0.0, attention_dropout=0.0,
    ffn_hidden_dropout=False,
)  # fmt: skip


def _folder(path, dtype=torch.bfloat16):
    torch.manual_seed(0)
    return build_lm(LMConfig(**CONFIG)).to(dtype).save_pretrained(path)


@pytest.fixture(scope="module")
def bf16_folder(tmp_path_factory):
    return _folder(tmp_path_factory.mktemp("bf16") / "model")


def test_the_names_are_transformers_torch_attribute_names():
    transformers = pytest.importorskip("transformers")
    del transformers  # its rule: a str other than "auto" must be hasattr(torch, name) (modeling_utils._get_dtype)
    for name, dtype in WEIGHT_DTYPE_NAMES.items():
        assert getattr(torch, name) is dtype
    assert DTYPE_ARGUMENT_NAMES[0] == "auto" and set(DTYPE_ARGUMENT_NAMES[1:]) == set(WEIGHT_DTYPE_NAMES)
    for refused in ("fp16", "bf16", "fp32"):
        assert not hasattr(torch, refused)


@pytest.mark.parametrize("name", list(WEIGHT_DTYPE_NAMES))
def test_every_accepted_name_loads_the_weights_in_its_dtype(bf16_folder, name):
    model = TransformerLM.from_pretrained(bf16_folder, dtype=name)
    expected = WEIGHT_DTYPE_NAMES[name]
    assert {p.dtype for p in model.parameters()} == {expected}
    reference = load_pretrained(bf16_folder, dtype=expected)  # the name loads what its torch dtype loads
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters(), strict=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_a_torch_dtype_is_taken_as_it_is(bf16_folder, dtype):
    assert TransformerLM.from_pretrained(bf16_folder, dtype=dtype).weights_dtype() == dtype


@pytest.mark.parametrize("folder_dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_auto_and_none_load_the_folders_dtype(tmp_path, folder_dtype):
    folder = _folder(tmp_path / "m", folder_dtype)
    assert json.loads((folder / "config.json").read_text())["dtype"] == str(folder_dtype).removeprefix("torch.")
    assert TransformerLM.from_pretrained(folder, dtype="auto").weights_dtype() == folder_dtype
    assert TransformerLM.from_pretrained(folder).weights_dtype() == folder_dtype


def test_auto_follows_config_json_over_the_tensors_and_the_tensors_without_it(tmp_path):
    folder = _folder(tmp_path / "m", torch.bfloat16)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "dtype": "float16"}))  # config.json decides
    assert load_pretrained(folder, dtype="auto").weights_dtype() == torch.float16
    del config["dtype"]
    (folder / "config.json").write_text(json.dumps({**config, "torch_dtype": "float64"}))  # transformers 4's field
    assert load_pretrained(folder, dtype="auto").weights_dtype() == torch.float64
    (folder / "config.json").write_text(json.dumps(config))  # no dtype: the tensors', as transformers reads them
    assert load_pretrained(folder, dtype="auto").weights_dtype() == torch.bfloat16


@pytest.mark.parametrize(
    ("value", "hint"),
    [("fp16", "did you mean 'float16'?"), ("bf16", "did you mean 'bfloat16'?"), ("int8", ""), ("Auto", ""),
     (torch.int8, ""), (torch.float8_e4m3fn, ""), (16, "")],
)  # fmt: skip
def test_other_values_are_refused_naming_the_argument_the_value_and_the_accepted_names(tmp_path, value, hint):
    with pytest.raises(ValueError) as caught:
        load_pretrained(tmp_path / "never-read", dtype=value)  # refused before the folder is looked at
    message = str(caught.value)
    assert message.startswith("from_pretrained: argument 'dtype' must be None, one of the names 'auto', 'float32'")
    assert f"got dtype={value!r}" in message and "'bfloat16'" in message and "torch.bfloat16" in message
    assert hint in message
    with pytest.raises(ValueError, match="argument 'dtype'"):
        TransformerLM.from_pretrained(tmp_path, dtype=value)


def test_dtype_argument_names_its_caller_and_argument():
    assert dtype_argument("f", "d", "half") is torch.float16 and dtype_argument("f", "d", "auto") is None
    with pytest.raises(ValueError, match=r"^g: argument 'precision' must be .* got precision='fp32' \(did you mean"):
        dtype_argument("g", "precision", "fp32")
