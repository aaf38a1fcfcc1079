"""A seeded differential fuzzer of beam search (``generate(num_beams=K)``) against transformers'
``generate(num_beams=K, do_sample=False, length_penalty=..., early_stopping=...)`` (the oracle).

Each case draws, from its seed, an architecture's random config (``differential_models.random_config``: heads,
key/value heads, RoPE rules, windows), builds transformers' model with random weights, writes it in float32,
bfloat16 and float16 folders, loads each both ways, and draws a left-padded batch of prompts, K in 2..5,
``length_penalty`` in {-0.5, 0, 1, 2}, ``early_stopping`` in {True, False, "never"} and one or two end tokens taken
from what the model writes greedily (so that hypotheses end at different lengths and the penalty and stopping rule
matter). Every row's tokens must equal transformers' (and the padding after them). In float32 any difference is a
disagreement. In bfloat16 and float16 each model decides on the float32 log-softmax of its own half-precision logits,
and the two models' logits differ by rounding: a row that differs is a ``tie`` when, scored by transformers' model,
the two hypotheses' final scores are within ``2 L d`` (L: the longer one's generated tokens, d: the largest difference
between the two models' float32 log-probabilities along both), else a disagreement.

``run_beam_cases(transformers, seeds)`` returns the counts; ``python tests/beam_fuzz.py --cases N`` (the long budget)
writes them to ``benchmarks/results/differential/beam.json``.
"""

from __future__ import annotations

import random
import tempfile
from collections import Counter
from pathlib import Path

import torch
from differential_models import ARCHITECTURES, _random_model, random_config, random_prompts

from transformer.lm import TransformerLM, generate

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
EARLY_STOPPING = (True, False, "never")


def _options(rng: random.Random, ours, tokens, mask, new: int) -> dict:
    """K, length_penalty, early_stopping and end tokens drawn from ``rng``; the ends from the greedy tokens."""
    free = generate(ours, tokens, new, prompt_mask=mask, pad_symbol=0)[:, tokens.size(1) :].flatten().tolist()
    ends = rng.sample(sorted(set(free)), k=min(len(set(free)), rng.choice([1, 2])))
    return dict(
        num_beams=rng.randint(2, 5), length_penalty=rng.choice([-0.5, 0.0, 1.0, 2.0]),
        early_stopping=rng.choice(EARLY_STOPPING), ends=ends,
    )  # fmt: skip


def _hf_log_probs(model, seq):
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=seq[None]).logits[0].float(), dim=-1)


def _ours_log_probs(model, seq):
    with torch.no_grad():
        return torch.log_softmax(model.logits(seq[None])[0].float(), dim=-1)


def _score(lp, seq, start, penalty):
    """transformers' beam score of ``seq`` (its real tokens) generated from ``start``: sum log p / length ** penalty."""
    gen = seq[start:]
    total = sum(float(lp[start - 1 + i, t]) for i, t in enumerate(gen.tolist()))
    return total / (len(gen) ** penalty)


def _tie(theirs, ours, prompt_row, expected, got, options) -> bool:
    """Whether two different hypotheses of one row are a tie (the module's rule), on the row's real tokens."""
    start = len(prompt_row)
    pieces = []
    for seq in (expected, got):
        seq = torch.tensor(seq)
        hf, mine = _hf_log_probs(theirs, seq), _ours_log_probs(ours, seq)
        d = float((hf[start - 1 : -1] - mine[start - 1 : -1]).abs().max())
        pieces.append((_score(hf, seq, start, options["length_penalty"]), d, len(seq) - start))
    (a, da, la), (b, db, lb) = pieces
    return abs(a - b) <= 2 * max(la, lb) * max(da, db)


def _old_beam(ours, tokens, mask, new, k, ends, penalty):
    """The package's beam search before this fuzzer (``beam_generate``: GNMT penalty, one end token), row by row:
    the ``--before`` run's count."""
    from transformer.lm import beam_generate

    out = torch.zeros(tokens.size(0), tokens.size(1) + new, dtype=torch.long)
    for row in range(tokens.size(0)):
        real = tokens[row][mask[row]][None]
        got, _ = beam_generate(ours, real, new, beam_size=k, end_symbol=ends[0], length_penalty=max(penalty, 0.0),
                               pad_symbol=0)  # fmt: skip
        out[row, int((~mask[row]).sum()) :] = got[0]
    return out


def run_beam_case(transformers, seed: int, kind: str | None = None, new: int = 8, old: bool = False) -> Counter:
    rng = random.Random(seed)
    kind = kind or rng.choice(ARCHITECTURES)
    config, _ = random_config(transformers, kind, rng)
    model = _random_model(transformers, config, seed)
    tokens, mask = random_prompts(rng, config.vocab_size)
    counts = Counter()
    with tempfile.TemporaryDirectory() as root:
        options = None
        for dtype in DTYPES:
            name = str(dtype).removeprefix("torch.")
            folder = Path(root) / name
            model.to(dtype).save_pretrained(folder)
            theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="sdpa")
            ours = TransformerLM.from_pretrained(folder).eval()
            options = options or _options(rng, ours, tokens, mask, new)
            ends, k = options["ends"], options["num_beams"]
            kwargs = dict(length_penalty=options["length_penalty"], early_stopping=options["early_stopping"])
            if old:
                got = _old_beam(ours, tokens, mask, new, k, ends, options["length_penalty"])
            else:
                got = generate(ours, tokens, new, prompt_mask=mask, num_beams=k, end_symbol=ends[0],
                               end_symbols=ends[1:], pad_symbol=0, **kwargs)  # fmt: skip
            for row in range(tokens.size(0)):  # transformers' batch pads by its own rule: each row alone
                real = tokens[row][mask[row]][None]
                expected = theirs.generate(input_ids=real, attention_mask=torch.ones_like(real), max_new_tokens=new,
                                           num_beams=k, do_sample=False, eos_token_id=ends, pad_token_id=0,
                                           **kwargs)[0].tolist()  # fmt: skip
                pads = int((~mask[row]).sum())
                mine = got[row, pads:].tolist()
                mine_real = mine[: len(expected)]
                if mine_real == expected and all(t == 0 for t in mine[len(expected) :]):
                    counts[f"{name}_rows_agreed"] += 1
                    counts[f"{name}_rows_ended_early"] += len(expected) < real.size(1) + new
                elif dtype != torch.float32 and _tie(theirs, ours, real[0], expected, _real(mine, real, ends), kwargs):
                    counts[f"{name}_rows_tie"] += 1
                else:
                    counts[f"{name}_rows_disagreed"] += 1
    return counts


def _real(row, prompt, ends):
    """Our row's hypothesis: the prompt, then the tokens up to (and with) its first end token."""
    start = prompt.size(1)
    for i in range(start, len(row)):
        if row[i] in ends:
            return row[: i + 1]
    return row


def run_beam_cases(transformers, seeds, kinds=ARCHITECTURES, old: bool = False) -> dict:
    total, disagreeing = Counter(), []
    for seed in seeds:
        counts = run_beam_case(transformers, seed, kind=kinds[seed % len(kinds)], old=old)
        total.update(counts)
        if any(key.endswith("disagreed") for key in counts):
            disagreeing.append(seed)
    return {"cases": len(list(seeds)), "total": dict(sorted(total.items())), "disagreeing_seeds": disagreeing}


if __name__ == "__main__":  # the long budget, by hand
    import argparse
    import datetime
    import json
    import sys

    import transformers

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--label", default="after")
    parser.add_argument("--old", action="store_true", help="the beam search before (beam_generate): label before")
    parser.add_argument(
        "--out", default=str(Path(__file__).parent.parent / "benchmarks/results/differential/beam.json")
    )
    arguments = parser.parse_args()
    seeds = range(arguments.first_seed, arguments.first_seed + arguments.cases)
    report = run_beam_cases(transformers, seeds, old=arguments.old)
    report.update(
        command=" ".join(["python", *sys.argv]), date=datetime.date.today().isoformat(),
        versions=dict(python=sys.version.split()[0], torch=torch.__version__, transformers=transformers.__version__),
    )  # fmt: skip
    out = Path(arguments.out)
    stored = json.loads(out.read_text()) if out.exists() else {}
    stored[arguments.label] = report
    out.write_text(json.dumps(stored, indent=1) + "\n")
    print(json.dumps(report, indent=1))
