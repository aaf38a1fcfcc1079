"""Edge cases of the contracts that a blind review of issue 31 found unchecked.

* A variadic axis group seen twice (``*b`` / ``*#b``, in either order, broadcastable or not): every combination of
  shapes gets the verdict jaxtyping + beartype give (docs/contracts.md: "binding dimension names the way jaxtyping
  does ... ``*#name`` broadcasts like ``np.broadcast_shapes``"), the reference nobody here wrote.
* ``validate_dtype_device``: "under autocast on that device, floating dtypes may differ" -- on the CPU's autocast
  as on CUDA's; outside autocast the mismatch is refused naming both dtypes.
"""

import itertools

import pytest
import torch
from beartype import beartype
from jaxtyping import Float, jaxtyped

from transformer.contracts import Tensor, checked
from transformer.contracts.guards import validate_dtype_device

SHAPES = [(), (1,), (3,), (2,), (1, 1), (1, 3), (3, 1), (2, 3)]
FORMS = ["*b n", "*#b n"]


def _pair(first: str, second: str):
    def f(x: Float[Tensor, first], y: Float[Tensor, second]) -> None:  # evaluated here (no postponed annotations)
        return None

    return f


@pytest.mark.parametrize("first,second", list(itertools.product(FORMS, FORMS)))
def test_a_variadic_group_seen_twice_gets_jaxtypings_verdict_for_every_shape(first, second):
    ours, theirs = checked(_pair(first, second)), jaxtyped(_pair(first, second), typechecker=beartype)
    disagree, refused = [], 0
    for a, b in itertools.product(SHAPES, SHAPES):
        x, y = torch.zeros(*a, 4), torch.zeros(*b, 4)
        verdicts = []
        for fn in (ours, theirs):
            try:
                fn(x, y)
                verdicts.append(True)
            except Exception as error:  # jaxtyping raises its TypeCheckError, beartype its own violation
                assert "TypeCheck" in type(error).__name__ or "Violation" in type(error).__name__, error
                verdicts.append(False)
        refused += not verdicts[1]
        if verdicts[0] != verdicts[1]:
            disagree.append((a, b, verdicts))
    assert not disagree, f"x '{first}', y '{second}': (x shape, y shape, [ours, jaxtyping's]) {disagree}"
    assert refused > 0  # the shapes do reach refusals


def test_autocast_on_the_cpu_lets_floating_dtypes_differ_and_only_there():
    params = torch.zeros(2, dtype=torch.float32)
    x = torch.zeros(2, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"argument 'x' is torch.bfloat16, the parameters torch.float32"):
        validate_dtype_device("Module.forward", params, "the parameters", x=x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        validate_dtype_device("Module.forward", params, "the parameters", x=x)  # accepted
        with pytest.raises(ValueError, match="argument 'ids' is on meta"):
            validate_dtype_device("Module.forward", params, "the parameters", ids=torch.zeros(2, device="meta"))
