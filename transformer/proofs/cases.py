"""A proof by cases: the ranges split by relations that together cover them, each case proved on its own.

Some shapes are piecewise functions of a size: a sliding-window cache holds ``min(prompt, window - 1)`` keys
(``LMCache.trim``, Mistral's rolling buffer, Jiang et al. 2023 section 2), and torch's symbolic shape reasoning
specialises on which piece holds (a ``min`` of a size is no size it can keep symbolic through every operation). The
proof over the whole range then reports the branch (``the model's code holds only when seq > 3``); proving each piece
(``cases=["seq <= 3", "seq >= 4"]``) covers every size, with the cases said in the report. The cases must cover the
ranges (every size tried is in one case: every size, for ranges shorter than 4096), else ``ValueError`` names a size
none covers. See "Proofs by cases" in docs/proved-shapes.md.
"""

from __future__ import annotations

import itertools
import time

from .report import ProofReport
from .sizes import Assumption, candidates
from .structures import inputs_at


def uncovered(cases: list[Assumption], ranges: dict, assumptions: list[Assumption]) -> dict | None:
    """Sizes within the ranges and the assumptions that no case holds at, or None when the cases cover them all."""
    involved = sorted({n for c in cases for n in c.names})
    missing = [n for n in involved if n not in ranges]
    if missing:
        raise ValueError(f"cases: {missing[0]!r} has no range in sizes (the cases split the ranges: {sorted(ranges)})")
    axes = [candidates(*ranges[n], ranges[n][0], seed=i) for i, n in enumerate(involved)]
    for point in itertools.product(*axes):
        values = dict(zip(involved, point, strict=True))
        if not all(a.holds(values) for a in assumptions if set(a.names) <= set(values)):
            continue
        if not any(c.holds(values) for c in cases):
            return values
    return None


def case_inputs(bound: dict, named: dict, alias: dict, ranges: dict, examples: dict, like) -> dict:
    """The example inputs (by argument name) with each named size moved into its case's range (to its nearest end)
    when the given example lies outside it; tensors rebuilt with ``like(value, shape)``, others kept."""
    sizes = {n: min(max(v, ranges[n][0]), ranges[n][1]) if n in ranges else v for n, v in examples.items()}
    if sizes == examples:
        return {k: v for k, v in bound.items() if k != "self"}
    return inputs_at({k: v for k, v in bound.items() if k != "self"}, named, alias, sizes, like)


def combined(target: str, ranges: dict, assumptions: list[str], reports: list[ProofReport], seconds: float):
    """One report of the cases: proved when every case is; its calls and counterexamples are the cases'."""
    calls = reports[0].calls if reports else []
    counterexamples = [c for r in reports for c in r.counterexamples]
    failure = next((r.failure for r in reports if r.failure), "")
    export_seconds = sum(r.export_seconds for r in reports)
    not_covered = reports[0].not_covered if reports else []
    report = ProofReport(target, ranges, assumptions, calls, counterexamples, failure, export_seconds, seconds)
    report.not_covered = not_covered
    report.cases = reports
    return report


#: the most cases ``cases="split"`` makes
MOST_CASES = 8


def split_points(report: ProofReport, ranges: dict) -> tuple[str, list[int]] | None:
    """Where to split a case whose proof found only branches of the model's code on one size that eager code takes
    without error (``the model's code holds only when seq > 2``, a specialisation, not a bug): the name and the
    sizes ``b`` that end a piece (pieces ``lo..b`` and ``b + 1..hi``); None when the case's failure is another
    (a contract's counterexample, an eager error, a relation over several sizes) or the split makes no progress."""
    if report.failure or not report.counterexamples:
        return None
    found = report.counterexamples[0]
    if found.by != "the model's code" or not found.eager.startswith("no error"):
        return None
    try:
        bound = Assumption(found.relation).bound()
    except ValueError:
        return None
    if bound is None or bound[0] not in ranges:
        return None
    name, op, n = bound
    ends = {">": [n], "<=": [n], ">=": [n - 1], "<": [n - 1], "==": [n - 1, n], "!=": [n - 1, n]}[op]
    lo, hi = ranges[name]
    ends = [b for b in ends if lo <= b < hi]
    return (name, ends) if ends else None


def pieces(name: str, ends: list[int], ranges: dict) -> list[dict]:
    """The ranges of the pieces of ``name``'s range that end at ``ends``."""
    lo, hi = ranges[name]
    starts = [lo, *(b + 1 for b in ends)]
    stops = [*ends, hi]
    return [{**ranges, name: (a, b)} for a, b in zip(starts, stops, strict=True)]


def relations(case: dict, ranges: dict) -> list[str]:
    """A case's ranges (narrower than ``ranges``) as the relations a proof assumes: ``seq <= 2``, ``seq == 3``."""
    texts = []
    for name, (lo, hi) in case.items():
        full = ranges[name]
        if (lo, hi) == full:
            continue
        if lo == hi:
            texts.append(f"{name} == {lo}")
            continue
        if lo > full[0]:
            texts.append(f"{name} >= {lo}")
        if hi < full[1]:
            texts.append(f"{name} <= {hi}")
    return texts


def by_cases(target, example_args, example_kwargs, sizes, assume, axes, rerun, cases, started) -> ProofReport:
    """``prove`` by cases (:mod:`transformer.proofs.cases`): given ones, or ``"split"``: split where a proof finds
    only a branch of the model's code on one size that eager code takes without error, until each piece is proved
    (at most ``MOST_CASES``)."""
    from .prove import _like, _ranges, plan_export, prove  # (prove calls this module: imported when called)

    plan = plan_export(target, example_args, example_kwargs, sizes, assume, axes)

    def prove_case(texts: list[str], ranges: dict) -> ProofReport:
        inputs = case_inputs(plan.bound, plan.named, plan.alias, ranges, plan.examples, _like)
        return prove(target, sizes=sizes, assume=[*assume, *texts], axes=axes, rerun=rerun, **inputs)

    reports = []
    if cases == ["split"]:
        pending = [dict(plan.ranges)]
        while pending:
            case = pending.pop(0)
            report = prove_case(relations(case, plan.ranges), case)
            where = split_points(report, case)
            if where is not None and len(reports) + len(pending) + len(where[1]) + 1 <= MOST_CASES:
                pending[0:0] = pieces(*where, case)
            else:
                reports.append(report)
    else:
        parsed = [Assumption(case) for case in cases]
        gap = uncovered(parsed, plan.ranges, plan.assumptions)
        if gap is not None:
            raise ValueError(f"prove: the cases {cases} leave out the sizes {gap}: they must cover the ranges")
        for case in parsed:
            ranges, _ = _ranges(plan.ranges, [*plan.assumptions, case])
            reports.append(prove_case([case.text], ranges))
    kept = {n: plan.ranges[n] for n in plan.ranges if n not in plan.alias}
    target_name = getattr(plan.fn, "__qualname__", str(plan.fn))
    return combined(target_name, kept, [a.text for a in plan.assumptions], reports, time.perf_counter() - started)
