"""The files of a Hugging Face checkpoint folder: ``config.json`` and friends read as JSON with errors naming the
file, and the tensors of ``model.safetensors`` (or the shards a ``model.safetensors.index.json`` names) read lazily.

:class:`SafetensorsFolder` learns every tensor's name, shape and dtype from the files' headers without reading a
byte of data, so a folder is checked before anything is loaded. :meth:`SafetensorsFolder.read_blocks` then gives
a tensor in blocks of rows (16 MiB), each memory-mapped from a file opened for that block alone: the loader copies
the block where it belongs (the model's dtype and device) and the mapped pages are released with the file, so
loading holds the model once plus one block (the pages of a mapping stay resident until it is closed: one mapping
for a whole file would hold the checkpoint twice). No tensor is read twice (a second read is refused).

Writing is atomic: each file goes to a temporary name beside its final one, then ``os.replace`` (a model loaded
from a folder keeps reading nothing from it, and a reader never sees half a file).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from .errors import PretrainedFormatError

__all__ = [
    "SHARD_NAME",
    "CONFIG_FILE",
    "GENERATION_CONFIG_FILE",
    "WEIGHTS_FILE",
    "INDEX_FILE",
    "SAFETENSORS_DTYPES",
    "TensorHeader",
    "SafetensorsFolder",
    "read_json",
    "write_json",
    "write_safetensors",
]

CONFIG_FILE = "config.json"
GENERATION_CONFIG_FILE = "generation_config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
#: The names transformers gives shards: ``model-00001-of-00003.safetensors``.
SHARD_NAME = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")

#: The safetensors dtypes a model's weights may have, and their torch dtypes (integers, booleans and 8-bit floats
#: are refused: no supported architecture stores weights in them).
SAFETENSORS_DTYPES: dict[str, torch.dtype] = {
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
}
_CODES = {dtype: code for code, dtype in SAFETENSORS_DTYPES.items()}

#: How much of a tensor is mapped at a time while loading: the peak memory is the model plus about this much.
BLOCK_BYTES = 16 * 1024 * 1024


def read_json(path: Path, *, required: bool = True) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when it is absent and not ``required``. A missing required file, a file
    that is not JSON or whose top level is not an object raises :class:`PretrainedFormatError` naming it."""
    if not path.is_file():
        if required:
            raise PretrainedFormatError(f"{path}: no such file (a Hugging Face checkpoint folder needs it)")
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PretrainedFormatError(f"{path}: not valid JSON ({error})") from None
    if not isinstance(value, dict):
        raise PretrainedFormatError(f"{path}: expected a JSON object at the top level, got {type(value).__name__}")
    return value


def _atomic_write(path: Path, write: Callable[[str], None]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(str(tmp))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_json(path: Path, value: Mapping[str, Any]) -> None:
    """Write ``value`` as indented JSON (keys sorted, as transformers writes its configs), atomically."""
    text = json.dumps(value, indent=2, sort_keys=True) + "\n"
    _atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def write_safetensors(path: Path, tensors: Mapping[str, torch.Tensor]) -> None:
    """Write ``tensors`` (contiguous, on any device: copied to the CPU) to one safetensors file with the metadata
    transformers writes (``format: pt``), atomically. Tensors of a dtype a reader cannot use are refused."""
    from safetensors.torch import save_file

    for name, tensor in tensors.items():
        if tensor.dtype not in _CODES:
            raise PretrainedFormatError(
                f"{path}: tensor {name!r} has dtype {tensor.dtype}; a checkpoint's weights are one of "
                f"{sorted(str(d) for d in _CODES)}"
            )
    cpu = {name: tensor.detach().to("cpu").contiguous() for name, tensor in tensors.items()}
    _atomic_write(path, lambda tmp: save_file(cpu, tmp, metadata={"format": "pt"}))


@dataclass(frozen=True)
class TensorHeader:
    """What a safetensors header says of one tensor: its name, the file holding it, its shape and dtype code."""

    name: str
    file: Path
    shape: tuple[int, ...]
    dtype: str


def _open(file: Path):
    try:
        return safe_open(str(file), framework="pt")
    except (SafetensorError, OSError) as error:
        raise PretrainedFormatError(
            f"{file}: not a readable safetensors file ({error}); the file is truncated or corrupt"
        ) from None


class SafetensorsFolder:
    """The tensors of a checkpoint folder: ``model.safetensors``, else the shards of ``model.safetensors.index.json``
    (whose ``weight_map`` maps each tensor to its shard), in transformers' order. Headers are read at construction;
    data by :meth:`read_blocks`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        if (folder / WEIGHTS_FILE).is_file():  # first, as transformers looks for it first
            self.source = folder / WEIGHTS_FILE
            self.headers = self._headers(folder / WEIGHTS_FILE)
        elif (folder / INDEX_FILE).is_file():
            self.source = folder / INDEX_FILE
            self.headers = self._from_index(read_json(folder / INDEX_FILE))
        else:
            raise PretrainedFormatError(
                f"{folder}: no {WEIGHTS_FILE} and no {INDEX_FILE} (the weights of a Hugging Face checkpoint folder; "
                "pytorch_model.bin and other pickled formats are not read)"
            )
        self._read: set[str] = set()

    def _from_index(self, index: dict[str, Any]) -> dict[str, TensorHeader]:
        path = self.folder / INDEX_FILE
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
        ):
            raise PretrainedFormatError(f"{path}: field 'weight_map' must map tensor names to shard file names")
        headers: dict[str, TensorHeader] = {}
        for shard in sorted(set(weight_map.values())):
            file = self.folder / shard
            if Path(shard).name != shard or not file.is_file():
                wanted = sorted(name for name, s in weight_map.items() if s == shard)
                raise PretrainedFormatError(
                    f"{path}: names shard {shard!r} (for {len(wanted)} tensors, e.g. {wanted[0]!r}), "
                    f"which is not a file in {self.folder}"
                )
            in_shard = self._headers(file)
            for name, header in in_shard.items():
                if weight_map.get(name) != shard:
                    raise PretrainedFormatError(
                        f"{file}: holds tensor {name!r}, which {INDEX_FILE}'s weight_map "
                        + (f"puts in {weight_map[name]!r}" if name in weight_map else "does not list")
                    )
                headers[name] = header
        for name, shard in weight_map.items():
            if name not in headers:
                raise PretrainedFormatError(f"{self.folder / shard}: has no tensor {name!r}, which {path} puts there")
        return headers

    @staticmethod
    def _headers(file: Path) -> dict[str, TensorHeader]:
        with _open(file) as handle:
            names = list(handle.keys())
            return {
                name: TensorHeader(
                    name, file, tuple(handle.get_slice(name).get_shape()), handle.get_slice(name).get_dtype()
                )
                for name in names
            }

    def names(self) -> list[str]:
        """Every tensor name of the folder, sorted."""
        return sorted(self.headers)

    def dtype(self, name: str) -> torch.dtype:
        """The torch dtype of tensor ``name``; a dtype a model's weight cannot have is refused naming the tensor."""
        header = self.headers[name]
        if header.dtype not in SAFETENSORS_DTYPES:
            raise PretrainedFormatError(
                f"{header.file}: tensor {name!r} has dtype {header.dtype}; weights must be one of "
                f"{sorted(SAFETENSORS_DTYPES)}"
            )
        return SAFETENSORS_DTYPES[header.dtype]

    def read_blocks(self, name: str, block_bytes: int | None = None) -> Iterator[tuple[int, torch.Tensor]]:
        """Tensor ``name`` as ``(first row, block)`` pairs of consecutive leading rows, ``block_bytes`` each (default
        :data:`BLOCK_BYTES`) or one row when a row is larger
        (a 0-d or 1-d tensor is one block). A block is memory-mapped from its file, which is open only until the
        next block is asked for: copy it before that. Each tensor is read once (a second read is a bug)."""
        if name in self._read:
            raise RuntimeError(f"tensor {name!r} of {self.source} read twice")  # the loader's bug, not the folder's
        self._read.add(name)
        self.dtype(name)
        header = self.headers[name]
        rows = header.shape[0] if len(header.shape) > 1 else 1
        row_bytes = math.prod(header.shape[1:]) * torch.empty((), dtype=self.dtype(name)).element_size()
        step = max(1, (BLOCK_BYTES if block_bytes is None else block_bytes) // max(1, row_bytes))
        for start in range(0, rows, step):
            with _open(header.file) as handle:
                try:
                    block = handle.get_slice(name)[start : start + step] if rows > 1 else handle.get_tensor(name)
                except (SafetensorError, OSError) as error:
                    raise PretrainedFormatError(f"{header.file}: cannot read tensor {name!r} ({error})") from None
                yield start, block
                del block
