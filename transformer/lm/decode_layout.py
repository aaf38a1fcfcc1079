"""Weights laid out for the matrix-vector products of decoding on the CPU (Pope et al. 2022, "Efficiently Scaling
Transformer Inference", section 2: a decode step at a small batch reads every weight once, so its speed is the
speed at which each product streams its weight).

A linear map computes ``x W^T`` with ``W`` (out_features, in_features), stored row by row as transformers and our
checkpoints store it. For a step of one token, torch's float32 CPU product streams a weight stored the other way,
(in_features, out_features) contiguous with ``W`` its transposed view, two to three times faster when out_features
is several times in_features (the output head, a gated network's gate and up maps), and not faster (or slower) for
square or narrow maps and from batch 8 on, except for the head (``python benchmarks/decode_layout.py``, measured in
docs/benchmarks.md, "Weights laid out for decoding"). The values do not change, only the order of each product's
sums: the logits round differently (float32 rounding, about 1e-7 of their size).

:func:`laid_out_for_decoding` is the context :func:`~transformer.lm.generation.generate` decodes in
(``weight_layout="auto"``, the default): for float32 ``nn.Linear`` weights on the CPU that :data:`PAYS` names for the
request's batch, and requests of at least :data:`MIN_NEW_TOKENS` new tokens (each weight is copied twice, there and
back: about 80 ms for a 32000 x 384 head, repaid after about 25 tokens), each weight's storage is laid out
transposed for the request and laid back, contiguous as it was, when it ends (also on an error). Nothing else
changes: the same parameters, shapes and values; a weight replaced during the request is left as it is. Half
precision is never relaid (its rounding is kept bit for bit equal to transformers'), nor CUDA tensors (cuBLAS reads
both layouts at one speed), nor tensor subclasses. ``weight_layout="as_loaded"`` decodes with the weights as they
are: logits bit for bit those of a forward call.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

__all__ = ["LAYOUTS", "MIN_NEW_TOKENS", "PAYS", "check_weight_layout", "decode_layout_weights", "laid_out_for_decoding"]

#: generate's ``weight_layout`` values
LAYOUTS = ("auto", "as_loaded")
#: (largest decode batch, smallest out_features / in_features): a weight is relaid for a batch when a rule with a
#: batch at least as large allows its ratio (measured: batch 1, wide maps 1.35x-2.5x; up to batch 8, the head alone)
PAYS = ((1, 2.0), (8, 16.0))
#: shorter requests decode with the weights as loaded (the two copies would cost more than they save)
MIN_NEW_TOKENS = 32


def check_weight_layout(who: str, weight_layout: object) -> str:
    """``weight_layout`` if it is one of :data:`LAYOUTS`, else a ValueError naming it and the values."""
    if not isinstance(weight_layout, str) or weight_layout not in LAYOUTS:
        raise ValueError(f"{who}: weight_layout must be one of {', '.join(map(repr, LAYOUTS))}, got {weight_layout!r}")
    return weight_layout


def decode_layout_weights(model: nn.Module, batch: int) -> list[nn.Parameter]:
    """The weights :func:`laid_out_for_decoding` relays for a decode ``batch``: each distinct float32, contiguous,
    CPU ``nn.Linear`` weight (a plain tensor) whose out_features / in_features a rule of :data:`PAYS` allows."""
    chosen, seen = [], set()
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if not isinstance(module, nn.Linear) or not isinstance(weight, nn.Parameter) or id(weight) in seen:
            continue
        seen.add(id(weight))
        data = weight.data
        if type(data) is not torch.Tensor or data.dtype != torch.float32 or data.device.type != "cpu":
            continue
        if data.dim() != 2 or not data.is_contiguous() or data.numel() == 0:
            continue
        ratio = data.size(0) / data.size(1)
        if any(batch <= largest and ratio >= smallest for largest, smallest in PAYS):
            chosen.append(weight)
    return chosen


@contextmanager
def laid_out_for_decoding(
    model: nn.Module, batch: int, max_new_tokens: int, weight_layout: str = "auto", who: str = "generate"
) -> Iterator[list[nn.Parameter]]:
    """Decode with the weights of :func:`decode_layout_weights` laid out (in_features, out_features) contiguous
    (``weight_layout="auto"`` and at least :data:`MIN_NEW_TOKENS` new tokens), laid back when the block ends; yields
    the relaid weights (none with ``"as_loaded"``). A ValueError names ``weight_layout`` if it is not one of
    :data:`LAYOUTS`."""
    if check_weight_layout(who, weight_layout) == "as_loaded" or max_new_tokens < MIN_NEW_TOKENS:
        yield []
        return
    relaid: list[tuple[nn.Parameter, torch.Tensor]] = []
    try:
        for weight in decode_layout_weights(model, batch):
            with _as_made(weight):
                weight.data = weight.data.t().contiguous().t()  # the same values, stored column by column
            relaid.append((weight, weight.data))
        yield [weight for weight, _ in relaid]
    finally:
        for weight, data in relaid:
            if weight.data.data_ptr() == data.data_ptr() and weight.data.stride() == data.stride():
                with _as_made(weight):
                    weight.data = data.contiguous()  # laid back row by row, as loaded


@contextmanager
def _as_made(weight: torch.Tensor) -> Iterator[None]:
    """No autograd, and inference mode as ``weight`` was made in: a copy made under the caller's
    ``torch.inference_mode()`` would otherwise turn a trainable weight into an inference tensor."""
    with torch.no_grad(), torch.inference_mode(weight.is_inference()):
        yield
