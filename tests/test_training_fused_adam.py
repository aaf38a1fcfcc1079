"""noam_adam's fused Adam (issue 45): fused where it runs, the same updates as torch's default Adam, off on request."""

import pytest
import torch

from transformer.training import fused_supported, noam_adam


def _params(seed: int, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=g, dtype=dtype)) for shape in ((7, 5), (5,), (3, 4, 2))]


def _train(params, optimizer, scheduler, steps: int):
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g, dtype=p.dtype)
        optimizer.step()
        scheduler.step()
    return [p.detach().clone() for p in params]


def test_noam_adam_is_fused_on_cpu_and_steps_as_torchs_default_adam():
    """The oracle: torch's Adam with the same betas, eps and Noam schedule (for-loop); 20 steps from the same
    weights and gradients agree to float32 rounding, and the weights did move (a no-op would fail)."""
    fused_params, plain_params = _params(0), _params(0)
    start = [p.detach().clone() for p in fused_params]
    fused, fused_schedule = noam_adam(fused_params, 16, 1.0, 4)
    plain, plain_schedule = noam_adam(plain_params, 16, 1.0, 4, fused=False)
    assert fused.param_groups[0]["fused"] is True
    assert not plain.param_groups[0]["fused"]
    a = _train(fused_params, fused, fused_schedule, 20)
    b = _train(plain_params, plain, plain_schedule, 20)
    for x, y, s in zip(a, b, start, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)
        assert (x - s).abs().max() > 1e-2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_fused_supported_on_cpu_floating_parameters(dtype):
    assert fused_supported(_params(0, dtype))


def test_not_fused_where_fused_adam_does_not_run():
    """A parameter on the meta device (or a tensor subclass, e.g. a DTensor): torch's default Adam instead."""
    meta = [torch.nn.Parameter(torch.empty(3, device="meta"))]
    assert not fused_supported(meta)
    optimizer, _ = noam_adam(meta, 16, 1.0, 4)
    assert not optimizer.param_groups[0]["fused"]

    class Sub(torch.Tensor):
        pass

    assert not fused_supported([torch.zeros(2).as_subclass(Sub)])


def test_one_parameter_where_fused_adam_does_not_run_keeps_the_whole_model_unfused():
    """ "Runs on all of parameters": one meta parameter (or one subclass) among CPU ones is enough for torch's
    default Adam, whichever position it takes, and noam_adam builds that."""
    meta = torch.nn.Parameter(torch.empty(3, device="meta"))
    for position in (0, 1, 3):
        params = _params(0)
        params.insert(position, meta)
        assert not fused_supported(params), position
        optimizer, _ = noam_adam(params, 16, 1.0, 4)
        assert not optimizer.param_groups[0]["fused"]
    assert fused_supported(_params(0)) and not fused_supported([*_params(0), torch.zeros(2, dtype=torch.int64)])
