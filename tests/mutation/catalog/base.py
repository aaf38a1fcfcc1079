"""What a mutant is: one plausible bug, as exact string replacements in one source file."""

from __future__ import annotations

import dataclasses

# Test files run against every mutant, fastest and sharpest first (-x stops at the first failure).
# Files that do not exist (yet) are skipped. Compile tests (test_contracts_compiled.py), kernel tests and
# packaging/README tests are left out: slow, and not about the semantics mutated here.
TEST_FILES = [
    "tests/test_modules.py",
    "tests/test_guards.py",
    "tests/test_config_plumbing.py",
    "tests/test_structured_masks.py",
    "tests/test_cache.py",
    "tests/test_sampling.py",
    "tests/test_backends.py",
    "tests/properties/test_rocq_invariants.py",
    "tests/properties/test_semantic_properties.py",
    "tests/properties/test_concept_properties.py",
    "tests/properties/test_rocq_properties.py",
    "tests/properties/test_decoding_properties.py",
    "tests/test_attention.py",
    "tests/test_parity.py",
    "tests/test_decoding.py",
    "tests/test_training.py",
    "tests/test_gradients.py",
    "tests/test_dropout_placement.py",
    "tests/test_dropout_in_evaluation.py",
]


@dataclasses.dataclass(frozen=True)
class Mutant:
    id: str
    file: str  # relative to the repository root
    edits: tuple[tuple[str, str], ...]  # (old, new): old must occur exactly once
    what: str
    tests: tuple[str, ...] = ()  # test files to run instead of TEST_FILES


def M(id: str, file: str, old: str, new: str, what: str) -> Mutant:
    return Mutant(id, file, ((old, new),), what)


# The Triton kernels' own suite (under the interpreter on a CPU), run against the kernel mutants.
KERNEL_TESTS = (
    "tests/kernels/test_dropout.py",
    "tests/kernels/test_flash_attention.py",
    "tests/kernels/test_kernel_layouts.py",
)  # the shorter file first


def K(id: str, file: str, old: str, new: str, what: str) -> Mutant:
    return Mutant(id, file, ((old, new),), what, KERNEL_TESTS)
