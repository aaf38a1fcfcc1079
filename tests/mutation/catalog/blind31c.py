"""Blind review of contracts, the drop-in and integrations, run safety and distributed (2026-11-27), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-edge31-reg-num-splits-zero",
        "transformer/integrations/sdpa_registry.py",
        (("and value <= 1)", "and value == 1)"),),
        "The flash-provider adapters refuse num_splits=0 ('num_splits is not supported') although the docs accept "
        "None/-1/False/<=1 for the arguments the kernel has no equivalent for.",
    ),
    Mutant(
        "blind-edge31-guard-cpu-autocast",
        "transformer/contracts/guards.py",
        (("not torch.is_autocast_enabled(device.type)", "not torch.is_autocast_enabled()"),),
        "validate_dtype_device asks about CUDA autocast only: under torch.autocast('cpu', bfloat16) a bf16 tensor "
        "against float32 parameters raises ValueError although floating dtypes may differ under autocast on that device.",
    ),
    Mutant(
        "blind-edge31-fast-short-variadic",
        "transformer/contracts/fast.py",
        (
            (
                '        if i or not top or any(d[0] == "anon" for d in dims[i + 1 :]):',
                '        if not top or any(d[0] == "anon" for d in dims[i + 1 :]):',
            ),
        ),
        "The eager fast checker skips the rank test of a top-level annotation with axes before the variadic one: "
        "'a *mid b' accepts a 1-D tensor (too few axes) that jaxtyping refuses.",
    ),
    Mutant(
        "blind-edge31-check-empty-variadic",
        "transformer/contracts/traced_rules.py",
        (("    if len(shape) < len(dims) - 1:", "    if len(shape) < len(dims):"),),
        "A '*name' that matches zero axes is refused by check(...) inside a checked call (and by the traced "
        "checker under torch.compile): check(x, '*batch d') on a 1-D tensor raises TypeCheckError.",
    ),
    Mutant(
        "blind-edge31-join-broadcast-variadic",
        "transformer/contracts/grammar.py",
        (
            (
                "        if joint is None or (not broadcastable and not same_sizes(joint, new)):",
                "        if joint is None:",
            ),
        ),
        "A plain '*b' seen after a broadcastable '*#b' only has to broadcast with it: x '*#b n' (3,4) then "
        "y '*b n' (1,4) passes the contract, which jaxtyping refuses (both checkers share join_variadic).",
    ),
    Mutant(
        "blind-edge31-eager-causal-bottom-right",
        "transformer/backends/sdpa_reference.py",
        (("device=q.device).tril()", "device=q.device).tril(k.size(-2) - q.size(-2))"),),
        "The eager reference aligns is_causal bottom-right instead of torch's top-left when L != S: "
        "backend='eager' (and float64 on auto) differs from F.scaled_dot_product_attention for 3 queries over 5 keys.",
    ),
    Mutant(
        "blind-edge31-hf-single-query-causal",
        "transformer/integrations/huggingface.py",
        (("is_causal = q_len > 1 and attention_mask", "is_causal = q_len >= 1 and attention_mask"),),
        "attention_forward sets is_causal for a single query without a mask (a decoding step over a cache): "
        "top-left causality lets the new token see only the first cached key.",
    ),
    Mutant(
        "blind-edge31-eval-share-last-round",
        "transformer/distributed/strategy.py",
        (("rounds = -(-len(batches) // self.world_size)", "rounds = len(batches) // self.world_size"),),
        "With a number of evaluation batches that is not a multiple of the world size (7 over 3 ranks), the last "
        "partial round is dropped under DDP and FSDP: batch 6 is never evaluated.",
    ),
    Mutant(
        "blind-edge31-restart-count-var",
        "transformer/distributed/world.py",
        (('integer("TORCHELASTIC_RESTART_COUNT", 0)', 'integer("TORCHELASTIC_MAX_RESTARTS", 0)'),),
        "World.restart_count is read from TORCHELASTIC_MAX_RESTARTS: a first attempt launched with --max-restarts=3 "
        "looks restarted (3), and a real restart without that variable looks like a first attempt (0).",
    ),
    Mutant(
        "blind-edge31-stale-temp-permission",
        "transformer/common/output_dirs.py",
        (("    except ProcessLookupError:\n        return False", "    except OSError:\n        return False"),),
        "remove_stale_temps treats a PermissionError from os.kill (another user's live process) as a dead process "
        "and deletes that process's temporary directory, which the docs promise never to touch.",
    ),
]

# The before rate ran on commit eb200ba against the files after the issue-31 ones (the areas' suites of that morning);
# the files issue 31 added, which catch the survivors, come first.
_TESTS = (
    "tests/test_sdpa_registry_neutral_arguments.py",
    "tests/test_contract_edges.py",
    "tests/test_run_safety_leftovers.py",
    "tests/test_contracts_compiled_containers.py",
    "tests/test_contracts_fast.py",
    "tests/test_contracts_check.py",
    "tests/test_contracts_compiled.py",
    "tests/test_contracts_compiled_forms.py",
    "tests/test_contracts_user.py",
    "tests/test_contracts_vocabulary.py",
    "tests/test_contracts_switch.py",
    "tests/test_guards.py",
    "tests/test_sdpa_dropin.py",
    "tests/test_sdpa_registry.py",
    "tests/test_huggingface.py",
    "tests/test_huggingface_structures.py",
    "tests/test_distributed_laws.py",
    "tests/test_distributed_setup.py",
    "tests/test_distributed_cli.py",
    "tests/test_run_safety_disk.py",
    "tests/test_common_idioms.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
