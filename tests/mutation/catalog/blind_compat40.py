"""Blind review of issue 40's supported range (2026-12-01), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-c40-torch-floor-warned",
        "transformer/common/versions.py",
        (("    if version < OLDEST_TORCH:\n", "    if version <= OLDEST_TORCH:\n"),),
        "Off by one at the floor: torch 2.9, the oldest supported torch, now gets the 'typed-transformer supports "
        "torch >= 2.9 and torch 2.9.x is installed' warning at import; only a torch below 2.9 should.",
    ),
    Mutant(
        "blind-c40-unsupported-base-not-added",
        "transformer/common/graph_errors.py",
        (
            (
                "    cls = type(error)\n"
                "    if not issubclass(cls, Unsupported):\n"
                "        cls.__bases__ = (*cls.__bases__, Unsupported)\n",
                "    cls = type(error)\n",
            ),
        ),
        "Before torch 2.13, _handed_on no longer adds Dynamo's Unsupported as a base of the error's class: the "
        "error is not an Unsupported (Unsupported.__init__'s super() then fails on it), so Dynamo wraps it and "
        "the compiled contract's violation no longer reaches the caller as the CompiledContractError.",
    ),
    Mutant(
        "blind-c40-dynamo-trailer-shown",
        "transformer/common/graph_errors.py",
        (
            (
                "    Unsupported.__init__(error, text)\n    error._text = text\n",
                "    Unsupported.__init__(error, text)\n",
            ),
        ),
        "Before torch 2.13 the message as raised is not kept (_text never set), so str() of the handed-on error "
        "falls back to its arguments and shows Dynamo's appended 'from user code: ...' trace: the compiled error's "
        "message is no longer the eager one.",
    ),
    Mutant(
        "blind-c40-spec-reader-not-constant",
        "transformer/contracts/traced.py",
        (("    read_spec._dynamo_marked_constant = True  # type: ignore[attr-defined]\n", ""),),
        "Contract.read_spec is no longer marked as torch.compiler.assume_constant_result marks a function: Dynamo "
        "traces into the closure and guards on every entry of the contract's tables (one guard per entry instead "
        "of one per contract), and it no longer agrees with assume_constant_result(read_spec).",
    ),
    Mutant(
        "blind-c40-old-triton-message-no-version",
        "transformer/backends/choice.py",
        (('            f"Triton {found} is older than', '            f"Triton is older than'),),
        "The one-line refusal of an old Triton drops the installed version: 'Triton is older than 3.5, ...' "
        "instead of docs/install.md's 'Triton 3.2.0 is older than 3.5, the oldest the kernels support; ...'.",
    ),
    Mutant(
        "blind-c40-kernels-refuse-triton-3.5",
        "kernels/_triton_version.py",
        (("if TRITON_VERSION < OLDEST_TRITON:\n", "if TRITON_VERSION <= OLDEST_TRITON:\n"),),
        "Off by one in the import check: import transformer.kernels raises ImportError ('needs triton >= 3.5, "
        "found triton 3.5.1') on triton 3.5, the supported floor that torch 2.9 pins.",
    ),
    Mutant(
        "blind-c40-traceable-unwraps-jit",
        "kernels/_op.py",
        (
            (
                '    while not isinstance(inner, JITFunction) and hasattr(inner, "fn"):',
                '    while hasattr(inner, "fn"):',
            ),
        ),
        "_traceable unwraps past a JITFunction (it has .fn too) down to the plain Python function, so a compiled "
        "(non-interpreted) kernel, alone or under triton.autotune, is never given to wrap_triton: torch.compile on "
        "CUDA can no longer trace the launch.",
    ),
    Mutant(
        "blind-c40-descriptors-interpreted-on-3.5",
        "kernels/_tuning.py",
        (
            (
                "    return _HAS_DESCRIPTORS and triton_version >= (3, 6)\n",
                "    return _HAS_DESCRIPTORS and triton_version >= (3, 5)\n",
            ),
        ),
        "Tensor descriptors are enabled under the interpreter on Triton 3.5, whose interpreter checks a "
        "descriptor's strides in elements ('stride must be 16-byte aligned' for a float32 row of 20): docs say "
        "the forward reads through pointers there (descriptors on the CPU from Triton 3.6).",
    ),
    Mutant(
        "blind-c40-interpreter-reason-never-cached",
        "kernels/_validate.py",
        (
            (
                "    if not _OLD_INTERPRETER:\n"
                "        _OLD_INTERPRETER.append(_ask_old_interpreter())\n"
                "    return _OLD_INTERPRETER[0]\n",
                "    if not _OLD_INTERPRETER:\n"
                "        reason = _ask_old_interpreter()\n"
                "        if reason is not None:\n"
                "            _OLD_INTERPRETER.append(reason)\n"
                "        return reason\n"
                "    return _OLD_INTERPRETER[0]\n",
            ),
        ),
        "The old-interpreter reason is cached only when there is one: in the usual case (no reason) the cache "
        "never fills and the installed numpy and triton versions are read from their metadata at every check, "
        "not once as the docstring says.",
    ),
    Mutant(
        "blind-c40-junit-skipped-counted-passed",
        "scripts/compat.py",
        (
            (
                'row["failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"] += 1',
                'row["failed" if kinds & {"failure", "error"} else "passed"] += 1',
            ),
        ),
        "The compatibility run's per-file counts (_junit_counts) count a skipped test as passed: 'skipped' is "
        "always 0, so a point where a whole file skips (an old transformers, no registry) looks fully passed.",
    ),
]

# Run against (the before rate, 6/10, on commit d80469b plus the review's own tree; after, 10/10, with the tests the
# review prompted: the kernels' import at triton 3.5.x, a real JITFunction for _traceable, the descriptor rule by
# version, the interpreter's reason asked once whatever the answer):
_TESTS = ("tests/test_compat.py", "tests/test_contracts_compiled.py")
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
