"""Blind review of the merged contract and attention machinery (2026-11-27), by a reviewer who did not read the tests."""

import dataclasses

from .base import Mutant

MUTANTS = [
    Mutant(
        "blind-layout-is-int-accepts-bool",
        "transformer/common/arguments.py",
        (
            (
                '    if isinstance(value, bool) or not (isinstance(value, int) or type(value).__name__ == "SymInt"):\n        return False\n    return (at_least',
                '    if not (isinstance(value, int) or type(value).__name__ == "SymInt"):\n        return False\n    return (at_least',
            ),
        ),
        "n_layers=True (or any bool) passes every is_int validator and silently builds a 1-layer (or 0-sized) model instead of being refused.",
    ),
    Mutant(
        "blind-layout-version-dev-build",
        "transformer/common/versions.py",
        (
            (
                '    major, minor = (int(part) for part in version.split("+")[0].split(".")[:2])',
                '    major, minor, *_ = (int(part) for part in version.split("+")[0].split("."))',
            ),
        ),
        "On a source or nightly torch such as \"2.5.0a0+git1234\" the package fails at import (int('0a0')), though local and patch parts are documented as ignored.",
    ),
    Mutant(
        "blind-layout-nested-block-resets-to-default",
        "transformer/common/switches.py",
        (
            (
                "        finally:\n            self.variable.reset(token)",
                "        finally:\n            self.variable.set(self.default)",
            ),
        ),
        "Leaving an inner use_backend/checks block restores the process default instead of the outer block's value (and pins it in the context for good), so nested blocks leak.",
    ),
    Mutant(
        "blind-layout-uint-short-name",
        "transformer/common/dtypes.py",
        (
            (
                '.replace("float", "f").replace("uint", "u").replace("int", "i")',
                '.replace("float", "f").replace("int", "i").replace("uint", "u")',
            ),
        ),
        "Error messages name a uint8 tensor 'ui8[...]' instead of jaxtyping's 'u8[...]'.",
    ),
    Mutant(
        "blind-layout-scale-zero-is-default",
        "transformer/backends/sdpa_reference.py",
        (
            (
                "        scores = scores * (1.0 / math.sqrt(q.size(-1)) if scale is None else scale)",
                "        scores = scores * (scale or 1.0 / math.sqrt(q.size(-1)))",
            ),
        ),
        "scale=0.0 on the eager drop-in is treated as the default 1/sqrt(E) instead of giving uniform attention as torch does.",
    ),
    Mutant(
        "blind-layout-float-mask-only-inf",
        "transformer/backends/sdpa_reference.py",
        (
            (
                "            scores = scores + attn_mask.to(acc)",
                '            scores = scores.masked_fill(attn_mask == float("-inf"), float("-inf"))',
            ),
        ),
        "A float attn_mask with finite additive biases (ALiBi, relative positions) is ignored on the eager backend; only its -inf entries mask.",
    ),
    Mutant(
        "blind-layout-gqa-tiled-heads",
        "transformer/backends/sdpa_reference.py",
        (
            (
                "        k = k.repeat_interleave(q.size(-3) // k.size(-3), dim=-3)\n"
                "        v = v.repeat_interleave(q.size(-3) // v.size(-3), dim=-3)",
                "        k = torch.cat([k] * (q.size(-3) // k.size(-3)), dim=-3)\n"
                "        v = torch.cat([v] * (q.size(-3) // v.size(-3)), dim=-3)",
            ),
        ),
        "With enable_gqa on the eager backend, query head h reads key/value head h % kv_heads instead of h // group, disagreeing with torch.",
    ),
    Mutant(
        "blind-layout-empty-row-uniform",
        "transformer/backends/sdpa_reference.py",
        (
            (
                "    probs = scores.masked_fill(empty, 0.0).softmax(dim=-1).masked_fill(empty, 0.0)",
                "    probs = scores.masked_fill(empty, 0.0).softmax(dim=-1)",
            ),
        ),
        "A fully masked query row on the eager drop-in outputs the mean of all values instead of 0 (with nonzero gradients).",
    ),
    Mutant(
        "blind-layout-float64-auto-cuda-only",
        "transformer/backends/choice.py",
        (
            (
                "    if q.dtype == torch.float64:  # verification",
                "    if q.dtype == torch.float64 and q.is_cuda:  # verification",
            ),
        ),
        "On CPU, auto sends float64 inputs to torch's SDPA instead of the eager reference, so gradgradcheck / double backward fails.",
    ),
    Mutant(
        "blind-layout-sdpa-logger-name",
        "transformer/backends/sdpa.py",
        (
            (
                'logger = logging.getLogger("transformer.sdpa")',
                "logger = logging.getLogger(__name__)",
            ),
        ),
        "The drop-in's DEBUG records come from 'transformer.backends.sdpa', so a handler or level set on the documented 'transformer.sdpa' logger sees nothing.",
    ),
]

# the suites of the merged code (the default TEST_FILES lack the drop-in's, the switch's and the idioms' tests)
_TESTS = (
    "tests/test_common_idioms.py",
    "tests/test_arguments.py",
    "tests/test_sdpa_dropin.py",
    "tests/test_backends.py",
    "tests/test_contracts_switch.py",
    "tests/test_contracts_user.py",
    "tests/test_contracts_vocabulary.py",
    "tests/test_config.py",
    "tests/test_structured_masks.py",
    "tests/test_guards.py",
    "tests/test_entry_guards.py",
    "tests/test_gradients.py",
)
MUTANTS = [dataclasses.replace(m, tests=_TESTS) for m in MUTANTS]
