"""Blind review of the one-go GPU check harness (2026-11-27), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-32g-sweep-no-length-one",
        "scripts/gpu_check/sweep.py",
        (("length = lambda: max(1, min(top,", "length = lambda: max(2, min(top,"),),
        "The sweep's lengths are drawn log-uniform in 2..8192 instead of 1..8192: q_len 1 (decoding) and k_len 1 are never drawn (about 8 % of cases before), so the sweep never checks the single-row/single-key edge.",
    ),
    Mutant(
        "blind-32g-sweep-rule-skips-dv",
        "scripts/gpu_check/sweep.py",
        (
            (
                "ok = finite and all(o <= 2 * y + f for o, y, f in zip(ours, yard, floors, strict=True))",
                "ok = finite and all(o <= 2 * y + f for o, y, f in zip(ours[:3], yard, floors))",
            ),
        ),
        "The sweep's FlashAttention rule only judges out, dq and dk: a kernel whose dv is off (5 % here) passes every case, though the docs promise the rule on out, dq, dk and dv.",
    ),
    Mutant(
        "blind-32g-sweep-workers-same-seed",
        "scripts/gpu_check/sweep.py",
        (("rng = random.Random(1000 + args.worker)", "rng = random.Random(1000)"),),
        "Every --workers process seeds its RNG with the same 1000 instead of 1000 + worker: all N workers draw the very same cases, so a 6-process sweep checks 6 times fewer distinct cases than promised ('each with its own seed').",
    ),
    Mutant(
        "blind-32g-checks-split-kv-one-split",
        "scripts/gpu_check/checks.py",
        (("ok=splits > 1 and mine", "ok=splits >= 1 and mine"),),
        "check_split_kv passes with splits == 1: the split-KV check is ok even when the decoding shape no longer takes the split-KV path at all.",
    ),
    Mutant(
        "blind-32g-checks-backward-det-skips-second",
        "scripts/gpu_check/checks.py",
        (("for r in results[1:] for a, b", "for r in results[2:] for a, b"),),
        "The bitwise-identical backward compares runs 2.. with run 0, never run 1: with the dry run's 2 repeats nothing is compared and a non-deterministic backward is reported ok (on a GPU, 49 of 50 runs compared).",
    ),
    Mutant(
        "blind-32g-checks-dropout-corr-sign",
        "scripts/gpu_check/checks.py",
        (("all(abs(c) < 0.04 for c in correlations.values())", "all(c < 0.04 for c in correlations.values())"),),
        "The dropout independence check tests c < 0.04 instead of |c| < 0.04: a mask with strongly negatively correlated neighbouring keys (or queries, heads, batch rows) passes as independent.",
    ),
    Mutant(
        "blind-32g-model-compile-tol-swapped",
        "scripts/gpu_check/model.py",
        (
            (
                "tolerance = 1e-5 if dtype == torch.float32 else 2e-2",
                "tolerance = 2e-2 if dtype == torch.float32 else 1e-5",
            ),
        ),
        "compile_dynamic's tolerance is swapped between dtypes: float32 (the dry run) gets 2e-2 instead of 1e-5, so a compiled drop-in 1e-3 off eager passes; bf16 on a GPU would get 1e-5.",
    ),
    Mutant(
        "blind-32g-model-speed-ratio-swapped",
        "scripts/gpu_check/model.py",
        (
            (
                '("checks_on", "ours triton, checks on"),\n            ("checks_off", "ours triton, checks off"),',
                '("checks_on", "ours triton, checks off"),\n            ("checks_off", "ours triton, checks on"),',
            ),
        ),
        "The model_speed summary's ratio_checks_on and ratio_checks_off are taken from each other's variant: the 1.15x target is judged on the checks-off speed, and the recorded ratios disagree with the variant rows.",
    ),
    Mutant(
        "blind-32g-model-decode-both-eager",
        "scripts/gpu_check/model.py",
        (("ys_f = decoding.greedy_decode(fused, batch.src", "ys_f = decoding.greedy_decode(eager, batch.src"),),
        "model_decode_eager_match decodes the 'triton' copy with the eager model too, so it compares eager with itself and passes however the kernel decodes.",
    ),
    Mutant(
        "blind-32g-sh-summary-skips-sweep",
        "scripts/gpu_check.sh",
        (
            (
                'FAILED=$(cat "$RESULTS" "$OUT/sweep.jsonl" 2>/dev/null | grep -c \'"ok": false\')',
                'FAILED=$(grep -c \'"ok": false\' "$RESULTS")',
            ),
        ),
        "gpu_check.sh's summary counts failed checks in gpu_check.jsonl only, not in sweep.jsonl: failed sweep cases no longer show in failed_checks.",
    ),
]

# Measured on the harness's CPU tests (tests/mutation/blind_runs/blind32g_*.json): before, tests/test_gpu_check_scripts.py
# alone (test_gpu_check_checks.py was written for the misses).
_TESTS = ("tests/test_gpu_check_scripts.py", "tests/test_gpu_check_checks.py")
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
