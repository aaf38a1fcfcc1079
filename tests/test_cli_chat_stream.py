"""``typed-transformer generate`` for a chat model's folder: ``--chat`` (each prompt a user message after
``--system``'s, rendered as transformers' ``apply_chat_template(..., add_generation_prompt=True)``, the answer
printed alone), streaming (the default: the same text as ``--no-stream``, written in pieces as the tokens come) and
``--seed`` once per prompt (a prompt and its seed give the same text alone or among other prompts)."""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
from chat_helpers import EOS, EOT, PAD, chat_folder, chat_model

import transformer.cli.checkpoint_commands as commands
from transformer.cli import main

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = chat_folder(tmp_path_factory.mktemp("cli_chat") / "model")
    return folder, chat_model(transformers, folder, seed=4)


def _run(*argv: str) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["generate", *argv]) == 0
    return buffer.getvalue()


@pytest.mark.parametrize("system", [None, "Answer in one word."])
def test_chat_prints_transformers_answer_to_the_rendered_conversation(folder, system):
    path, theirs = folder
    hf_tok = transformers.AutoTokenizer.from_pretrained(path)
    questions = ["what is the cat?", "héllo 🙂"]
    flags = ["--model", str(path), "--chat", "--max-new-tokens", "20", "--no-stream"]
    out = _run(*flags, *(["--system", system] if system else []), *questions)
    expected = []
    for question in questions:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
        ids = hf_tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        assert ids["input_ids"][0, :2].tolist() != [1, 1]  # one start token
        new = theirs.generate(**ids, max_new_tokens=20, do_sample=False, eos_token_id=[EOS, EOT], pad_token_id=PAD)
        new = new[0, ids["input_ids"].size(1) :].tolist()
        new = new[: min([new.index(e) for e in (EOS, EOT) if e in new], default=len(new))]
        expected.append(hf_tok.decode(new, skip_special_tokens=True))
    assert out == "".join(answer + "\n" for answer in expected)
    assert _run(*flags[:-1], *(["--system", system] if system else []), *questions) == out  # streamed: the same


def test_chat_is_refused_without_a_template_or_with_a_checkpoint(tmp_path, capsys):
    plain = chat_folder(tmp_path / "plain", None)
    chat_model(transformers, plain)
    assert main(["generate", "--model", str(plain), "--chat", "hello"]) == 2
    assert "--chat: " in (err := capsys.readouterr().err) and "has no chat template" in err
    assert main(["generate", "--model", str(plain), "--system", "be brief", "hello"]) == 2
    assert "--system is the system message of --chat: add --chat" in capsys.readouterr().err


def test_streaming_writes_pieces_as_the_tokens_come_and_the_text_of_no_stream(folder, monkeypatch):
    path, _ = folder
    writes, steps = [], []
    real = commands._write
    monkeypatch.setattr(commands, "_write", lambda text: (writes.append((len(steps), text)), real(text)))
    real_generate = commands.generate

    def counting(model, prompt, new, **kwargs):  # counts the model's steps as they run
        steps_fn = model.next_tokens

        def next_tokens(*a, **k):
            inner = steps_fn(*a, **k)

            class Counted:
                def __call__(self, ys):
                    steps.append(ys.size(1))
                    return inner(ys)

                def __getattr__(self, name):
                    return getattr(inner, name)

            return Counted()

        monkeypatch.setattr(model, "next_tokens", next_tokens)
        return real_generate(model, prompt, new, **kwargs)

    monkeypatch.setattr(commands, "generate", counting)
    prompt = " héllo wörld, naïve café"
    streamed = _run("--model", str(path), "--max-new-tokens", "30", prompt)
    ran = len(steps)
    assert streamed == _run("--model", str(path), "--max-new-tokens", "30", "--no-stream", prompt)
    assert len(writes) > 5 and streamed == prompt + "".join(text for _, text in writes) + "\n"
    assert 0 < writes[0][0] < ran  # text came out after the first step, before the last one ran
    assert len({at for at, _ in writes}) > 5  # at many different steps


def test_each_prompt_has_its_own_seed_alone_or_among_others(folder, capsys):
    path, _ = folder
    flags = ["--model", str(path), "--max-new-tokens", "15", "--sample", "--top-k", "50", "--no-stream"]
    both = _run(*flags, "--seed", "11", "--seed", "12", "the cat", "the dog").splitlines()
    assert both == [
        _run(*flags, "--seed", "11", "the cat").rstrip("\n"),
        _run(*flags, "--seed", "12", "the dog").rstrip("\n"),
    ]
    assert both[1] != _run(*flags, "--seed", "11", "the dog").rstrip("\n")  # the seed matters
    assert _run(*flags, "--seed", "12", "the cat", "the dog").splitlines()[1] == both[1]  # one seed for all
    assert main(["generate", *flags, "--seed", "1", "--seed", "2", "a", "b", "c"]) == 2
    assert "--seed was given 2 times for 3 prompts" in capsys.readouterr().err
    torch.manual_seed(0)  # the global generator is not what seeds a continuation
    assert _run(*flags, "--seed", "11", "the cat").rstrip("\n") == both[0]


def test_beam_size_is_transformers_beam_search(folder, capsys):
    path, theirs = folder
    hf_tok = transformers.AutoTokenizer.from_pretrained(path)
    prompt = "the cat sat"
    ids = hf_tok(prompt, return_tensors="pt")
    flags = ["--model", str(path), "--max-new-tokens", "12", "--beam-size", "3", "--length-penalty", "0.5"]
    for stopping in ("true", "never"):
        new = theirs.generate(**ids, max_new_tokens=12, num_beams=3, do_sample=False, length_penalty=0.5,
                              early_stopping=stopping == "true" or stopping, eos_token_id=[EOS, EOT],
                              pad_token_id=PAD)[0, ids["input_ids"].size(1) :].tolist()  # fmt: skip
        new = new[: min([new.index(e) for e in (EOS, EOT) if e in new], default=len(new))]
        assert _run(*flags, "--early-stopping", stopping, prompt) == prompt + hf_tok.decode(new) + "\n"
    assert main(["generate", "--model", str(path), "--length-penalty", "2", prompt]) == 2
    assert "--length-penalty is a beam search option: add --beam-size K" in capsys.readouterr().err
