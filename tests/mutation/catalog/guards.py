"""Mutants of the guards that run whether checks are on or off, and of the checks switch itself."""

from .base import M, Mutant

CONTRACT_TESTS = (
    "tests/test_guards.py",
    "tests/test_contracts_switch.py",
    "tests/test_contracts_vocabulary.py",
    "tests/test_contracts_compiled.py",
)
GUARD_TESTS = ("tests/test_guards.py",)
CHECK_TESTS = ("tests/test_contracts_check.py", "tests/test_contracts_compiled_forms.py")

MUTANTS: list[Mutant] = [
    M(
        "guard-token-ids-follow-switch",
        "transformer/contracts/guards.py",
        "    if tokens.numel() == 0 or torch.compiler.is_compiling():\n",
        "    if tokens.numel() == 0 or not checks_enabled():\n",
        "the token-id guard is skipped with checks off (an index error, or a device assert on CUDA)",
    ),
    M(
        "guard-token-ids-last-id-allowed",
        "transformer/contracts/guards.py",
        "    bad = (tokens < 0) | (tokens >= vocab)\n",
        "    bad = (tokens < 0) | (tokens > vocab)\n",
        "the token id equal to the vocabulary size passes the guard",
    ),
    M(
        "guard-token-ids-negative-allowed",
        "transformer/contracts/guards.py",
        "    bad = (tokens < 0) | (tokens >= vocab)\n",
        "    bad = tokens >= vocab\n",
        "negative token ids pass the guard",
    ),
    M(
        "guard-empty-src-unchecked",
        "transformer/model.py",
        'validate_nonempty(src, "EncoderDecoder.encode: argument \'src\'", "batch src_len")',
        "pass",
        "an empty source reaches the encoder",
    ),
    M(
        "guard-empty-tgt-unchecked",
        "transformer/model.py",
        'validate_nonempty(tgt, "EncoderDecoder.decode: argument \'tgt\'", "batch tgt_len")',
        "pass",
        "an empty target reaches the decoder",
    ),
    M(
        "guard-empty-memory-unchecked",
        "transformer/model.py",
        'validate_nonempty(memory, "EncoderDecoder.decode: argument \'memory\'", "batch src_len d_model", axis=1)',
        "pass",
        "an empty memory reaches cross-attention",
    ),
    M(
        "guard-empty-checks-the-batch-axis",
        "transformer/contracts/guards.py",
        "    if tokens.size(axis) == 0:\n",
        "    if tokens.size(0) == 0:\n",
        "the empty-sequence guard looks at the batch axis",
    ),
    M(
        "guard-search-empty-src-unchecked",
        "transformer/decoding/requests.py",
        '    validate_nonempty(src, f"{who}: argument \'src\'", "batch src_len")\n',
        "    pass\n",
        "greedy_decode, sample_decode and beam_search do not name their empty source",
    ),
    # the token-id guard on CUDA (checked on the device, answered later; tests/test_guards.py fakes the device)
    Mutant(
        "guard-device-ids-not-clamped",
        "transformer/contracts/guards.py",
        (("    return tokens.clamp(0, vocab - 1)\n", "    return tokens\n"),),
        "on CUDA the lookup gets the bad id itself: a device-side assert",
        GUARD_TESTS,
    ),
    Mutant(
        "guard-device-answer-never-read",
        "transformer/contracts/guards.py",
        (("        error = check.error()\n", "        error = None\n"),),
        "on CUDA a bad id found by the device check is never reported",
        GUARD_TESTS,
    ),
    Mutant(
        "guard-device-waits-at-every-call",
        "transformer/contracts/guards.py",
        (
            (
                "    raise_pending_token_errors(wait=False)  # what earlier calls' checks have found by now\n",
                "    raise_pending_token_errors(wait=True)  # what earlier calls' checks have found by now\n",
            ),
        ),
        "on CUDA every call waits for the device (the host synchronisation the design avoids)",
        GUARD_TESTS,
    ),
    Mutant(
        "guard-device-position-column-major",
        "transformer/contracts/guards.py",
        (
            (
                "        for size in reversed(self.shape):  # the flat (row-major) index as a position, as nonzero() gives it\n",
                "        for size in self.shape:  # the flat (row-major) index as a position, as nonzero() gives it\n",
            ),
        ),
        "on CUDA the reported position of the bad id is wrong",
        GUARD_TESTS,
    ),
    Mutant(
        "switch-ignored",
        "transformer/contracts/decorator.py",
        (("        if enabled:\n", "        if True:\n"),),
        "checks(False) does not switch the contracts off",
        CONTRACT_TESTS,
    ),
    Mutant(
        "switch-context-not-restored",
        "transformer/common/switches.py",
        (("            self.variable.reset(token)\n", "            self.variable.set(True)\n"),),
        "the checks() context manager turns checks on at exit instead of restoring",
        CONTRACT_TESTS,
    ),
    Mutant(
        "switch-block-sets-process-default",
        "transformer/common/switches.py",
        (
            (
                (
                    "        token = self.variable.set(value)\n"
                    "        try:\n"
                    "            yield\n"
                    "        finally:\n"
                    "            self.variable.reset(token)\n"
                ),
                (
                    "        previous, self.default = self.default, value\n"
                    "        try:\n"
                    "            yield\n"
                    "        finally:\n"
                    "            self.default = previous\n"
                ),
            ),
        ),
        "checks(...) changes the setting of every thread and task, not only its own",
        CONTRACT_TESTS,
    ),
    Mutant(
        "switch-block-ignored-by-checks-enabled",
        "transformer/common/switches.py",
        (("        return self.default if value is self.reader else value\n", "        return self.default\n"),),
        "checks_enabled() reports the process default inside a checks(...) block",
        CONTRACT_TESTS,
    ),
    # contracts under torch.compile (transformer/contracts/traced.py)
    Mutant(
        "compiled-contracts-skipped",
        "transformer/contracts/decorator.py",
        (
            (
                "                return call_traced(contract, fn, args, kwargs, wrapper)",
                "                return fn(*args, **kwargs)",
            ),
        ),
        "a compiled model skips its contracts (the behaviour before contracts held under torch.compile)",
        CONTRACT_TESTS,
    ),
    Mutant(
        "compiled-broadcast-axis-binds",
        "transformer/contracts/traced_rules.py",
        (("        if dim[2] and size == 1:\n", '        if dim[2] and size == 1 and kind == "fixed":\n'),),
        "under torch.compile a size-1 '#name' axis binds the name (jaxtyping does not)",
        CONTRACT_TESTS,
    ),
    Mutant(
        "compiled-dtype-unchecked",
        "transformer/contracts/traced_rules.py",
        (
            (
                ("        if hint[1] is not None and value.dtype not in hint[1]:\n            return False\n"),
                "        pass\n",
            ),
        ),
        "under torch.compile a tensor of the wrong dtype (a float mask) passes its contract",
        CONTRACT_TESTS,
    ),
    Mutant(
        "compiled-return-unchecked",
        "transformer/contracts/traced.py",
        (
            (
                "        if result is not None and not fits(result[0], out, memo, bound, contract):\n",
                "        if False:\n",
            ),
        ),
        "under torch.compile the return value's contract is not checked",
        CONTRACT_TESTS,
    ),
    Mutant(
        "compiled-failed-binding-kept",
        "transformer/contracts/traced_rules.py",
        (
            (
                "        memo[0], memo[1] = single_before, variadic_before  # jaxtyping's restore: later bindings go to the copies\n",
                "        pass  # jaxtyping's restore: later bindings go to the copies\n",
            ),
        ),
        "under torch.compile a failed union alternative keeps the sizes it bound",
        CONTRACT_TESTS,
    ),
    Mutant(
        "compiled-no-caller-chain",
        "transformer/contracts/traced.py",
        (
            (
                '    raise_traced(" > ".join(_TRACE_CALLS) + ": " + template, sizes)\n',
                '    raise_traced(_TRACE_CALLS[-1] + ": " + template, sizes)\n',
            ),
        ),
        "a compiled nested violation does not name its callers",
        CONTRACT_TESTS,
    ),
    Mutant(
        "check-names-not-in-return",
        "transformer/contracts/decorator.py",
        (
            (
                "            if frame[3] is not None:  # a check(...) inside fn bound names: the return value answers to them too\n",
                "            if False:\n",
            ),
        ),
        "a name bound by check(...) does not hold for the return value in eager mode",
        CHECK_TESTS,
    ),
    Mutant(
        "check-ignores-signature-names",
        "transformer/contracts/within.py",
        (("            fits(hint, given[name], memo, bound, contract)\n", "            pass\n"),),
        "check(...) binds its names afresh instead of with the enclosing call's arguments",
        CHECK_TESTS,
    ),
    Mutant(
        "traced-violation-raised-from-graph",
        "transformer/contracts/traced.py",
        (
            (
                '_contract_violation = raising_operator("contract_violation_traced", _violation_error, while_tracing=True)\n',
                '_contract_violation = raising_operator("contract_violation_traced", _violation_error)\n',
            ),
        ),
        "a violation found while tracing is raised by the compiled graph, after the next operation has been traced",
        CHECK_TESTS,
    ),
]
