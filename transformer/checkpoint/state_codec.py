"""A training state (tensors and JSON values in dicts, lists and tuples) as JSON plus a flat dict of tensors for
``safetensors``, and back: how ``state.json`` + ``state.safetensors`` hold it without pickle."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["encode_state", "decode_state", "tensor_bytes"]


def encode_state(obj: Any, tensors: dict[str, torch.Tensor], path: str = "") -> Any:
    """``obj`` (tensors and JSON values in dicts, lists and tuples: a training state) as a JSON value in which each
    tensor is ``{"__tensor__": key}``, the tensor itself put in ``tensors[key]`` (for ``safetensors``); tuples and
    dicts with non-string keys are tagged (``__tuple__``, ``__items__``) so that :func:`decode_state` gives them
    back. ``path`` prefixes the keys; a key already in ``tensors`` (two paths that read the same, such as keys
    ``"a.b"`` and ``"a"`` -> ``"b"``) gets a ``#N`` suffix, never overwriting a tensor. Anything else raises
    ``TypeError`` naming where it is.

    Every tensor put in ``tensors`` owns its memory, as ``safetensors`` requires: a non-contiguous tensor, a view
    into a larger tensor, or a tensor whose memory another entry shares (the same tensor twice, a slice of another)
    is stored as a contiguous copy of its values."""
    before = set(tensors)
    encoded = _encode(obj, tensors, path)
    seen: set[int] = set()  # the memory of every entry, those added before this call included
    for key, tensor in tensors.items():
        pointer = _storage(tensor)
        owns = tensor.is_contiguous() and tensor.storage_offset() == 0 and _whole(tensor)
        if key not in before and (not owns or (pointer and pointer in seen)):
            tensors[key] = tensor.clone(memory_format=torch.contiguous_format)
            pointer = _storage(tensors[key])
        seen.add(pointer)
    return encoded


def _storage(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def _whole(tensor: torch.Tensor) -> bool:
    return tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()


def _encode(obj: Any, tensors: dict[str, torch.Tensor], path: str) -> Any:
    if isinstance(obj, torch.Tensor):
        key = path or "root"
        taken, n = key, 1
        while key in tensors:  # another tensor's path reads the same ("a.b" and "a" -> "b"; 1 and "1"): never overwrite
            key, n = f"{taken}#{n}", n + 1
        tensors[key] = obj.detach().cpu()
        return {"__tensor__": key}
    if isinstance(obj, dict):
        if (
            all(isinstance(k, str) for k in obj)
            and "__tensor__" not in obj
            and "__tuple__" not in obj
            and "__items__" not in obj
        ):
            return {k: _encode(v, tensors, f"{path}.{k}") for k, v in obj.items()}
        return {
            "__items__": [
                [_encode(k, tensors, f"{path}.k{i}"), _encode(v, tensors, f"{path}.{k}")]
                for i, (k, v) in enumerate(obj.items())
            ]
        }
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, tensors, f"{path}.{i}") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_encode(v, tensors, f"{path}.{i}") for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(
        f"cannot store a {type(obj).__name__} at {path or 'root'} in a checkpoint (only tensors and JSON values)"
    )


def decode_state(obj: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """The inverse of :func:`encode_state`: the JSON value ``obj`` with its tensor references looked up in
    ``tensors`` and its tuples and non-string-keyed dicts restored."""
    if isinstance(obj, dict):
        if set(obj) == {"__tensor__"}:
            return tensors[obj["__tensor__"]]
        if set(obj) == {"__tuple__"}:
            return tuple(decode_state(v, tensors) for v in obj["__tuple__"])
        if set(obj) == {"__items__"}:
            return {decode_state(k, tensors): decode_state(v, tensors) for k, v in obj["__items__"]}
        return {k: decode_state(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode_state(v, tensors) for v in obj]
    return obj


def tensor_bytes(obj: Any) -> int:
    """The bytes of every tensor in ``obj`` (dicts, lists and tuples of tensors and other values)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(v) for v in obj)
    return 0
