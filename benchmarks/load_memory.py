"""Peak memory while `TransformerLM.from_pretrained` loads a checkpoint folder (issue 28, section 2).

    python benchmarks/load_memory.py            # a Llama-shaped model of about 520 MB (float32), 3 fresh processes
    python benchmarks/load_memory.py --quick    # about 40 MB, 1 process (what the tests run)

The script writes the checkpoint itself: a random Llama-shaped model (RMSNorm, rotary positions, SwiGLU, GQA) saved
with our `save_pretrained` into a temporary folder. Each measurement is a fresh interpreter that imports torch and
transformer, reads its resident-set high-water mark (`VmHWM` of /proc/self/status) as the baseline, loads the folder
and reads the mark again; the figure is the rise, divided by the size of `model.safetensors`. A second mark after
one forward pass (a few tokens) shows that nothing is mapped lazily and read later. Goal: at most 1.3x the checkpoint
above the baseline. Writes `benchmarks/results/load_memory.json` (command, device, versions, date, load average).
"""

from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parents[1]
GOAL = 1.3

CHILD = """
import json, sys, torch, transformer
from transformer.lm import TransformerLM

def high_water_mark():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")

baseline = high_water_mark()
model = TransformerLM.from_pretrained(sys.argv[1])
loaded = high_water_mark()
with torch.no_grad():
    model.logits(torch.arange(8)[None])
after_forward = high_water_mark()
print(json.dumps({"baseline": baseline, "loaded": loaded, "after_forward": after_forward,
                  "parameter_bytes": sum(p.numel() * p.element_size() for p in model.parameters())}))
"""


def llama_config(d_model: int, n_layers: int, vocab: int):
    from transformer.lm import LMConfig

    return LMConfig(
        vocab=vocab, n_layers=n_layers, d_model=d_model, d_ff=(8 * d_model) // 3 // 64 * 64, n_heads=d_model // 64,
        n_kv_heads=max(1, d_model // 256), max_len=2048, dropout=0.0, attention_dropout=0.0, norm="rms",
        layer_norm_eps=1e-5, positional_encoding="rotary", embedding_scale=1.0, activation="silu", ffn_gated=True,
        ffn_hidden_dropout=False, qkv_bias=False, out_bias=False, ffn_bias=False, lm_head_bias=False, pad_id=None,
    )  # fmt: skip


def write_checkpoint(folder: Path, d_model: int, n_layers: int, vocab: int) -> int:
    """A random Llama-shaped model saved with save_pretrained; the size of its model.safetensors in bytes."""
    from transformer.lm import build_lm

    torch.manual_seed(0)
    model = build_lm(llama_config(d_model, n_layers, vocab))
    model.save_pretrained(folder)
    del model
    return (folder / "model.safetensors").stat().st_size


def measure(folder: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder)], check=True, capture_output=True, text=True, cwd=ROOT
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


FORK_SERVER = """
import json, os, sys
import torch, transformer
from transformer.lm import TransformerLM
child = sys.argv[1]
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        try:
            sys.argv = [sys.argv[0], line.strip()]
            exec(child, {"__name__": "__main__"})
        except BaseException as error:
            print(json.dumps({"error": repr(error)}))
        finally:
            sys.stdout.flush()
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status:
        print(json.dumps({"error": f"the measuring child ended with status {status}"}), flush=True)
"""


class ForkedMeasurements:
    """:func:`measure` for many folders at the cost of one interpreter's imports (the tests' way): each folder is
    loaded by a child forked from one interpreter that imported torch and transformer and loaded nothing; the child
    reads its baseline and its peak as :data:`CHILD` does. Stricter than a fresh interpreter: the pages of the
    libraries that the fork does not carry over resident (mapped files) count in the rise when the load touches them
    again (about 9 MiB here, on any folder). Close it (or use it as a context manager) to end the interpreter."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", FORK_SERVER, CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
        )  # fmt: skip

    def measure(self, folder: Path) -> dict:
        self.process.stdin.write(f"{folder}\n")
        self.process.stdin.flush()
        run = json.loads(self.process.stdout.readline() or '{"error": "the measuring interpreter ended"}')
        if "error" in run:
            raise RuntimeError(f"measuring {folder}: {run['error']}")
        return run

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.process.stdout.close()

    def __enter__(self) -> ForkedMeasurements:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--processes", type=int, default=3, help="fresh processes measured (the median is reported)")
    p.add_argument("--quick", action="store_true", help="d_model 256, 2 layers, vocab 8000, one process")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "load_memory.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.d_model, args.layers, args.vocab, args.processes = 256, 2, 8000, 1
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="load_memory_") as tmp:
        folder = Path(tmp) / "llama"
        size = write_checkpoint(folder, args.d_model, args.layers, args.vocab)
        runs = [measure(folder) for _ in range(args.processes)]
    load_after = os.getloadavg()
    rise = [r["loaded"] - r["baseline"] for r in runs]
    rise_forward = [r["after_forward"] - r["baseline"] for r in runs]
    ratio = statistics.median(rise) / size
    ratio_forward = statistics.median(rise_forward) / size
    mib = 1024 * 1024
    print(
        f"load memory: Llama-shaped d_model {args.d_model}, {args.layers} layers, vocab {args.vocab}; "
        f"model.safetensors {size / mib:.1f} MiB; {args.processes} fresh processes; Python "
        f"{platform.python_version()}, torch {torch.__version__}, {os.cpu_count()} CPUs"
    )
    print(f"{'measure':44s} | {'MiB (median)':>12s} | {'x checkpoint':>12s}")
    baseline = statistics.median(r["baseline"] for r in runs)
    print(f"{'baseline (import torch, transformer)':44s} | {baseline / mib:12.1f} |")
    print(f"{'peak rise while from_pretrained loads':44s} | {statistics.median(rise) / mib:12.1f} | {ratio:12.3f}")
    forward = statistics.median(rise_forward)
    print(f"{'peak rise after one forward pass':44s} | {forward / mib:12.1f} | {ratio_forward:12.3f}")
    print(f"goal: at most {GOAL}x the checkpoint above the baseline: {'met' if ratio <= GOAL else 'MISSED'}")
    result = {
        "benchmark": "peak resident memory while TransformerLM.from_pretrained loads a checkpoint",
        "command": "python benchmarks/load_memory.py" + (" " + " ".join(argv) if argv else ""),
        "model": {
            "shape": "Llama (RMSNorm, rotary, SwiGLU, GQA)",
            "d_model": args.d_model,
            "layers": args.layers,
            "vocab": args.vocab,
            "dtype": "float32",
        },
        "checkpoint_bytes": size,
        "processes": args.processes,
        "runs": runs,
        "peak_rise_bytes": statistics.median(rise),
        "peak_rise_ratio": round(ratio, 4),
        "peak_rise_after_forward_ratio": round(ratio_forward, 4),
        "goal": f"peak_rise_ratio <= {GOAL}",
        "met": ratio <= GOAL,
        "device": f"CPU ({platform.machine()}, {os.cpu_count()} CPUs)",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "safetensors": _version("safetensors"),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return result


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
