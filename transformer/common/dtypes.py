"""Names of torch dtypes as jaxtyping reads and writes them: one table for every message that names a dtype; and
the names a dtype argument takes (:func:`dtype_argument`, transformers' spellings and ``"auto"``); the dtype
decoding takes its decisions in (:func:`decision_dtype`)."""

from __future__ import annotations

import torch

#: every dtype torch defines, each once
TORCH_DTYPES: tuple[torch.dtype, ...] = tuple(
    dict.fromkeys(v for v in vars(torch).values() if isinstance(v, torch.dtype))
)
#: dtype -> the name jaxtyping matches its dtype names against (the last part of ``repr(dtype)``: ``"float32"``)
DTYPE_NAMES: dict[torch.dtype, str] = {dt: repr(dt).rsplit(".", 1)[-1] for dt in TORCH_DTYPES}
#: dtype -> the short name of jaxtyping's messages (wadler_lindig's: ``f32``, ``bf16``, ``i64``, ``u8``, ``bool``)
DTYPE_SHORT_NAMES: dict[torch.dtype, str] = {
    dt: str(dt).rsplit(".")[-1].replace("float", "f").replace("uint", "u").replace("int", "i").replace("complex", "c")
    for dt in TORCH_DTYPES
}


#: the dtypes :func:`shape_text` writes short; any other is written out (``complex64``), as the masks' messages say
_SHORT_IN_SHAPES = frozenset(
    (
        torch.bool,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.uint8,
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
    )
)


def shape_text(t: torch.Tensor) -> str:
    """``f32[2,3]``: a tensor's dtype and shape as jaxtyping's messages write them (``complex64[2]`` for a dtype the
    package never computes in)."""
    name = DTYPE_SHORT_NAMES[t.dtype] if t.dtype in _SHORT_IN_SHAPES else str(t.dtype).removeprefix("torch.")
    return f"{name}[{','.join(map(str, t.shape))}]"


#: the dtypes a model computes in but decoding never decides in: their log-softmax rounds near-equal candidates
#: to ties (bfloat16 keeps 8 bits), so decisions are taken in float32, as transformers' ``generate`` takes them
LOW_PRECISION_FLOATS = (torch.float16, torch.bfloat16)


def decision_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype next-token decisions (greedy, sampling, beam scores) are computed in for logits of ``dtype``:
    float32 for float16 and bfloat16 (transformers' ``generate`` casts the logits to float32 before choosing), the
    dtype itself otherwise (float32 and float64 decide as they compute)."""
    return torch.float32 if dtype in LOW_PRECISION_FLOATS else dtype


#: The names a weights' dtype argument takes besides a torch dtype, as transformers' ``from_pretrained`` spells them
#: (torch's own attribute names: ``getattr(torch, name)``), each with its dtype; ``"auto"`` is :data:`AUTO_DTYPE`.
WEIGHT_DTYPE_NAMES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "double": torch.float64,
}
#: The name of the checkpoint's own dtype (``config.json``'s ``dtype``), as transformers names it.
AUTO_DTYPE = "auto"
#: Every name a dtype argument takes, in the order its messages list them.
DTYPE_ARGUMENT_NAMES: tuple[str, ...] = (AUTO_DTYPE, *WEIGHT_DTYPE_NAMES)
#: Spellings transformers refuses too (no torch attribute of the name), and the name that means it.
_NOT_NAMES = {"fp32": "float32", "f32": "float32", "fp16": "float16", "f16": "float16", "bf16": "bfloat16",
              "fp64": "float64", "f64": "float64"}  # fmt: skip


def dtype_argument(who: str, argument: str, value: object) -> torch.dtype | None:
    """The weights' dtype an argument ``argument`` of ``who`` names: a torch dtype of :data:`WEIGHT_DTYPE_NAMES`
    itself, a name of it (``"bfloat16"``), or None for ``"auto"`` and None (the checkpoint's own). Anything else
    raises ValueError naming ``who``, the argument, the value and the accepted names."""
    if value is None or value == AUTO_DTYPE:
        return None
    if isinstance(value, torch.dtype) and value in WEIGHT_DTYPE_NAMES.values():
        return value
    if isinstance(value, str) and value in WEIGHT_DTYPE_NAMES:
        return WEIGHT_DTYPE_NAMES[value]
    hint = f" (did you mean {_NOT_NAMES[value]!r}?)" if isinstance(value, str) and value in _NOT_NAMES else ""
    accepted = sorted({str(dt) for dt in WEIGHT_DTYPE_NAMES.values()})
    raise ValueError(
        f"{who}: argument {argument!r} must be None, one of the names {', '.join(map(repr, DTYPE_ARGUMENT_NAMES))} "
        f"or a torch dtype ({', '.join(accepted)}), got {argument}={value!r}{hint}"
    )
