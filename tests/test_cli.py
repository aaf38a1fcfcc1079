"""The typed-transformer console script: train, decode, and clean errors (exit 2, no traceback)."""

import os
import subprocess
import sys

import pytest
import torch

import transformer as T
from transformer.cli import main


@pytest.fixture(autouse=True)
def _restore_threads():
    previous = torch.get_num_threads()
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "copy"
    previous = torch.get_num_threads()
    code = main(
        ["train", "copy", "--steps", "40", "--out", str(out), "--no-progress", "--eval-examples", "20", "--seed", "1"]
    )
    torch.set_num_threads(previous)
    assert code == 0
    return out


def test_train_saves_a_checkpoint_and_reports(trained, capsys):
    assert sorted(os.listdir(trained)) == [
        "config.json",
        "meta.json",
        "model.safetensors",
        "state.json",
        "state.safetensors",
    ]
    code = main(["decode", "--checkpoint", str(trained), "1 2 3 4 5 6 7 8 9 10"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0 and len(out) == 1 and len(out[0].split()) == 10 and out[0].split()[0] == "1"
    code = main(["decode", "--checkpoint", str(trained), "--beam-size", "2", "1 2 3", "1 4 4"])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 0 and out[0].startswith("1 2 3 -> ") and out[1].startswith("1 4 4 -> ")


def test_decode_runs_attention_on_the_requested_backend(trained, capsys, monkeypatch):
    from transformer import backends

    assert main(["decode", "--checkpoint", str(trained), "1 2 3 4 5"]) == 0
    default = capsys.readouterr().out
    calls = []
    reference = backends.attention.unchecked
    monkeypatch.setattr(backends.attention, "unchecked", lambda *a, **k: calls.append(1) or reference(*a, **k))
    assert main(["decode", "--checkpoint", str(trained), "--attention-backend", "eager", "1 2 3 4 5"]) == 0
    assert calls, "--attention-backend eager did not reach the eager reference"
    assert capsys.readouterr().out == default
    assert T.current_backend() is None  # the choice ends with the command


def test_train_prints_progress_results_and_decodes(tmp_path, capsys):
    code = main(
        ["train", "copy", "--steps", "3", "--out", str(tmp_path / "run"), "--eval-examples", "5", "--eval-every", "2"]
    )
    captured = capsys.readouterr()
    assert code == 0
    assert "exact match on 5 held-out inputs" in captured.out and "'1 2 3 4 5 6 7 8 9 10' -> " in captured.out
    assert "RESULTS {" in captured.out
    assert "tok/s" in captured.err and "lr=" in captured.err and "loss=" in captured.err  # the tqdm bar
    assert "step 2: train loss" in captured.out  # periodic evaluation


@pytest.mark.parametrize("backend", [[], ["--attention-backend", "eager"]], ids=["same-backend", "another-backend"])
def test_resume_continues_from_the_saved_step(trained, tmp_path, capsys, backend):
    """Trained with 'auto'; resuming on another backend works too (the backend is not the model's identity)."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(trained, out)
    code = main(
        [
            "train",
            "copy",
            "--steps",
            "45",
            "--out",
            str(out),
            "--resume",
            "--no-progress",
            "--eval-examples",
            "5",
            "--seed",
            "1",
            *backend,
        ]
    )
    assert code == 0
    out_text = capsys.readouterr().out
    assert f"resumed from {out} at step 40" in out_text
    assert "trained 5 steps (resumed at step 40; 45 in all)" in out_text  # this run's steps, then the total


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "copyy"], "invalid choice: 'copyy'"),
        (["train", "copy", "--steps", "0"], "expected a positive integer, got 0"),
        (["train", "copy", "--steps", "many"], "expected a positive integer, got 'many'"),
        (["train", "copy", "--attention-backend", "fast"], "invalid choice: 'fast'"),
        (["decode", "1 2 3"], "the following arguments are required: --checkpoint"),
        ([], "the following arguments are required"),
    ],
)
def test_bad_flags_exit_2_with_a_usage_message(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_device_missing_and_corrupt_checkpoints_and_unknown_tokens_exit_2(trained, tmp_path, capsys):
    if not torch.cuda.is_available():
        assert main(["train", "copy", "--device", "cuda", "--out", str(tmp_path / "x")]) == 2
        assert "CUDA is not available" in capsys.readouterr().err
    assert main(["decode", "--checkpoint", str(tmp_path / "missing"), "1 2"]) == 2
    assert "no checkpoint at" in capsys.readouterr().err
    assert main(["decode", "--checkpoint", str(trained), "1 2 12"]) == 2
    err = capsys.readouterr().err
    assert "unknown token '12' at position 2" in err and "Traceback" not in err
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(trained, broken)
    (broken / "model.safetensors").write_bytes(b"\x00" * 64)
    assert main(["decode", "--checkpoint", str(broken), "1 2"]) == 2
    assert "corrupt" in capsys.readouterr().err


def test_console_entry_points_report_errors_without_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "transformer", "decode", "--checkpoint", str(tmp_path / "none"), "1 2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "typed-transformer decode: error: no checkpoint at" in result.stderr and "Traceback" not in result.stderr
    result = subprocess.run(
        [sys.executable, "-m", "transformer.cli", "--help"], capture_output=True, text=True, timeout=120
    )
    every = "{train,decode,generate,consolidate,export,prove}"
    assert result.returncode == 0 and every in result.stdout  # every sub-command
