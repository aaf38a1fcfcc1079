"""Every annotation of the package uses the one vocabulary of dimension names (``transformer.contracts.DIMENSIONS``)."""

import re


def _annotation_dims(annotation):
    import typing

    dim_str = getattr(annotation, "dim_str", None)
    if dim_str is not None:
        yield from dim_str.split()
    for arg in typing.get_args(annotation):
        yield from _annotation_dims(arg)


def package_modules():
    """Every module of the package (``__main__`` excepted: importing it runs the command line)."""
    import importlib
    import pkgutil

    import transformer

    for info in pkgutil.walk_packages(transformer.__path__, "transformer."):
        if not info.name.endswith("__main__"):
            yield importlib.import_module(info.name)


def _checked_functions():
    import inspect

    for module in package_modules():
        for _, obj in inspect.getmembers(module):
            candidates = [obj]
            if inspect.isclass(obj) and obj.__module__ == module.__name__:
                candidates = [getattr(obj, name) for name in vars(obj)]
            for fn in candidates:
                if callable(fn) and getattr(fn, "__module__", None) == module.__name__ and hasattr(fn, "__wrapped__"):
                    yield f"{module.__name__}.{fn.__qualname__}", fn.__wrapped__


def test_every_annotation_uses_the_dimension_vocabulary():
    import typing

    from transformer.contracts import DIMENSIONS

    seen = 0
    for name, fn in _checked_functions():
        for annotation in typing.get_type_hints(fn).values():
            for dim in _annotation_dims(annotation):
                bare = dim.lstrip("*#")
                if bare.startswith("{") or bare == "...":
                    continue
                for word in re.findall(r"[A-Za-z_]\w*", bare):  # symbolic sizes such as "steps+1" too
                    assert word in DIMENSIONS, f"{name}: dimension {word!r} ({dim!r}) is not in contracts.DIMENSIONS"
                    seen += 1
    assert seen > 50
