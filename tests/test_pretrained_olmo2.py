"""OLMo 2 (``Olmo2ForCausalLM``) checkpoint folders against transformers (issue 44): tiny random models from its
own config class (no download): logits on a left-padded batch (float32 within 1e-5 x max|logit|, float64 within
1e-10, bfloat16 bit for bit), each of OLMo 2's blocks matters there (the norm after the sub-layers only, QK-norm
over the whole projection, the gain and the rotation in float32), greedy generation with our cache equal token for
token (float32 and bfloat16), gradients equal, saving back both ways, the blocks refused where they describe no
model, and ``train lm --init`` fine-tuning an OLMo 2 folder and resuming exactly (docs/pretrained.md,
docs/lm_blocks.md)."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import torch
from olmo_helpers import load_memory_rise, olmo_model, olmo_pair
from pretrained_helpers import (
    assert_gradients_equal,
    assert_logits_close,
    hf_logits,
    left_padded_batch,
    our_greedy,
    our_logits,
    reweighted,
    their_greedy,
)

from transformer.lm import LMConfig, TransformerLM, build_lm
from transformer.lm.pretrained import PretrainedFormatError, save_pretrained
from transformer.lm.pretrained.supported import ARCHITECTURES, architecture_for

transformers = pytest.importorskip("transformers")

CASES = {
    "gqa": {},
    "bias-tied-head_dim-mqa": dict(attention_bias=True, tie_word_embeddings=True, head_dim=12, num_key_value_heads=1),
    "llama3-rope": dict(
        rope_parameters={"rope_type": "llama3", "rope_theta": 1000.0, "factor": 4.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8},
    ),
}  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_equal_transformers(tmp_path, case, dtype):
    theirs, ours = olmo_pair(transformers, tmp_path, "olmo2", dtype, **CASES[case])
    assert ours.pretrained_origin.architecture == "Olmo2ForCausalLM" and ours.weights_dtype() == dtype
    c = ours.config
    assert (c.pre_sublayer_norm, c.post_sublayer_norm, c.qk_norm_scope) == (False, True, "projection")
    assert ours.layers[0].self_attn.q_norm.features == c.n_heads * c.d_k  # one norm over every head
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask, dtype)


def test_bfloat16_logits_are_transformers_bit_for_bit(tmp_path):
    theirs, ours = olmo_pair(transformers, tmp_path, "olmo2", torch.bfloat16)
    assert ours.weights_dtype() == torch.bfloat16 and ours.rotary.inv_freq.dtype == torch.float32
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert torch.equal(our_logits(ours, tokens, mask)[mask], hf_logits(theirs, tokens, mask)[mask])


def _rebuilt(ours, **fields):
    other = build_lm(dataclasses.replace(ours.config, **fields)).to(ours.weights_dtype()).eval()
    state = {k: v for k, v in ours.state_dict().items() if k in other.state_dict()}
    other.load_state_dict(state, strict=False)
    return other


@pytest.mark.parametrize(
    "fields",
    [dict(pre_sublayer_norm=True), dict(qk_norm_scope="head"), dict(float32_gain_and_rotation=False)],
    ids=["norm-before-too", "qk-norm-per-head", "gain-and-rotation-rounded-first"],
)
def test_each_block_of_olmo2_matters_here(tmp_path, fields):
    """Another choice of each OLMo block moves the logits far beyond the tolerance above (the float32 gain and
    rotation in bfloat16, where they differ; the norms in float32): the parity tests see each of them."""
    dtype = torch.bfloat16 if "float32_gain_and_rotation" in fields else torch.float32
    theirs, ours = olmo_pair(transformers, tmp_path, "olmo2", dtype)
    if "qk_norm_scope" in fields:  # per-head norms of width d_k: their gains are the first d_k of the projection's
        state = ours.state_dict()
        for name in [n for n in state if n.endswith(("q_norm.weight", "k_norm.weight"))]:
            state[name] = state[name][: ours.config.d_k]
        other = build_lm(dataclasses.replace(ours.config, **fields)).eval()
        other.load_state_dict({k: v for k, v in state.items() if k in other.state_dict()}, strict=False)
    else:
        other = _rebuilt(ours, **fields)
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        expected = hf_logits(theirs, tokens, mask)
        moved = (our_logits(other, tokens, mask) - expected)[mask].abs().max().item()
    assert moved > 100 * 1e-5 * expected.abs().max().item() if dtype == torch.float32 else moved >= 2**-4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_greedy_generation_with_our_cache_gives_transformers_tokens(tmp_path, dtype):
    theirs, ours = olmo_pair(transformers, tmp_path, "olmo2", dtype)
    tokens, mask = left_padded_batch(steps=7, pads=(0, 2, 4))
    expected = their_greedy(theirs, tokens, mask, 10)
    assert torch.equal(our_greedy(ours, tokens, mask, 10), expected)


def test_gradients_of_a_loss_equal_transformers(tmp_path):
    theirs, ours = olmo_pair(transformers, tmp_path, "olmo2", torch.float64)
    assert_gradients_equal(theirs, ours, "Olmo2ForCausalLM", every_tensor=True)


def test_theirs_to_ours_to_theirs_keeps_the_logits(tmp_path):
    theirs, ours = olmo_pair(transformers, tmp_path / "theirs", "olmo2", torch.float64, attention_bias=True)
    folder = ours.save_pretrained(tmp_path / "ours")
    again = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()
    assert type(again).__name__ == "Olmo2ForCausalLM" and again.dtype == torch.float64
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(hf_logits(again, tokens, mask), hf_logits(theirs, tokens, mask), mask, torch.float64)


def test_ours_saved_is_loaded_by_transformers_with_the_same_logits(tmp_path):
    """A model of ours (its own random weights; the folder forgotten), written as the architecture its config alone
    chooses: OLMo 2, the only one that computes it."""
    _, ours = olmo_pair(transformers, tmp_path / "theirs", "olmo2", torch.float64)
    reweighted(ours)
    assert architecture_for(ours.config).name == "Olmo2ForCausalLM"
    folder = ours.save_pretrained(tmp_path / "ours")
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["Olmo2ForCausalLM"]
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask, torch.float64)


def test_a_llama_config_is_not_written_as_olmo2_nor_olmo2_as_llama(tmp_path):
    _, ours = olmo_pair(transformers, tmp_path / "theirs", "olmo2")
    with pytest.raises(PretrainedFormatError, match=r"cannot be written as LlamaForCausalLM: qk_norm=True"):
        save_pretrained(ours, tmp_path / "as-llama", architecture="LlamaForCausalLM")
    llama = dataclasses.replace(ours.config, qk_norm=False, qk_norm_scope="head", pre_sublayer_norm=True,
                                post_sublayer_norm=False, float32_gain_and_rotation=False)  # fmt: skip
    with pytest.raises(PretrainedFormatError, match=r"cannot be written as Olmo2ForCausalLM: .*pre_sublayer_norm=True"):
        ARCHITECTURES["Olmo2ForCausalLM"].writable(llama)


def test_lmconfig_refuses_olmo_blocks_that_describe_no_model():
    base = dict(vocab=20, n_layers=1, d_model=16, d_ff=16, n_heads=2)
    with pytest.raises(ValueError, match=r"pre_sublayer_norm=False .* needs post_sublayer_norm=True"):
        LMConfig(**base, pre_sublayer_norm=False)
    olmo = dict(base, pre_sublayer_norm=False, post_sublayer_norm=True)
    LMConfig(**olmo)  # OLMo 2's layer: accepted; with the post-norm placement it is no layer of the docs: refused
    with pytest.raises(ValueError, match=r"pre_sublayer_norm=False .* needs .*norm_placement='pre'.*got .*'post'"):
        LMConfig(**olmo, norm_placement="post")
    with pytest.raises(ValueError, match=r"qk_norm_scope='projection' says what QK-norm normalises, and qk_norm=False"):
        LMConfig(**base, qk_norm_scope="projection")
    with pytest.raises(ValueError, match=r"qk_norm_scope must be 'head' or 'projection', got qk_norm_scope='all'"):
        LMConfig(**base, qk_norm=True, qk_norm_scope="all")
    with pytest.raises(ValueError, match=r"float32_gain_and_rotation=True .* needs norm='rms'.*got norm='layer'"):
        LMConfig(**base, float32_gain_and_rotation=True)
    with pytest.raises(ValueError, match=r"pre_sublayer_norm must be a bool, got pre_sublayer_norm=0"):
        LMConfig(**base, pre_sublayer_norm=0)


def test_the_whole_projection_norm_names_a_projection_of_the_wrong_width():
    """The contracts name the norm's width: a query projection that is not n_heads * d_k wide fails there."""
    import transformer as T

    config = LMConfig(vocab=20, n_layers=1, d_model=32, d_ff=16, n_heads=4, positional_encoding="rotary", norm="rms",
                      qk_norm=True, qk_norm_scope="projection")  # fmt: skip
    attention = build_lm(config).layers[0].self_attn
    with pytest.raises(T.TypeCheckError, match=r"RMSNorm.forward: argument 'x'.*self.features=32"):
        attention._whole(attention.q_norm, torch.randn(1, 3, 5, 8))


@pytest.fixture(scope="module")
def olmo2_folder(tmp_path_factory):
    from test_cli_pretrained import WORDS, _write_tokenizer

    folder = tmp_path_factory.mktemp("olmo2") / "model"
    folder.mkdir(parents=True)
    config = LMConfig(
        vocab=len(WORDS) + 3, n_layers=2, d_model=32, d_ff=24, n_heads=4, n_kv_heads=2, max_len=64,
        positional_encoding="rotary", norm="rms", activation="silu", ffn_gated=True, qkv_bias=False, out_bias=False,
        ffn_bias=False, lm_head_bias=False, embedding_scale=1.0, pad_id=None, dropout=0.0, attention_dropout=0.0,
        ffn_hidden_dropout=False, qk_norm=True, qk_norm_scope="projection", pre_sublayer_norm=False,
        post_sublayer_norm=True, float32_gain_and_rotation=True, layer_norm_eps=1e-5,
    )  # fmt: skip
    torch.manual_seed(0)
    build_lm(config).save_pretrained(folder)
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["Olmo2ForCausalLM"]
    _write_tokenizer(folder)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 1}))
    return folder


def test_train_lm_init_fine_tunes_an_olmo2_folder_and_resumes_exactly(olmo2_folder, tmp_path, capsys):
    from safetensors.torch import load_file
    from test_cli_pretrained import TRAIN

    from transformer.cli import main

    corpus = tmp_path / "text.txt"
    corpus.write_text("\n".join(["def add ( a , b ) : return a + b", "the box is the value of the self"] * 40) + "\n")
    straight, split = tmp_path / "straight", tmp_path / "split"
    base = ["train", "lm", "--init", str(olmo2_folder), "--text", str(corpus), "--eval-every", "2", *TRAIN]
    base += ["--lr", "1e-3"]
    assert main([*base, "--steps", "4", "--out", str(straight)]) == 0
    assert "pretrained Olmo2ForCausalLM" in capsys.readouterr().out
    assert main([*base, "--steps", "2", "--out", str(split)]) == 0
    assert main([*base, "--steps", "4", "--out", str(split), "--resume"]) == 0
    assert f"resumed from {split} at step 2" in capsys.readouterr().out
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    pretrained = TransformerLM.from_pretrained(olmo2_folder)
    assert not torch.equal(a["layers.0.self_attn.q_norm.weight"], pretrained.layers[0].self_attn.q_norm.weight)
    assert "layers.0.sublayer.0.norm.weight" not in a  # no norm before the sub-layers
    histories = [json.loads((d / "state.json").read_text())["history"] for d in (straight, split)]
    assert histories[0] == histories[1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmHWM from /proc/self/status")
def test_loading_an_olmo2_folder_keeps_the_memory_bound(tmp_path):
    """docs/pretrained.md's bound for every architecture: the peak resident memory while from_pretrained loads a
    folder (about 150 MiB here, the embedding and head half of it) rises at most 1.3x the checkpoint."""
    config = LMConfig(
        vocab=32000, n_layers=2, d_model=512, d_ff=1024, n_heads=8, n_kv_heads=2, max_len=2048, dropout=0.0,
        attention_dropout=0.0, norm="rms", positional_encoding="rotary", embedding_scale=1.0, activation="silu",
        ffn_gated=True, ffn_hidden_dropout=False, qkv_bias=False, out_bias=False, ffn_bias=False, lm_head_bias=False,
        pad_id=None, qk_norm=True, qk_norm_scope="projection", pre_sublayer_norm=False, post_sublayer_norm=True,
        float32_gain_and_rotation=True,
    )  # fmt: skip
    ratio, _ = load_memory_rise(config, tmp_path / "olmo2")
    assert json.loads((tmp_path / "olmo2" / "config.json").read_text())["architectures"] == ["Olmo2ForCausalLM"]
    assert ratio <= 1.3, f"peak rise {ratio:.3f}x the checkpoint"


def test_a_folder_without_the_optional_fields_reads_transformers_defaults(tmp_path):
    """Fields a config.json may leave out read as transformers' olmo2 config fills them in (rms_norm_eps 1e-5,
    attention_bias false, an untied head, max_position_embeddings, silu), with its own
    model, loaded from the same edited folder, as the oracle."""
    olmo_model(transformers, "olmo2", torch.float64).save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    config = json.loads(path.read_text())
    for field in ("rms_norm_eps", "attention_bias", "tie_word_embeddings", "max_position_embeddings", "hidden_act"):
        config.pop(field)
    path.write_text(json.dumps(config))
    theirs = transformers.AutoModelForCausalLM.from_pretrained(path.parent, attn_implementation="sdpa").eval()
    theirs.config._experts_implementation = "eager"
    ours = TransformerLM.from_pretrained(tmp_path)
    assert ours.config.layer_norm_eps == theirs.config.rms_norm_eps == 1e-5
    assert ours.config.max_len == theirs.config.max_position_embeddings and not ours.config.tie_weights
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask, torch.float64)


def test_a_fine_tune_exports_as_olmo2_and_transformers_computes_our_logits(olmo2_folder, tmp_path, capsys):
    """``typed-transformer export`` writes a ``train lm --init`` fine-tune of the folder back as Olmo2ForCausalLM, which
    transformers loads to our logits (float32 within 1e-5 x max|logit|)."""
    from fine_tune_helpers import assert_fine_tune_exports_as
    from olmo_helpers import skip_unless_transformers_builds

    skip_unless_transformers_builds(transformers, "Olmo2Config")
    assert_fine_tune_exports_as(transformers, "Olmo2ForCausalLM", olmo2_folder, tmp_path)
