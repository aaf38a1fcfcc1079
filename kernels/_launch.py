"""Eager launches that skip the autotuner's per-call key once it has chosen.

Triton's ``Autotuner.run`` rebuilds its key from the launch's ~50 arguments at every call: a scan of the list of
argument names per argument (quadratic) and ``str(dtype)`` per tensor, tens of microseconds of host time per launch
(benchmarks/kernel_host_cost.py's "autotuner key" row). The launchers already build their own key, which
determines Triton's (the tuning buckets, the compile-time switches, the GQA group, the split counts and the dtypes:
every value of ``TUNE_KEY`` and every argument's dtype follows from it). After the autotuner has run once for a
launcher key (timing its configs, or reading them from Triton's cache), :func:`launch` remembers the config it chose
and later launches with that key call the chosen config's kernel directly, with the same arguments the autotuner
would pass it: the same config, so the same bits.

Only eager launches use this; under torch.compile (``wrap_triton``) the kernels are launched as they are.
"""

import torch
from triton.runtime.autotuner import Autotuner

_chosen: dict = {}  # launcher key -> (constexprs with the chosen config's kwargs, the config's block sizes)
MAX_CHOSEN = 4096  # a bounded memory (keys hold length buckets, not lengths, so real programs stay far below)


def eager_launch(kernel):
    """The kernel wrapper of eager calls (kernels/_op.py hands it to the launchers): the identity. A launcher given
    this very function launches through :func:`launch`; any other wrapper (wrap_triton, a test's recorder) is used
    as ``wrapper(kernel)[grid](...)``."""
    return kernel


def autotuned(kernel) -> bool:
    """Whether ``kernel`` is an autotuner (CUDA) rather than one jit function (the interpreter)."""
    return isinstance(kernel, Autotuner)


def launch(kernel, grid, key: tuple, args: tuple, constexprs: dict) -> None:
    """``kernel[grid](*args, **constexprs)``; ``grid`` maps a config's kwargs (BLOCK_M, BLOCK_N) to the launch grid.
    An autotuner that has chosen a config for ``key`` is bypassed: its chosen config's kernel is launched directly."""
    chosen = _chosen.get(key)
    if chosen is not None:
        kwargs, blocks = chosen
        kernel.fn.run(*args, grid=grid(blocks), warmup=False, **kwargs)
        return
    kernel.run(*args, grid=grid, warmup=False, **constexprs)  # what kernel[grid](*args, ...) calls
    if isinstance(kernel, Autotuner) and torch._C._len_torch_dispatch_stack() == 0:
        config = kernel.best_config
        if len(_chosen) >= MAX_CHOSEN:
            _chosen.clear()
        _chosen[key] = ({**constexprs, **config.all_kwargs()}, dict(config.kwargs))


def forget() -> None:
    """Forget every remembered choice (tests; a rebuilt kernel)."""
    _chosen.clear()
