"""The flags of ``generate`` and the dropout of ``train lm`` reach the call and the modules they document
(``--help``, docs/lm.md, docs/data.md), checked by value: every ``generate`` flag (and every default) as the argument
``generate`` receives, ``--sample`` without ``--seed`` as seed 0, an empty prompt as the document
start the model was trained with, and ``train lm --dropout P`` as every dropout of the model, attention included.
(tests/test_cli_flags_reach.py checks the other ``train lm`` flags; it is near its size limit.)"""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
from cli_helpers import (
    restore_threads,  # noqa: F401  (an autouse fixture: active where imported)
    write_corpus,
)
from torch import nn

import transformer.cli.checkpoint_commands as commands
from transformer.checkpoint import load_checkpoint
from transformer.cli import main
from transformer.data.token_store import TokenStore
from transformer.training import Trainer

TINY = ["--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "24", "--tokenizer", "char"]
TINY += ["--block-len", "12", "--max-tokens", "48", "--no-progress"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    out = root / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["train", "lm", "--text", write_corpus(root), "--steps", "3", "--out", str(out), *TINY]) == 0
    return out


def _generate(checkpoint, *flags: str) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["generate", "--checkpoint", str(checkpoint), *flags]) == 0
    return buffer.getvalue()


@pytest.fixture
def calls(monkeypatch):
    """Every call of ``generate`` by the command (beam search included): its arguments (a streamer by its class),
    the attention backend and thread count in force; the real function then runs."""
    from transformer.attention import current_backend

    seen = []
    for name in ("generate",):
        real = getattr(commands, name)

        def record(model, prompt, new, *, _real=real, _name=name, **kwargs):
            seen.append(
                dict(
                    function=_name,
                    prompt=prompt.tolist(),
                    max_new_tokens=new,
                    backend=current_backend(),
                    threads=torch.get_num_threads(),
                    device=next(model.parameters()).device.type,
                    training=model.training,
                    **{k: type(v).__name__ if k == "streamer" else v for k, v in kwargs.items()},
                )
            )
            return _real(model, prompt, new, **kwargs)

        monkeypatch.setattr(commands, name, record)
    return seen


def _tokenizer(checkpoint):
    from transformer.tasks.tokenizer_assets import tokenizer_from_checkpoint

    return tokenizer_from_checkpoint(load_checkpoint(str(checkpoint), load_trainer_state=False))


def test_every_generate_flag_reaches_the_call(checkpoint, calls):
    tok = _tokenizer(checkpoint)
    flags = ["--max-new-tokens", "5", "--sample", "--temperature", "0.7", "--top-k", "4", "--top-p", "0.9"]
    flags += ["--seed", "3", "--stop", "ab", "--stop", "(", "--device", "cpu", "--attention-backend", "eager"]
    _generate(checkpoint, *flags, "--threads", "2", "--compile", "on", "--weight-layout", "as_loaded", "def", "class")
    expected = dict(
        function="generate",
        max_new_tokens=5,
        backend="eager",
        threads=2,
        device="cpu",
        training=False,
        sample=True,
        temperature=0.7,
        top_k=4,
        top_p=0.9,
        seed=3,
        end_symbol=tok.eos_id,
        end_symbols=[],
        stop_strings=["ab", "("],
        compile=True,
        weight_layout="as_loaded",
        streamer="TextStreamer",  # the default: printed as the tokens come
    )
    given = [call.pop("tokenizer") for call in calls]  # the checkpoint's tokenizer, which the stop strings read
    assert [t.to_json() for t in given] == [tok.to_json()] * 2
    assert calls == [dict(expected, prompt=[tok.encode(text)]) for text in ("def", "class")]


def test_the_generate_defaults_reach_the_call(checkpoint, calls):
    tok = _tokenizer(checkpoint)
    _generate(checkpoint, "def")
    assert calls == [
        dict(
            function="generate",
            prompt=[tok.encode("def")],
            max_new_tokens=100,  # --max-new-tokens: default 100
            backend=None,  # the model config's
            threads=1,
            device="cpu",
            training=False,
            sample=False,
            temperature=1.0,
            top_k=None,
            top_p=None,
            seed=0,
            end_symbol=tok.eos_id,
            end_symbols=[],
            stop_strings=[],
            tokenizer=None,
            compile=False,  # --compile: default off
            weight_layout="auto",  # --weight-layout: default auto
            streamer="TextStreamer",
        )
    ]
    calls.clear()
    _generate(checkpoint, "--no-stream", "def")
    assert "streamer" not in calls[0]
    calls.clear()
    _generate(checkpoint, "--beam-size", "3", "--max-new-tokens", "4", "def")
    beam = dict(
        function="generate",
        prompt=[tok.encode("def")],
        max_new_tokens=4,
        backend=None,
        threads=1,
        device="cpu",
        training=False,
        num_beams=3,
        length_penalty=1.0,  # transformers' defaults
        early_stopping=False,
        end_symbol=tok.eos_id,
        end_symbols=[],
        weight_layout="auto",
    )
    assert calls == [beam]
    calls.clear()
    _generate(checkpoint, "--beam-size", "3", "--max-new-tokens", "4", "--length-penalty", "-0.5",
              "--early-stopping", "never", "def")  # fmt: skip
    assert calls == [dict(beam, length_penalty=-0.5, early_stopping="never")]
    calls.clear()
    _generate(checkpoint, "--beam-size", "2", "--early-stopping", "true", "--weight-layout", "as_loaded", "def")
    assert calls[0]["early_stopping"] is True and calls[0]["weight_layout"] == "as_loaded"


def test_weight_layout_as_loaded_prints_the_text_of_auto(checkpoint, calls):
    """``--weight-layout``: the weights relaid for decoding (auto, 40 tokens: past the 32-token threshold) or as
    loaded give the same text, greedy and sampled."""
    for flags in ([], ["--sample", "--temperature", "4", "--seed", "2"]):
        auto = _generate(checkpoint, *flags, "--max-new-tokens", "40", "--no-stream", "def")
        assert _generate(checkpoint, *flags, "--max-new-tokens", "40", "--weight-layout", "as_loaded", "def") == auto
    assert [call["weight_layout"] for call in calls] == ["auto", "as_loaded"] * 2


def test_compile_on_prints_the_text_of_compile_off(checkpoint, calls):
    """``--compile on``: the static, compiled decode step; the same text as the eager step, greedy and sampled."""
    for flags in ([], ["--sample", "--temperature", "4", "--seed", "2"]):
        eager = _generate(checkpoint, *flags, "--max-new-tokens", "20", "--no-stream", "def")
        assert _generate(checkpoint, *flags, "--max-new-tokens", "20", "--compile", "on", "def") == eager
    assert [call["compile"] for call in calls] == [False, True] * 2


def test_sample_without_a_seed_is_seed_0(checkpoint, calls):
    """``--seed`` (default 0): the same text as ``--seed 0``, and another seed gives another text (the temperature
    makes the draws matter)."""
    sample = ["--sample", "--temperature", "4", "--max-new-tokens", "30", "def"]
    unseeded, zero, one = (_generate(checkpoint, *seed, *sample) for seed in ([], ["--seed", "0"], ["--seed", "1"]))
    assert unseeded == zero != one
    assert [call["seed"] for call in calls] == [0, 0, 1]


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    """A ``train lm --no-pack`` checkpoint: windows run across documents, so the end token is followed by the next
    document's first token in training."""
    root = tmp_path_factory.mktemp("unpacked")
    out = root / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(
            ["train", "lm", "--text", write_corpus(root), "--no-pack", "--steps", "3", "--out", str(out), *TINY]
        )
    assert code == 0
    return out


def test_an_empty_prompt_starts_from_the_document_start_the_model_was_trained_with(unpacked, calls):
    """``""`` starts a new document: the model's training stream (unpacked) holds each document followed by the end
    token, so a document begins after it, and never the start token ``<s>``; the empty prompt is that end token."""
    tok = _tokenizer(unpacked)
    store = TokenStore.open(unpacked.parent / "run.data" / "train")
    documents = [store[i].tolist() for i in range(len(store))]
    assert documents and all(doc[-1] == tok.eos_id for doc in documents)
    assert all(tok.bos_id not in doc for doc in documents)
    _generate(unpacked, "--max-new-tokens", "3", "")
    assert [call["prompt"] for call in calls] == [[[tok.eos_id]]]


def test_an_empty_prompt_to_a_packed_model_exits_2_asking_for_a_prompt(checkpoint, calls, capsys):
    """A ``--pack`` model (the default) never learned what starts a document (each begins at position 0 with
    nothing before it; the end token only closes one): one line, exit 2, nothing generated; a prompt still works."""
    assert main(["generate", "--checkpoint", str(checkpoint), "--max-new-tokens", "3", ""]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "trained packed" in err and "give a prompt, or train with --no-pack" in err
    assert str(checkpoint) in err and calls == []
    _generate(checkpoint, "--max-new-tokens", "3", "def")
    assert len(calls) == 1


class _Captured(Exception):
    pass


@pytest.mark.parametrize("formulation", ["paper", "functional"])
@pytest.mark.parametrize("dropout", [None, "0.25"])
def test_train_lm_dropout_sets_every_dropout_of_the_model(formulation, dropout, tmp_path, monkeypatch):
    """``--dropout P`` (default 0.1): on the embeddings, every sub-layer output, the feed-forward network's hidden
    activations and the attention probabilities, for both formulations."""
    seen = {}

    def stop(self, *args, **kwargs):
        seen["model"] = self.model
        raise _Captured

    monkeypatch.setattr(Trainer, "train", stop)
    flags = ["--formulation", formulation, *([] if dropout is None else ["--dropout", dropout])]
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(_Captured):
        main(["train", "lm", "--text", write_corpus(tmp_path), "--out", str(tmp_path / "o"), *TINY, *flags])
    model = seen["model"]
    p = 0.1 if dropout is None else float(dropout)
    drops = [m.p for m in model.modules() if isinstance(m, nn.Dropout)]
    assert drops == [p] * (1 + 3 * len(model.layers))  # embeddings; per layer two sub-layers and the hidden
    assert [layer.self_attn.dropout_p for layer in model.layers] == [p] * len(model.layers)
    assert (model.config.dropout, model.config.attention_dropout) == (p, p)


def test_the_other_train_lm_flags_reach_their_objects(tmp_path, monkeypatch):
    """The ``train lm`` flags tests/test_cli_flags_reach.py leaves out: ``--valid`` (the held-out windows are those
    files' tokens), ``--tokenizer-file`` (that tokenizer, none trained), ``--lr`` (the schedule's peak),
    ``--attention-backend``, ``--threads`` and ``--device`` (in force during training)."""
    import transformer.tasks.text_lm as text_lm
    from transformer.attention import current_backend
    from transformer.data.tokenizers import train_tokenizer

    seen = {}

    def stop(self, *args, **kwargs):
        seen.update(trainer=self, backend=current_backend(), threads=torch.get_num_threads())
        raise _Captured

    monkeypatch.setattr(Trainer, "train", stop)
    corpus = write_corpus(tmp_path)
    tokenizer = train_tokenizer([open(corpus).read()], "char", vocab_size=60, min_frequency=1)
    tokenizer_dir = tmp_path / "tok"
    tokenizer_dir.mkdir()
    tokenizer_file = tokenizer.save(tokenizer_dir)
    monkeypatch.setattr(text_lm, "train_tokenizer", lambda *a, **k: pytest.fail("--tokenizer-file: none is trained"))
    held_out = tmp_path / "held.txt"
    held_out.write_text("zzz yyy\n" * 40)  # characters the training text lacks: its tokens are recognisable
    flags = ["--valid", str(held_out), "--tokenizer-file", tokenizer_file, "--lr", "0.003"]
    flags += ["--attention-backend", "eager", "--threads", "2", "--device", "cpu", "--data-dir", str(tmp_path / "d")]
    with contextlib.redirect_stdout(io.StringIO()), pytest.raises(_Captured):
        main(
            [
                "train",
                "lm",
                "--text",
                corpus,
                "--out",
                str(tmp_path / "o"),
                *TINY[:8],
                "--block-len",
                "4",
                "--no-progress",
                *flags,
            ]
        )
    trainer = seen["trainer"]
    used = tokenizer_from_trainer(trainer)
    assert used.fingerprint == tokenizer.fingerprint
    held = TokenStore.open(tmp_path / "d" / "valid")
    assert [held[i].tolist() for i in range(len(held))] == [tokenizer.encode("zzz yyy\n" * 40) + [tokenizer.eos_id]]
    (schedule,) = trainer.scheduler.lr_lambdas
    assert schedule.peak == pytest.approx(0.003, rel=1e-12)
    assert (seen["backend"], seen["threads"], trainer.device.type) == ("eager", 2, "cpu")


def tokenizer_from_trainer(trainer):
    from transformer.data.tokenizers import tokenizer_from_texts

    assets = trainer.model.checkpoint_assets
    return tokenizer_from_texts(assets["tokenizer.json"], assets["tokenizer_extra.json"])
