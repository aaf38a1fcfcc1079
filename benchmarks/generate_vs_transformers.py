"""Our generation, prefill and training step against transformers' ``LlamaForCausalLM``, on the same weights.

    python benchmarks/generate_vs_transformers.py            # 30M and 120M, 3 alternating rounds: an idle machine
    python benchmarks/generate_vs_transformers.py --quick    # a dry run at tiny sizes, one round (seconds)
    python benchmarks/generate_vs_transformers.py --sizes 30M --batches 1 --new-tokens 64   # one short case
    python benchmarks/generate_vs_transformers.py --profile  # and where our generation's time goes (torch.profiler)

For each size a Llama-shaped model with random weights is built by transformers (``LlamaConfig``: grouped-query
attention, vocabulary 32000, RoPE, RMSNorm, SwiGLU, no biases, untied head), saved with its ``save_pretrained``,
then loaded twice from that folder: by transformers (``LlamaForCausalLM.from_pretrained``, its default attention,
sdpa) and by us (``TransformerLM.from_pretrained``), both float32 on the CPU, so both compute with the same weights.
Ours runs with the contracts checked as by default (``generate``'s ``checks="first"``: the prompt and the first
steps checked; the training step checked at every call).

* **generation**: a 128-token prompt, 256 new tokens, greedy, with each library's key/value cache (theirs: its
  default ``DynamicCache``), batch 1 and 8. transformers' ``generate`` gets ``min_new_tokens`` = ``max_new_tokens``
  and no end-of-sequence id, so both produce exactly N tokens; the tokens are compared (``tokens_equal``; greedy on
  the same weights gives the same tokens unless two logits tie to float32 rounding, and the first step where they
  differ is recorded). Figures: tokens/s (batch x new tokens / wall time) and ours / theirs.
* **prefill**: a 512-token prompt, batch 1, into an empty cache, to the next token's logits (the time to the first
  token: generation's first step; transformers' ``generate`` computes the head at the last position only, and so
  does ours).
* **training step** (the 30M model): batch 4 x 256, forward, cross-entropy over the logits, backward, AdamW.

Each round runs every variant once, alternating which goes first; the table shows medians and the median of the
per-round speed ratios (ours / theirs, above 1: we are faster). The goals (issue 28): generation >= 1.2x at 30M,
>= 1.05x at 120M; prefill and training step >= 1.0x. Writes ``benchmarks/results/generate_vs_transformers.json``
(the command, device, versions, date, load average before and after). Figures for the record come from an idle
machine; under load they are provisional.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from transformer.lm import TransformerLM
from transformer.lm.generation import generate

ROOT = Path(__file__).resolve().parents[1]
#: Llama-shaped sizes: (hidden, layers, heads, key/value heads, intermediate, vocabulary).
SIZES = {
    "30M": dict(hidden=384, layers=4, heads=6, kv_heads=2, ffn=1024, vocab=32000),
    "120M": dict(hidden=768, layers=12, heads=12, kv_heads=4, ffn=2048, vocab=32000),
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=128, vocab=1000),
}
GOALS = {"30M": 1.2, "120M": 1.05}


def write_llama(folder: Path, size: dict, max_len: int) -> int:
    """A random ``LlamaForCausalLM`` of ``size`` saved into ``folder``; returns its parameter count."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    config = transformers.LlamaConfig(
        vocab_size=size["vocab"],
        hidden_size=size["hidden"],
        intermediate_size=size["ffn"],
        num_hidden_layers=size["layers"],
        num_attention_heads=size["heads"],
        num_key_value_heads=size["kv_heads"],
        max_position_embeddings=max_len,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(copy.deepcopy(config))
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def load_pair(folder: Path):
    """Theirs (transformers, default attention) and ours, float32, eval mode, from the same folder."""
    import transformers

    theirs = transformers.LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    ours = TransformerLM.from_pretrained(folder, dtype=torch.float32).eval()
    return ours, theirs


def _ours_generate(model, prompt, new):
    return lambda: generate(model, prompt, new)


def _theirs_generate(model, prompt, new):
    mask = torch.ones_like(prompt)
    return lambda: model.generate(
        prompt,
        attention_mask=mask,
        max_new_tokens=new,
        min_new_tokens=new,
        do_sample=False,
        use_cache=True,
        eos_token_id=None,
        pad_token_id=0,
    )


def _first_difference(a: torch.Tensor, b: torch.Tensor, prompt_len: int) -> int | None:
    """The first generated step (0-based) where the rows of ``a`` and ``b`` differ, or None."""
    differs = (a != b).any(dim=0).nonzero()
    return None if differs.numel() == 0 else int(differs[0, 0]) - prompt_len


def _prefill(model, prompt, ours: bool):
    """The first step of generation: the prompt through the model into an empty cache, the next token's logits
    (theirs as its ``generate`` asks for them: ``logits_to_keep=1``; ours ``next_token_log_probs``)."""
    if ours:
        return lambda: model.next_token_log_probs(prompt, model.new_cache())
    return lambda: model(input_ids=prompt, use_cache=True, logits_to_keep=1).logits[:, -1]


def _train_step(model, x, y, ours: bool):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        logits = model.logits(x) if ours else model(input_ids=x).logits
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def cases(name: str, size: dict, args, workdir: Path) -> tuple[dict, dict]:
    """{case: {"ours": fn, "theirs": fn}} for one size, and what was checked (parameters, tokens equal)."""
    folder = workdir / name
    max_len = max(args.prompt + args.new_tokens, args.prefill)
    params = write_llama(folder, size, max_len)
    ours, theirs = load_pair(folder)
    g = torch.Generator().manual_seed(1)
    out, checked = {}, {"parameters": params}
    with torch.no_grad():
        for batch in args.batches:
            prompt = torch.randint(0, size["vocab"], (batch, args.prompt), generator=g)
            mine, their = (
                _ours_generate(ours, prompt, args.new_tokens),
                _theirs_generate(theirs, prompt, args.new_tokens),
            )
            a, b = mine(), their()
            assert a.shape == b.shape == (batch, args.prompt + args.new_tokens), (a.shape, b.shape)
            first = _first_difference(a, b, args.prompt)
            checked[f"generation, batch {batch}"] = {"tokens_equal": first is None, "first_difference_at": first}
            out[f"generation, batch {batch}"] = {"ours": mine, "theirs": their, "tokens": batch * args.new_tokens}
        prompt = torch.randint(0, size["vocab"], (1, args.prefill), generator=g)
        log_probs_ours = _prefill(ours, prompt, True)()
        log_probs_theirs = torch.log_softmax(_prefill(theirs, prompt, False)(), dim=-1)
        error = (log_probs_ours - log_probs_theirs).abs().max().item() / log_probs_theirs.abs().max().item()
        checked[f"prefill {args.prefill}"] = {"max_relative_logit_difference": error}
    out[f"prefill {args.prefill}"] = {"ours": _prefill(ours, prompt, True), "theirs": _prefill(theirs, prompt, False)}
    if name in args.train_sizes:
        x = torch.randint(0, size["vocab"], (args.train_batch, args.train_len + 1), generator=g)
        train_ours, train_theirs = load_pair(folder)
        out["training step"] = {
            "ours": _train_step(train_ours.train(), x[:, :-1], x[:, 1:], True),
            "theirs": _train_step(train_theirs.train(), x[:, :-1], x[:, 1:], False),
        }
    return out, checked


def measure(fns: dict, rounds: int) -> dict[str, list[float]]:
    """Seconds per run of ``ours`` and ``theirs``, alternating which goes first (after one warm-up run each)."""
    times = {"ours": [], "theirs": []}
    grad = torch.enable_grad if "step" in str(fns.get("kind", "")) else torch.no_grad
    for fn in (fns["ours"], fns["theirs"]):
        with grad():
            fn()
    for r in range(rounds):
        order = ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")
        for who in order:
            with grad():
                start = time.perf_counter()
                fns[who]()
                times[who].append(time.perf_counter() - start)
    return times


def profile_generation(fn, top: int = 15) -> list[dict]:
    """The aten operators (and our Python functions) that take the most time in one run of ``fn``."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:top]
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))
    return [{"op": e.key, "calls": e.count, "self_ms": round(e.self_cpu_time_total / 1e3, 2)} for e in events]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a dry run: tiny sizes, short requests, one round")
    p.add_argument("--sizes", default="30M,120M", help="comma-separated, of " + ", ".join(SIZES))
    p.add_argument("--batches", default="1,8", help="generation batch sizes, comma-separated")
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--prefill", type=int, default=512, help="prompt length of the prefill case")
    p.add_argument("--train-sizes", default="30M", help="sizes whose training step is measured")
    p.add_argument("--train-batch", type=int, default=4)
    p.add_argument("--train-len", type=int, default=256)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--profile", action="store_true", help="profile one run of our generation per size")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "generate_vs_transformers.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.train_sizes, args.rounds = "tiny", "tiny", 1
        args.prompt, args.new_tokens, args.prefill, args.train_len = 16, 8, 32, 16
    args.sizes = args.sizes.split(",")
    args.train_sizes = args.train_sizes.split(",")
    args.batches = [int(b) for b in args.batches.split(",")]
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    load_before = os.getloadavg()
    rows, checks, profiles = [], {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.sizes:
            fns, checked = cases(name, SIZES[name], args, Path(tmp))
            checks[name] = checked
            if args.profile:
                profiles[name] = profile_generation(fns[f"generation, batch {args.batches[0]}"]["ours"])
            for case, pair in fns.items():
                pair["kind"] = case
                times = measure(pair, args.rounds)
                ratio = statistics.median(t / o for o, t in zip(times["ours"], times["theirs"], strict=True))
                row = {
                    "size": name,
                    "parameters": checked["parameters"],
                    "case": case,
                    "ours_ms": round(1e3 * statistics.median(times["ours"]), 2),
                    "theirs_ms": round(1e3 * statistics.median(times["theirs"]), 2),
                    "speed_ours_vs_theirs": round(ratio, 3),
                    "goal": GOALS.get(name, 1.0) if case.startswith("generation") else 1.0,
                    "times_ms": {who: [round(1e3 * t, 2) for t in ts] for who, ts in times.items()},
                }
                if "tokens" in pair:
                    row["ours_tokens_per_s"] = round(pair["tokens"] / statistics.median(times["ours"]), 1)
                    row["theirs_tokens_per_s"] = round(pair["tokens"] / statistics.median(times["theirs"]), 1)
                row.update(checked.get(case, {}))
                rows.append(row)
    load_after = os.getloadavg()
    print(
        f"ours vs transformers {transformers.__version__} LlamaForCausalLM (same weights, float32, CPU), "
        f"{args.rounds} alternating round(s), {torch.get_num_threads()} threads, torch {torch.__version__}, "
        f"load average {load_before[0]:.2f} -> {load_after[0]:.2f}"
    )
    print(f"{'size':5s} | {'case':20s} | {'ours':>10s} | {'theirs':>10s} | {'ours/theirs':>11s} | goal | checked")
    for r in rows:
        rate = (
            f" ({r['ours_tokens_per_s']:.0f} vs {r['theirs_tokens_per_s']:.0f} tok/s)"
            if "ours_tokens_per_s" in r
            else ""
        )
        check = (
            ("tokens equal" if r["tokens_equal"] else f"tokens differ from step {r['first_difference_at']}")
            if "tokens_equal" in r
            else (
                f"logits within {r['max_relative_logit_difference']:.1e}"
                if "max_relative_logit_difference" in r
                else ""
            )
        )
        met = "met" if r["speed_ours_vs_theirs"] >= r["goal"] else "MISSED"
        print(
            f"{r['size']:5s} | {r['case']:20s} | {r['ours_ms']:7.1f} ms | {r['theirs_ms']:7.1f} ms | "
            f"{r['speed_ours_vs_theirs']:10.2f}x | {r['goal']:.2f} {met} | {check}{rate}"
        )
    result = {
        "benchmark": "generation, prefill and training step: ours vs transformers LlamaForCausalLM",
        "command": "python benchmarks/generate_vs_transformers.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "setup": {k: v for k, v in vars(args).items() if k != "json"}
        | {"sizes_detail": {n: SIZES[n] for n in args.sizes}},
        "rows": rows,
        "profile": profiles or None,
        **run_record(load_before, load_after),
    }
    return write_result(args.json, result)


def run_record(load_before: tuple[float, ...], load_after: tuple[float, ...]) -> dict:
    """Where and when a run ran, for its JSON (this script's and benchmarks/generate_roofline.py's): the device,
    the versions, torch's threads, the load average before and after (figures under load are provisional), the date."""
    import transformers

    return {
        "device": f"cpu ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def write_result(path: str, result: dict) -> dict:
    """``result`` as indented JSON at ``path`` (its folder made), said on stdout; returns it."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    Path(path).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    main()
