"""A seeded differential fuzzer of the checkpoint loader and generation against transformers (the oracle).

Each case draws, from its seed, one supported architecture's config (layers, heads and key/value heads that need
not be powers of two: 3 or 6 heads with 1 or 3 key/value heads, head dims, vocabulary, the RoPE rules the
architecture implements, tied or untied head, biases, sliding windows), builds transformers' model from its own
config class with random weights (1-D parameters spread out, as ``pretrained_helpers``), writes it with
``save_pretrained`` in float32, bfloat16 and float16 folders, and loads each folder both ways: ours with
``TransformerLM.from_pretrained``, theirs with ``AutoModelForCausalLM.from_pretrained`` (sdpa attention; eager for
Gemma 2 and 3, whose random configs draw windows on random layers, soft caps and Gemma 3's two RoPE bases;
GPT-NeoX's draw the parallel residual or not and the rotated fraction). On a
left-padded batch of random prompts it compares, per dtype:

* ``logits``: on the real positions. float32: within 1e-5 x max|logit| (the parity tests' bound). bfloat16 and
  float16: "the same" is "as close to the exact function as transformers is in that dtype": |ours - theirs| at most
  ``3 e + 2 ulp`` where ``e`` is transformers' own max error there against the float64 model of the same weights
  (both rounded to the dtype: ours within ``2 e`` of the exact value plus theirs within ``e``) and ``ulp`` the
  dtype's spacing at max|logit|;
* ``greedy``: ``generate(do_sample=False)`` of transformers with its cache and without, against ours with our cache
  and without. A row that diverges is a ``tie`` (counted, not a failure) when at the first differing step
  transformers' float32 logit of its token exceeds that of ours by at most twice the case's logits tolerance
  (``2 tol``: two vectors each within ``tol`` can order such a pair either way), else a disagreement;
* ``sampling``: for random (temperature, top_k, top_p), the next-token distribution of our sampler
  (:func:`~transformer.decoding.sampling_probabilities` of our float32 log-probabilities) against transformers'
  ``TemperatureLogitsWarper``, ``TopKLogitsWarper`` and ``TopPLogitsWarper`` then softmax: on the SAME scores
  (ours) their total variation must be under 1e-6 and their supports equal (``sampling_same_logits``); on each
  model's own logits (``sampling``) the total variation is at most max|d logits| / temperature (softmax is
  1-Lipschitz from the max norm to total variation) when the supports agree, and a support that differs only where
  the same-scores comparison agreed is a ``sampling_tie`` (a logit at the cut moved by rounding).

The configs are drawn by tests/differential_configs.py. ``run_cases(seeds)`` returns the counts; ``python
tests/differential_models.py --cases N`` (the long budget) writes them to
``benchmarks/results/differential/models.json``.
"""

from __future__ import annotations

import copy
import random
import tempfile
from collections import Counter
from pathlib import Path

import hf_float64_attention
import torch
from differential_configs import ARCHITECTURES, random_config

from transformer.decoding import sampling_probabilities
from transformer.lm import TransformerLM, generate
from transformer.masks import AttentionMask

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: transformers' attention for each architecture (sdpa where it has one; Gemma 2 has none)
ATTENTION = {"gemma2": "eager", "gemma3": "eager"}
#: the float64 model's: transformers' eager softmax is float32, NaN on a float64 model's fully masked (pad) rows
EXACT_ATTENTION = {"eager": hf_float64_attention.NAME}


def _random_model(transformers, config, seed: int):
    torch.manual_seed(seed)
    attention = ATTENTION.get(config.model_type.removesuffix("_text"), "sdpa")
    model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=attention)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.normal_(1.0 if "norm" in name or "ln_" in name else 0.0, 0.3)
    return model.eval()


def random_prompts(rng: random.Random, vocab: int):
    rows, steps = rng.randint(1, 4), rng.randint(2, 9)
    generator = torch.Generator().manual_seed(rng.randrange(2**31))
    tokens = torch.randint(3, vocab, (rows, steps), generator=generator)
    mask = torch.ones(rows, steps, dtype=torch.bool)
    for r in range(rows):
        mask[r, : rng.randint(0, steps - 1) if r else 0] = False
    return tokens.masked_fill(~mask, 0), mask


def _positions(mask):
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def _theirs_logits(model, tokens, mask):
    with torch.no_grad():
        return model(input_ids=tokens, attention_mask=mask.long(), position_ids=_positions(mask)).logits.double()


def _ours_logits(model, tokens, mask):
    with torch.no_grad():
        return model.logits(tokens, AttentionMask(key_mask=mask), positions=_positions(mask)).double()


def logits_tolerance(dtype, theirs, exact, mask) -> float:
    """The case's bound on |ours - theirs| on the real positions (see the module's docstring)."""
    top = exact[mask].abs().max().item()
    if dtype == torch.float32:
        return 1e-5 * max(top, 1e-3)
    own_error = (theirs[mask] - exact[mask]).abs().max().item()
    ulp = torch.finfo(dtype).eps * 2.0 ** torch.tensor(max(top, 1e-3)).log2().floor().item()
    return 3 * own_error + 2 * ulp


def _hf_greedy(model, tokens, mask, new, use_cache):
    out = model.generate(
        input_ids=tokens, attention_mask=mask.long(), do_sample=False, max_new_tokens=new, min_new_tokens=new,
        pad_token_id=0, eos_token_id=None, use_cache=use_cache,
    )  # fmt: skip
    return out[:, tokens.size(1) :]


def _greedy_divergences(theirs_model, tokens, mask, expected, got, tol, counts, label):
    """Counts ``label`` (agreed rows), ``label + '_tie'`` and ``label`` disagreements of ``got`` against
    ``expected`` (the rows transformers generated)."""
    for row in range(tokens.size(0)):
        differ = (got[row] != expected[row]).nonzero()
        if differ.numel() == 0:
            counts[f"{label}_rows_agreed"] += 1
            continue
        step = int(differ[0, 0])
        prefix = torch.cat([tokens[row : row + 1], expected[row : row + 1, :step]], dim=1)
        real = torch.cat([mask[row : row + 1], torch.ones(1, step, dtype=torch.bool)], dim=1)
        last = _theirs_logits(theirs_model, prefix, real)[0, -1]
        margin = (last[expected[row, step]] - last[got[row, step]]).item()
        counts[f"{label}_tie" if margin <= 2 * tol else f"{label}_disagreement"] += 1


def hf_sampling_probabilities(transformers, scores, temperature, top_k, top_p):
    """transformers' distribution: its warpers in generate's order (temperature, top-k, top-p), then softmax."""
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    ids = torch.zeros(scores.size(0), 1, dtype=torch.long)
    scores = scores.float()
    if temperature != 1.0:
        scores = TemperatureLogitsWarper(temperature)(ids, scores)
    if top_k is not None:
        scores = TopKLogitsWarper(top_k)(ids, scores)
    if top_p is not None:
        scores = TopPLogitsWarper(top_p)(ids, scores)
    return scores.double().softmax(-1)


def _tied_cut(scores, mine, theirs) -> bool:
    """Whether two supports differ only in which of several tokens of one score a cut kept (top-k keeps every tie,
    so the top-p cut: transformers' sort orders equal scores its own way): as many tokens kept, the same kept
    probabilities, and every token kept by one only of the same score."""
    kept_mine, kept_theirs = mine > 0, theirs > 0
    if int(kept_mine.sum()) != int(kept_theirs.sum()):
        return False
    if not torch.allclose(mine[kept_mine].sort().values, theirs[kept_theirs].sort().values, atol=1e-6):
        return False
    return scores[kept_mine != kept_theirs].unique().numel() == 1


def _sampling(transformers, rng, ours_lp, theirs_logits, counts, name):
    temperature = rng.choice([1.0, 0.7, 1.5, 0.3])
    top_k = rng.choice([None, 1, 2, 5, 20])
    top_p = rng.choice([None, 0.5, 0.9, 0.95])
    mine = sampling_probabilities(ours_lp, temperature, top_k, top_p)
    same = hf_sampling_probabilities(transformers, ours_lp, temperature, top_k, top_p)
    hf = hf_sampling_probabilities(transformers, theirs_logits, temperature, top_k, top_p)
    delta = (ours_lp.double().log_softmax(-1) - theirs_logits.double().log_softmax(-1)).abs().amax(-1)
    for row in range(mine.size(0)):
        same_support = torch.equal(mine[row] > 0, same[row] > 0)
        tv_same = 0.5 * (mine[row] - same[row]).abs().sum().item()
        ok_same = same_support and tv_same <= 1e-6
        tied = not same_support and _tied_cut(ours_lp[row], mine[row], same[row])
        verdict = "agreed" if ok_same else "tie" if tied else "disagreement"
        counts[f"{name}_sampling_same_logits_{verdict}"] += 1
        ok_same = ok_same or tied
        tv = 0.5 * (mine[row] - hf[row]).abs().sum().item()
        if torch.equal(mine[row] > 0, hf[row] > 0):
            bound = 2 * delta[row].item() / temperature + 1e-6  # log-softmax shifts: 2 x the logits' max change
            counts[f"{name}_sampling_{'agreed' if tv <= bound else 'disagreement'}"] += 1
        else:
            counts[f"{name}_sampling_{'tie' if ok_same else 'disagreement'}"] += 1


def run_case(transformers, seed: int, kind: str | None = None, new_tokens: int = 6) -> tuple[Counter, dict]:
    """One case: the counts of each class, and its description."""
    rng = random.Random(seed)
    kind = kind or rng.choice(ARCHITECTURES)
    config, described = random_config(transformers, kind, rng)
    base = _random_model(transformers, config, seed)
    tokens, mask = random_prompts(rng, config.vocab_size)
    counts: Counter = Counter()
    with tempfile.TemporaryDirectory() as root:
        folders = {}
        for dtype in DTYPES:
            folders[dtype] = Path(root) / str(dtype).split(".")[-1]
            copy.deepcopy(base).to(dtype).save_pretrained(folders[dtype])
        worst = {}
        for dtype in DTYPES:
            name = str(dtype).split(".")[-1]
            attention = ATTENTION.get(kind, "sdpa")
            theirs = transformers.AutoModelForCausalLM.from_pretrained(folders[dtype], attn_implementation=attention)
            theirs = theirs.eval()
            if kind == "olmoe":  # their grouped_mm experts refuse rows not a multiple of 16 bytes (d_model 6 x 4 ...)
                theirs.config._experts_implementation = "eager"
            ours = TransformerLM.from_pretrained(folders[dtype])
            exact_model = transformers.AutoModelForCausalLM.from_pretrained(
                folders[dtype], dtype=torch.float64, attn_implementation=EXACT_ATTENTION.get(attention, attention)
            )  # the float64 function of the dtype's own rounded weights (eager: with the softmax in float64)
            if kind == "olmoe":  # and float64
                exact_model.config._experts_implementation = "eager"
            exact = _theirs_logits(exact_model.eval(), tokens, mask)
            theirs_l, ours_l = _theirs_logits(theirs, tokens, mask), _ours_logits(ours, tokens, mask)
            tol = logits_tolerance(dtype, theirs_l, exact, mask)
            error = (ours_l[mask] - theirs_l[mask]).abs().max().item()
            worst[name] = {"error": error, "tolerance": tol}
            counts[f"{name}_logits_{'agreed' if error <= tol else 'disagreement'}"] += 1
            with torch.no_grad():
                for hf_cache in (True, False):
                    expected = _hf_greedy(theirs, tokens, mask, new_tokens, hf_cache)
                    for our_cache in (True, False):
                        got = generate(ours, tokens, new_tokens, prompt_mask=mask, pad_symbol=0, use_cache=our_cache)
                        label = f"{name}_greedy_{'cache' if our_cache else 'nocache'}"
                        if hf_cache == our_cache:
                            _greedy_divergences(
                                theirs, tokens, mask, expected, got[:, tokens.size(1) :], tol, counts, label
                            )
                ours_lp = ours.next_token_log_probs(tokens, prompt_mask=mask)
            _sampling(transformers, rng, ours_lp, theirs_l[:, -1], counts, name)
    return counts, {"seed": seed, "architecture": kind, "config": described, "logits": worst}


def run_cases(transformers, seeds, kinds=ARCHITECTURES) -> dict:
    """Every (seed, architecture) case: the counts by class, by architecture and in all, and each case that
    disagreed (with its description)."""
    transformers.utils.logging.disable_progress_bar()
    hf_float64_attention.register(transformers)
    total, by_architecture, failures = Counter(), {}, []
    measured: dict = {}
    for seed in seeds:
        for kind in kinds:
            try:
                counts, case = run_case(transformers, seed * 1000 + ARCHITECTURES.index(kind), kind)
            except Exception as error:  # a crash is a disagreement of its own class, with its message
                counts = Counter({"crash_disagreement": 1})
                case = {"seed": seed * 1000 + ARCHITECTURES.index(kind), "architecture": kind, "logits": {}}
                case["error"] = f"{type(error).__name__}: {error}"[:400]
            total.update(counts)
            by_architecture.setdefault(kind, Counter()).update(counts)
            for name, logits in case["logits"].items():  # the largest error, and its ratio to the tolerance
                worst = measured.setdefault(name, {"max_error": 0.0, "max_error_over_tolerance": 0.0})
                worst["max_error"] = max(worst["max_error"], logits["error"])
                ratio = logits["error"] / logits["tolerance"]
                worst["max_error_over_tolerance"] = max(worst["max_error_over_tolerance"], ratio)
            if any(key.endswith("disagreement") for key in counts):
                failures.append({**case, "counts": dict(counts)})
    return {
        "total": dict(sorted(total.items())),
        "by_architecture": {k: dict(sorted(v.items())) for k, v in by_architecture.items()},
        "logits_measured": measured,
        "disagreeing_cases": failures,
    }


def disagreements(report: dict) -> dict:
    return {k: v for k, v in report["total"].items() if k.endswith("disagreement")}


if __name__ == "__main__":
    import argparse
    import datetime
    import json
    import platform
    import sys
    import time

    import transformers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20, help="seeds per architecture")
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument(
        "--out", default=str(Path(__file__).parent.parent / "benchmarks/results/differential/models.json")
    )
    parser.add_argument("--label", default="after", help="the key the run is stored under (before/after a fix)")
    parser.add_argument("--kinds", nargs="+", default=list(ARCHITECTURES), choices=ARCHITECTURES)
    arguments = parser.parse_args()
    started = time.time()
    seeds = range(arguments.first_seed, arguments.first_seed + arguments.cases)
    report = run_cases(transformers, seeds, kinds=tuple(arguments.kinds))
    out = Path(arguments.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stored = json.loads(out.read_text()) if out.exists() else {}
    stored[arguments.label] = {
        "command": " ".join(["python"] + sys.argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "seeds": [arguments.first_seed, arguments.first_seed + arguments.cases - 1],
        "architectures": list(arguments.kinds),
        "seed_of_a_case": "seed * 1000 + index of the architecture in ARCHITECTURES",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "seconds": round(time.time() - started, 1),
        "disagreements": disagreements(report),
        **report,
    }  # fmt: skip
    out.write_text(json.dumps(stored, indent=1) + "\n")
    print(json.dumps(stored[arguments.label]["total"], indent=1))
