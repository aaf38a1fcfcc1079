"""Structured example inputs of a proof: an ``AttentionMask`` or a key/value cache (pytrees, see
:mod:`transformer.common.pytrees`), whose tensors' axes carry size names as a tensor argument's annotation does.

A leaf is named by its argument and its path in the structure, as ``torch.utils._pytree.keystr`` writes it
(``mask.key_mask``, ``cache.layers[0]._keys``); its axes by :data:`LEAF_AXES` (the part's documented shape:
``key_mask`` is (batch, k_len), a cache's keys (batch, heads, cache_len, d_k), a cross-attention cache's (batch,
heads, src_len, d_k)), or by ``axes={"mask.key_mask": ("batch", "seq")}`` (a name per axis, None for a fixed one).
"""

from __future__ import annotations

import torch
import torch.utils._pytree as pytree

#: the size names of a structure's parts, by the part's name (the last key of its path)
LEAF_AXES: dict[str, tuple[str | None, ...]] = {
    "key_lengths": ("batch",),
    "key_mask": ("batch", "k_len"),
    "query_lengths": ("batch",),
    "dense": ("#batch", "#q_len", "k_len"),
    "documents": ("batch", "k_len"),
    "_keys": ("batch", None, "cache_len", None),
    "_values": ("batch", None, "cache_len", None),
    "real_keys": ("batch", "cache_len"),
    "next_positions": ("batch",),
}


def is_structure(value: object) -> bool:
    """Whether ``value`` is one of the package's structured inputs (a registered pytree node of ``transformer``)."""
    return type(value) in pytree.SUPPORTED_NODES and type(value).__module__.startswith("transformer.")


def leaves(arg: str, value: object) -> dict[str, torch.Tensor]:
    """The tensors of a structure, by leaf name (``mask.key_mask``)."""
    flat, _ = pytree.tree_flatten_with_path(value)
    return {arg + pytree.keystr(path): leaf for path, leaf in flat if isinstance(leaf, torch.Tensor)}


def leaf_axes(leaf: str, value: torch.Tensor, axes: dict | None) -> dict[int, tuple[str, bool]]:
    """``{axis: (name, broadcastable)}`` of one leaf: ``axes[leaf]`` when given, else :data:`LEAF_AXES`."""
    given = (axes or {}).get(leaf)
    if given is not None:
        if len(given) != value.dim():
            raise ValueError(f"prove: axes[{leaf!r}] = {given!r} must name each of its {value.dim()} axes")
        return {i: (d.lstrip("#"), d.startswith("#")) for i, d in enumerate(given) if d is not None}
    part = leaf.rsplit(".", 1)[-1]
    names = LEAF_AXES.get(part, ())
    if part in ("_keys", "_values") and ".src_attn." in leaf:
        names = ("batch", None, "src_len", None)
    if len(names) != value.dim():
        return {}
    return {i: (d.lstrip("#"), d.startswith("#")) for i, d in enumerate(names) if d is not None}


def dynamic_tree(value: object, path: str, specs: dict):
    """``value``'s ``dynamic_shapes`` for torch.export: a tensor's spec from ``specs`` (by leaf name, None when it
    has none), a registered structure's or a list's as the list of its children's."""
    if isinstance(value, torch.Tensor):
        return specs.get(path)
    if value is None:
        return None
    node = pytree.SUPPORTED_NODES.get(type(value))
    if node is None:
        return None
    if node.flatten_with_keys_fn is not None:
        children = node.flatten_with_keys_fn(value)[0]
    else:
        children = list(zip([pytree.SequenceKey(i) for i in range(len(value))], value, strict=True))
    made = [dynamic_tree(child, path + str(key), specs) for key, child in children]
    return tuple(made) if isinstance(value, tuple) else made


def resized(arg: str, value: object, named: dict, alias: dict, sizes: dict, like):
    """A structure like ``value`` with its named leaves at ``sizes`` (``like(tensor, shape)`` makes each)."""
    flat, spec = pytree.tree_flatten_with_path(value)
    made = []
    for path, leaf in flat:
        name = arg + pytree.keystr(path)
        if isinstance(leaf, torch.Tensor) and name in named:
            made.append(like(leaf, resized_shape(leaf, named[name], alias, sizes)))
            if name.endswith(".documents"):  # packed documents' ids are non-decreasing along a row
                made[-1] = made[-1].sort(dim=-1).values
        else:
            made.append(leaf)
    return pytree.tree_unflatten(made, spec)


def inputs_at(bound: dict, named: dict, alias: dict, sizes: dict, like) -> dict:
    """The bound arguments with every named tensor, and every named leaf of a structure, at ``sizes``
    (``like(tensor, shape)`` makes each); other arguments as they are."""
    inputs = {}
    for arg, value in bound.items():
        if isinstance(value, torch.Tensor) and arg in named:
            inputs[arg] = like(value, resized_shape(value, named[arg], alias, sizes))
        elif is_structure(value):
            inputs[arg] = resized(arg, value, named, alias, sizes, like)
        else:
            inputs[arg] = value
    return inputs


def resized_shape(value: torch.Tensor, axes: dict, alias: dict, sizes: dict) -> list[int]:
    shape = list(value.shape)
    for axis, (name, broadcastable) in axes.items():
        name = alias.get(name, name)
        if name in sizes and not (broadcastable and value.shape[axis] == 1):
            shape[axis] = sizes[name]
    return shape
