"""Blind review of step checks: the searches' ``checks`` policy (2026-11-24), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-stepchecks-first-checks-one-step",
        "transformer/decoding/steps.py",
        (
            (
                '        check = self.policy == "always" or (self.policy == "first" and (self.calls < 2 or ys.size(0) != self.batch))\n',
                '        check = self.policy == "always" or (self.policy == "first" and (self.calls < 1 or ys.size(0) != self.batch))\n',
            ),
        ),
        "checks='first' (the default) checks only the prompt step: the first one-token step (the second call) runs "
        "unchecked whenever the batch is unchanged, so a contract that only breaks on a one-token cached step "
        "(greedy, sampling, generate) is never named",
    ),
    Mutant(
        "blind-stepchecks-policy-switches-checks-on",
        "transformer/decoding/steps.py",
        (
            (
                ("        if check:\n            return self.steps(ys)\n        with checks_switch(False):\n"),
                "        with checks_switch(check):\n",
            ),
        ),
        "the policy now switches checks ON for the steps it checks: under set_checks(False) or "
        "`with checks(False)`, every search (default 'first', or 'always') still runs checked steps",
    ),
    Mutant(
        "blind-stepchecks-reorder-records-batch",
        "transformer/decoding/steps.py",
        (
            (
                ("    def reorder(self, index: Tensor) -> None:\n        self.steps.reorder(index)\n"),
                (
                    "    def reorder(self, index: Tensor) -> None:\n"
                    "        self.batch = index.numel()  # the rows the next call holds\n"
                    "        self.steps.reorder(index)\n"
                ),
            ),
        ),
        "CheckedSteps.reorder records the new batch, so under checks='first' the step after beam search's batch "
        "changes (hypotheses finishing, or the beam filling up past the second step) is no longer checked",
    ),
    Mutant(
        "blind-stepchecks-validate-accepts-non-str",
        "transformer/decoding/steps.py",
        (
            (
                "    if not isinstance(policy, str) or policy not in STEP_CHECKS:\n",
                "    if isinstance(policy, str) and policy not in STEP_CHECKS:\n",
            ),
        ),
        "validate_step_checks only refuses unknown strings: checks=None, True, 0 ... are accepted (with checks "
        "off, where the str annotation is not checked) and silently behave as 'never', instead of the ValueError "
        "naming checks",
    ),
    Mutant(
        "blind-stepchecks-beam-default-always",
        "transformer/decoding/beam.py",
        (
            (
                '    checks: str = "first",\n',
                '    checks: str = "always",\n',
            ),
        ),
        "beam_search's default policy is 'always' instead of the documented 'first': every step of every "
        "source's search is checked by default (steps after the second, with an unchanged batch, raise/slow down)",
    ),
    Mutant(
        "blind-stepchecks-stop-sequences-bypass-policy",
        "transformer/lm/generation.py",
        (
            (
                "            steps = StopSequences(steps, request.stops, request.end, prompt.size(1))",
                "            steps = StopSequences(model.next_tokens(use_cache=use_cache), request.stops, request.end, "
                "prompt.size(1))",
            ),
        ),
        "generate with stop_sequences wraps a fresh, unwrapped step function: the checks policy is dropped, so "
        "'first' and 'never' check every step (under the current setting), as if checks='always'",
    ),
    Mutant(
        "blind-stepchecks-beam-generate-wrong-who",
        "transformer/lm/generation.py",
        (('checks, "beam_generate")', 'checks, "generate")'),),
        "beam_generate(checks='sometimes') raises 'generate: checks must be one of ...': the error names the "
        "wrong function",
    ),
    Mutant(
        "blind-stepchecks-switch-not-restored-on-error",
        "transformer/common/switches.py",
        (
            (
                ("        try:\n            yield\n        finally:\n            self.variable.reset(token)\n"),
                ("        yield\n        self.variable.reset(token)\n"),
            ),
        ),
        "checks(...) restores the previous setting only on a normal exit: an exception inside the block (e.g. a "
        "guard's ValueError in a decoding step the policy ran unchecked) leaves checks switched off (or on) for "
        "the rest of the thread/task",
    ),
    Mutant(
        "blind-stepchecks-lm-cache-guard-follows-switch",
        "transformer/lm/model.py",
        (
            (
                "from ..contracts import Bool, Float, Int, Tensor, checked, validate_dtype_device, validate_length, validate_nonempty\n",
                (
                    "from ..contracts import (\n"
                    "    Bool,\n"
                    "    Float,\n"
                    "    Int,\n"
                    "    Tensor,\n"
                    "    checked,\n"
                    "    checks_enabled,\n"
                    "    validate_dtype_device,\n"
                    "    validate_length,\n"
                    "    validate_nonempty,\n"
                    ")\n"
                ),
            ),
            (
                "            if cache.length != ys.size(1) - 1:\n",
                "            if checks_enabled() and cache.length != ys.size(1) - 1:\n",
            ),
        ),
        "the LM cache's bookkeeping guard (cache length vs ys) only runs while checks are on: in the steps the "
        "policy runs unchecked (steps 3+ under 'first', all under 'never'), a step function fed the wrong ys "
        "silently decodes the last token at the wrong position instead of raising ValueError",
    ),
    Mutant(
        "blind-stepchecks-nexttokens-cache-reorder-on-batch-change",
        "transformer/model.py",
        (
            (
                "        self.memory = self.memory.index_select(0, index)\n",
                "        changed = index.numel() != self.memory.size(0)  # hypotheses were dropped or added\n"
                "        self.memory = self.memory.index_select(0, index)\n",
            ),
            (
                "        if self.cache is not None:\n            self.cache.reorder(index)\n",
                "        if self.cache is not None and changed:\n            self.cache.reorder(index)\n",
            ),
        ),
        "NextTokens.reorder moves the key/value cache only when the batch size changes: a beam step that keeps "
        "the same number of hypotheses but permutes/repeats them leaves each row with another hypothesis's "
        "cache, so beam_search with use_cache=True differs from use_cache=False",
    ),
]

# The tests they are measured against (the default TEST_FILES do not include the step-check or contract suites).
SUITE = (
    "tests/test_step_checks.py",
    "tests/test_decoding.py",
    "tests/test_contracts_switch.py",
    "tests/test_contracts_vocabulary.py",
    "tests/test_contracts_compiled.py",
)
MUTANTS = [dataclasses.replace(m, tests=SUITE) for m in MUTANTS]
