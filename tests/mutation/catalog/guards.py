"""Mutants of the guards that run whether checks are on or off, and of the checks switch itself."""

from .base import M, Mutant

CONTRACT_TESTS = ("tests/test_guards.py", "tests/test_contracts.py")
GUARD_TESTS = ("tests/test_guards.py",)

MUTANTS: list[Mutant] = [
    M(
        "guard-token-ids-follow-switch",
        "transformer/contracts/__init__.py",
        "if tokens.numel() == 0 or torch.compiler.is_compiling():",
        "if tokens.numel() == 0 or not checks_enabled():",
        "the token-id guard is skipped with checks off (an index error, or a device assert on CUDA)",
    ),
    M(
        "guard-token-ids-last-id-allowed",
        "transformer/contracts/__init__.py",
        "bad = (tokens < 0) | (tokens >= vocab)",
        "bad = (tokens < 0) | (tokens > vocab)",
        "the token id equal to the vocabulary size passes the guard",
    ),
    M(
        "guard-token-ids-negative-allowed",
        "transformer/contracts/__init__.py",
        "bad = (tokens < 0) | (tokens >= vocab)",
        "bad = tokens >= vocab",
        "negative token ids pass the guard",
    ),
    M(
        "guard-empty-src-unchecked",
        "transformer/model.py",
        '        validate_nonempty(src, "EncoderDecoder.encode: argument \'src\'", "batch src_len")\n',
        "        pass\n",
        "an empty source reaches the encoder",
    ),
    M(
        "guard-empty-tgt-unchecked",
        "transformer/model.py",
        '        validate_nonempty(tgt, "EncoderDecoder.decode: argument \'tgt\'", "batch tgt_len")\n',
        "        pass\n",
        "an empty target reaches the decoder",
    ),
    M(
        "guard-empty-memory-unchecked",
        "transformer/model.py",
        '        validate_nonempty(memory, "EncoderDecoder.decode: argument \'memory\'", "batch src_len d_model", axis=1)\n',
        "        pass\n",
        "an empty memory reaches cross-attention",
    ),
    M(
        "guard-empty-checks-the-batch-axis",
        "transformer/contracts/__init__.py",
        "if tokens.size(axis) == 0:",
        "if tokens.size(0) == 0:",
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
        "transformer/contracts/__init__.py",
        (("    return tokens.clamp(0, vocab - 1)", "    return tokens"),),
        "on CUDA the lookup gets the bad id itself: a device-side assert",
        GUARD_TESTS,
    ),
    Mutant(
        "guard-device-answer-never-read",
        "transformer/contracts/__init__.py",
        (("        error = check.error()", "        error = None"),),
        "on CUDA a bad id found by the device check is never reported",
        GUARD_TESTS,
    ),
    Mutant(
        "guard-device-waits-at-every-call",
        "transformer/contracts/__init__.py",
        (
            (
                "    raise_pending_token_errors(wait=False)  # what earlier",
                "    raise_pending_token_errors(wait=True)  # what earlier",
            ),
        ),
        "on CUDA every call waits for the device (the host synchronisation the design avoids)",
        GUARD_TESTS,
    ),
    Mutant(
        "guard-device-position-column-major",
        "transformer/contracts/__init__.py",
        (("        for size in reversed(self.shape):", "        for size in self.shape:"),),
        "on CUDA the reported position of the bad id is wrong",
        GUARD_TESTS,
    ),
    Mutant(
        "switch-ignored",
        "transformer/contracts/__init__.py",
        (
            (
                "        if enabled:\n            if torch.compiler.is_compiling():",
                "        if True:\n            if torch.compiler.is_compiling():",
            ),
        ),
        "checks(False) does not switch the contracts off",
        CONTRACT_TESTS,
    ),
    Mutant(
        "switch-context-not-restored",
        "transformer/contracts/__init__.py",
        (("        _override.reset(token)", "        _override.set(True)"),),
        "the checks() context manager turns checks on at exit instead of restoring",
        CONTRACT_TESTS,
    ),
    Mutant(
        "switch-block-sets-process-default",
        "transformer/contracts/__init__.py",
        (
            (
                "    token = _override.set(bool(enabled))\n    try:\n        yield\n    finally:\n        _override.reset(token)",
                "    global _default_enabled\n    previous, _default_enabled = _default_enabled, bool(enabled)\n"
                "    try:\n        yield\n    finally:\n        _default_enabled = previous",
            ),
        ),
        "checks(...) changes the setting of every thread and task, not only its own",
        CONTRACT_TESTS,
    ),
    Mutant(
        "switch-block-ignored-by-checks-enabled",
        "transformer/contracts/__init__.py",
        (("    return _default_enabled if value is _SWITCH else value", "    return _default_enabled"),),
        "checks_enabled() reports the process default inside a checks(...) block",
        CONTRACT_TESTS,
    ),
    # contracts under torch.compile (transformer/contracts/traced.py)
    Mutant(
        "compiled-contracts-skipped",
        "transformer/contracts/__init__.py",
        (
            (
                "                return call_traced(contract, fn, args, kwargs)",
                "                return fn(*args, **kwargs)",
            ),
        ),
        "a compiled model skips its contracts (the behaviour before contracts held under torch.compile)",
        CONTRACT_TESTS,
    ),
    Mutant(
        "compiled-broadcast-axis-binds",
        "transformer/contracts/traced.py",
        (
            (
                "        if dim[2] and size == 1:\n            continue",
                "        if dim[2] and size == 1 and kind == 'fixed':\n            continue",
            ),
        ),
        "under torch.compile a size-1 '#name' axis binds the name (jaxtyping does not)",
        CONTRACT_TESTS,
    ),
    Mutant(
        "compiled-dtype-unchecked",
        "transformer/contracts/traced.py",
        (("        if hint[1] is not None and value.dtype not in hint[1]:\n            return False", "        pass"),),
        "under torch.compile a tensor of the wrong dtype (a float mask) passes its contract",
        CONTRACT_TESTS,
    ),
    Mutant(
        "compiled-return-unchecked",
        "transformer/contracts/traced.py",
        (("            if result is None or _fits(result[0], out, memo, bound, contract):", "            if True:"),),
        "under torch.compile the return value's contract is not checked",
        CONTRACT_TESTS,
    ),
    Mutant(
        "compiled-failed-binding-kept",
        "transformer/contracts/traced.py",
        (("        memo[0], memo[1] = single_before, variadic_before", "        pass"),),
        "under torch.compile a failed union alternative keeps the sizes it bound",
        CONTRACT_TESTS,
    ),
    Mutant(
        "compiled-no-caller-chain",
        "transformer/contracts/traced.py",
        (
            (
                '        message = " > ".join(_TRACE_CALLS) + ": " + template',
                '        message = qualname + ": " + template',
            ),
        ),
        "a compiled nested violation does not name its callers",
        CONTRACT_TESTS,
    ),
]
