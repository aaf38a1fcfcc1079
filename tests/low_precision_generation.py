"""Half-precision generation against transformers' ``generate`` on every supported architecture (issues 43, 44):
the comparison of ``tests/test_pretrained_low_precision.py`` (a short fixed-seed budget) and its by-hand long run
(``python tests/low_precision_generation.py --seeds 10``: every architecture, bfloat16 and float16, seeds 100 to
109, the counts written to ``benchmarks/results/differential/low_precision_generation.json``).

A case is one architecture's tiny random model (``architecture_models``: logits within a few hundredths of each
other, so near ties are everywhere) saved in bfloat16 or float16 and loaded both ways, ours with
``TransformerLM.from_pretrained`` and theirs with ``AutoModelForCausalLM.from_pretrained``, and a left-padded batch
of 8 prompts (rows padded by 0 to 3):

* ``greedy``: ``generate(do_sample=False)`` of transformers (its cache) against ours (our cache), token for token;
  a row that differs anywhere is a disagreement (no tie allowance: we decide on the float32 cast of the same
  logits, as transformers does). ``float32_decided`` counts the steps of our run where the argmax of the
  log-probabilities rounded to the model's dtype is another token than the float32 one (the decision in float32
  mattered there: the data is built so that it does);
* ``sampling``: transformers' ``generate(do_sample=True, temperature, top_k, top_p)`` draws a continuation and
  returns its filtered scores at every step (``output_scores``: its logits cast to float32, then its
  ``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``); our step function with our cache, fed
  the same tokens, gives the log-probabilities whose :func:`~transformer.decoding.sampling_probabilities` our
  ``generate(sample=True)`` draws from. At every step of every row the two distributions must have the same
  support and a total variation under 1e-6 (``tie``: the supports differ only in which of several tokens of one
  score a top-p cut kept, transformers' sort ordering equal scores its own way). Where our float32
  log-probabilities are not theirs bit for bit (``logits_differ``: the steps where they differ at all), a step is
  ``close`` when the supports agree and the total variation is at most ``2 max|d log p| / temperature + 1e-6``
  (softmax is 1-Lipschitz from the max norm to total variation): the distribution no further from theirs than the
  logits' difference allows, and ``cut_moved`` when the supports differ only in tokens whose log-probabilities
  differ (a top-k or top-p cut that the difference moved); the tests accept ``close`` and ``cut_moved`` only for the
  cases whose differing operation is named.
"""

from __future__ import annotations

import random
import tempfile
from collections import Counter
from pathlib import Path

import torch
from architecture_models import EVERY, load_theirs, saved

from transformer.decoding import sampling_probabilities
from transformer.lm import TransformerLM, generate

DTYPES = (torch.bfloat16, torch.float16)
ROWS, PROMPT, NEW = 8, 6, 24


def padded_prompts(seed: int, vocab: int):
    """``ROWS`` prompts of ``PROMPT`` tokens in [3, vocab), row r padded on the left by r % 4 (pad id 0)."""
    tokens = torch.randint(3, vocab, (ROWS, PROMPT), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(tokens, dtype=torch.bool)
    for row in range(ROWS):
        mask[row, : row % 4] = False
    return tokens.masked_fill(~mask, 0), mask


def their_generate(theirs, tokens, mask, new=NEW, **sampling):
    """transformers' ``generate`` of ``new`` tokens (no end id): the new tokens, its filtered float32 scores and
    its raw logits at each step (steps, rows, vocab)."""
    out = theirs.generate(
        input_ids=tokens, attention_mask=mask.long(), max_new_tokens=new, min_new_tokens=new, pad_token_id=0,
        eos_token_id=None, return_dict_in_generate=True, output_scores=True, output_logits=True, **sampling,
    )  # fmt: skip
    return out.sequences[:, tokens.size(1) :], torch.stack(out.scores), torch.stack(out.logits).float()


def our_step_log_probs(ours, tokens, mask, continuation):
    """Our float32 log-probabilities (steps, rows, vocab) at each step of ``continuation``, from our cached step
    function (what ``generate`` decides or draws on) fed ``continuation``'s tokens."""
    steps = ours.next_tokens(use_cache=True, prompt_mask=mask)
    ys, out = tokens, []
    with torch.no_grad():
        for step in range(continuation.size(1)):
            out.append(steps(ys))
            ys = torch.cat([ys, continuation[:, step : step + 1]], dim=1)
    return torch.stack(out)


def tied_cut(scores, mine, theirs) -> bool:
    """Whether two supports differ only in which of several tokens of one score a cut kept (as many kept, the same
    kept probabilities, every token kept by one only of one score)."""
    kept_mine, kept_theirs = mine > 0, theirs > 0
    if int(kept_mine.sum()) != int(kept_theirs.sum()):
        return False
    if not torch.allclose(mine[kept_mine].sort().values, theirs[kept_theirs].sort().values, atol=1e-6):
        return False
    return scores[kept_mine != kept_theirs].unique().numel() == 1


def _moved_cut(ours_lp, theirs_lp, mine, theirs) -> bool:
    """Whether the supports differ only in tokens whose log-probabilities differ (each one's logit moved across a
    cut): a token of equal log-probability in or out on one side only would be the sampler's own fault."""
    differs = (mine > 0) != (theirs > 0)
    return bool(differs.any()) and bool((ours_lp[differs] != theirs_lp[differs]).all())


def compare_greedy(theirs, ours, tokens, mask, dtype, counts: Counter, new=NEW) -> None:
    expected, _, _ = their_generate(theirs, tokens, mask, new, do_sample=False)
    got = generate(ours, tokens, new, prompt_mask=mask, pad_symbol=0)[:, tokens.size(1) :]
    for row in range(tokens.size(0)):
        counts["greedy_rows_" + ("agreed" if torch.equal(got[row], expected[row]) else "disagreement")] += 1
    log_probs = our_step_log_probs(ours, tokens, mask, got)
    rounded = log_probs.to(dtype).float().argmax(-1)
    counts["greedy_steps"] += log_probs.shape[0] * log_probs.shape[1]
    counts["float32_decided"] += int((rounded != log_probs.argmax(-1)).sum())


def compare_sampling(theirs, ours, tokens, mask, rng: random.Random, counts: Counter, new=NEW) -> None:
    temperature, top_k, top_p = rng.choice([0.7, 1.0, 1.3]), rng.choice([None, 5, 20]), rng.choice([None, 0.8, 0.95])
    torch.manual_seed(rng.randrange(2**31))
    continuation, scores, logits = their_generate(
        theirs, tokens, mask, new, do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p
    )
    theirs_probs = scores.double().softmax(-1)
    log_probs = our_step_log_probs(ours, tokens, mask, continuation)
    mine = sampling_probabilities(log_probs.flatten(0, 1), temperature, top_k, top_p).view_as(theirs_probs)
    delta = (log_probs.double() - logits.double().log_softmax(-1)).abs().amax(-1)
    counts["logits_differ"] += int((log_probs != logits.log_softmax(-1)).any(-1).sum())
    for step in range(mine.size(0)):
        for row in range(mine.size(1)):
            a, b = mine[step, row], theirs_probs[step, row]
            tv = 0.5 * (a - b).abs().sum().item()
            if torch.equal(a > 0, b > 0) and tv <= 1e-6:
                verdict = "agreed"
            elif tied_cut(log_probs[step, row], a, b):
                verdict = "tie"
            elif torch.equal(a > 0, b > 0) and tv <= 2 * delta[step, row].item() / temperature + 1e-6:
                verdict = "close"
            elif _moved_cut(log_probs[step, row], logits[step, row].log_softmax(-1), a, b):
                verdict = "cut_moved"
            else:
                verdict = "disagreement"
            counts[f"sampling_steps_{verdict}"] += 1


def run_case(transformers, kind: str, dtype: torch.dtype, seed: int, new: int = NEW) -> Counter:
    """One (architecture, dtype, seed) case's counts."""
    counts: Counter = Counter()
    with tempfile.TemporaryDirectory() as root:
        folder = saved(transformers, kind, Path(root) / kind, dtype, seed=seed)
        theirs = load_theirs(transformers, folder)
        ours = TransformerLM.from_pretrained(folder)
        assert ours.weights_dtype() == dtype == theirs.dtype, (ours.weights_dtype(), theirs.dtype)
        tokens, mask = padded_prompts(seed, theirs.config.vocab_size)
        compare_greedy(theirs, ours, tokens, mask, dtype, counts, new)
        compare_sampling(theirs, ours, tokens, mask, random.Random(seed), counts, new)
    return counts


def run_cases(transformers, seeds, kinds=EVERY, dtypes=DTYPES) -> dict:
    transformers.utils.logging.disable_progress_bar()
    total, by_case = Counter(), {}
    for kind in kinds:
        for dtype in dtypes:
            name = f"{kind}/{str(dtype).removeprefix('torch.')}"
            counts = Counter()
            for seed in seeds:
                counts.update(run_case(transformers, kind, dtype, seed))
            total.update(counts)
            by_case[name] = dict(sorted(counts.items()))
    return {"total": dict(sorted(total.items())), "by_case": by_case}


def disagreements(report: dict) -> dict:
    """The cases with a disagreement or a ``close`` step (not bit for bit), with their counts."""
    return {
        k: v for k, v in report["by_case"].items() if any(key.endswith(("disagreement", "close", "moved")) for key in v)
    }


if __name__ == "__main__":
    import argparse
    import datetime
    import json
    import platform
    import sys
    import time

    import transformers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds per architecture and dtype")
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--kinds", nargs="+", default=list(EVERY), choices=EVERY)
    parser.add_argument(
        "--out",
        default=str(Path(__file__).parent.parent / "benchmarks/results/differential/low_precision_generation.json"),
    )
    parser.add_argument("--label", default="after", help="the key the run is stored under (before/after a fix)")
    arguments = parser.parse_args()
    started = time.time()
    seeds = range(arguments.first_seed, arguments.first_seed + arguments.seeds)
    report = run_cases(transformers, seeds, kinds=tuple(arguments.kinds))
    out = Path(arguments.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stored = json.loads(out.read_text()) if out.exists() else {}
    stored[arguments.label] = {
        "command": " ".join(["python"] + sys.argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "seeds": [arguments.first_seed, arguments.first_seed + arguments.seeds - 1],
        "rows_per_case": ROWS, "prompt": PROMPT, "new_tokens": NEW,
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "seconds": round(time.time() - started, 1),
        "disagreeing": disagreements(report),
        **report,
    }  # fmt: skip
    out.write_text(json.dumps(stored, indent=1) + "\n")
    print(json.dumps(stored[arguments.label]["total"], indent=1))
