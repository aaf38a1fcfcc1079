"""Kernel tests run on the CPU through the Triton interpreter when there is no CUDA device.

TRITON_INTERPRET is read by ``triton.jit`` when a kernel is decorated, and transformer.kernels decorates
its kernels at their first launch, so setting it here (before any test runs a kernel) takes effect;
test_interpreter_is_active checks that it did.

Under the interpreter every kernel launches with one fixed block shape, so logic that depends on
BLOCK_M != BLOCK_N (causal key-block skipping, the interior/edge split of the forward, dQ and dK/dV loops,
the grids) would only ever run as 32 x 32. The tests in BLOCK_SHAPE_MODULES therefore run once per shape in
BLOCK_SHAPES (through the ``interpret_blocks`` fixture, which sets ``transformer.kernels._tuning``'s
interpreter blocks), except those marked ``one_block_shape``: they add no block-shape-dependent coverage
(e.g. the broad length x head_dim x dtype sweep) and run under the default 32 x 32 only. On CUDA the
autotuner picks the blocks, and every test runs once.
"""

import os
import sys

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

sys.path.insert(0, os.path.dirname(__file__))  # for the shared helpers in attention_reference.py

DEFAULT_BLOCKS = (32, 32)
# (BLOCK_M, BLOCK_N): square, more keys than queries per block (both ratios), fewer keys than queries.
BLOCK_SHAPES = [DEFAULT_BLOCKS, (16, 64), (64, 16), (32, 64)]
BLOCK_SHAPE_MODULES = ("test_flash_attention", "test_dropout", "test_split_kv")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "one_block_shape: under the interpreter, run only with the default "
        "32 x 32 blocks (no block-shape-dependent coverage to add)",
    )


def pytest_generate_tests(metafunc):
    """Parametrize the autouse ``interpret_blocks`` fixture in BLOCK_SHAPE_MODULES under the interpreter."""
    if HAS_CUDA or metafunc.module.__name__.rpartition(".")[2] not in BLOCK_SHAPE_MODULES:
        return  # autotuned on CUDA; the other modules keep the default blocks
    one = metafunc.definition.get_closest_marker("one_block_shape") is not None
    shapes = [DEFAULT_BLOCKS] if one else BLOCK_SHAPES
    metafunc.parametrize("interpret_blocks", shapes, indirect=True, ids=[f"blocks{m}x{n}" for m, n in shapes])


@pytest.fixture(autouse=True)
def interpret_blocks(request):
    """(BLOCK_M, BLOCK_N) every interpreted kernel launch of this test uses; None where not parametrized (the
    default 32 x 32 under the interpreter, autotuned on CUDA)."""
    shape = getattr(request, "param", None)
    if shape is None:
        yield None
        return
    from transformer.kernels import _tuning

    with _tuning.interpret_blocks(*shape):
        yield shape


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip)


@pytest.fixture
def device():
    return "cuda" if HAS_CUDA else "cpu"
