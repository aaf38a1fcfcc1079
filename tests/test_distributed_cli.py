"""The command line under torchrun: a restart after a killed rank, Ctrl-C to torchrun, ``--strategy fsdp`` then
``consolidate``, and ``train lm`` / ``train translate`` under DDP and FSDP (one launch of the worker ``cli`` of
``distributed_job.py``): only rank 0 prints, rank 0 prepares the data, every rank trains on its own share, resumes
are exact."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
import torch
from distributed_job import RESTARTED, UNSHARABLE, WORKER, cli_runs, write_corpus, write_pairs
from safetensors.torch import load_file
from torchrun_launch import (
    LAUNCH_TIMEOUT,
    check_ok,
    launch,
    read_json,
    restore_threads,  # noqa: F401  (an autouse fixture: active where imported)
    torchrun,
    worker_pids,
)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds torchrun's workers through /proc")
def test_cli_restart_after_a_killed_rank_resumes_from_the_last_checkpoint(tmp_path):
    """torchrun --max-restarts=1: rank 1 is killed (SIGKILL) once the first checkpoint exists; the restarted job
    resumes from the checkpoint, not from step 0, and finishes; the history has every step once."""
    from transformer.checkpoint import load_checkpoint

    out = tmp_path / "copy"
    killed = []

    def kill_rank_1_after_the_first_checkpoint(proc):
        if not killed and (out / "meta.json").exists():
            pids = worker_pids(proc.pid)
            if 1 in pids:
                os.kill(pids[1], signal.SIGKILL)
                killed.append(pids[1])

    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "--max-restarts=1",
        "--monitor-interval=0.2",
        "-m",
        "transformer",
        "train",
        "copy",
        "--steps",
        "60",
        "--eval-every",
        "15",
        "--batch-size",
        "16",
        "--out",
        str(out),
        "--no-progress",
        "--eval-examples",
        "10",
        "--seed",
        "1",
    ]
    result = launch(cmd, LAUNCH_TIMEOUT, poll=kill_rank_1_after_the_first_checkpoint)
    stdout, stderr = result.stdout, result.stderr
    assert killed, f"the job ended before a rank could be killed:\n{stdout[-3000:]}\n{stderr[-3000:]}"
    assert result.returncode == 0, f"{stdout[-3000:]}\n{stderr[-6000:]}"
    assert "restart 1: resumed from" in stdout, stdout
    resumed_at = int(stdout.split("restart 1: resumed from")[1].split("at step")[1].split()[0])
    assert resumed_at in (15, 30, 45)
    assert f"trained {60 - resumed_at} steps (resumed at step {resumed_at}; 60 in all)" in stdout
    state = load_checkpoint(out).trainer_state
    assert state["step"] == 60 and [step for step, _ in state["history"]["train_loss"]] == list(range(1, 61))


def test_ctrl_c_to_torchrun_saves_the_same_step_on_every_rank_and_stops(tmp_path):
    """Ctrl-C on the terminal reaches torchrun, which forwards SIGINT to every rank: the ranks finish the same step,
    save it once (a collective), and each says where it stopped."""
    from transformer.checkpoint import load_checkpoint

    out = tmp_path / "copy"
    sent = []

    def ctrl_c_once_the_first_checkpoint_exists(proc):
        if not sent and (out / "meta.json").exists():
            proc.send_signal(signal.SIGINT)
            sent.append(1)

    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "transformer",
        "train",
        "copy",
        "--steps",
        "100000",
        "--eval-every",
        "4",
        "--batch-size",
        "8",
        "--out",
        str(out),
        "--no-progress",
    ]
    result = launch(cmd, LAUNCH_TIMEOUT, poll=ctrl_c_once_the_first_checkpoint_exists)
    assert sent, f"the job ended before Ctrl-C:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    step = load_checkpoint(out).trainer_state["step"]
    said = f"typed-transformer train: interrupted at step {step}: the checkpoint in {out} holds step {step}"
    assert result.stderr.count(said) == 2, result.stderr[-4000:]  # both ranks, the same step
    assert step >= 4 and "Traceback" not in result.stderr.split("interrupted at step")[0]


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds torchrun's workers in /proc")
def test_sigterm_to_torchrun_and_every_rank_as_slurm_sends_it_saves_the_same_step_and_exits_143(tmp_path):
    """Slurm's time limit signals every process of the step: torchrun (which forwards SIGTERM to its workers, so each
    rank hears it twice) and every rank. Each rank's own handler takes it; the ranks finish the same step, save it once
    and each says so (signalled once the first periodic checkpoint shows the ranks are training)."""
    from transformer.checkpoint import load_checkpoint

    out = tmp_path / "copy"
    sent = []

    def sigterm_everyone_after_a_few_steps(proc):
        if sent or not (out / "meta.json").exists():
            return
        workers = worker_pids(proc.pid)
        if len(workers) == 2:
            for pid in workers.values():
                os.kill(pid, signal.SIGTERM)
            proc.send_signal(signal.SIGTERM)
            sent.append(1)

    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "transformer",
        "train",
        "copy",
        "--steps",
        "100000",
        "--eval-every",
        "4",
        "--batch-size",
        "8",
        "--out",
        str(out),
        "--no-progress",
    ]
    result = launch(cmd, LAUNCH_TIMEOUT, poll=sigterm_everyone_after_a_few_steps)
    assert sent, f"the job ended before SIGTERM:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    step = load_checkpoint(out).trainer_state["step"]
    said = f"typed-transformer train: interrupted by SIGTERM at step {step}: the checkpoint in {out} holds step {step}"
    assert result.stderr.count(said) == 2, result.stderr[-4000:]  # both ranks, the same step
    assert step >= 4 and "Traceback" not in result.stderr.split("interrupted by SIGTERM at step")[0]


def test_cli_fsdp_trains_dates_then_consolidates_for_decode(tmp_path):
    from transformer.cli import main

    out = tmp_path / "dates"
    result = torchrun(
        "-m",
        "transformer",
        "train",
        "dates",
        "--strategy",
        "fsdp",
        "--steps",
        "6",
        "--eval-every",
        "3",
        "--out",
        str(out),
        "--no-progress",
        "--eval-examples",
        "4",
    )
    check_ok(result)
    assert result.stdout.count("task dates:") == result.stdout.count("RESULTS {") == 1  # rank 0 prints, rank 1 not
    results = json.loads(result.stdout.split("RESULTS ", 1)[1].splitlines()[0])
    assert results["strategy"] == "fsdp" and results["world_size"] == 2 and results["steps"] == 6
    assert main(["decode", "--checkpoint", str(out), "fifth june 1912"]) == 2  # sharded: consolidate first
    assert main(["consolidate", str(out), str(tmp_path / "full")]) == 0
    assert main(["decode", "--checkpoint", str(tmp_path / "full"), "fifth june 1912"]) == 0


# ---------------------------------------------------------------------------- train lm / translate under torchrun
@pytest.fixture(scope="module")
def file_runs(tmp_path_factory) -> Path:
    """One launch of the worker ``cli``: every run of ``cli_runs`` on 2 ranks (the test writes the corpora)."""
    root = tmp_path_factory.mktemp("file-runs")
    write_corpus(root / "corpus.txt")
    write_pairs(root / "train.tsv", 200, seed=0)
    write_pairs(root / "valid.tsv", 12, seed=1)
    check_ok(torchrun(str(WORKER), "cli", str(root), timeout=150))  # about 15 s; a collective left waiting hangs
    return root


def _printed(root: Path, name: str, rank: int) -> str:
    return (root / f"{name}.rank{rank}.out").read_text()


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def _trained(root: Path) -> dict[str, list[str]]:
    return {name: argv for name, argv in cli_runs(root).items() if name != UNSHARABLE}


def test_cli_trains_lm_and_translate_under_ddp_and_fsdp_and_only_rank_0_prints(file_runs):
    for name, argv in _trained(file_runs).items():
        assert _printed(file_runs, name, 1) == "", f"{name}: rank 1 printed"
        printed = _printed(file_runs, name, 0)
        assert printed.count("RESULTS {") == 1, f"{name}:\n{printed}"
        results = json.loads(printed.split("RESULTS ", 1)[1].splitlines()[0])
        strategy = _flag(argv, "--strategy")
        assert (results["task"], results["strategy"], results["world_size"]) == (argv[1], strategy, 2), name
        assert results["steps"] == int(_flag(argv, "--steps")), name
        assert f"{strategy} on 2 processes (gloo)" in printed, name


def _resumed(name: str, argv: list[str]) -> bool:
    return "--resume" in argv or name == RESTARTED


def test_rank_0_prepares_the_data_and_the_other_ranks_read_it(file_runs):
    """Rank 0 trains the tokenizer and tokenizes the files into the cache; rank 1 then takes rank 0's tokenizer and
    reads that cache (it trains and writes nothing). A resumed run takes the checkpoint's tokenizer and, the files and
    tokenizer unchanged, the cache as it is."""
    for name, argv in _trained(file_runs).items():
        work = [read_json(file_runs / f"{name}.rank{r}.json") for r in range(2)]
        if _resumed(name, argv):
            assert work == [{"tokenizers": 0, "stores": 0, "code": 0}] * 2, name
        else:
            stores = 1 if argv[1] == "lm" else 4  # lm: one stream; translate: source and target, train and valid
            assert work == [
                {"tokenizers": 1, "stores": stores, "code": 0},
                {"tokenizers": 0, "stores": 0, "code": 0},
            ], name


def test_each_rank_trains_on_its_own_share_of_the_file_corpus(file_runs):
    """Rank r's training forwards ran exactly its share of the token-budget plan (batches r, r + 2, ... of each
    epoch), under DDP and FSDP, from the plan's start or, resumed, from where the checkpoint left it."""
    for name, argv in _trained(file_runs).items():
        ranks = [load_file(file_runs / f"{name}.rank{r}.safetensors") for r in range(2)]
        for rank, tensors in enumerate(ranks):
            start = int(tensors["start"])
            assert start == (2 if _resumed(name, argv) else 0), name
            steps = int(_flag(argv, "--steps")) - start
            assert len(tensors) == 2 * steps + 1, f"{name}: rank {rank} ran {(len(tensors) - 1) // 2} forwards"
            for i in range(steps):
                assert torch.equal(tensors[f"seen{i}"], tensors[f"expected{i}"]), (
                    f"{name}: rank {rank}'s batch {start + i} is not batch {start + i} of its share of the plan"
                )
        assert not any(torch.equal(ranks[0][f"seen{i}"], ranks[1][f"seen{i}"]) for i in range(2)), name


def test_an_epoch_the_ranks_cannot_share_is_a_one_line_error_on_every_rank(file_runs):
    for rank in range(2):
        assert read_json(file_runs / f"{UNSHARABLE}.rank{rank}.json")["code"] == 2
        assert (file_runs / f"{UNSHARABLE}.rank{rank}.err").read_text() == (
            "typed-transformer train: error: TokenBudgetPlan: 1 batches per epoch cannot be shared by world_size=2 "
            "ranks; lower max_tokens or use more data\n"
        )


def test_the_checkpoints_generate_and_decode_the_sharded_ones_after_consolidate(file_runs, tmp_path, capsys):
    from transformer.cli import main

    assert main(["generate", "--checkpoint", str(file_runs / "lm-ddp"), "--max-new-tokens", "5", "the cat"]) == 0
    assert capsys.readouterr().out.startswith("the cat")
    assert main(["generate", "--checkpoint", str(file_runs / "lm-fsdp"), "the cat"]) == 2
    assert "lm-fsdp is sharded (saved by --strategy fsdp); gather it first" in capsys.readouterr().err
    assert main(["consolidate", str(file_runs / "lm-fsdp"), str(tmp_path / "lm")]) == 0
    assert main(["generate", "--checkpoint", str(tmp_path / "lm"), "--max-new-tokens", "5", "the cat"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("the cat")
    assert main(["decode", "--checkpoint", str(file_runs / "tr-ddp"), "two six"]) == 0
    assert main(["consolidate", str(file_runs / "tr-fsdp"), str(tmp_path / "tr")]) == 0
    assert main(["decode", "--checkpoint", str(tmp_path / "tr"), "two six"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and "\t" not in out[-1]  # consolidate's line, then one translation each


def test_file_tasks_resume_exactly_under_torchrun(file_runs, tmp_path):
    """4 steps straight = 2 steps, then 2 more resumed, bit for bit: the LM under FSDP with --resume (its tokenizer
    read beside the shards) and the translation under DDP after a torchrun restart."""
    from transformer.distributed import consolidate_checkpoint

    assert f"resumed from {file_runs / 'lm-split'} at step 2" in _printed(file_runs, "lm-fsdp-resumed", 0)
    # the restart found the copy a save interrupted between its two renames left aside, as --resume would, and the
    # copy was deleted only once a newer checkpoint was in place
    assert f"restart 1: resumed from {file_runs / 'tr-split'} at step 2" in _printed(file_runs, RESTARTED, 0)
    assert "tr-split.old-crashed left by an interrupted save" in (file_runs / f"{RESTARTED}.rank0.err").read_text()
    assert not [name for name in os.listdir(file_runs) if ".old-" in name or ".tmp-" in name]
    weights = {}
    for name in ("lm-fsdp", "lm-split"):
        weights[name] = load_file(consolidate_checkpoint(file_runs / name, tmp_path / name) + "/model.safetensors")
    for name in ("tr-ddp", "tr-split"):
        weights[name] = load_file(file_runs / name / "model.safetensors")
    for straight, split in (("lm-fsdp", "lm-split"), ("tr-ddp", "tr-split")):
        histories = [read_json(file_runs / name / "state.json")["history"]["train_loss"] for name in (straight, split)]
        assert len(histories[0]) == 4 and histories[1] == histories[0], split
        assert weights[straight].keys() == weights[split].keys()
        for key in weights[straight]:
            assert torch.equal(weights[straight][key], weights[split][key]), f"{split}: {key}"
