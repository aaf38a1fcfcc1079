"""Shared fixtures. Tests run with contracts on (the default) unless they switch them off themselves."""

import os

import pytest
import torch

# Without CUDA, Triton kernels run on the CPU through Triton's interpreter. It must be set
# before triton is first imported, hence here, at the top of the root conftest.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The tests use tiny tensors, where OpenMP threads cost more than they save (and stall badly
# when the cores are shared): one intra-op thread makes the suite several times faster on 2 cores.
torch.set_num_threads(1)

# Hypothesis draws the same examples on every run (seeded by each test's name): a property test that fails, fails
# every time, in CI and on a developer's machine alike, instead of on one run in many.
from hypothesis import settings as _hypothesis_settings  # noqa: E402 (after TRITON_INTERPRET, as below)

import transformer as T  # noqa: E402 (triton is imported with the package: TRITON_INTERPRET must be set first)

_hypothesis_settings.register_profile("typed-transformer", _hypothesis_settings(), derandomize=True)  # on top of
# the profile already loaded (the mutation runner's, which skips shrinking)
_hypothesis_settings.load_profile("typed-transformer")


@pytest.fixture(autouse=True)
def _seed_and_checks():
    torch.manual_seed(0)
    T.set_checks(True)
    yield
    T.set_checks(True)


@pytest.fixture
def tiny_model():
    """A 2-layer model small enough for every test (eval mode, no dropout)."""
    return T.make_model(11, 13, N=2, d_model=16, d_ff=32, h=4, dropout=0.0).eval()


@pytest.fixture
def batch():
    """src (3, 7) and tgt (3, 5) token ids in [1, 11) with a padded tail in the first row."""
    src = torch.randint(1, 11, (3, 7))
    tgt = torch.randint(1, 11, (3, 5))
    src[0, 5:] = 0
    tgt[0, 4:] = 0
    return src, tgt, T.padding_mask(src, 0), T.target_mask(tgt, 0)
