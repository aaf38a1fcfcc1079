"""Kernel tests run on the CPU through the Triton interpreter when there is no CUDA device.

TRITON_INTERPRET is read by ``triton.jit`` when a kernel is decorated, and transformer.kernels decorates
its kernels at their first launch, so setting it here (before any test runs a kernel) takes effect;
test_interpreter_is_active checks that it did.
"""

import os
import sys

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ["TRITON_INTERPRET"] = "1"

sys.path.insert(0, os.path.dirname(__file__))  # for the shared helpers in attention_reference.py


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip)


@pytest.fixture
def device():
    return "cuda" if HAS_CUDA else "cpu"
