"""The package's structured inputs as pytrees (``torch.utils._pytree``), so that ``torch.export`` takes an
``AttentionMask`` or a key/value cache as an input of an exported program, with symbolic sizes on their tensors.

``register(cls, children, context, rebuild)``: the tensors (or nested structures) named in ``children`` are the
pytree's children, in that order (``torch.export``'s ``dynamic_shapes`` for such an input is the list of its
children's shapes); the attributes named in ``context`` are fixed when the program is exported (a flag, a window, a
count) and compared with each call's by torch; ``rebuild(children, context)`` (two dicts by name) makes the object
again. ``torch.utils._pytree.register_pytree_node`` with ``flatten_with_keys_fn`` (torch.export reads children by
key) has this signature in torch 2.9 to 2.14.
"""

from __future__ import annotations

from collections.abc import Callable

import torch.utils._pytree as pytree


def register(
    cls: type,
    children: tuple[str, ...],
    context: tuple[str, ...],
    rebuild: Callable[[dict, dict], object],
    prepare: Callable[[object], None] | None = None,
):
    """Register ``cls`` as a pytree node (see the module's docstring); the exact class only: a subclass registers
    itself. ``prepare(value)`` runs before the children are read: each must be the same tensor object every time
    (torch.export finds an input's ``dynamic_shapes`` by the tensor's identity; a property making a new view at
    each read loses them)."""

    def read(value):
        if prepare is not None:
            prepare(value)
        return [getattr(value, name) for name in children], tuple(getattr(value, name) for name in context)

    def flatten(value):
        return read(value)

    def flatten_with_keys(value):
        values, fixed = read(value)
        return [(pytree.GetAttrKey(name), v) for name, v in zip(children, values, strict=True)], fixed

    def unflatten(values, fixed):
        return rebuild(dict(zip(children, values, strict=True)), dict(zip(context, fixed, strict=True)))

    pytree.register_pytree_node(
        cls,
        flatten,
        unflatten,
        serialized_type_name=f"{cls.__module__}.{cls.__qualname__}",
        flatten_with_keys_fn=flatten_with_keys,
    )
    return cls
