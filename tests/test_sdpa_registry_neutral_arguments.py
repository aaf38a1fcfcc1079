"""The flash adapters' arguments that the kernel has no equivalent for: ``_unsupported``'s docstring promises that
"anything but None/-1/False/<=1 refuses" -- so each neutral value (FlashAttention's ``num_splits`` 0 = its heuristic
and 1 = no split, ``window_size_*`` -1 = no window, None, False) runs and gives the same output as leaving the
argument out, and each value one step past neutral is refused naming the argument (blind review of issue 31:
``num_splits=0`` refused survived every test)."""

from __future__ import annotations

import pytest
import torch

from transformer.integrations import sdpa_registry as registry


def _inputs():
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(2, 4, 2, 16, generator=g) for _ in range(3))  # (batch, seq, heads, dim)


def _forward(**extra):
    q, k, v = _inputs()
    return registry.flash_forward(q, k, v, None, None, 4, 4, 0.0, False, False, **extra)[0]


NEUTRAL = [
    {"num_splits": None},
    {"num_splits": 0},
    {"num_splits": 1},
    {"window_size_left": -1},
    {"window_size_right": -1},
    {"window_size_left": -1, "window_size_right": -1},
    {"window_size_left": None, "alibi_slopes": None, "seqused_k": None, "block_table": None},
]
REFUSED = [
    ({"num_splits": 2}, "num_splits"),
    ({"window_size_left": 0}, "window_size_left"),
    ({"window_size_right": 3}, "window_size_right"),
    ({"window_size_left": -2}, "window_size_left"),
]


@pytest.mark.parametrize("extra", NEUTRAL, ids=lambda extra: ",".join(f"{k}={v}" for k, v in extra.items()))
def test_a_neutral_value_runs_and_changes_nothing(extra):
    torch.testing.assert_close(_forward(**extra), _forward(), rtol=0, atol=0)


@pytest.mark.parametrize("extra,name", REFUSED, ids=lambda x: x if isinstance(x, str) else str(x))
def test_a_value_past_neutral_is_refused_naming_the_argument(extra, name):
    with pytest.raises(RuntimeError, match=f"unsupported: {name} is not supported"):
        _forward(**extra)
