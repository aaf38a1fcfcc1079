"""A mixture of experts on the CPU, ours against transformers' on the same weights (issue 44, "Speed and memory").

    python benchmarks/moe.py            # Mixtral-shaped, about 100M parameters, 8 experts, top-2, batch 8 x 256
    python benchmarks/moe.py --quick    # a few-million-parameter model, one repeat (a smoke run)

The script builds a random ``MixtralForCausalLM`` from its config (vocab 32000, d_model 512, 6 layers, 8 heads of
64 with 4 key/value heads, 8 experts of width 1024, top-2), saves it with transformers' ``save_pretrained`` and
measures, each in a fresh interpreter so that the peak resident memory (``VmHWM`` above the baseline after
loading) is the variant's own:

* ``theirs`` (transformers' default experts, ``grouped_mm``), ``theirs-eager`` (its loop over the experts hit),
  ``ours`` (TransformerLM.from_pretrained, contracts on) and ``ours-unchecked`` (``set_checks(False)``);
* the forward (logits of 8 x 256 tokens, no gradients) and one training step (forward, the cross-entropy, backward,
  AdamW step), median of ``--repeats`` after one warm-up.

Then, in this process, where the time of one of our blocks goes on the same 2048 tokens (router, dispatch: sort,
inverse and counts, gather, the experts, combine), the median of 20 calls each. Writes
``benchmarks/results/moe.json`` (command, date, versions, threads, load average before and after: the machine is
shared, the figures move with its load).
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
FULL = dict(vocab_size=32000, hidden_size=512, intermediate_size=1024, num_hidden_layers=6, num_attention_heads=8,
            num_key_value_heads=4, num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=512)  # fmt: skip
QUICK = dict(FULL, vocab_size=4000, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)  # fmt: skip

CHILD = r"""
import json, statistics, sys, time, torch
folder, variant, batch, seq, repeats, threads = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
torch.set_num_threads(threads)

def high_water_mark():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

if variant.startswith("theirs"):
    import transformers
    model = transformers.MixtralForCausalLM.from_pretrained(folder, attn_implementation="sdpa", dtype=torch.float32)
    if variant == "theirs-eager":
        model.config._experts_implementation = "eager"
    logits = lambda tokens: model(input_ids=tokens).logits
else:
    from transformer.contracts import set_checks
    from transformer.lm import TransformerLM
    model = TransformerLM.from_pretrained(folder, dtype=torch.float32)
    if variant == "ours-unchecked":
        set_checks(False)
    logits = lambda tokens: model.logits(tokens)
base = high_water_mark()
tokens = torch.randint(0, model.config.vocab_size if hasattr(model.config, "vocab_size") else model.config.vocab,
                       (batch, seq), generator=torch.Generator().manual_seed(0))
labels = torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(1))

def forward():
    with torch.no_grad():
        return logits(tokens)

optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
def step():
    out = logits(tokens)
    loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.size(-1)), labels.reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

result = {}
for name, fn, mode in (("forward", forward, "eval"), ("train_step", step, "train")):
    getattr(model, mode)()
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter(); fn(); times.append(time.perf_counter() - start)
    result[name + "_s"] = statistics.median(times)
    result[name + "_all_s"] = times
result["peak_rss_above_load_MiB"] = (high_water_mark() - base) / 2**20
result["parameters"] = sum(p.numel() for p in model.parameters())
print(json.dumps(result))
"""


def _load() -> list[float]:
    return list(os.getloadavg())


def dispatch_breakdown(folder: str, batch: int, seq: int, threads: int) -> dict:
    """Where the time of our first block goes on batch x seq tokens (median of 20 calls of each stage)."""
    from transformer.contracts import set_checks
    from transformer.lm import TransformerLM
    from transformer.lm.moe import dispatch

    torch.set_num_threads(threads)
    model = TransformerLM.from_pretrained(folder, dtype=torch.float32)
    block = model.layers[0].feed_forward
    x = torch.randn(batch * seq, block.d_model, generator=torch.Generator().manual_seed(0))
    routing = block.router(x)
    pairs = dispatch(routing.experts, block.router.n_experts)
    rows = pairs.gather(x)
    y = block.experts(rows, pairs.counts)
    stages = {
        "router (logits, float32 softmax, top-k)": lambda: block.router(x),
        "dispatch (stable sort, inverse, counts)": lambda: dispatch(routing.experts, block.router.n_experts),
        "gather (rows by expert)": lambda: pairs.gather(x),
        "experts (grouped_mm: one grouped matmul per projection)": lambda: block.experts(rows, pairs.counts),
        "combine (inverse, weights, sum of k)": lambda: pairs.combine(y, routing.weights),
        "whole block": lambda: block(x),
    }
    out = {}
    for checks in (True, False):
        set_checks(checks)
        timings = {}
        with torch.no_grad():
            for name, fn in stages.items():
                fn()
                times = []
                for _ in range(20):
                    start = time.perf_counter()
                    fn()
                    times.append(time.perf_counter() - start)
                timings[name] = round(statistics.median(times) * 1e3, 3)
        out["checks_on_ms" if checks else "checks_off_ms"] = timings
    set_checks(True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variants", default="theirs,theirs-eager,ours,ours-unchecked")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "moe.json"))
    args = parser.parse_args()
    import transformers

    shape = QUICK if args.quick else FULL
    repeats = 1 if args.quick else args.repeats
    batch, seq = 8, 256
    load_before = _load()
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        config = transformers.MixtralConfig(**shape, rms_norm_eps=1e-5, tie_word_embeddings=False)
        transformers.MixtralForCausalLM(config).save_pretrained(tmp)
        variants = {}
        for variant in args.variants.split(","):
            env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
            argv = [sys.executable, "-c", CHILD, tmp, variant, str(batch), str(seq), str(repeats), str(args.threads)]
            run = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
            variants[variant] = json.loads(run.stdout.strip().splitlines()[-1])
            print(variant, {k: v for k, v in variants[variant].items() if not k.endswith("_all_s")}, flush=True)
        breakdown = dispatch_breakdown(tmp, batch, seq, args.threads)
    theirs = variants["theirs"]
    result = {
        "command": " ".join(["python", "benchmarks/moe.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },  # fmt: skip
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads {args.threads}",
        "load_average_before_after": [load_before, _load()],
        "shape": {**shape, "batch": batch, "seq": seq, "parameters": theirs["parameters"]},
        "variants": variants,
        "ratios_ours_over_theirs": {
            name: {k: round(v[k] / theirs[k], 3) for k in ("forward_s", "train_step_s")} for name, v in variants.items()
        },
        "our_block_breakdown": breakdown,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["ratios_ours_over_theirs"], indent=2))
    print(json.dumps(breakdown, indent=2))


if __name__ == "__main__":
    main()
