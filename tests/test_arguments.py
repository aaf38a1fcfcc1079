"""transformer.common.arguments: the predicates every validator of the package asks (bools are never numbers)."""

import numpy as np
import pytest
import torch

from transformer.common.arguments import is_int, is_integral, is_number, is_real


@pytest.mark.parametrize("value", [True, False, 1.0, "1", None, np.int64(1), torch.tensor(1)])
def test_is_int_refuses_bools_floats_strings_and_non_python_ints(value):
    assert not is_int(value)


def test_is_int_bounds_are_inclusive_below_and_exclusive_above():
    assert is_int(0) and is_int(-5) and is_int(2**70)
    assert is_int(1, at_least=1) and not is_int(0, at_least=1)
    assert is_int(4, below=5) and not is_int(5, below=5)
    assert is_int(0, at_least=0, below=1) and not is_int(1, at_least=0, below=1)


def test_is_integral_takes_numpy_ints_but_not_bools():
    assert is_integral(np.int64(3)) and is_integral(3) and is_integral(np.int8(0), at_least=0)
    assert not is_integral(True) and not is_integral(np.bool_(True)) and not is_integral(3.0)
    assert not is_integral(np.int64(0), at_least=1) and is_integral(np.int64(1), at_least=1)


def test_is_real_takes_ints_floats_and_numpy_scalars_but_not_bools_or_strings():
    assert is_real(1) and is_real(0.5) and is_real(np.float32(0.5)) and is_real(float("inf"))
    assert not is_real(True) and not is_real("0.5") and not is_real(None) and not is_real(1j)


def test_is_number_takes_python_ints_and_floats_only_and_finite_ones_when_asked():
    assert is_number(1) and is_number(0.5) and is_number(float("nan")) and is_number(float("inf"))
    assert not is_number(True) and not is_number(np.float32(0.5)) and not is_number("1") and not is_number(None)
    assert is_number(2.5, finite=True) and not is_number(float("inf"), finite=True)
    assert not is_number(float("nan"), finite=True)
