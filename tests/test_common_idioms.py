"""transformer.common: the idioms the contracts, the backends and the drop-in share, at their edge values
(survivors of the blind review of the merged layout, tests/mutation/catalog/blind_layout_contracts.py)."""

import pytest
import torch
import torch.nn.functional as F

import transformer as T
from transformer.common.dtypes import DTYPE_SHORT_NAMES, shape_text
from transformer.common.versions import major_minor


@pytest.mark.parametrize(
    "version, expected",
    [
        ("2.13.0+cpu", (2, 13)),
        ("2.5.1+cu121", (2, 5)),
        ("2.5.0a0+git1234abc", (2, 5)),  # a source build
        ("2.6.0.dev20250101+cu124", (2, 6)),  # a nightly
        ("2.4", (2, 4)),
        ("3.0.0rc1", (3, 0)),
    ],
)
def test_the_version_is_major_and_minor_whatever_the_patch_and_local_parts(version, expected):
    assert major_minor(version) == expected


def test_dtype_short_names_are_jaxtyping_s():
    assert DTYPE_SHORT_NAMES[torch.uint8] == "u8" and DTYPE_SHORT_NAMES[torch.int8] == "i8"
    assert DTYPE_SHORT_NAMES[torch.float32] == "f32" and DTYPE_SHORT_NAMES[torch.bfloat16] == "bf16"
    assert DTYPE_SHORT_NAMES[torch.complex64] == "c64" and DTYPE_SHORT_NAMES[torch.bool] == "bool"
    assert shape_text(torch.zeros(2, 3, dtype=torch.uint8)) == "u8[2,3]"
    with pytest.raises(T.TypeCheckError) as info:  # a contract's summary line names the dtype as jaxtyping does
        T.LayerNorm(3)(torch.zeros(2, 3, dtype=torch.uint8))
    assert "argument 'x' is u8[2,3], expected Float[Tensor" in str(info.value).splitlines()[0]


@pytest.mark.parametrize("backend", ["eager", "torch", "auto"])
def test_the_drop_in_with_scale_zero_averages_the_values_as_torch_does(backend):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    out = T.scaled_dot_product_attention(q, k, v, scale=0.0, backend=backend)
    torch.testing.assert_close(out, v.mean(-2, keepdim=True).expand_as(out))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, scale=0.0))
