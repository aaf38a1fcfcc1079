"""The oldest Triton the kernels support, checked when they are imported: an older one is refused in one line."""

import triton

#: the oldest Triton the kernels are tested with (its interpreter and, on a GPU, its compiler): torch 2.9 pins it
OLDEST_TRITON = (3, 5)
#: (major, minor) of the installed Triton, parsed once: the kernels choose features by it
TRITON_VERSION = tuple(int(part) for part in triton.__version__.split(".")[:2] if part.isdigit())

if TRITON_VERSION < OLDEST_TRITON:
    _oldest = ".".join(map(str, OLDEST_TRITON))
    raise ImportError(
        f"transformer.kernels needs triton >= {_oldest}, found triton {triton.__version__}; "
        f'install a newer one with: pip install "triton>={_oldest}"'
    )
