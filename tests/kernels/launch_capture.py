"""Record the kernels' launches (and optionally skip running them), through the wrappers that kernels/_op.py hands
the launchers (``_traceable``, torch.library.wrap_triton or the interpreted kernel itself, for the registered op;
eager_launch for the eager path): what is recorded is exactly what each kernel receives."""

import contextlib

import pytest

from transformer.kernels import _op


def _kernel_name(kernel) -> str:
    fn = kernel
    while hasattr(fn, "fn"):  # Autotuner -> JITFunction -> function; InterpretedFunction -> function
        fn = fn.fn
    return fn.__name__


@contextlib.contextmanager
def launches(run: bool = True):
    """Yields a list that fills with (kernel name, {argument name: value}) for every launch, the grid under the
    key "grid" (evaluated with the launch's arguments when it is a function of the config, as Triton does).
    ``run=False`` records without running anything: the outputs stay uninitialized, for tests of the launch
    arithmetic at sizes the interpreter could not run."""
    seen = []

    def recording(real_wrap):
        return lambda kernel: wrap(kernel, real_wrap)

    def wrap(kernel, real_wrap):
        wrapped, name = real_wrap(kernel), _kernel_name(kernel)

        class Launch:
            def __getitem__(self, grid):
                def launch(*args, **kwargs):
                    named = {**dict(zip(kernel.arg_names, args, strict=False)), **kwargs}
                    named["grid"] = tuple(grid(named) if callable(grid) else grid)
                    seen.append((name, named))
                    if run:
                        return wrapped[grid](*args, **kwargs)
                    return None

                return launch

        return Launch()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_op, "_traceable", recording(_op._traceable))
        patch.setattr(_op, "eager_launch", recording(_op.eager_launch))
        yield seen


def launched(seen, kernel):
    """The arguments of the one launch of ``kernel`` (e.g. "_dq_kernel") in ``seen``."""
    calls = [args for name, args in seen if name == kernel]
    assert len(calls) == 1, f"{kernel} launched {len(calls)} times: {[name for name, _ in seen]}"
    return calls[0]
