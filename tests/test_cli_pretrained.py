"""The command line on a pretrained model's Hugging Face folder: ``generate --model DIR`` continues prompts as
:func:`generate` does in Python, stopping at the end-of-sequence ids of ``generation_config.json``; ``train lm --init
DIR`` continues the model on a text (its first logged loss is the pretrained model's on the first batch), resumes
exactly and refuses the flags of a new model; a bad folder exits 2 with one line naming the file.

The folder is written here: a tiny Llama-shaped model saved with our ``save_pretrained`` and a word-level
``tokenizer.json`` whose id 0 is a frequent word (a loss that left id 0 out as padding would differ)."""

import json

import pytest
import torch
from safetensors.torch import load_file

from transformer.cli import main
from transformer.data.token_batches import token_budget_batches
from transformer.lm import LMConfig, TransformerLM, build_lm
from transformer.lm.generation import generate
from transformer.lm.pretrained import PretrainedTokenizer
from transformer.tasks.pretrained_lm import pretrained_text_tokenizer
from transformer.tasks.text_lm import prepare_lm_data

tokenizers = pytest.importorskip("tokenizers")

WORDS = ["the", "<|endoftext|>", *"def add a b return class box self value for i in range print ( ) : , = + .".split()]
LINES = [
    "def add ( a , b ) : return a + b",
    "the box is the value of the self",
    "for i in range ( the ) : print ( add ( i , the ) )",
]
EOS = 1
TRAIN = ["--block-len", "16", "--max-tokens", "64", "--no-progress", "--warmup", "2"]


@pytest.fixture(autouse=True)
def _restore_threads():
    previous = torch.get_num_threads()
    yield
    torch.set_num_threads(previous)


def _write_tokenizer(folder) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {word: i for i, word in enumerate(WORDS)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tokenizer.add_special_tokens(["<|endoftext|>"])
    tokenizer.save(str(folder / "tokenizer.json"))


def write_folder(folder, eos_ids=EOS, seed=0):
    """A Llama-shaped model (rotary, RMSNorm, SwiGLU, grouped-query attention) and its tokenizer in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    config = LMConfig(
        vocab=len(WORDS) + 3, n_layers=2, d_model=32, d_ff=48, n_heads=4, n_kv_heads=2, max_len=64,
        positional_encoding="rotary", norm="rms", activation="silu", ffn_gated=True, qkv_bias=False, out_bias=False,
        ffn_bias=False, lm_head_bias=False, tie_weights=False, embedding_scale=1.0, pad_id=None, dropout=0.0,
        attention_dropout=0.0, ffn_hidden_dropout=False,
    )  # fmt: skip
    torch.manual_seed(seed)
    build_lm(config).save_pretrained(folder)
    _write_tokenizer(folder)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": eos_ids}))
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("pretrained") / "model")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "text.txt"
    path.write_text("\n".join(LINES * 40) + "\n")
    return str(path)


def _python_continuation(folder, prompt_text, new_tokens, **options):
    """The tokens :func:`generate` adds to ``prompt_text``, stopping where the folder's tokenizer says, and their
    text as the command prints it (up to the first end id)."""
    tokenizer = PretrainedTokenizer.from_folder(folder)
    model = TransformerLM.from_pretrained(folder).eval()
    ids = tokenizer.encode(prompt_text)
    options = {**tokenizer.generation_arguments(), **options}
    new = generate(model, torch.tensor([ids]), new_tokens, **options)[0, len(ids) :].tolist()
    ends = [new.index(i) for i in tokenizer.eos_ids if i in new]
    return new, tokenizer.decode(new[: min(ends)] if ends else new)


def test_help_shows_generate_model_and_train_lm_init(capsys):
    for argv in (["generate", "--help"], ["train", "lm", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
    shown = capsys.readouterr().out
    assert "--model DIR" in shown and "--init DIR" in shown and "Hugging Face checkpoint folder" in shown


@pytest.mark.parametrize("flags", [[], ["--sample", "--seed", "3", "--top-k", "5"]], ids=["greedy", "sampled"])
def test_generate_with_model_prints_what_generate_gives_in_python(folder, flags, capsys):
    prompt = "def add ( a , b )"
    options = {"sample": True, "seed": 3, "top_k": 5} if flags else {}
    _, text = _python_continuation(folder, prompt, 8, **options)
    assert text
    assert main(["generate", "--model", str(folder), "--max-new-tokens", "8", *flags, prompt]) == 0
    assert capsys.readouterr().out == f"{prompt} {text}\n"


def test_generate_with_model_stops_at_the_end_of_sequence_ids_of_generation_config(tmp_path, capsys):
    """generation_config.json lists two end ids; the second is the k-th greedy token (k >= 2; the first never
    comes): the continuation stops before it, k tokens printed."""
    prompt = "the box"
    new, _ = _python_continuation(write_folder(tmp_path / "plain", eos_ids=[]), prompt, 8)
    k = next(k for k in range(2, 8) if new[k] not in new[:k] and 2 <= new[k] < len(WORDS))
    never = next(i for i in range(len(WORDS)) if i not in new[: k + 1])
    stopping = write_folder(tmp_path / "stops", eos_ids=[never, new[k]])
    assert main(["generate", "--model", str(stopping), "--max-new-tokens", "8", prompt]) == 0
    tokenizer = PretrainedTokenizer.from_folder(stopping)
    assert capsys.readouterr().out == f"{prompt} {tokenizer.decode(new[:k])}\n"


def test_train_lm_init_starts_from_the_pretrained_weights(folder, corpus, tmp_path, capsys):
    """The first logged loss is the pretrained model's mean cross-entropy on the first batch (every label counted,
    id 0 included), and the learning rate is the fine-tuning default."""
    out = tmp_path / "run"
    assert (
        main(["train", "lm", "--init", str(folder), "--text", corpus, "--steps", "1", "--out", str(out), *TRAIN]) == 0
    )
    printed = capsys.readouterr().out
    assert "pretrained LlamaForCausalLM" in printed and "peak of 5e-05" in printed
    logged = json.loads((out / "state.json").read_text())["history"]["train_loss"][0]

    data = prepare_lm_data([corpus], str(tmp_path / "data"), tokenizer=pretrained_text_tokenizer(folder), block=16)
    batches, _ = token_budget_batches(data.train, data.valid, 64, seed=0, what="window")
    batch = next(batches(torch.Generator().manual_seed(0)))
    assert (batch.labels == 0).any()  # the word at id 0 is among the labels
    model = TransformerLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        log_probs = torch.log_softmax(model.logits(batch.tokens, batch.mask), dim=-1)
    expected = -log_probs.gather(-1, batch.labels.unsqueeze(-1)).mean().item()
    assert logged == {"__tuple__": [1, pytest.approx(expected, rel=1e-5)]}  # (step, loss), as state.json keeps it


def test_train_lm_init_resumes_exactly_and_generate_reads_its_checkpoint(folder, corpus, tmp_path, capsys):
    straight, split = tmp_path / "straight", tmp_path / "split"
    base = ["train", "lm", "--init", str(folder), "--text", corpus, "--eval-every", "2", *TRAIN, "--lr", "1e-3"]
    assert main([*base, "--steps", "4", "--out", str(straight)]) == 0
    assert main([*base, "--steps", "2", "--out", str(split)]) == 0
    assert main([*base, "--steps", "4", "--out", str(split), "--resume"]) == 0
    assert f"resumed from {split} at step 2" in capsys.readouterr().out
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    pretrained = load_file(folder / "model.safetensors")
    assert not torch.equal(a["layers.0.feed_forward.w_1.weight"], pretrained["model.layers.0.mlp.gate_proj.weight"])
    histories = [json.loads((d / "state.json").read_text())["history"] for d in (straight, split)]
    assert histories[0] == histories[1]
    assert main(["generate", "--checkpoint", str(split), "--max-new-tokens", "3", "the box"]) == 0
    assert capsys.readouterr().out.startswith("the box")


def test_train_lm_init_refuses_the_flags_of_a_new_model_and_a_resume_without_it(folder, corpus, tmp_path, capsys):
    base = ["train", "lm", "--text", corpus, "--steps", "1", *TRAIN]
    code = main([*base, "--init", str(folder), "--d-model", "64", "--tokenizer", "char", "--out", str(tmp_path / "a")])
    assert code == 2
    err = capsys.readouterr().err
    assert "--d-model, --tokenizer cannot be given with --init" in err and str(folder) in err
    assert main([*base, "--init", str(folder), "--out", str(tmp_path / "b")]) == 0
    # the checkpoint records --init (issue 43): a resume without it continues the pretrained model
    assert main([*base, "--steps", "2", "--out", str(tmp_path / "b"), "--resume"]) == 0
    assert f"pretrained LlamaForCausalLM from {folder}" in capsys.readouterr().out
    # one written before the flags were recorded does not: the resume asks for it
    meta = json.loads((tmp_path / "b" / "meta.json").read_text())
    del meta["metadata"]["flags"]
    (tmp_path / "b" / "meta.json").write_text(json.dumps(meta))
    assert main([*base, "--steps", "3", "--out", str(tmp_path / "b"), "--resume"]) == 2
    assert f"give --init {folder} again to resume it" in capsys.readouterr().err


def test_generate_needs_exactly_one_of_checkpoint_and_model(folder, capsys):
    with pytest.raises(SystemExit) as neither:
        main(["generate", "the"])
    assert (
        neither.value.code == 2 and "one of the arguments --checkpoint --model is required" in capsys.readouterr().err
    )
    with pytest.raises(SystemExit) as both:
        main(["generate", "--checkpoint", "x", "--model", str(folder), "the"])
    assert both.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def _break(folder, what):
    if what == "config.json":
        (folder / "config.json").unlink()
    elif what == "model.safetensors":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 2])  # truncated
    elif what == "tokenizer.json":
        (folder / "tokenizer.json").write_text("{not json")
    elif what == "architectures":
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "architectures": ["BertForMaskedLM"]}))


@pytest.mark.parametrize("what", ["config.json", "model.safetensors", "tokenizer.json", "architectures"])
def test_a_bad_folder_exits_2_with_one_line_naming_the_file(what, corpus, tmp_path, capsys):
    folder = write_folder(tmp_path / "model")
    _break(folder, what)
    named = "config.json" if what == "architectures" else what
    for argv in (
        ["generate", "--model", str(folder), "the"],
        ["train", "lm", "--init", str(folder), "--text", corpus, "--out", str(tmp_path / "run"), *TRAIN],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and named in err, err
    assert main(["generate", "--model", str(tmp_path / "absent"), "the"]) == 2
    assert "absent: no such directory" in capsys.readouterr().err


def test_the_pretrained_tokenizer_travels_as_json_to_the_other_ranks(folder):
    """Under torchrun rank 0 sends its tokenizer to the others as JSON (``TextTokenizer.from_json``): the pretrained
    kind comes back with its end ids and encodes and fingerprints the same."""
    from transformer.data.tokenizers import TextTokenizer

    sent = pretrained_text_tokenizer(folder)
    received = TextTokenizer.from_json(sent.to_json())
    assert type(received) is type(sent) and received.eos_ids == sent.eos_ids == (EOS,)
    assert received.fingerprint == sent.fingerprint and received.encode(LINES[0]) == sent.encode(LINES[0])


@pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed (gloo)")
def test_train_lm_init_under_torchrun_ddp_then_resumes(folder, corpus, tmp_path):
    from torchrun_launch import check_ok, torchrun

    out = tmp_path / "run"
    base = ["-m", "transformer", "train", "lm", "--init", str(folder), "--text", corpus, "--out", str(out), *TRAIN]
    first = torchrun(*base, "--steps", "2", "--eval-every", "2", "--strategy", "ddp", timeout=180)
    check_ok(first)
    assert first.stdout.count("RESULTS {") == 1 and "pretrained LlamaForCausalLM" in first.stdout
    assert "ddp on 2 processes (gloo)" in first.stdout
    again = torchrun(*base, "--steps", "3", "--strategy", "ddp", "--resume", timeout=180)
    check_ok(again)
    assert f"resumed from {out} at step 2" in again.stdout
    assert json.loads((out / "state.json").read_text())["step"] == 3


def test_the_fine_tuning_tokenizer_keeps_every_end_of_sequence_id(tmp_path):
    """``train lm --init`` ends documents (and its checkpoint's ``generate``) at every eos id of the folder."""
    folder = write_folder(tmp_path / "two-ends", eos_ids=[EOS, 5])
    assert pretrained_text_tokenizer(folder).eos_ids == (EOS, 5)


def test_block_len_may_be_the_whole_pretrained_context_and_no_more(folder):
    from transformer.tasks.pretrained_lm import load_pretrained_lm

    assert load_pretrained_lm(folder, "cpu", 64).config.max_len == 64  # the folder's max_len
    with pytest.raises(ValueError, match=r"--block-len 65 is longer than .* max_len=64 .*give --block-len 64 or less"):
        load_pretrained_lm(folder, "cpu", 65)


def test_the_fine_tuning_tokenizer_adds_what_the_folders_post_processor_adds(tmp_path):
    """Llama's tokenizer.json adds ``<s>`` through its post-processor: the ``pretrained`` tokenizer kind encodes as
    the folder's tokenizer does, start token included."""
    from tokenizers import Tokenizer, processors

    folder = write_folder(tmp_path / "with-bos")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    bos = len(WORDS)  # below the model's vocabulary (len(WORDS) + 3)
    tokenizer.add_special_tokens(["<s>"])
    assert tokenizer.token_to_id("<s>") == bos
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    tokenizer.save(str(folder / "tokenizer.json"))
    ids = pretrained_text_tokenizer(folder).encode(LINES[0])
    assert ids[0] == bos and ids == tokenizer.encode(LINES[0]).ids == PretrainedTokenizer.from_folder(folder).encode(
        LINES[0]
    )


@pytest.mark.parametrize("name", ["bfloat16", "float16", "auto"])
def test_generate_dtype_loads_the_folder_in_that_dtype(folder, name, capsys):
    """``--dtype`` names the dtype as ``from_pretrained(dtype=...)`` takes it: what is printed is what the model
    loaded in that dtype generates (the folder is float32: bfloat16 and float16 change the weights)."""
    prompt = "def add ( a , b )"
    tokenizer = PretrainedTokenizer.from_folder(folder)
    model = TransformerLM.from_pretrained(folder, dtype=name)
    assert model.weights_dtype() == {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(name, torch.float32)
    ids = tokenizer.encode(prompt)
    new = generate(model, torch.tensor([ids]), 8, **tokenizer.generation_arguments())[0, len(ids) :].tolist()
    ends = [new.index(i) for i in tokenizer.eos_ids if i in new]
    assert main(["generate", "--model", str(folder), "--dtype", name, "--max-new-tokens", "8", prompt]) == 0
    assert capsys.readouterr().out == f"{prompt} {tokenizer.decode(new[: min(ends)] if ends else new)}\n"


def test_a_dtype_name_transformers_refuses_exits_2_naming_the_flag_the_value_and_the_names(folder, corpus, capsys):
    for argv in (
        ["generate", "--model", str(folder), "--dtype", "bf16", "the"],
        ["train", "lm", "--init", str(folder), "--text", corpus, "--dtype", "bf16"],
    ):
        with pytest.raises(SystemExit) as refused:
            main(argv)
        err = capsys.readouterr().err
        assert refused.value.code == 2 and "argument --dtype: invalid choice: 'bf16'" in err
        accepted = err.split("choose from", 1)[1]  # quoted or not, by the Python version's argparse
        assert all(name in accepted for name in ("auto", "float32", "float16", "bfloat16", "float64", "half"))


def test_dtype_is_refused_where_no_pretrained_folder_is_loaded(corpus, tmp_path, capsys):
    assert main(["generate", "--checkpoint", str(tmp_path / "x"), "--dtype", "bfloat16", "the"]) == 2
    assert "--dtype bfloat16 is for --model" in capsys.readouterr().err
    argv = ["train", "lm", "--text", corpus, "--steps", "1", "--dtype", "float16", "--out", str(tmp_path / "a")]
    assert main([*argv, *TRAIN]) == 2
    assert "--dtype float16 is for --init" in capsys.readouterr().err


def test_train_lm_init_trains_in_the_dtype_asked_and_float32_by_default(folder, corpus, tmp_path, capsys):
    base = ["train", "lm", "--init", str(folder), "--text", corpus, "--steps", "1", *TRAIN]
    assert main([*base, "--dtype", "bfloat16", "--out", str(tmp_path / "bf16")]) == 0
    assert {t.dtype for t in load_file(tmp_path / "bf16" / "model.safetensors").values()} == {torch.bfloat16}
    assert main([*base, "--out", str(tmp_path / "default")]) == 0
    assert {t.dtype for t in load_file(tmp_path / "default" / "model.safetensors").values()} == {torch.float32}
