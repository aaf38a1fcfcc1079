"""Reading and writing Hugging Face checkpoint folders without transformers: what a folder must hold, and one clear
error (PretrainedFormatError, a ValueError) naming the file and the field or tensor for each way it can be wrong.

The folders are written here by our own save_pretrained, then broken on purpose; parity with transformers itself
is tests/test_pretrained_parity.py's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from transformer.lm import LMConfig, TransformerLM, build_lm
from transformer.lm.pretrained import PretrainedFormatError, load_pretrained, save_pretrained
from transformer.lm.pretrained import files as files_module
from transformer.lm.pretrained.supported import ARCHITECTURES


def llama_config(**fields) -> LMConfig:
    base = dict(
        vocab=53, n_layers=2, d_model=32, d_ff=48, n_heads=4, n_kv_heads=2, max_len=40, dropout=0.0,
        attention_dropout=0.0, norm="rms", layer_norm_eps=1e-5, positional_encoding="rotary", embedding_scale=1.0,
        activation="silu", ffn_gated=True, ffn_hidden_dropout=False, qkv_bias=False, out_bias=False, ffn_bias=False,
        lm_head_bias=False, pad_id=None,
    )  # fmt: skip
    return LMConfig(**{**base, **fields})


def gpt2_config(**fields) -> LMConfig:
    base = dict(
        vocab=53, n_layers=2, d_model=32, d_ff=128, n_heads=4, max_len=40, dropout=0.0, attention_dropout=0.0,
        norm="layer", layer_norm_eps=1e-5, positional_encoding="learned", embedding_scale=1.0, activation="gelu_tanh",
        ffn_hidden_dropout=False, tie_weights=True, lm_head_bias=False, pad_id=None,
    )  # fmt: skip
    return LMConfig(**{**base, **fields})


def _saved(tmp_path, config, name="model"):
    torch.manual_seed(0)
    model = build_lm(config).eval()
    return model.save_pretrained(tmp_path / name), model


def _tensors(path):
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k).clone() for k in f.keys()}


def _edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def _refused(folder, *fragments):
    with pytest.raises(PretrainedFormatError) as caught:
        load_pretrained(folder)
    for fragment in fragments:
        assert fragment in str(caught.value), f"{fragment!r} not in: {caught.value}"
    assert isinstance(caught.value, ValueError)
    return str(caught.value)


# ---------------------------------------------------------------------------- what loads
@pytest.mark.parametrize("make", [llama_config, gpt2_config], ids=["llama", "gpt2"])
def test_a_saved_model_loads_back_with_its_config_and_weights(tmp_path, make):
    folder, model = _saved(tmp_path, make())
    loaded = TransformerLM.from_pretrained(folder)
    assert loaded.config == model.config
    assert not loaded.training
    ours, theirs = model.state_dict(), loaded.state_dict()
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key
    tokens = torch.randint(0, 53, (2, 9))
    torch.testing.assert_close(loaded.logits(tokens), model.logits(tokens), rtol=0, atol=0)


def test_a_tied_head_is_written_once_and_loads_as_the_embedding_itself(tmp_path):
    folder, _ = _saved(tmp_path, llama_config(tie_weights=True))
    names = set(_tensors(folder / "model.safetensors"))
    assert "model.embed_tokens.weight" in names and "lm_head.weight" not in names
    loaded = load_pretrained(folder)
    assert loaded.generator.proj.weight is loaded.embed[0].lut.weight
    assert len(list(loaded.parameters())) == len(dict(loaded.named_parameters()))


def test_gpt2_conv1d_weights_are_written_transposed_and_fused(tmp_path):
    folder, model = _saved(tmp_path, gpt2_config())
    stored = _tensors(folder / "model.safetensors")
    attn = model.layers[1].self_attn
    expected = torch.cat([attn.q_proj.weight.T, attn.k_proj.weight.T, attn.v_proj.weight.T], dim=1)
    assert torch.equal(stored["transformer.h.1.attn.c_attn.weight"], expected)
    assert torch.equal(stored["transformer.h.1.mlp.c_fc.weight"], model.layers[1].feed_forward.w_1.weight.T)
    assert torch.equal(stored["transformer.wpe.weight"], model.embed[1].pe[0])


def test_a_file_saved_from_the_base_model_loads_without_its_prefix(tmp_path):
    folder, model = _saved(tmp_path, gpt2_config())
    stored = _tensors(folder / "model.safetensors")
    stored = {k.removeprefix("transformer."): v for k, v in stored.items()}
    stored["h.0.attn.bias"] = torch.ones(1, 1, 40, 40).tril()  # an old file's causal-mask buffer
    save_file(stored, str(folder / "model.safetensors"))
    loaded = load_pretrained(folder)
    assert torch.equal(loaded.layers[0].self_attn.q_proj.weight, model.layers[0].self_attn.q_proj.weight)


def test_an_old_llama_files_rotary_buffers_are_recognised_and_nothing_else(tmp_path):
    folder, model = _saved(tmp_path, llama_config())
    tensors = _tensors(folder / "model.safetensors")
    tensors["model.layers.1.self_attn.rotary_emb.inv_freq"] = torch.ones(4)  # a buffer of old files, not a weight
    save_file(tensors, str(folder / "model.safetensors"))
    assert torch.equal(load_pretrained(folder).norm.weight, model.norm.weight)
    tensors["model.layers.1.self_attn.rotary_emb.scale"] = torch.ones(4)
    save_file(tensors, str(folder / "model.safetensors"))
    _refused(folder, "unexpected tensor 'model.layers.1.self_attn.rotary_emb.scale'")


def test_dtype_is_the_checkpoints_unless_asked(tmp_path):
    folder, model = _saved(tmp_path, llama_config())
    assert json.loads((folder / "config.json").read_text())["dtype"] == "float32"
    assert load_pretrained(folder).embed[0].lut.weight.dtype == torch.float32
    as64 = load_pretrained(folder, dtype=torch.float64)
    assert {p.dtype for p in as64.parameters()} == {torch.float64}
    model.to(torch.bfloat16).save_pretrained(folder)
    assert {p.dtype for p in load_pretrained(folder).parameters()} == {torch.bfloat16}
    assert {p.dtype for p in load_pretrained(folder, dtype="float32").parameters()} == {torch.float32}  # a name
    for wrong in (torch.int64, "fp32", torch.float8_e4m3fn):  # tests/test_pretrained_dtype_names.py: every name
        with pytest.raises(ValueError, match=r"argument 'dtype' must be None, one of the names 'auto'.*got dtype="):
            load_pretrained(folder, dtype=wrong)


def _sharded(tmp_path):
    """A folder of two shards and their index; and the model it holds."""
    folder, model = _saved(tmp_path, llama_config())
    tensors = _tensors(folder / "model.safetensors")
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[:7], "model-00002-of-00002.safetensors": names[7:]}
    for shard, members in shards.items():
        save_file({n: tensors[n] for n in members}, str(folder / shard), metadata={"format": "pt"})
    (folder / "model.safetensors").unlink()
    index = {"metadata": {}, "weight_map": {n: s for s, members in shards.items() for n in members}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder, shards, model


def test_sharded_folders_load_through_their_index(tmp_path):
    folder, _, model = _sharded(tmp_path)
    loaded = load_pretrained(folder)
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_model_safetensors_is_read_before_an_index_beside_it(tmp_path):
    """As transformers does: a folder with both reads ``model.safetensors`` (here another model's shards and index
    stay beside it)."""
    folder, _, sharded = _sharded(tmp_path)
    torch.manual_seed(1)
    single = build_lm(sharded.config).eval()
    shutil.copy(single.save_pretrained(tmp_path / "single") / "model.safetensors", folder / "model.safetensors")
    assert not torch.equal(single.norm.weight, sharded.norm.weight) or not torch.equal(
        single.generator.proj.weight, sharded.generator.proj.weight
    )
    loaded = load_pretrained(folder)
    for key, value in single.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_save_pretrained_writes_the_architecture_it_is_asked_for(tmp_path):
    folder, model = _saved(tmp_path, llama_config())
    loaded = load_pretrained(folder)
    assert loaded.pretrained_origin.architecture == "LlamaForCausalLM"
    out = loaded.save_pretrained(tmp_path / "as-mistral", architecture="MistralForCausalLM")
    assert json.loads((out / "config.json").read_text())["architectures"] == ["MistralForCausalLM"]
    again = load_pretrained(out)
    assert again.pretrained_origin.architecture == "MistralForCausalLM"
    for key, value in model.state_dict().items():
        assert torch.equal(again.state_dict()[key], value), key


def test_saving_over_a_sharded_folder_removes_its_shards_and_index(tmp_path):
    folder, shards, model = _sharded(tmp_path)
    (folder / "notes.txt").write_text("kept")
    loaded = load_pretrained(folder)
    with torch.no_grad():
        loaded.norm.weight.add_(1.0)
    loaded.save_pretrained(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "notes.txt"]
    assert torch.equal(load_pretrained(folder).norm.weight, model.norm.weight + 1.0)


def test_each_tensor_is_read_once_in_blocks_of_rows(tmp_path, monkeypatch):
    folder, _ = _saved(tmp_path, llama_config())
    monkeypatch.setattr(files_module, "BLOCK_BYTES", 32 * 4 * 5)  # five rows of a (*, 32) float32 tensor a block
    read = {}  # name -> the rows read, in order
    real = files_module.safe_open

    class Recording:
        def __init__(self, *args, **kwargs):
            self.handle = real(*args, **kwargs)

        def __enter__(self):
            self.inner = self.handle.__enter__()
            return self

        def __exit__(self, *exc):
            return self.handle.__exit__(*exc)

        def get_tensor(self, name):
            tensor = self.inner.get_tensor(name)
            read.setdefault(name, []).extend(range(tensor.shape[0]) if tensor.dim() else [0])
            return tensor

        def get_slice(self, name):
            inner = self.inner.get_slice(name)

            class Rows:
                def __getitem__(self, rows):
                    read.setdefault(name, []).extend(range(*rows.indices(inner.get_shape()[0])))
                    return inner[rows]

                def __getattr__(self, attribute):  # get_shape, get_dtype: the header, not the data
                    return getattr(inner, attribute)

            return Rows()

        def __getattr__(self, name):
            return getattr(self.inner, name)

    monkeypatch.setattr(files_module, "safe_open", Recording)
    loaded = load_pretrained(folder)
    stored = _tensors(folder / "model.safetensors")
    assert read.keys() == stored.keys()
    for name, rows in read.items():
        assert rows == list(range(stored[name].shape[0])), name  # every row once, in order
    assert torch.equal(loaded.embed[0].lut.weight, stored["model.embed_tokens.weight"])  # 53 rows: 11 blocks


def test_stacked_tensors_load_block_by_block_across_our_tensors(tmp_path, monkeypatch):
    """Phi-3's qkv_proj is q (32 rows), k and v (16 each) one above the other: blocks of 5 rows straddle them."""
    config = llama_config(rope_fraction=0.5, sliding_window=6)
    folder, model = _saved(tmp_path, config)
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["Phi3ForCausalLM"]
    stored = _tensors(folder / "model.safetensors")
    attn = model.layers[0].self_attn
    qkv = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
    assert torch.equal(stored["model.layers.0.self_attn.qkv_proj.weight"], qkv)
    monkeypatch.setattr(files_module, "BLOCK_BYTES", 32 * 4 * 5)
    loaded = load_pretrained(folder)
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_loading_needs_no_transformers(tmp_path):
    folder, model = _saved(tmp_path, llama_config(tie_weights=True))
    torch.save(model.logits(torch.arange(6)[None]), tmp_path / "expected.pt")
    script = textwrap.dedent(f"""
        import sys
        sys.modules["transformers"] = None  # any import of transformers now raises ImportError
        import torch
        from transformer.lm import TransformerLM
        model = TransformerLM.from_pretrained({str(folder)!r})
        torch.testing.assert_close(model.logits(torch.arange(6)[None]), torch.load({str(tmp_path / "expected.pt")!r}))
        model.save_pretrained({str(tmp_path / "again")!r})
        assert "transformers" not in {{m.split(".")[0] for m in sys.modules if sys.modules[m] is not None}}
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-2000:]


# ---------------------------------------------------------------------------- the folder and config.json
def test_a_missing_folder_or_config_is_named(tmp_path):
    _refused(tmp_path / "nowhere", "nowhere", "not a directory")
    folder, _ = _saved(tmp_path, llama_config())
    (folder / "config.json").write_text("{not json")
    _refused(folder, "config.json", "not valid JSON")
    (folder / "config.json").unlink()
    _refused(folder, "config.json", "no such file")


def test_an_unknown_architecture_is_refused_listing_the_supported(tmp_path):
    folder, _ = _saved(tmp_path, llama_config())
    _edit_config(folder, architectures=["FalconForCausalLM"])
    message = _refused(folder, "config.json", "'FalconForCausalLM'", "architectures")
    assert all(name in message for name in ARCHITECTURES)
    _edit_config(folder, architectures=None)
    _refused(folder, "config.json", "'architectures'")


LLAMA_OPTIONS = [
    ({"rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0}}, "rope_parameters.rope_type"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [1]}}, "mrope_section"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}}, "partial_rot"),
    ({"rope_parameters": None, "rope_scaling": {"type": "longrope", "factor": 2.0}}, "rope_scaling.rope_type"),
    (
        {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 2.0, "truncate": "no"}},
        "rope_parameters.truncate",  # not a bool (false is read since gpt-oss: LMConfig's rope_yarn_truncate)
    ),
    ({"hidden_act": "gelu_fast"}, "hidden_act"),
    ({"rms_norm_eps": -1.0}, "rms_norm_eps"),
    ({"num_key_value_heads": 3}, "n_kv_heads"),
    ({"pad_token_id": 99}, "pad_id"),
]


@pytest.mark.parametrize("changes,field", LLAMA_OPTIONS, ids=[f for _, f in LLAMA_OPTIONS])
def test_an_option_not_implemented_is_refused_naming_the_field(tmp_path, changes, field):
    folder, _ = _saved(tmp_path, llama_config())
    _edit_config(folder, **changes)
    _refused(folder, "config.json", field)


GPT2_OPTIONS = [
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
    ({"reorder_and_upcast_attn": True}, "reorder_and_upcast_attn"),
    ({"add_cross_attention": True}, "add_cross_attention"),
    ({"embd_pdrop": 0.2}, "embd_pdrop"),
    ({"activation_function": "gelu_10"}, "activation_function"),
]


@pytest.mark.parametrize("changes,field", GPT2_OPTIONS, ids=[f for _, f in GPT2_OPTIONS])
def test_a_gpt2_option_not_implemented_is_refused_naming_the_field(tmp_path, changes, field):
    folder, _ = _saved(tmp_path, gpt2_config())
    _edit_config(folder, **changes)
    _refused(folder, "config.json", field)


def test_qwen2_windows_on_some_layers_only_are_refused(tmp_path):
    folder, _ = _saved(tmp_path, llama_config(qkv_bias=True, sliding_window=5), "qwen")
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    assert load_pretrained(folder).config.sliding_window == 5
    _edit_config(folder, layer_types=["full_attention", "sliding_attention"])
    _refused(folder, "config.json", "layer_types")
    _edit_config(folder, layer_types=None, max_window_layers=1)
    _refused(folder, "config.json", "max_window_layers")
    _edit_config(folder, use_sliding_window=False)
    assert load_pretrained(folder).config.sliding_window is None


# ---------------------------------------------------------------------------- the tensors
def test_a_missing_tensor_is_named(tmp_path):
    folder, _ = _saved(tmp_path, llama_config())
    tensors = _tensors(folder / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(folder / "model.safetensors"))
    _refused(folder, "model.safetensors", "missing tensor 'model.layers.1.mlp.up_proj.weight'", "feed_forward.w_3")


def test_an_unexpected_tensor_is_named(tmp_path):
    folder, _ = _saved(tmp_path, llama_config())
    tensors = _tensors(folder / "model.safetensors")
    tensors["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(32)
    save_file(tensors, str(folder / "model.safetensors"))
    _refused(folder, "model.safetensors", "unexpected tensor 'model.layers.0.self_attn.q_proj.bias'")


def test_a_head_the_config_ties_is_unexpected_in_the_file(tmp_path):
    folder, model = _saved(tmp_path, llama_config())
    _edit_config(folder, tie_word_embeddings=True)
    _refused(folder, "unexpected tensor 'lm_head.weight'")


@pytest.mark.parametrize(
    "name,shape", [("model.layers.0.self_attn.k_proj.weight", (32, 32)), ("model.norm.weight", (31,))]
)
def test_a_misshaped_tensor_is_named_with_both_shapes(tmp_path, name, shape):
    folder, model = _saved(tmp_path, llama_config())
    tensors = _tensors(folder / "model.safetensors")
    expected = list(tensors[name].shape)
    tensors[name] = torch.zeros(shape)
    save_file(tensors, str(folder / "model.safetensors"))
    _refused(folder, "model.safetensors", repr(name), f"shape {list(shape)}", f"expected {expected}")


def test_a_dtype_a_weight_cannot_have_is_named(tmp_path):
    folder, _ = _saved(tmp_path, llama_config())
    tensors = _tensors(folder / "model.safetensors")
    tensors["model.norm.weight"] = torch.ones(32, dtype=torch.int32)
    save_file(tensors, str(folder / "model.safetensors"))
    _refused(folder, "model.safetensors", "'model.norm.weight'", "I32")


@pytest.mark.parametrize("cut", [lambda data: data[:-40], lambda data: data[:6], lambda data: b"\xff" * 64 + data[64:]])
def test_a_truncated_or_corrupt_file_is_named(tmp_path, cut):
    folder, _ = _saved(tmp_path, llama_config())
    path = folder / "model.safetensors"
    path.write_bytes(cut(path.read_bytes()))
    _refused(folder, str(path), "truncated or corrupt")


def test_no_weights_file_is_named(tmp_path):
    folder, _ = _saved(tmp_path, llama_config())
    (folder / "model.safetensors").unlink()
    _refused(folder, "model.safetensors", "model.safetensors.index.json")


def test_a_shard_the_index_names_that_is_absent_is_named(tmp_path):
    folder, shards, _ = _sharded(tmp_path)
    (folder / "model-00002-of-00002.safetensors").unlink()
    _refused(folder, "model.safetensors.index.json", "'model-00002-of-00002.safetensors'")


def test_an_index_and_its_shards_that_disagree_are_named(tmp_path):
    folder, shards, _ = _sharded(tmp_path)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    moved = next(iter(shards["model-00001-of-00002.safetensors"]))
    index["weight_map"][moved] = "model-00002-of-00002.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    _refused(folder, "model-00001-of-00002.safetensors", repr(moved))
    index["weight_map"] = "everything.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    _refused(folder, "model.safetensors.index.json", "weight_map")


# ---------------------------------------------------------------------------- writing
def test_a_config_no_architecture_computes_is_refused_naming_the_field(tmp_path):
    torch.manual_seed(0)
    model = build_lm(llama_config(norm="layer"))
    with pytest.raises(PretrainedFormatError, match="norm='layer'"):
        model.save_pretrained(tmp_path / "x")
    model = build_lm(llama_config(dropout=0.1))
    with pytest.raises(PretrainedFormatError, match=r"LlamaForCausalLM.*dropout=0.1"):
        save_pretrained(model, tmp_path / "x", architecture="LlamaForCausalLM")
    with pytest.raises(PretrainedFormatError, match="'Mamba'.*supported"):
        save_pretrained(model, tmp_path / "x", architecture="Mamba")
    assert not (tmp_path / "x" / "config.json").exists()


def test_a_model_whose_parameters_are_not_its_configs_is_refused(tmp_path):
    model = build_lm(llama_config())
    model.layers[0].feed_forward.w_3 = torch.nn.Linear(32, 50, bias=False)
    with pytest.raises(PretrainedFormatError, match=r"layers\.0\.feed_forward\.w_3\.weight.*\[50, 32\].*\[48, 32\]"):
        model.save_pretrained(tmp_path / "x")
