"""Loading a Hugging Face checkpoint folder into a :class:`~transformer.lm.model.TransformerLM`.

The order makes every check happen before a byte of weights is read: ``config.json`` gives the architecture and
the :class:`LMConfig` (an unknown architecture or an option not implemented is refused by name); the model is
built with its parameters on the meta device (no memory, no initialisation: buffers such as positional tables are
built for real); the safetensors headers are matched against the model's parameters (a missing, unexpected or
misshaped tensor, a dtype that cannot be a weight, are refused naming the tensor and the file). Then each tensor
is read once, block by block, copied straight into the dtype and device asked for, and swapped into its parameter
(``torch.utils.swap_tensors``: a tied head stays the embedding's very tensor). Peak memory is the model plus one
block (``benchmarks/load_memory.py`` measures it).

No transformers import: the JSON is read with :mod:`json`, the tensors with ``safetensors``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ...common.dtypes import dtype_argument
from ..model import TransformerLM, build_lm
from .architectures import Architecture
from .config_fields import ConfigFields
from .errors import PretrainedFormatError
from .files import CONFIG_FILE, GENERATION_CONFIG_FILE, SAFETENSORS_DTYPES, SafetensorsFolder, read_json
from .supported import architecture_of
from .tensor_map import TensorMap

__all__ = ["load_pretrained", "PretrainedOrigin", "parameters_on_meta"]


@dataclass(frozen=True)
class PretrainedOrigin:
    """Where a model was loaded from: the folder, its architecture and the JSON of its ``config.json`` and
    ``generation_config.json`` (None when absent). :func:`~transformer.lm.pretrained.save.save_pretrained` writes
    the same architecture, token ids and generation config back."""

    folder: Path
    architecture: str
    config: dict[str, Any]
    generation_config: dict[str, Any] | None


#: torch.nn.init's in-place initialisers, skipped while a model is built for loading (what they would draw is
#: overwritten; on meta tensors some of them import torch._dynamo, about 150 MB, for nothing)
_INITIALISERS = tuple(name for name in dir(nn.init) if name.endswith("_") and not name.startswith("_"))


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Modules built inside get their parameters on the meta device (no memory) and skip ``torch.nn.init``'s
    initialisers; buffers stay real, as they are computed from the config, not loaded."""
    register = nn.Module.register_parameter
    initialisers = {name: getattr(nn.init, name) for name in _INITIALISERS}

    def on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None and not param.is_meta:
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    def skipped(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return tensor

    nn.Module.register_parameter = on_meta  # type: ignore[method-assign]
    for name in initialisers:
        setattr(nn.init, name, skipped)
    try:
        yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]
        for name, initialiser in initialisers.items():
            setattr(nn.init, name, initialiser)


def _dtype(
    dtype: torch.dtype | None, config: ConfigFields, tensors: SafetensorsFolder, maps: list[TensorMap]
) -> torch.dtype:
    """``dtype``, else (None: ``"auto"``) ``config.json``'s ``dtype`` (``torch_dtype`` in older files), else the
    tensors' own (as transformers' ``"auto"`` reads the weights when the config has none), else float32."""
    if dtype is not None:
        return dtype
    for field in ("dtype", "torch_dtype"):  # transformers 5 writes dtype, 4 wrote torch_dtype
        name = config.values.get(field)
        if isinstance(name, str) and getattr(torch, name, None) in SAFETENSORS_DTYPES.values():
            return getattr(torch, name)
    stored = {tensors.dtype(m.theirs) for m in maps}
    return stored.pop() if len(stored) == 1 else torch.float32


def _listing(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _check_tensors(
    maps: list[TensorMap], params: dict[str, nn.Parameter], tensors: SafetensorsFolder, architecture: Architecture
) -> None:
    """Refuse a missing, unexpected or misshaped tensor, or one of a dtype a weight cannot have."""
    where = f"{tensors.source} ({architecture.name})"
    present = set(tensors.names())
    wanted = {m.theirs: m for m in maps}
    missing = sorted(set(wanted) - present)
    if missing:
        raise PretrainedFormatError(
            f"{where}: missing tensor {_listing(missing)} (for our parameter "
            f"{', '.join(wanted[missing[0]].ours)}); config.json's model needs them"
        )
    unexpected = sorted(n for n in present - set(wanted) if not architecture.is_derived_buffer(n))
    if unexpected:
        raise PretrainedFormatError(
            f"{where}: unexpected tensor {_listing(unexpected)}: the model config.json describes has no such weight "
            "(a bias its options leave out, a head its tie_word_embeddings shares, another architecture's)"
        )
    for m in maps:
        expected = m.their_shape(tuple(params[name].shape for name in m.ours))
        actual = tensors.headers[m.theirs].shape
        if actual != expected:
            raise PretrainedFormatError(
                f"{tensors.headers[m.theirs].file}: tensor {m.theirs!r} has shape {list(actual)}, expected "
                f"{list(expected)} (our parameter {', '.join(m.ours)}, from config.json)"
            )
        tensors.dtype(m.theirs)


def _read_into(
    m: TensorMap, params: dict[str, nn.Parameter], tensors: SafetensorsFolder, dtype, device, fresh: dict
) -> None:
    """Fill fresh tensors (``fresh``, by our name: several ``"part"`` maps fill one) in ``dtype`` on ``device``
    with their tensor ``m.theirs``, block by block; :func:`load_pretrained` swaps them into our parameters."""
    ours = tuple(fresh.setdefault(name, torch.empty(params[name].shape, dtype=dtype, device=device)) for name in m.ours)
    views = m.their_views(ours)
    for start, block in tensors.read_blocks(m.theirs):
        for view, first, columns in views:
            if block.dim() < 2:  # a 1-d tensor is one block
                view.copy_(block[columns])
                continue
            low, high = max(start, first), min(start + block.size(0), first + view.size(0))  # rows in both
            if low < high:
                view[low - first : high - first].copy_(block[low - start : high - start][..., columns])


def load_pretrained(
    path: str | Path, dtype: torch.dtype | str | None = None, device: str | torch.device | None = None
) -> TransformerLM:
    """The :class:`TransformerLM` of a Hugging Face checkpoint folder (``config.json`` plus ``model.safetensors`` or
    a sharded ``model.safetensors.index.json``), in ``dtype`` on ``device`` (None: the CPU), in eval mode as
    transformers returns it. ``dtype``: a torch dtype (float32, float16, bfloat16, float64), a name of one as
    transformers spells it (``"bfloat16"``, ``"float16"``, ``"half"``, ``"float32"``, ``"float"``, ``"float64"``,
    ``"double"``), or ``"auto"`` and None: the checkpoint's, as ``config.json``'s ``dtype`` says (else the tensors'
    own); anything else raises ValueError naming the argument and the accepted names. Anything it cannot load
    exactly raises :class:`~transformer.lm.pretrained.errors.PretrainedFormatError` naming the file and the field
    or tensor."""
    dtype = dtype_argument("from_pretrained", "dtype", dtype)
    folder = Path(path)
    if not folder.is_dir():
        raise PretrainedFormatError(f"{folder}: not a directory (from_pretrained reads a checkpoint folder)")
    raw = read_json(folder / CONFIG_FILE)
    fields = ConfigFields(raw, folder / CONFIG_FILE)
    architecture = architecture_of(fields)
    config = architecture.lm_config(fields)
    tensors = SafetensorsFolder(folder)
    with parameters_on_meta():
        model = build_lm(config)
    params = dict(model.named_parameters())  # a tied head is listed once, as the embedding
    shapes = {name: tuple(p.shape) for name, p in params.items()}
    maps = architecture.expand_maps(architecture.maps_for_file(list(params), tensors.names(), config), shapes)
    _check_tensors(maps, params, tensors, architecture)
    dtype = _dtype(dtype, fields, tensors, maps)
    device = torch.device("cpu" if device is None else device)
    fresh: dict[str, torch.Tensor] = {}
    for m in maps:
        _read_into(m, params, tensors, dtype, device, fresh)
    for name, tensor in fresh.items():
        torch.utils.swap_tensors(params[name], nn.Parameter(tensor, requires_grad=params[name].requires_grad))
    model.to(device=device)  # the buffers, in their own dtype (RoPE's frequencies stay float32, as transformers');
    # the parameters are there already
    model.eval()
    generation = read_json(folder / GENERATION_CONFIG_FILE, required=False)
    model.pretrained_origin = PretrainedOrigin(folder, architecture.name, raw, generation)
    return model
