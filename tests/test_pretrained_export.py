"""``typed-transformer export`` and ``export_pretrained`` (issue 43, "a fine-tune that can leave"): a ``train lm``
checkpoint becomes a folder transformers' ``AutoModelForCausalLM`` and ``AutoTokenizer`` load, computing our logits
(float32, within 1e-5 x max|logit|) and encoding a text to our ids.

The pretrained folder is built here: a tiny Mistral from transformers' own config class with random weights and no
window (so that its config is also a Llama's, and only the recorded origin keeps it a Mistral), a byte-level BPE
``tokenizer.json`` trained here whose post-processor adds ``<s>``, a ``tokenizer_config.json`` with a chat template
and a ``generation_config.json`` with two end ids. The folder is deleted before the fine-tune is exported: what the
export writes comes from the checkpoint."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from pretrained_helpers import hf_model

from transformer.checkpoint import load_checkpoint, save_checkpoint
from transformer.cli import main
from transformer.lm import LMConfig, build_lm
from transformer.model import make_model
from transformer.tasks.hf_export import ORIGIN_ASSET, ExportError, export_pretrained
from transformer.tasks.tokenizer_assets import attach_tokenizer, tokenizer_from_checkpoint, tokenizer_metadata

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

LINES = [
    "def add(a, b): return a + b",
    "the box holds the value of the self",
    "for i in range(3): print(add(i, i))",
]
TEXT = "the value of add(a, b) is a + b"
CHAT = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
TRAIN = ["--block-len", "16", "--max-tokens", "64", "--no-progress", "--warmup", "2", "--lr", "1e-3"]


def _bpe(vocab_size: int):
    """A byte-level BPE tokenizer trained on LINES; its post-processor adds ``<s>`` (id 1) before every text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(LINES * 20, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "text.txt"
    path.write_text("\n".join(LINES * 40) + "\n")
    return str(path)


def write_folder(folder):
    """The pretrained folder described in the module docstring."""
    tok = _bpe(300)
    model = hf_model(transformers, "mistral", vocab_size=tok.get_vocab_size(), sliding_window=None)
    model.save_pretrained(folder)
    tok.save(str(folder / "tokenizer.json"))
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
        "chat_template": CHAT, "model_max_length": 48, "clean_up_tokenization_spaces": False,
    }  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": [2, 7]}))
    return folder


@pytest.fixture(scope="module")
def fine_tune(tmp_path_factory, corpus):
    """A ``train lm --init`` checkpoint of the folder, the folder's own AutoTokenizer (loaded before the folder is
    deleted) and its config.json."""
    root = tmp_path_factory.mktemp("fine_tune")
    folder = write_folder(root / "pretrained")
    original = transformers.AutoTokenizer.from_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    out = root / "run"
    argv = ["train", "lm", "--init", str(folder), "--text", corpus, "--steps", "3", "--out", str(out), *TRAIN]
    assert main(argv) == 0
    weights = {k: v.clone() for k, v in transformers.AutoModelForCausalLM.from_pretrained(folder).state_dict().items()}
    shutil.rmtree(folder)
    return out, original, config, weights


def _assert_same_function(ours, theirs, ids):
    x = torch.tensor([ids])
    with torch.no_grad():
        a, b = ours.logits(x), theirs(input_ids=x).logits
    assert (a - b).abs().max().item() <= 1e-5 * b.abs().max().item()


def test_a_fine_tune_exports_as_its_pretrained_folder_with_its_chat_template(fine_tune, tmp_path, capsys):
    out, original, config, pretrained = fine_tune
    ckpt = load_checkpoint(out)
    assert ORIGIN_ASSET in ckpt.assets and not ckpt.model.training  # eval mode, as from_pretrained returns
    hf_dir = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(out), "--to", str(hf_dir)]) == 0
    assert f"exported {out} to {hf_dir}" in capsys.readouterr().out
    files = {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}
    assert files <= {p.name for p in hf_dir.iterdir()}

    theirs = transformers.AutoModelForCausalLM.from_pretrained(hf_dir)
    assert type(theirs).__name__ == "MistralForCausalLM"  # the original architecture, not the first that maps
    assert not theirs.training
    moved = [k for k, v in theirs.state_dict().items() if not torch.equal(v, pretrained[k])]
    assert moved  # the fine-tuned weights, not the pretrained ones
    ours_tokenizer = tokenizer_from_checkpoint(ckpt)
    ids = ours_tokenizer.encode(TEXT)
    assert ids[0] == 1  # the post-processor's <s>
    assert transformers.PreTrainedTokenizerFast.from_pretrained(out)(TEXT)["input_ids"] == ids  # the checkpoint itself
    _assert_same_function(ckpt.model, theirs, ids)

    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    assert tokenizer(TEXT)["input_ids"] == ids == original(TEXT)["input_ids"]
    assert tokenizer.chat_template == CHAT
    messages = [{"role": "user", "content": "hi"}]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == original.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == "<|user|> hi\n<|assistant|> "
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (1, 2, 0)

    written = json.loads((hf_dir / "config.json").read_text())
    assert {k: written.get(k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")} == {
        k: config.get(k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")
    }
    assert json.loads((hf_dir / "generation_config.json").read_text()) == {"bos_token_id": 1, "eos_token_id": [2, 7]}
    assert theirs.generation_config.eos_token_id == [2, 7]


def test_export_refuses_a_folder_that_holds_files_unless_overwrite_and_never_the_checkpoint(fine_tune, tmp_path):
    out = fine_tune[0]
    target = tmp_path / "taken"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="the folder exists and is not empty .1 entries.: .* --overwrite"):
        export_pretrained(out, target)
    assert (target / "notes.txt").read_text() == "mine"  # untouched
    assert export_pretrained(out, target, overwrite=True) == target
    assert not (target / "notes.txt").exists() and (target / "model.safetensors").is_file()
    for inside in (out, out.parent):
        with pytest.raises(ExportError, match="is the checkpoint .* or holds it"):
            export_pretrained(out, inside, overwrite=True)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ExportError, match="exists and is not a directory"):
        export_pretrained(out, tmp_path / "file")


def test_the_cli_refusals_are_one_line_with_exit_status_2(fine_tune, tmp_path, capsys):
    out = fine_tune[0]
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("x")
    assert main(["export", "--checkpoint", str(out), "--to", str(tmp_path / "taken")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("typed-transformer export: error: --to ") and err.count("\n") == 1
    translation = make_model(11, 11, N=1, d_model=16, d_ff=32, h=2)
    save_checkpoint(tmp_path / "mt", translation, metadata={"task": "copy"})
    assert main(["export", "--checkpoint", str(tmp_path / "mt"), "--to", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "holds a model of kind 'encoder_decoder'" in err and "export writes a language model" in err
    assert not (tmp_path / "a").exists()
    assert main(["export", "--checkpoint", str(tmp_path / "none"), "--to", str(tmp_path / "b")]) == 2
    assert "typed-transformer export: error: " in capsys.readouterr().err
    from transformer.distributed.sharded_checkpoint import SHARDED_FORMAT

    (tmp_path / "sharded").mkdir()
    (tmp_path / "sharded" / "meta.json").write_text(json.dumps({"format": SHARDED_FORMAT}))
    assert main(["export", "--checkpoint", str(tmp_path / "sharded"), "--to", str(tmp_path / "c")]) == 2
    assert "is sharded (train --strategy fsdp): gather it first with `typed-transformer consolidate" in (
        capsys.readouterr().err
    )
    (tmp_path / "link").symlink_to(out)
    with pytest.raises(ExportError, match="is the checkpoint .* or holds it"):
        export_pretrained(out, tmp_path / "link", overwrite=True)  # a link to the checkpoint is the checkpoint
    assert load_checkpoint(out).assets  # still there


def test_a_model_trained_from_scratch_with_a_llama_config_exports_with_our_tokenizer(tmp_path):
    from transformer.data.tokenizers import train_tokenizer

    tok = train_tokenizer(LINES * 20, "bpe", vocab_size=300, min_frequency=2)
    config = LMConfig(
        vocab=tok.vocab_size,
        n_layers=2,
        d_model=32,
        d_ff=64,
        n_heads=4,
        n_kv_heads=2,
        max_len=64,
        dropout=0.1,
        attention_dropout=0.1,
        norm="rms",
        positional_encoding="rotary",
        embedding_scale=1.0,
        activation="silu",
        ffn_gated=True,
        ffn_hidden_dropout=False,
        qkv_bias=False,
        out_bias=False,
        ffn_bias=False,
        lm_head_bias=False,
        pad_id=0,
    )  # fmt: skip (dropout 0.1: a training field Llama has no place for, zeroed on export)
    torch.manual_seed(0)
    model = build_lm(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.normal_(1.0, 0.3)
    attach_tokenizer(model, tok)
    save_checkpoint(tmp_path / "ck", model, metadata={"task": "lm", "tokenizer": tokenizer_metadata(tok)})
    hf_dir = export_pretrained(tmp_path / "ck", tmp_path / "hf")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(hf_dir)
    assert type(theirs).__name__ == "LlamaForCausalLM"
    ids = tok.encode(TEXT)
    _assert_same_function(model.eval(), theirs, ids)
    tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    assert tokenizer(TEXT)["input_ids"] == ids
    assert (tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token) == (
        "<pad>", "<s>", "</s>", "<unk>"
    )  # fmt: skip
    ids_written = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    assert json.loads((hf_dir / "generation_config.json").read_text()) == ids_written
    assert ids_written.items() <= json.loads((hf_dir / "config.json").read_text()).items()


def test_a_train_lm_model_of_our_own_formulation_is_refused_naming_the_closest_architecture(corpus, tmp_path, capsys):
    small = ["--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "32", "--vocab-size", "300", "--steps", "1"]
    out = tmp_path / "scratch"
    assert main(["train", "lm", "--text", corpus, *small, *TRAIN, "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(out), "--to", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "no Hugging Face architecture" in err and "the closest, GPT2LMHeadModel" in err
    assert "positional_encoding='sinusoidal'" in err and err.count("\n") == 1
    assert not (tmp_path / "hf").exists()


def test_a_fine_tune_saved_before_the_origin_was_recorded_exports_from_its_folder_while_it_is_there(corpus, tmp_path):
    """A checkpoint without ``pretrained_origin.json`` (as saved before 2026-12-02) takes the architecture, token ids
    and tokenizer files from the folder its metadata names; once that folder is gone, the export says so. The folder's
    tokenizer is saved here by transformers itself, which writes the chat template as ``chat_template.jinja``."""
    folder = write_folder(tmp_path / "pretrained")
    transformers.AutoTokenizer.from_pretrained(folder).save_pretrained(folder)
    assert (folder / "chat_template.jinja").read_text() == CHAT
    run = tmp_path / "run"
    assert (
        main(["train", "lm", "--init", str(folder), "--text", corpus, "--steps", "1", "--out", str(run), *TRAIN]) == 0
    )
    ckpt = load_checkpoint(run)
    assets = {name: open(ckpt.asset(name), "rb").read() for name in ckpt.assets if name != ORIGIN_ASSET}
    save_checkpoint(tmp_path / "old", ckpt.model, metadata=ckpt.metadata, assets=assets)
    assert ORIGIN_ASSET not in load_checkpoint(tmp_path / "old").assets
    hf_dir = export_pretrained(tmp_path / "old", tmp_path / "hf")
    assert (hf_dir / "chat_template.jinja").read_text() == CHAT
    assert transformers.AutoTokenizer.from_pretrained(hf_dir).chat_template == CHAT
    theirs = transformers.AutoModelForCausalLM.from_pretrained(hf_dir)
    assert type(theirs).__name__ == "MistralForCausalLM"
    _assert_same_function(ckpt.model, theirs, tokenizer_from_checkpoint(ckpt).encode(TEXT))
    shutil.rmtree(folder)
    with pytest.raises(ExportError, match=f"continues the pretrained folder {folder} .train lm --init., which is gone"):
        export_pretrained(tmp_path / "old", tmp_path / "hf2")
    assert not (tmp_path / "hf2").exists()
