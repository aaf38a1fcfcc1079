"""The report of a proof (:func:`transformer.proofs.prove`): every checked call reached, and for each either
*proved for every size in the ranges* or its first counterexample, re-run eagerly; what the proof does not cover."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Counterexample:
    """A size relation a call's traced program needs that the ranges do not give, with sizes that break it."""

    call: str  # "Outer.forward > Inner.forward"
    by: str  # "argument 'tgt_mask' axis tgt_len" (a contract's), or "the model's code" / "torch" (a specialisation)
    relation: str  # what it holds only when: "tgt_len == 1"
    sizes: dict  # a set of sizes within the ranges (and the assumptions) that breaks it
    where: str  # path:line of the code that asked
    source: str  # that line
    eager: str = ""  # what the call does eagerly at those sizes, checks on: the contract error, or another outcome

    def text(self) -> str:
        sizes = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        lines = [f"{self.call}: {self.by} holds only when {self.relation}"]
        if self.where:
            lines.append(f"    at {self.where}: {self.source}")
        lines.append(f"    broken by {sizes}")
        if self.eager:
            lines.append(f"    eagerly at those sizes: {self.eager}")
        return "\n".join(lines)


@dataclass
class CallReport:
    """One checked call reached while tracing (deduplicated by its chain of callers)."""

    call: str
    where: str
    times: int
    values: tuple[str, ...]  # non-tensor arguments: their values are not proved over
    asserted: list[str] = field(default_factory=list)  # relations left to run-time assertions in the program
    counterexample: Counterexample | None = None

    @property
    def proved(self) -> bool:
        return self.counterexample is None


@dataclass
class ProofReport:
    """What :func:`transformer.proofs.prove` found. ``proved``: every contract on every checked call reached holds
    for every size in ``ranges`` (under ``assumptions``); ``str(report)`` is the text a person reads."""

    target: str
    ranges: dict
    assumptions: list[str]
    calls: list[CallReport]
    counterexamples: list[Counterexample]
    failure: str = ""  # export could not trace the call at all (the example inputs break a contract, a
    #                    data-dependent size, ...): the proof is not done
    export_seconds: float = 0.0
    seconds: float = 0.0
    not_covered: list[str] = field(default_factory=list)
    cases: list[ProofReport] = field(default_factory=list)  # a proof by cases: each case's own report

    @property
    def proved(self) -> bool:
        if self.cases:
            return all(case.proved for case in self.cases)
        return not self.failure and not self.counterexamples

    @property
    def exit_code(self) -> int:
        return 0 if self.proved else 1

    def __str__(self) -> str:
        ranges = ", ".join(f"{k}={lo}..{hi}" for k, (lo, hi) in self.ranges.items())
        assumed = f" assuming {', '.join(self.assumptions)}" if self.assumptions else ""
        if self.proved:
            verdict = "PROVED for every size in the ranges"
        elif self.failure:
            verdict = "NOT PROVED (the program could not be traced)"
        else:
            verdict = f"NOT PROVED: {len(self.counterexamples)} counterexample(s)"
        lines = [f"prove {self.target} over {ranges}{assumed}: {verdict}"]
        if self.cases:
            lines[0] += f", by {len(self.cases)} cases covering the ranges"
            for case in self.cases:
                lines.append("  case " + str(case).replace("\n", "\n  "))
            return "\n".join(lines)
        if self.failure:
            lines.append(f"  {self.failure}")
        for counterexample in self.counterexamples:
            lines.append("  counterexample: " + counterexample.text().replace("\n", "\n  "))
        lines.append(f"  checked calls reached ({len(self.calls)}):")
        for call in self.calls:
            state = "proved for every size in the ranges" if call.proved else "COUNTEREXAMPLE (above)"
            if self.failure and call.proved:
                state = "reached before the trace stopped"
            times = f" x{call.times}" if call.times > 1 else ""
            lines.append(f"    {call.call}{times} ({call.where}): {state}")
            if call.values:
                lines.append(f"      not covered: the values of {', '.join(call.values)} (only sizes are proved)")
            for relation in call.asserted:
                lines.append(f"      checked at run time by an assertion in the program: {relation}")
        for note in self.not_covered:
            lines.append(f"  not covered: {note}")
        lines.append(f"  ({self.seconds:.1f} s, export {self.export_seconds:.1f} s)")
        return "\n".join(lines)
