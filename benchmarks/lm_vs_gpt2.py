"""Our language model against Hugging Face GPT-2 of the same size: a training step and cached greedy generation.

    python benchmarks/lm_vs_gpt2.py            # 12 alternating rounds: about 4 minutes on an idle 2-core machine
    python benchmarks/lm_vs_gpt2.py --quick    # 3 rounds, about 1 minute
    python benchmarks/lm_vs_gpt2.py --profile  # and where the time goes (torch.profiler), about 20 s more

Both models are built in code (no download) at the sizes of issue 22: 4 layers, d_model 256, 8 heads, d_ff 1024,
vocabulary 2000, 256 positions. Ours is the GPT-2-like configuration of docs/lm.md (learned positions, GELU, no
dropout inside the feed-forward block, tied output, LayerNorm eps 1e-5, embeddings unscaled); GPT-2 is
``GPT2LMHeadModel`` with ``attn_implementation="sdpa"`` and ``activation_function="gelu"`` (so that both compute the
same function: tests/test_lm_gpt2.py). Ours runs with checks on (the default) and, for reference, off; generation
with checks on runs the default ``checks="first"`` (the first two steps checked) and, as "ours, checks always",
``checks="always"`` (every step).

* **training step**: batch 16 x 128, forward, cross-entropy, backward, AdamW step (dropout 0.1 in both);
* **generation**: 64 new tokens after a 16-token prompt, greedy, with the key/value cache, batch 1 and batch 8
  (``transformer.lm.generation.generate`` and ``GPT2LMHeadModel.generate(min_new_tokens=64)``).

Each round runs every variant once, the order rotated; the table shows medians and, for each of ours, the median of
its per-round speed ratio to GPT-2 (above 1: faster). Writes ``benchmarks/results/lm_vs_gpt2.json`` with the load
average before and after. The machine is shared: figures taken under load are provisional.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import transformer as T
from transformer.lm import build_lm
from transformer.lm.config import LMConfig
from transformer.lm.generation import generate

ROOT = Path(__file__).resolve().parents[1]
SIZES = dict(vocab=2000, n_layers=4, d_model=256, n_heads=8, max_len=256)


def gpt2_like(
    vocab: int = 50257, n_layers: int = 12, d_model: int = 768, n_heads: int = 12, max_len: int = 1024, **fields
) -> LMConfig:
    """The GPT-2-like configuration of docs/lm.md."""
    return LMConfig(
        vocab=vocab,
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        d_ff=4 * d_model,
        max_len=max_len,
        positional_encoding="learned",
        embedding_scale=1.0,
        activation="gelu",
        layer_norm_eps=1e-5,
        ffn_hidden_dropout=False,
        tie_weights=True,
        **fields,
    )


def hf_gpt2(vocab: int, n_layers: int, d_model: int, n_heads: int, max_len: int):
    import transformers

    config = transformers.GPT2Config(
        vocab_size=vocab,
        n_positions=max_len,
        n_embd=d_model,
        n_layer=n_layers,
        n_head=n_heads,
        n_inner=4 * d_model,
        activation_function="gelu",
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
    )
    model = transformers.GPT2LMHeadModel._from_config(copy.deepcopy(config), attn_implementation="sdpa")
    assert model.config._attn_implementation == "sdpa", model.config._attn_implementation
    return model


def _train_step(model, optimizer, x, y, ours: bool):
    def step():
        if ours:
            loss = F.nll_loss(model.generator(model(x)).flatten(0, 1), y.flatten())
        else:
            loss = F.cross_entropy(model(input_ids=x).logits.flatten(0, 1), y.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _generate(model, prompt, new: int, ours: bool, policy: str = "first"):
    if ours:
        return lambda: generate(model, prompt, new, checks=policy)
    mask = torch.ones_like(prompt)
    return lambda: model.generate(
        prompt,
        attention_mask=mask,
        max_new_tokens=new,
        min_new_tokens=new,
        do_sample=False,
        use_cache=True,
        pad_token_id=0,
    )


def _with_checks(fn, enabled: bool):
    def run():
        with T.checks(enabled):
            return fn()

    return run


def variants(batch: int, length: int, prompt_len: int, new: int) -> dict[str, dict[str, callable]]:
    """{task: {variant: function}}, each variant on its own model (the same initial weights for ours on and off)."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, SIZES["vocab"], (batch, length), generator=g)
    y = torch.randint(1, SIZES["vocab"], (batch, length), generator=g)
    tasks: dict[str, dict] = {"training step": {}}
    torch.manual_seed(0)
    model = build_lm(gpt2_like(**SIZES)).train()  # one model and optimizer for checks on and off (see train_step.py)
    step = _train_step(model, torch.optim.AdamW(model.parameters()), x, y, ours=True)
    for name, enabled in (("ours, checks on", True), ("ours, checks off", False)):
        tasks["training step"][name] = _with_checks(step, enabled)
    torch.manual_seed(0)
    gpt2 = hf_gpt2(**SIZES).train()
    tasks["training step"]["GPT-2 (sdpa)"] = _train_step(gpt2, torch.optim.AdamW(gpt2.parameters()), x, y, ours=False)
    ours_eval = build_lm(gpt2_like(**SIZES)).eval()
    gpt2_eval = hf_gpt2(**SIZES).eval()
    for gen_batch in (1, 8):
        prompt = torch.randint(1, SIZES["vocab"], (gen_batch, prompt_len), generator=g)
        tasks[f"generation, batch {gen_batch}"] = {
            "ours, checks on": _with_checks(_generate(ours_eval, prompt, new, ours=True), True),
            "ours, checks always": _with_checks(_generate(ours_eval, prompt, new, ours=True, policy="always"), True),
            "ours, checks off": _with_checks(_generate(ours_eval, prompt, new, ours=True), False),
            "GPT-2 (sdpa)": _generate(gpt2_eval, prompt, new, ours=False),
        }
        lengths = {len(fn()[0]) for fn in tasks[f"generation, batch {gen_batch}"].values()}
        assert lengths == {prompt_len + new}, lengths  # every variant generates exactly `new` tokens
    return tasks


def _probes(fn) -> int:
    """Contract probes in one run of ``fn``: each checked call (and token-id guard) asks once whether torch.compile
    is tracing."""
    count = 0

    def counting():
        nonlocal count
        count += 1
        return False

    real = torch.compiler.is_compiling
    torch.compiler.is_compiling = counting
    try:
        fn()
    finally:
        torch.compiler.is_compiling = real
    return count


def profile(tasks: dict, top: int = 12) -> dict:
    """torch.profiler over one run of ours (checks on) and GPT-2 per task: wall time, the time inside aten operators
    (self CPU time summed), the rest (Python: modules, contracts, generation loop), the number of operator calls, and
    the operators that differ most between the two."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    out = {}
    for task, vs in tasks.items():
        rows = {}
        for name in ("ours, checks on", "GPT-2 (sdpa)"):
            vs[name]()  # warm
            with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
                start = time.perf_counter()
                vs[name]()
                wall = time.perf_counter() - start
            events = [e for e in prof.key_averages() if e.key.startswith("aten::")]
            ops = {e.key: (e.count, e.self_cpu_time_total / 1e3) for e in events}
            in_ops = sum(ms for _, ms in ops.values())
            rows[name] = {
                "wall_ms": round(1e3 * wall, 2),
                "aten_self_ms": round(in_ops, 2),
                "outside_aten_ms": round(1e3 * wall - in_ops, 2),
                "aten_calls": sum(c for c, _ in ops.values()),
                "ops": ops,
            }
        ours, theirs = rows["ours, checks on"]["ops"], rows["GPT-2 (sdpa)"]["ops"]
        keys = set(ours) | set(theirs)
        diff = sorted(keys, key=lambda k: -abs(ours.get(k, (0, 0))[1] - theirs.get(k, (0, 0))[1]))[:top]
        out[task] = {name: {k: v for k, v in r.items() if k != "ops"} for name, r in rows.items()} | {
            "largest_differences_ms": {
                k: {
                    "ours": [ours.get(k, (0, 0))[0], round(ours.get(k, (0, 0))[1], 2)],
                    "gpt2": [theirs.get(k, (0, 0))[0], round(theirs.get(k, (0, 0))[1], 2)],
                }
                for k in diff
            }
        }
        print(f"\nprofile, {task}: (calls, ms)")
        for name, r in rows.items():
            print(
                f"  {name:18s} wall {r['wall_ms']:8.1f} ms = aten {r['aten_self_ms']:8.1f} ms + outside "
                f"{r['outside_aten_ms']:8.1f} ms, {r['aten_calls']} aten calls"
            )
        for k, v in out[task]["largest_differences_ms"].items():
            print(f"  {k:40s} ours {v['ours']!s:18s} GPT-2 {v['gpt2']!s:18s}")
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--quick", action="store_true", help="3 rounds")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--length", type=int, default=128)
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--profile", action="store_true", help="also profile one run of each task (torch.profiler)")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "lm_vs_gpt2.json"))
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    rounds = 3 if args.quick else args.rounds
    import transformers

    tasks = variants(args.batch, args.length, args.prompt, args.new_tokens)
    probes = {
        (task, name): _probes(vs[name])
        for task, vs in tasks.items()
        for name in ("ours, checks on", "ours, checks always")
        if name in vs
    }
    costs = ROOT / "benchmarks" / "results" / "contracts_overhead.json"
    mean_us = None
    if costs.exists():  # the mean cost of one contract, measured by benchmarks/contracts_overhead.py
        mean_us = statistics.mean(r["contract_after_us"] for r in json.loads(costs.read_text())["per_call"].values())
    load_before = os.getloadavg()
    times = {task: {name: [] for name in vs} for task, vs in tasks.items()}
    for vs in tasks.values():  # warm-up
        for fn in vs.values():
            fn()
    for r in range(rounds):
        for task, vs in tasks.items():
            names = list(vs)
            for name in names[r % len(names) :] + names[: r % len(names)]:
                start = time.perf_counter()
                vs[name]()
                times[task][name].append(time.perf_counter() - start)
    load_after = os.getloadavg()
    print(
        f"our LM (GPT-2-like config) vs Hugging Face GPT-2 {transformers.__version__} (sdpa), 4 layers, d_model 256, "
        f"8 heads, vocab 2000; {rounds} alternating rounds, {torch.get_num_threads()} threads, torch "
        f"{torch.__version__}, load average {load_before[0]:.2f} -> {load_after[0]:.2f}"
    )
    rows = []
    print(f"{'task':22s} | {'variant':20s} | {'median':>10s} | {'speed vs GPT-2':>14s}")
    for task, by_name in times.items():
        base = by_name["GPT-2 (sdpa)"]
        for name, values in by_name.items():
            ratio = statistics.median(b / v for b, v in zip(base, values, strict=True))
            rows.append(
                {
                    "task": task,
                    "variant": name,
                    "median_ms": round(1e3 * statistics.median(values), 2),
                    "speed_vs_gpt2": round(ratio, 3),
                    "times_ms": [round(1e3 * v, 2) for v in values],
                }
            )
            print(f"{task:22s} | {name:20s} | {1e3 * statistics.median(values):7.1f} ms | {ratio:13.2f}x")
        for name, label in (
            ("ours, checks on", "checks on vs off (ours)"),
            ("ours, checks always", "checks always vs off (ours)"),
        ):
            if name not in by_name:
                continue
            on, off = by_name[name], by_name["ours, checks off"]
            checks = statistics.median(b / a for a, b in zip(on, off, strict=True))
            count = probes[(task, name)]
            share = None if mean_us is None else count * mean_us * 1e-6 / statistics.median(on)
            rows.append(
                {
                    "task": task,
                    "variant": label,
                    "speed_on_vs_off": round(checks, 3),
                    "contract_probes": count,
                    "contract_share_from_per_call_cost": None if share is None else round(share, 5),
                }
            )
            print(f"{task:22s} | {label.split(' (')[0]:20s} | {'':>10s} | {checks:13.3f}x (speed against checks off)")
            if share is not None:
                print(
                    f"{'':22s} | {'contracts share':20s} | {'':>10s} | {100 * share:12.2f}%  ({count} checked calls "
                    f"x {mean_us:.2f} us)"
                )
    profiles = profile(tasks) if args.profile else None
    result = {
        "benchmark": "our LM vs Hugging Face GPT-2",
        "setup": vars(args) | {"rounds": rounds, **SIZES},
        "rows": rows,
        "profile": profiles,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "date": time.strftime("%Y-%m-%d"),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
