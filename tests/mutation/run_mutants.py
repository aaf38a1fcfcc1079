#!/usr/bin/env python
"""Mutation testing: do our tests catch plausible bugs?

For each mutant below: copy the package (``transformer/``, with ``kernels/`` as
``transformer/kernels``), the tests and ``pyproject.toml`` into a fresh temporary directory,
apply one textual mutation (exact string replacement; every ``old`` string must occur exactly
once in the current source, otherwise the script stops and says which mutant is stale), then run
pytest there with ``PYTHONPATH`` pointing at the copy *first*, so the mutant shadows the
editable install. A small pytest plugin (``-p _mutant_guard``) checks inside the pytest process
that ``transformer.__file__`` is the mutant's, and aborts the whole run otherwise.

A mutant is *caught* when the tests fail (pytest exit code 1, or 2 when collection fails), and
*survives* when they pass. The unmutated copy runs first and must pass, or nothing is measured.

Usage (from the repository root; not part of the normal test run)::

    python tests/mutation/run_mutants.py                 # every mutant, 2 workers
    python tests/mutation/run_mutants.py -k mask -j 1    # mutants whose id contains "mask"
    python tests/mutation/run_mutants.py --list          # list the mutants and exit

Prints a table, writes JSON (``--json``, default ``tests/mutation/results.json``), and exits 1
if any mutant survives (2 if the baseline fails or a mutation target is missing).
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import dataclasses
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Test files run against every mutant, fastest and sharpest first (-x stops at the first failure).
# Files that do not exist (yet) are skipped. Compile tests (test_contracts.py), kernel tests and
# packaging/README tests are left out: slow, and not about the semantics mutated here.
TEST_FILES = [
    "tests/test_modules.py",
    "tests/properties/test_rocq_invariants.py",
    "tests/properties/test_semantic_properties.py",
    "tests/properties/test_concept_properties.py",
    "tests/properties/test_rocq_properties.py",
    "tests/properties/test_decoding_properties.py",
    "tests/test_attention.py",
    "tests/test_parity.py",
    "tests/test_decoding.py",
    "tests/test_training.py",
    "tests/test_gradients.py",
]


@dataclasses.dataclass(frozen=True)
class Mutant:
    id: str
    file: str  # relative to the repository root
    edits: tuple[tuple[str, str], ...]  # (old, new): old must occur exactly once
    what: str
    tests: tuple[str, ...] = ()  # test files to run instead of TEST_FILES


def M(id: str, file: str, old: str, new: str, what: str) -> Mutant:
    return Mutant(id, file, ((old, new),), what)


# The Triton kernels' own suite (under the interpreter on a CPU), run against the kernel mutants.
KERNEL_TESTS = ("tests/kernels/test_flash_attention.py", "tests/kernels/test_dropout.py")


def K(id: str, file: str, old: str, new: str, what: str) -> Mutant:
    return Mutant(id, file, ((old, new),), what, KERNEL_TESTS)


MUTANTS: list[Mutant] = [
    # --- attention
    M("attn-no-scale", "transformer/attention.py",
      "scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)",
      "scores = torch.matmul(query, key.transpose(-2, -1))",
      "drop the 1/sqrt(d_k) scale"),
    M("attn-scale-by-dk", "transformer/attention.py",
      "key.transpose(-2, -1)) / math.sqrt(d_k)", "key.transpose(-2, -1)) / d_k",
      "scale by 1/d_k instead of 1/sqrt(d_k)"),
    M("attn-softmax-wrong-axis", "transformer/attention.py",
      "p_attn = scores.softmax(dim=-1)", "p_attn = scores.softmax(dim=-2)",
      "softmax over the query axis instead of the key axis"),
    Mutant("attn-mask-polarity", "transformer/attention.py", (
        ("scores = scores.masked_fill(~mask,", "scores = scores.masked_fill(mask,"),
        ("p_attn = p_attn * mask", "p_attn = p_attn * ~mask"),
    ), "invert the mask polarity (True = masked)"),
    M("attn-fully-masked-uniform", "transformer/attention.py",
      "p_attn = p_attn * mask", "p_attn = p_attn",
      "fully masked rows average uniformly (the tutorial's -1e9 behaviour)"),
    M("attn-split-heads-transposed", "transformer/attention.py",
      '"b s (h d) -> b h s d"', '"b s (d h) -> b h s d"',
      "split d_model into heads in the wrong order"),
    M("attn-merge-heads-transposed", "transformer/attention.py",
      '"b h s d -> b s (h d)"', '"b h s d -> b s (d h)"',
      "concatenate the heads in the wrong order"),
    M("attn-key-from-query", "transformer/attention.py",
      "k = self.split_heads(self.k_proj(key))", "k = self.split_heads(self.k_proj(query))",
      "project the keys from the query input"),
    M("attn-dropout-in-eval", "transformer/attention.py",
      "dropout_p = self.dropout_p if self.training else 0.0", "dropout_p = self.dropout_p",
      "attention dropout stays on in eval mode"),
    # --- masks
    M("mask-causal-shift-plus-one", "transformer/masks.py",
      ".tril()", ".tril(1)", "causal mask shifted by one: a position sees the next token"),
    M("mask-causal-shift-minus-one", "transformer/masks.py",
      ".tril()", ".tril(-1)", "causal mask shifted by one: a position cannot see itself"),
    M("mask-padding-polarity", "transformer/masks.py",
      "(tokens != pad_id).unsqueeze(-2)", "(tokens == pad_id).unsqueeze(-2)",
      "padding mask marks the padding as attendable"),
    M("mask-target-pad-rows-kept", "transformer/masks.py",
      "causal & real.unsqueeze(-2) & real.unsqueeze(-1)", "causal & real.unsqueeze(-2)",
      "padded target query rows still attend"),
    # --- layers
    M("residual-removed", "transformer/layers.py",
      "return x + sublayer_out", "return sublayer_out", "remove the residual connection"),
    M("layernorm-unbiased-variance", "transformer/layers.py",
      "var = x.var(-1, unbiased=False, keepdim=True)", "var = x.var(-1, unbiased=True, keepdim=True)",
      "LayerNorm with the unbiased variance (the tutorial's)"),
    M("layernorm-eps-outside-sqrt", "transformer/layers.py",
      "torch.sqrt(var + self.eps)", "(torch.sqrt(var) + self.eps)",
      "LayerNorm eps added to the std instead of the variance"),
    M("post-norm-behaves-as-pre", "transformer/layers.py",
      "return self.norm(residual(x, self.dropout(sublayer(x))))",
      "return residual(x, self.dropout(sublayer(self.norm(x))))",
      "post-norm placement silently computes pre-norm"),
    M("ffn-no-activation", "transformer/layers.py",
      "self.w_2(self.dropout(act(self.w_1(x))))", "self.w_2(self.dropout(self.w_1(x)))",
      "FFN without its ReLU"),
    # --- embeddings
    M("embeddings-unscaled", "transformer/embeddings.py",
      "self.lut(x) * math.sqrt(self.d_model)", "self.lut(x)",
      "forget to scale embeddings by sqrt(d_model)"),
    Mutant("pe-sin-cos-swapped", "transformer/embeddings.py", (
        ("pe[:, 0::2] = torch.sin(position * div_term)", "pe[:, 0::2] = torch.cos(position * div_term)"),
        ("pe[:, 1::2] = torch.cos(position * div_term)", "pe[:, 1::2] = torch.sin(position * div_term)"),
    ), "swap sin and cos in the positional encoding"),
    M("pe-frequency-sign", "transformer/embeddings.py",
      "* -(math.log(10000.0) / d_model))", "* (math.log(10000.0) / d_model))",
      "positional frequencies grow instead of shrink"),
    M("pe-not-added", "transformer/embeddings.py",
      "return self.dropout(x + self.pe[:, offset:end].to(x.dtype))", "return self.dropout(x)",
      "sinusoidal positional encoding never added"),
    M("max-len-off-by-one", "transformer/contracts.py",
      "if length > max_len:", "if length >= max_len:",
      "refuse sequences of exactly max_len"),
    # --- encoder / decoder / model
    M("encoder-ignores-padding-mask", "transformer/encoder.py",
      "self.self_attn(x, x, x, mask)", "self.self_attn(x, x, x, None)",
      "encoder self-attention ignores the source mask"),
    M("encoder-stack-one-layer", "transformer/encoder.py",
      "for layer in self.layers:", "for layer in self.layers[:1]:",
      "the encoder stack runs only its first layer"),
    M("decoder-ignores-causal-mask", "transformer/decoder.py",
      "self.self_attn(x, x, x, tgt_mask)", "self.self_attn(x, x, x, None)",
      "decoder self-attention sees the future"),
    M("decoder-cross-ignores-src-mask", "transformer/decoder.py",
      "self.src_attn(x, m, m, src_mask)", "self.src_attn(x, m, m, None)",
      "cross-attention attends to source padding"),
    M("decoder-no-final-norm", "transformer/decoder.py",
      "return self.norm(x)", "return x", "decoder stack without its final LayerNorm"),
    M("generator-softmax-wrong-axis", "transformer/model.py",
      "F.log_softmax(self.proj(x), dim=-1)", "F.log_softmax(self.proj(x), dim=0)",
      "generator normalises over the wrong axis"),
    # --- decoding (transformer/decoding.py)
    M("greedy-argmin", "transformer/decoding.py",
      "ys, cache).argmax(dim=-1)", "ys, cache).argmin(dim=-1)",
      "greedy decoding picks the least probable token"),
    M("greedy-one-step-too-many", "transformer/decoding.py",
      "        while ys.size(1) < max_len:\n            if end_symbol is not None and bool(finished.all()):",
      "        while ys.size(1) <= max_len:\n            if end_symbol is not None and bool(finished.all()):",
      "greedy decoding loop runs one step too many"),
    Mutant("cache-drops-oldest-position", "transformer/decoding.py", (
        ("k = torch.cat([cache.self_k[i], k], dim=2)", "k = torch.cat([cache.self_k[i][:, :, 1:], k], dim=2)"),
        ("v = torch.cat([cache.self_v[i], v], dim=2)", "v = torch.cat([cache.self_v[i][:, :, 1:], v], dim=2)"),
    ), "the key/value cache loses its oldest position"),
    # --- label smoothing (transformer/training.py)
    M("label-smoothing-wrong-mass", "transformer/training.py",
      "each = s / self.size", "each = s / (self.size - 1)",
      "label smoothing spreads s/(V-1) instead of s/V (mass != 1)"),
    M("label-smoothing-full-confidence", "transformer/training.py",
      "cross = -((1.0 - s) * x_label + each * total)", "cross = -(x_label + each * total)",
      "label smoothing keeps confidence 1 on the label (mass 1 + s)"),
    M("label-smoothing-mass-on-padding", "transformer/training.py",
      "columns[self.padding_idx] = False", "columns[self.padding_idx] = True",
      "annotated label smoothing puts mass on the padding class"),
    # --- the Triton kernels (kernels/, shipped as transformer.kernels)
    K("kernel-causal-diagonal", "kernels/_common.py",
      "allowed = allowed & (kj <= qi)",
      "allowed = allowed & (kj < qi)", "causal mask hides the diagonal"),
    K("kernel-causal-skips-diagonal-block", "kernels/_common.py",
      "hi = tl.minimum(hi, (pid_m + 1) * BLOCK_M)", "hi = tl.minimum(hi, pid_m * BLOCK_M)",
      "causal block skipping also skips the diagonal block"),
    K("kernel-no-online-rescale", "kernels/_forward.py",
      "acc = acc * alpha[:, None] + tl.dot", "acc = acc + tl.dot",
      "online softmax forgets to rescale the accumulator when the row max grows"),
    K("kernel-lse-base-2", "kernels/_forward.py", " * 0.6931471805599453)", ")",
      "logsumexp stored in base 2 instead of natural log"),
    K("kernel-dk-unscaled", "kernels/_backward.py", "dk = dk * sm_scale", "dk = dk",
      "dK misses the softmax scale"),
    K("kernel-dq-unscaled", "kernels/_backward.py", "dq = dq * sm_scale", "dq = dq",
      "dQ misses the softmax scale"),
    K("kernel-dv-ignores-dropout", "kernels/_backward.py",
      "p_drop_t = tl.where(keep_t, p_t * inv_keep, 0.0)", "p_drop_t = p_t * inv_keep",
      "dV uses the probabilities without the dropout mask"),
    K("kernel-lse-grad-dropped", "kernels/_backward.py",
      "delta = delta - grad_lse.to(delta.dtype)", "delta = delta",
      "the logsumexp output's gradient is ignored"),
    K("kernel-key-padding-ignored", "kernels/_common.py",
      "allowed = allowed & (key_ok != 0)", "allowed = allowed",
      "the (batch, k_len) key-padding mask is ignored"),
    K("kernel-empty-row-nan", "kernels/_forward.py",
      "acc = acc / tl.where(empty, 1.0, l_i)[:, None]", "acc = acc / l_i[:, None]",
      "a row with no allowed key divides 0 by 0"),
    K("kernel-head-dim-padding-not-zero", "kernels/_common.py", "mask=ok, other=0.0)", "mask=ok, other=1.0)",
      "padded head-dim columns (head_dim 40, 80) read as 1 instead of 0"),
    K("kernel-partial-block-unmasked", "kernels/_common.py",
      "full_end = (kv_end // BLOCK_N) * BLOCK_N", "full_end = tl.cdiv(kv_end, BLOCK_N) * BLOCK_N",
      "forward and dQ: the last, partly valid key block runs without a mask"),
    K("kernel-diagonal-unmasked", "kernels/_common.py",
      "(pid_m * BLOCK_M // BLOCK_N) * BLOCK_N)", "((pid_m + 1) * BLOCK_M // BLOCK_N) * BLOCK_N)",
      "forward and dQ: the causal diagonal block runs without a mask"),
    K("kernel-dkdv-padding-unmasked", "kernels/_backward.py",
      "tl.where((pid_n + 1) * BLOCK_N <= kv_end, mask_end, hi)", "mask_end",
      "dK/dV: a key block holding padding keys runs without a mask"),
    K("kernel-dkdv-diagonal-unmasked", "kernels/_backward.py",
      "tl.cdiv((pid_n + 1) * BLOCK_N, BLOCK_M) * BLOCK_M", "tl.cdiv(pid_n * BLOCK_N, BLOCK_M) * BLOCK_M",
      "dK/dV: query blocks crossing the causal diagonal run without a mask"),
    K("kernel-dropout-keeps-p", "kernels/_common.py",
      "tl.rand(seed, offsets) >= dropout_p", "tl.rand(seed, offsets) < dropout_p",
      "dropout keeps a fraction p instead of 1 - p"),
]

GUARD = '''
import os, pytest
from hypothesis import Phase, settings

# A failing example is enough to catch a mutant: skip shrinking it (minutes), keep no database.
settings.register_profile("mutation", phases=[Phase.explicit, Phase.reuse, Phase.generate], database=None)
settings.load_profile("mutation")

def pytest_sessionstart(session):
    import transformer
    expected = os.environ["MUTANT_ROOT"]
    if not os.path.realpath(transformer.__file__).startswith(os.path.realpath(expected) + os.sep):
        pytest.exit(f"mutant guard: transformer imported from {transformer.__file__}, not {expected}", returncode=99)
'''


def _copy_tree(workdir: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", "results.json")
    shutil.copytree(ROOT / "transformer", workdir / "transformer", ignore=ignore)
    if (ROOT / "kernels").is_dir():
        shutil.rmtree(workdir / "transformer" / "kernels", ignore_errors=True)
        shutil.copytree(ROOT / "kernels", workdir / "transformer" / "kernels", ignore=ignore)
    shutil.copytree(ROOT / "tests", workdir / "tests", ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", workdir / "pyproject.toml")
    (workdir / "_mutant_guard.py").write_text(GUARD)


def check_targets(mutants: list[Mutant]) -> list[str]:
    """Every edit's old text must occur exactly once in the current source."""
    problems = []
    for m in mutants:
        path = ROOT / m.file
        if not path.exists():
            problems.append(f"{m.id}: {m.file} does not exist")
            continue
        text = path.read_text()
        for old, _ in m.edits:
            count = text.count(old)
            if count != 1:
                problems.append(f"{m.id}: {old!r} occurs {count} times in {m.file} (expected exactly once)")
    return problems


def run_one(mutant: Mutant | None, tests: list[str], timeout: float) -> dict:
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutant-") as tmp:
        workdir = Path(tmp)
        _copy_tree(workdir)
        if mutant is not None:
            in_copy = "transformer/" + mutant.file if mutant.file.startswith("kernels/") else mutant.file
            path = workdir / in_copy
            text = path.read_text()
            for old, new in mutant.edits:
                if text.count(old) != 1:
                    raise SystemExit(f"mutant {mutant.id}: target text not found exactly once in {mutant.file}")
                text = text.replace(old, new)
            path.write_text(text)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TYPED_TRANSFORMER_CHECKS", "JAXTYPING_DISABLE")}
        env.update(PYTHONPATH=str(workdir), MUTANT_ROOT=str(workdir), PYTHONDONTWRITEBYTECODE="1",
                   OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "_mutant_guard",
               "--no-header", "-W", "ignore::DeprecationWarning", *tests]
        try:
            proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
            rc, output = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as error:
            rc, output = -1, f"timeout after {timeout:.0f}s\n{error.stdout or ''}"
    if rc == 99:
        raise SystemExit(f"mutant guard failed: the tests did not import the mutant's package\n{output}")
    failed = next((line for line in output.splitlines() if line.startswith(("FAILED", "ERROR"))), "")
    return {
        "id": mutant.id if mutant else "baseline",
        "file": mutant.file if mutant else "",
        "what": mutant.what if mutant else "unmutated copy",
        "returncode": rc,
        "status": "passed" if rc == 0 else ("caught" if rc in (1, 2) else ("timeout" if rc == -1 else f"error rc={rc}")),
        "killed_by": failed.split(" - ")[0].removeprefix("FAILED ").removeprefix("ERROR ").strip(),
        "seconds": round(time.monotonic() - start, 1),
        "tail": "\n".join(output.splitlines()[-15:]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", dest="select", default="", help="run only mutants whose id contains this text (comma-separated: any of them)")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="mutants run in parallel (default 2)")
    parser.add_argument("--json", default=str(ROOT / "tests" / "mutation" / "results.json"))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--tests", nargs="+", help="test files to run instead of TEST_FILES")
    args = parser.parse_args()

    mutants = [m for m in MUTANTS if any(part in m.id for part in args.select.split(","))]
    if args.list:
        for m in mutants:
            print(f"{m.id:34s} {m.file:28s} {m.what}")
        return 0
    # mutants of files that do not exist yet (work in progress elsewhere) are skipped, loudly
    missing = [m for m in mutants if not (ROOT / m.file).exists()]
    for m in missing:
        print(f"SKIP {m.id}: {m.file} does not exist")
    mutants = [m for m in mutants if m not in missing]
    problems = check_targets(mutants)
    if problems:
        print("stale mutants (the source changed; update MUTANTS):\n  " + "\n  ".join(problems))
        return 2
    tests = [t for t in (args.tests or TEST_FILES) if (ROOT / t).exists()]

    def suite(m: Mutant) -> list[str]:
        return list(m.tests) if m.tests and not args.tests else tests

    suites = sorted({tuple(suite(m)) for m in mutants}) or [tuple(tests)]
    print(f"{len(mutants)} mutants; test suites: " + "; ".join(" ".join(s) for s in suites))

    baselines = [run_one(None, list(s), args.timeout) for s in suites]  # each suite must pass unmutated
    for baseline in baselines:
        print(f"baseline: {baseline['status']} in {baseline['seconds']}s: {baseline['tail'].splitlines()[-1]}")
        if baseline["status"] != "passed":
            print(baseline["tail"])
            return 2

    results: list[dict] = []
    started = time.monotonic()
    with futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        jobs = {pool.submit(run_one, m, suite(m), args.timeout): m for m in mutants}
        for job in futures.as_completed(jobs):
            r = job.result()
            results.append(r)
            print(f"  {r['status']:9s} {r['id']:34s} {r['seconds']:6.1f}s  {r['killed_by']}", flush=True)
    order = {m.id: i for i, m in enumerate(mutants)}
    results.sort(key=lambda r: order[r["id"]])

    caught = [r for r in results if r["status"] == "caught"]
    survived = [r for r in results if r["status"] != "caught"]
    width = max(len(r["id"]) for r in results) if results else 10
    print(f"\n{'mutant':{width}s}  {'result':8s}  first failing test")
    print(f"{'-' * width}  --------  ------------------")
    for r in results:
        print(f"{r['id']:{width}s}  {r['status']:8s}  {r['killed_by']}")
    print(f"\nscore: {len(caught)}/{len(results)} mutants caught in {time.monotonic() - started:.0f}s "
          f"(baselines {', '.join(str(b['seconds']) + 's' for b in baselines)})")
    for r in survived:
        print(f"\nSURVIVED {r['id']} ({r['what']}):\n{r['tail']}")

    report = {
        "date": dt.date.today().isoformat(),
        "python": sys.version.split()[0],
        "tests": [list(s) for s in suites],
        "baseline_seconds": [b["seconds"] for b in baselines],
        "baseline": [b["tail"].splitlines()[-1] for b in baselines],
        "caught": len(caught),
        "total": len(results),
        "skipped": [m.id for m in missing],
        "mutants": [{k: v for k, v in r.items() if k != "tail"} for r in results],
    }
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0 if not survived else 1


if __name__ == "__main__":
    sys.exit(main())
