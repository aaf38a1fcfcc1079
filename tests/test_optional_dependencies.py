"""The core install needs neither tokenizers nor sacrebleu (the `text` extra): the package imports, trains the copy task
and decodes without them, and every feature that needs one says which feature, which package and the exact pip
command (the command line: exit status 2, one line, before any work)."""

import importlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from transformer.cli import main
from transformer.common import optional
from transformer.common.optional import MissingDependencyError, install_command, require
from transformer.data import load_tokenizer, train_tokenizer
from transformer.lm.pretrained.tokenizer import PretrainedTokenizer
from transformer.tasks.translation_files import bleu_note, corpus_scores

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# The command a user is told to run, from pyproject.toml's own declaration of the extra
TEXT_COMMAND = "pip install " + " ".join(f'"{r}"' for r in PYPROJECT["optional-dependencies"]["text"])


def test_the_core_dependencies_leave_tokenizers_and_sacrebleu_to_the_text_extra():
    core = " ".join(PYPROJECT["dependencies"])
    assert "tokenizers" not in core and "sacrebleu" not in core
    text = PYPROJECT["optional-dependencies"]["text"]
    assert sorted(r.split(">")[0] for r in text) == ["sacrebleu", "tokenizers"]
    assert set(optional.EXTRAS) == {"tokenizers", "sacrebleu"} and set(optional.EXTRAS.values()) == {"text"}


def test_the_install_command_is_the_extras_declared_requirements():
    assert install_command("text") == TEXT_COMMAND
    assert TEXT_COMMAND == 'pip install "tokenizers>=0.15" "sacrebleu>=2.3"'


def test_without_readable_metadata_the_command_names_the_bare_packages(monkeypatch):
    def not_installed(name):
        raise optional.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(optional.metadata, "requires", not_installed)
    optional._extra_requirements.cache_clear()
    try:
        assert install_command("text") == 'pip install "sacrebleu" "tokenizers"'
    finally:
        optional._extra_requirements.cache_clear()


def test_require_returns_the_module_when_it_is_installed():
    assert require("tokenizers", "anything") is importlib.import_module("tokenizers")


def test_require_refuses_a_package_that_belongs_to_no_extra():
    with pytest.raises(ValueError, match=r"package must be one of sacrebleu, tokenizers, got 'numpy'"):
        require("numpy", "anything")


@pytest.mark.parametrize(
    "package, call, feature",
    [
        ("tokenizers", lambda tmp: train_tokenizer(["ab ab"], "bpe", vocab_size=300), "training a byte-level BPE"),
        ("tokenizers", lambda tmp: train_tokenizer(["ab ab"], "char", vocab_size=10), "training a character"),
        ("tokenizers", lambda tmp: load_tokenizer(_tokenizer_file(tmp)), "reading "),
        ("tokenizers", lambda tmp: PretrainedTokenizer.from_folder(tmp), "reading the tokenizer of "),
        ("sacrebleu", lambda tmp: corpus_scores(["a b"], ["a b"]), "the BLEU and chrF scores of train translate"),
        ("sacrebleu", lambda tmp: bleu_note(["a b"]), "the BLEU and chrF scores of train translate"),
    ],
)
def test_a_missing_package_is_named_with_its_feature_and_the_command(package, call, feature, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, package, None)  # as if not installed: `import` fails with its name
    with pytest.raises(MissingDependencyError) as info:
        call(tmp_path)
    message = str(info.value)
    assert message.startswith(feature), message
    assert message.endswith(
        f"needs the {package} package (typed-transformer's [text] extra), which is not installed; "
        f"install it with: {TEXT_COMMAND}"
    ), message
    assert isinstance(info.value, ImportError) and info.value.name == package


def _tokenizer_file(directory: Path) -> Path:
    path = directory / "tokenizer.json"
    path.write_text('{"typed_transformer_kind": "char"}')
    return path


def test_a_package_that_is_installed_but_broken_is_told_apart(monkeypatch):
    real = importlib.import_module

    def broken(name, *args):
        if name == "sacrebleu":
            raise ModuleNotFoundError("No module named 'portalocker'", name="portalocker")
        return real(name, *args)

    monkeypatch.setattr(optional.importlib, "import_module", broken)
    with pytest.raises(MissingDependencyError, match=r"which is installed but cannot be imported \(No module named "):
        require("sacrebleu", "scoring")


def _write_pairs(path: Path) -> Path:
    path.write_text("".join(f"a{i} b\tb a{i}\n" for i in range(20)))
    return path


@pytest.mark.parametrize(
    "package, argv, feature",
    [
        ("tokenizers", ["train", "lm", "--text", "{corpus}"], "train lm"),
        ("tokenizers", ["train", "translate", "--train", "{corpus}", "--valid", "{corpus}"], "train translate"),
        (
            "sacrebleu",
            ["train", "translate", "--train", "{corpus}", "--valid", "{corpus}"],
            "the BLEU and chrF scores of train translate",
        ),
    ],
)
def test_the_cli_exits_2_with_one_line_before_any_work(package, argv, feature, tmp_path, monkeypatch, capsys):
    corpus = _write_pairs(tmp_path / "pairs.tsv")
    out = tmp_path / "run"
    monkeypatch.setitem(sys.modules, package, None)
    status = main([a.format(corpus=corpus) for a in argv] + ["--out", str(out), "--steps", "2"])
    err = capsys.readouterr().err
    assert status == 2
    assert err == (
        f"typed-transformer train: error: {feature} needs the {package} package (typed-transformer's [text] extra), "
        f"which is not installed; install it with: {TEXT_COMMAND}\n"
    )
    assert not out.exists() and not Path(f"{out}.data").exists()  # refused before the tokenizer or the data


WITHOUT_TEXT = r"""
import sys, warnings
sys.modules["tokenizers"] = None  # as if the text extra were not installed
sys.modules["sacrebleu"] = None
warnings.simplefilter("error")
import transformer as tt
from transformer.cli import main

status = main(["train", "copy", "--steps", "40", "--out", sys.argv[1], "--no-progress"])
print("TRAIN:", status)
print("DECODE:", main(["decode", "--checkpoint", sys.argv[1], "1 2 3"]))
"""


def test_import_and_the_copy_task_train_and_decode_without_the_text_extra(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TYPED_TRANSFORMER_CHECKS"}
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_TEXT, str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "TRAIN: 0" in out.stdout and "DECODE: 0" in out.stdout, out.stdout[-2000:]
    assert "exact match on" in out.stdout
