"""What torch.distributed costs on the CPU: one training step of the copy task alone, under DDP and under FSDP2.

The job is `typed-transformer train copy`'s (make_trainer: N=2, d_model 64, d_ff 128, 4 heads, 169,803 parameters,
global batch 80, checks on as in the CLI, one torch thread per process). Configurations:

* ``single``: one process, batch 80;
* ``ddp`` / ``fsdp``: ``torchrun --standalone --nproc_per_node=2``, gloo, 2 ranks x 40 (the same global batch).

Each reports the median wall time of an optimizer step after a warm-up, and the tokens per second of the job.
The DDP workers also time a bare gloo all-reduce of a float32 buffer of the model's size (what DDP all-reduces
once per step). Prints a table, writes JSON::

    python benchmarks/distributed.py --out benchmarks/results/distributed_cpu.json

On a machine with fewer free cores than ranks the ranks share cores: the step times then measure contention as
much as communication; the JSON records the load average before and after.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve()
GLOBAL_BATCH = 80


def _worker(strategy_name: str, steps: int, warmup: int, out: Path) -> None:
    from transformer.tasks import CopyTask, make_trainer

    torch.set_num_threads(1)
    strategy = None
    if strategy_name != "single":
        from transformer.distributed import setup

        strategy = setup(strategy_name, "cpu")
    trainer = make_trainer(CopyTask(), steps=warmup + steps, batch_size=GLOBAL_BATCH, seed=0, eval_every=0)
    if strategy is not None:
        trainer.distribute(strategy)
    times = []
    for i in range(warmup + steps):
        if strategy is not None:
            strategy.barrier()
        start = time.perf_counter()
        trainer.train_step()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    tokens_per_step = trainer.tokens / trainer.step
    result = {
        "ms_per_step": 1e3 * statistics.median(times),
        "ms_per_step_min": 1e3 * min(times),
        "tokens_per_step": tokens_per_step,
        "tokens_per_s": tokens_per_step / statistics.median(times),
        "examples_per_rank": GLOBAL_BATCH // (strategy.world_size if strategy else 1),
        "final_train_loss": trainer.last_train_loss,
    }
    if strategy is not None and strategy_name == "ddp":
        import torch.distributed as dist

        n = sum(p.numel() for p in trainer.model.parameters())
        buffer = torch.zeros(n)
        reps = []
        for _ in range(5 + 30):
            strategy.barrier()
            start = time.perf_counter()
            dist.all_reduce(buffer)
            reps.append(time.perf_counter() - start)
        result["gloo_all_reduce_ms"] = 1e3 * statistics.median(reps[5:])
        result["all_reduce_elements"] = n
    if strategy is None or strategy.is_main:
        out.write_text(json.dumps(result))
    if strategy is not None:
        strategy.barrier()
        strategy.close()


def _run(strategy_name: str, steps: int, warmup: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        worker = [
            str(SCRIPT),
            "--worker",
            strategy_name,
            "--steps",
            str(steps),
            "--warmup",
            str(warmup),
            "--result",
            str(out),
        ]
        if strategy_name == "single":
            cmd = [sys.executable, *worker]
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *worker]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run(cmd, check=True, env=env, capture_output=True, text=True, timeout=1800)
        return json.loads(out.read_text())


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"{platform.machine()}, {os.cpu_count()} cores"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    parser.add_argument("--out", default=None, help="JSON result file")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker, args.steps, args.warmup, Path(args.result))
        return 0

    load_before = os.getloadavg()
    results = {}
    for name in ("single", "ddp", "fsdp"):
        results[name] = _run(name, args.steps, args.warmup)
        print(
            f"{name:7s} {results[name]['ms_per_step']:8.1f} ms/step  {results[name]['tokens_per_s']:9.0f} tokens/s",
            flush=True,
        )
    single = results["single"]["ms_per_step"]
    for name in ("ddp", "fsdp"):
        results[name]["step_time_vs_single"] = results[name]["ms_per_step"] / single
    print(
        f"gloo all-reduce of {results['ddp']['all_reduce_elements']:,} floats: "
        f"{results['ddp']['gloo_all_reduce_ms']:.2f} ms"
    )
    report = {
        "benchmark": "distributed",
        "date": datetime.date.today().isoformat(),
        "command": "python benchmarks/distributed.py" + (f" --out {args.out}" if args.out else ""),
        "device": f"CPU: {_cpu()}; 1 torch thread per process; gloo over loopback",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "settings": {
            "task": "copy",
            "global_batch": GLOBAL_BATCH,
            "ranks": 2,
            "steps": args.steps,
            "warmup": args.warmup,
            "checks": "always (as the CLI)",
        },
        "results": results,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
