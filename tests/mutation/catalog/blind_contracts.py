"""Blind review of the run-time contracts and the CPU-speed work (2026-11-24), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-contracts-variadic-min-rank",
        "transformer/contracts/fast.py",
        (
            (
                '            src.emit(f"if len({shape}) < {rank - 1}: {_fail(src, fail)}")\n',
                '            src.emit(f"if len({shape}) < {rank - 2}: {_fail(src, fail)}")\n',
            ),
        ),
        "the fast checker's minimum rank for a variadic annotation is one too low: with an axis before the "
        "variadic one ('a *b c'), a 1-D tensor of shape (5,) is accepted (a=5, c=5, *b empty) where jaxtyping "
        "raises TypeCheckError",
    ),
    Mutant(
        "blind-contracts-join-broadcast-into-fixed",
        "transformer/contracts/grammar.py",
        (
            (
                "        return None if joint is None or not same_sizes(joint, previous) else (False, previous)\n",
                "        return None if joint is None else (False, previous)\n",
            ),
        ),
        "a '*#b' seen after '*b' bound it: any shape that merely broadcasts with the bound one is accepted "
        "(x: '*b' of shape (1,), y: '*#b' of shape (4,)) where jaxtyping rejects it (the broadcast would change "
        "the fixed '*b')",
    ),
    Mutant(
        "blind-contracts-keyword-args-unchecked",
        "transformer/contracts/fast.py",
        (
            (
                '            return f"{local} = {src.const(p.default, \'_default\')}" + (f"; {flag} = False" if flag else "")\n'
                '        return f"{local} = {how}" + (f"; {flag} = True" if flag else "")\n',
                '            return f"{local} = {src.const(p.default, \'_default\')}" + (f"; {flag} = True" if flag else "")\n'
                '        return f"{local} = {how}" + (f"; {flag} = False" if flag else "")\n',
            ),
        ),
        "the 'given' flags are swapped on the keyword path: an argument with a default passed by keyword "
        "(f(x, y=bad) with y: Float[Tensor, 'a'] | None = None) is never checked and a wrong shape passes "
        "silently, while the same call with y positional raises TypeCheckError",
    ),
    Mutant(
        "blind-contracts-tuple-length-at-least",
        "transformer/contracts/fast.py",
        (
            (
                '        src.emit(f"if not isinstance({value}, tuple) or len({value}) != {len(items)}: {_fail(src, fail)}")\n',
                '        src.emit(f"if not isinstance({value}, tuple) or len({value}) < {len(items)}: {_fail(src, fail)}")\n',
            ),
        ),
        "a fixed-length tuple annotation accepts longer tuples: a function annotated to return "
        "tuple[Float[Tensor, 'a'], Float[Tensor, 'a']] may return three tensors without a TypeCheckError",
    ),
    Mutant(
        "blind-contracts-rank0-unchecked",
        "transformer/contracts/fast.py",
        (
            (
                "        if not top or not rank:  # (at the top, unpacking the wrong number of sizes raises: jaxtyping decides)\n",
                "        if not top:  # (at the top, unpacking the wrong number of sizes raises: jaxtyping decides)\n",
            ),
        ),
        "a scalar annotation Float[Tensor, ''] checked at the top level no longer checks the rank: any tensor "
        "of the right dtype is accepted (a loss of shape (3,) passes a contract promising a 0-d tensor)",
    ),
    Mutant(
        "blind-contracts-token-id-equal-vocab",
        "transformer/contracts/guards.py",
        (("    bad = (tokens < 0) | (tokens >= vocab)\n", "    bad = (tokens < 0) | (tokens > vocab)\n"),),
        "token id == vocab is not caught by validate_token_ids: on the CPU nn.Embedding raises IndexError "
        "('index out of range in self') instead of the ValueError naming the id and the vocabulary size",
    ),
    Mutant(
        "blind-contracts-async-position-order",
        "transformer/contracts/guards.py",
        (
            (
                "        for size in reversed(self.shape):  # the flat (row-major) index as a position, as nonzero() gives it\n",
                "        for size in self.shape:  # the flat (row-major) index as a position, as nonzero() gives it\n",
            ),
        ),
        "the asynchronous (CUDA) token check turns the flat index into a position with the axes in the wrong "
        "order: a bad id at (1, 3) of a (2, 5) batch is reported 'at position (4, 0)'",
    ),
    Mutant(
        "blind-contracts-pending-no-wait",
        "transformer/contracts/guards.py",
        (("            if not wait and not check.ready():\n", "            if not check.ready():\n"),),
        "raise_pending_token_errors() (wait=True) returns at the first check whose answer has not arrived "
        "instead of waiting for it: an out-of-vocabulary id found on CUDA is not raised where the user asked "
        "to be told (end of epoch, before saving)",
    ),
    Mutant(
        "blind-contracts-layernorm-eps-dropped",
        "transformer/layers.py",
        (
            (
                "            return F.layer_norm(x, (self.features,), self.weight, self.bias, self.eps)\n",
                "            return F.layer_norm(x, (self.features,), self.weight, self.bias)\n",
            ),
        ),
        "LayerNorm's eps is not applied on the fused path: F.layer_norm's default 1e-5 is used instead of the "
        "configured eps (1e-6 by default, layer_norm_eps), while the mixed-dtype fallback still uses self.eps",
    ),
    Mutant(
        "blind-contracts-ffn-dropout-wrong-p",
        "transformer/lm/blocks.py",
        (
            (
                "hidden_dropout = config.dropout if config.ffn_hidden_dropout else 0.0",
                "hidden_dropout = config.attention_dropout if config.ffn_hidden_dropout else 0.0",
            ),
        ),
        "with ffn_hidden_dropout=True the feed-forward network's hidden dropout uses attention_dropout instead "
        "of dropout: LMConfig(dropout=0.3, attention_dropout=0.0) trains with no dropout inside the FFN",
    ),
]

# The files run for this review (its first run and after).
SUITE = (
    "tests/test_contracts_fast.py",
    "tests/test_contracts_switch.py",
    "tests/test_contracts_vocabulary.py",
    "tests/test_contracts_compiled.py",
    "tests/test_contracts_user.py",
    "tests/test_modules.py",
    "tests/test_lm.py",
    "tests/test_lm_gpt2.py",
    "tests/test_entry_guards.py",
    "tests/test_guards.py",
    "tests/test_config.py",
    "tests/test_dropout_placement.py",
    "tests/test_dropout_in_evaluation.py",
    "tests/test_compiled_contracts_of_modules.py",
)
MUTANTS = [dataclasses.replace(m, tests=SUITE) for m in MUTANTS]
