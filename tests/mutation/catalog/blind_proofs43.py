"""Blind review of issue 42's proofs (2026-12-02): AttentionMask and the key/value caches as pytrees
(transformer/common/pytrees.py), prove/export taking structured inputs named by their documented axes
(transformer/proofs/structures.py), prove by cases (transformer/proofs/cases.py, --cases), check_documents without a
branch on a symbolic size; by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-p43-split-past-a-contract-breaking-branch",
        "transformer/proofs/cases.py",
        (
            (
                '    if found.by != "the model\'s code" or not found.eager.startswith("no error"):\n',
                '    if found.by != "the model\'s code":\n',
            ),
        ),
        "split_points no longer asks that eager code at the breaking sizes take the other path without error: "
        "cases='split' splits at any branch of the model's code, also one whose other path breaks a contract, "
        "against docs/proved-shapes.md ('A branch whose other path breaks a contract is not split away: it stays "
        "the counterexample, with its eager contract error'). The report then has cases and the branch's "
        "counterexample with its contract error is gone (replaced by a failing piece).",
    ),
    Mutant(
        "blind-p43-split-case-lower-bound-exclusive",
        "transformer/proofs/cases.py",
        (('            texts.append(f"{name} >= {lo}")\n', '            texts.append(f"{name} > {lo}")\n'),),
        "Off by one in relations(): a split piece lo..hi is assumed as 'seq > lo' instead of 'seq >= lo', so the "
        "piece's proof runs over lo+1..hi and the piece's lowest size is never proved. For the sliding-window step "
        "(window 4) cases='split' reports PROVED with case ranges [(1, 2), (3, 3), (5, 31)]: seq=4 is in no case, "
        "a false proof by cases (docs/proved-shapes.md expects [(1, 2), (3, 3), (4, 31)] covering the ranges).",
    ),
    Mutant(
        "blind-p43-split-ends-off-by-one",
        "transformer/proofs/cases.py",
        (
            (
                '    ends = {">": [n], "<=": [n], ">=": [n - 1], "<": [n - 1], "==": [n - 1, n], "!=": [n - 1, n]}[op]\n',
                '    ends = {">": [n - 1], "<=": [n - 1], ">=": [n], "<": [n], "==": [n - 1, n], "!=": [n - 1, n]}[op]\n',
            ),
        ),
        "The split points of a strict and a non-strict bound are swapped: 'the model's code holds only when seq > 3' "
        "splits into 1..2 and 3..31 (its docstring: pieces lo..b and b+1..hi with b = 3), so the piece 3..31 still "
        "holds only when seq > 3, cannot be split further and stays a counterexample: cases='split' no longer proves "
        "the sliding-window step (docs/proved-shapes.md: proved by cases [(1, 2), (3, 3), (4, 31)]).",
    ),
    Mutant(
        "blind-p43-cases-string-iterated",
        "transformer/proofs/prove.py",
        (
            (
                "        cases = [cases] if isinstance(cases, str) else list(cases)\n",
                "        cases = list(cases)\n",
            ),
        ),
        "prove(..., cases='split') iterates the string: the cases become ['s', 'p', 'l', 'i', 't'], which are not "
        "'split', and Assumption('s') raises ValueError ('assume: 's' is not one comparison ...') instead of the "
        'proof by cases that the prove docstring and docs/proved-shapes.md promise for cases="split".',
    ),
    Mutant(
        "blind-p43-cases-proved-when-any-case-is",
        "transformer/proofs/report.py",
        (
            (
                "            return all(case.proved for case in self.cases)\n",
                "            return any(case.proved for case in self.cases)\n",
            ),
        ),
        "A proof by cases is reported PROVED when one case is proved: cases that together cover the ranges but one "
        "of which misses a boundary (cases=['seq <= 3', 'seq >= 4'] on the window-4 step, whose 'seq <= 3' piece "
        "branches at seq 3) give report.proved True and exit status 0, against docs/promises/proofs.md ('a case "
        "that misses a boundary is not proved') and combined()'s docstring (proved when every case is).",
    ),
    Mutant(
        "blind-p43-structure-axes-not-named-in-guards",
        "transformer/proofs/prove.py",
        (
            (
                "                if match:  # a tensor argument's axis, or a part's of a structured one (L['mask'].key_mask)\n",
                '                if match and not match["path"]:  # a tensor argument\'s axis\n',
            ),
        ),
        "_symbol_names again names only the axes of top-level tensor arguments: a guard on a cache's or a mask's "
        "part (L['cache'].layers[0]._keys.size()[2]) keeps torch's symbol (s27), which has no range, so "
        "counterexample() skips it as not decided. A contract that holds for one cache length is no longer the "
        "counterexample 'cache_len == 4' that docs/proved-shapes.md promises (at best an eager run at the low ends).",
    ),
    Mutant(
        "blind-p43-mask-window-not-fixed",
        "transformer/masks.py",
        (
            (
                'register_pytree(AttentionMask, _TENSORS, ("causal", *_WINDOW), lambda parts, fixed: AttentionMask(**fixed, **parts))\n',
                'register_pytree(AttentionMask, _TENSORS, ("causal",), lambda parts, fixed: AttentionMask(**fixed, **parts))\n',
            ),
        ),
        "The window is left out of the mask's pytree context: a mask flattened and rebuilt (torch.export's input, "
        "tree_map) loses window_left/window_right, so an exported attention given AttentionMask(key_lengths=..., "
        "window_left=...) computes without the window (not what eager computes), and a mask with another window is "
        "no longer refused, against docs/proved-shapes.md ('causal and the window are fixed at export, and a mask "
        "with other ones is another program, which torch refuses').",
    ),
    Mutant(
        "blind-p43-kv-cache-length-from-heads-axis",
        "transformer/cache.py",
        (
            (
                '    cache._length = 0 if parts["_keys"] is None else parts["_keys"].size(2)\n',
                '    cache._length = 0 if parts["_keys"] is None else parts["_keys"].size(1)\n',
            ),
        ),
        "A KVCache rebuilt from its pytree children takes its length from the heads axis (keys are (batch, heads, "
        "steps, d_k)): the cache an exported step takes or returns holds 'heads' positions instead of the keys "
        "given (a cache_len symbolic cache is sliced to the head count), so the exported cached step no longer "
        "equals eager and cache.length after two steps is not 13 (docs/proved-shapes.md, 'Structured inputs').",
    ),
    Mutant(
        "blind-p43-documents-branch-on-symbolic-length",
        "transformer/mask_inputs.py",
        (
            (
                '    if documents.device.type != "cpu" or torch.compiler.is_compiling() or is_fake(documents) or documents.size(1) < 2:\n',
                '    if documents.device.type != "cpu" or documents.size(1) < 2 or torch.compiler.is_compiling() or is_fake(documents):\n',
            ),
        ),
        "check_documents branches on the (symbolic) k_len before the compiling/fake test: rebuilding an "
        "AttentionMask(documents=...) input under torch.export asks 'k_len < 2' of a symbolic size, a guard that "
        "specialises the program (k_len >= 2, or fails export over a range from 1) instead of leaving k_len "
        "symbolic, against the change's promise (check_documents: no branch on a symbolic size first).",
    ),
    Mutant(
        "blind-p43-single-size-case-loses-its-example",
        "transformer/proofs/prove.py",
        (
            (
                "            examples.setdefault(name, size)\n"
                "            if lo == hi:\n"
                "                continue  # one size: the axis stays static (export makes no Dim of an empty range)\n",
                "            if lo == hi:\n"
                "                continue  # one size: the axis stays static (export makes no Dim of an empty range)\n"
                "            examples.setdefault(name, size)\n",
            ),
        ),
        "A range of one size (a case 'seq == 3', or the split piece (3, 3)) skips the axis before its example size "
        "is recorded: plan_export then finds no axis carrying 'seq' and raises 'prove: no axis of the example "
        "inputs carries 'seq'', so the sliding-window step can no longer be proved by cases at the window "
        "(prompt <= window - 2, == window - 1, >= window; docs/proved-shapes.md, 'Proofs by cases').",
    ),
]

_TESTS = (
    "tests/test_prove.py",
    "tests/test_prove_inputs.py",
    "tests/test_export.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
