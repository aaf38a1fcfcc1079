"""Blind review of issue 30 check inside a forward and compiled contracts (2026-11-27), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-c30-outermost-frame",
        "transformer/contracts/within.py",
        (("    frame = frames[-1]\n", "    frame = frames[0]\n"),),
        "A check(...) inside a checked call nested in another checked call binds with the outermost call's names and "
        "arguments instead of the innermost one's, so {self.x} and names bound by the inner call's signature are wrong.",
    ),
    Mutant(
        "blind-c30-checks-off-reads-annotation",
        "transformer/contracts/within.py",
        (
            (
                "    if not enabled:\n        return x\n    parsed = _parsed(annotation)\n",
                "    parsed = _parsed(annotation)\n    if not enabled:\n        return x\n",
            ),
        ),
        "With checks off, check() still parses its annotation: an unreadable annotation raises ValueError (and every "
        "call pays for the parse lookup) where the docs promise it returns its argument after one switch lookup.",
    ),
    Mutant(
        "blind-c30-broken-axis-skips-size-one",
        "transformer/contracts/within.py",
        (("(broadcastable and x.shape[axis] == 1)", "x.shape[axis] == 1"),),
        "A failed check whose wrong axis has size 1 on a non-broadcastable name loses the '; axis N (name) is 1, "
        "expected M' detail (or names a later axis) in its message.",
    ),
    Mutant(
        "blind-c30-frame-left-after-error",
        "transformer/contracts/decorator.py",
        (
            (
                "                raise TypeCheckError(located(qualname, str(error), fields(args, kwargs))) from None\n"
                "            finally:\n                frames.pop()\n",
                "                raise TypeCheckError(located(qualname, str(error), fields(args, kwargs))) from None\n"
                "            frames.pop()\n",
            ),
        ),
        "After a checked call raises, its frame stays on the per-thread stack: a later check() outside any checked "
        "call no longer refuses, and later checks bind with the stale call's names.",
    ),
    Mutant(
        "blind-c30-nested-check-prefix",
        "transformer/contracts/decorator.py",
        (
            (
                '                raise TypeCheckError(qualname + ": " + str(failure)) from None\n',
                '                raise CheckFailure(qualname + ": " + str(failure)) from None\n',
            ),
        ),
        "A failed check() in a checked call nested in another one reads 'Outer.forward: Inner.forward: tensor ...' "
        "instead of eager's 'Outer.forward > Inner.forward: tensor ...' (and every failed check "
        "raises the internal CheckFailure subclass rather than a plain TypeCheckError).",
    ),
    Mutant(
        "blind-c30-traced-check-binds-copy",
        "transformer/contracts/traced.py",
        (
            (
                "        TRACED.append((memo, bound))  # what a check(...) inside fn binds with\n",
                "        TRACED.append(([dict(single), dict(variadic)], bound))  # what a check(...) inside fn binds with\n",
            ),
        ),
        "Under torch.compile a name first bound by check(h, 'b m') no longer holds for the return value: a return "
        "of the wrong size for m compiles and runs where eager mode raises TypeCheckError.",
    ),
    Mutant(
        "blind-c30-symbolic-size-unhinted",
        "transformer/common/graph_errors.py",
        (("        return int(hint) if hint is not None else str(size)\n", "        return str(size)\n"),),
        "With dynamic shapes (dynamic=True or automatic), the compiled error writes symbolic sizes ('f32[s0,s1]', "
        "'b=s0') instead of the wrong call's own numbers, so its first line no longer matches eager mode's.",
    ),
    Mutant(
        "blind-c30-literal-class-index-shifted",
        "transformer/contracts/grammar.py",
        (
            (
                "tuple(range(len(classes) - len(values), len(classes)))",
                "tuple(range(len(classes) - len(values) - 1, len(classes) - 1))",
            ),
        ),
        "Literal[...] values are matched against the class of the previous value (off by one), so under "
        "torch.compile a valid value of a mixed Literal[1, 'a'] (or one after another class annotation) is rejected.",
    ),
    Mutant(
        "blind-c30-literal-equality-only",
        "transformer/contracts/traced_rules.py",
        (
            (
                "            if isinstance(value, contract.classes[index]) and value == literal:\n",
                "            if value == literal:\n",
            ),
        ),
        "Under torch.compile Literal[1] accepts 1.0 (equal but not an int), which eager mode's beartype rejects: "
        "the compiled call runs where the eager one raises TypeCheckError.",
    ),
    Mutant(
        "blind-c30-call-site-outermost-frame",
        "transformer/contracts/report.py",
        (("    for frame in reversed(stack):\n", "    for frame in stack:\n"),),
        "A failed check(...) given no name= is named from the outermost frame of the stack (the script's top-level "
        "call) instead of check's own call site: 'tensor 'the tensor checked at script.py:N'' instead of 'tensor 'q''.",
    ),
]

# Run against the test files of the code reviewed (the before rate, 6/10: on commit 3fdd077, before the tests the review prompted).
_TESTS = (
    "tests/test_contracts_check.py",
    "tests/test_contracts_compiled_forms.py",
    "tests/test_contracts_compiled.py",
    "tests/test_compiled_contracts_of_modules.py",
    "tests/test_contracts_user.py",
    "tests/test_contracts_fast.py",
    "tests/test_contracts_switch.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
