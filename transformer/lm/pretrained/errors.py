"""What goes wrong with a Hugging Face checkpoint folder: one error class, whose message names the file and the
field or tensor."""

from __future__ import annotations

__all__ = ["PretrainedFormatError"]


class PretrainedFormatError(ValueError):
    """A checkpoint folder that cannot be read as the model it says it is (or a model that cannot be written as a
    Hugging Face folder): a missing or corrupt file, an unknown architecture, a config option this package does not
    implement, a missing, unexpected or misshaped tensor, a dtype it cannot use. The message names the file and the
    field or tensor."""
