"""The fields of a ``config.json``, read with their types checked: every error names the file and the field.

:class:`ConfigFields` wraps the parsed JSON object; each getter says what the field must be (a positive integer,
a probability, one of some names...) and what it means when absent (transformers' default for the architecture).
``refuse`` is the one way to turn down an option this package does not implement: the message names the file, the
field, its value and what would be accepted.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

from ...common.arguments import is_int, is_number
from .errors import PretrainedFormatError

__all__ = ["ConfigFields", "MISSING"]

MISSING: Any = object()  #: the default of a field that must be present


class ConfigFields:
    """The fields of one JSON object read from ``path`` (``prefix`` names a nested object: ``rope_parameters.``)."""

    def __init__(self, values: dict[str, Any], path: Path, prefix: str = "") -> None:
        self.values, self.path, self.prefix = values, path, prefix

    def refuse(self, field: str, value: Any, why: str) -> NoReturn:
        """Raise :class:`PretrainedFormatError`: ``field`` = ``value`` is not supported, because ``why``."""
        raise PretrainedFormatError(f"{self.path}: field {self.prefix}{field}={value!r} is not supported: {why}")

    def _get(self, field: str, default: Any) -> Any:
        if field in self.values:
            return self.values[field]
        if default is MISSING:
            raise PretrainedFormatError(f"{self.path}: required field {self.prefix}{field!r} is missing")
        return default

    def _bad(self, field: str, value: Any, expected: str) -> NoReturn:
        raise PretrainedFormatError(f"{self.path}: field {self.prefix}{field} must be {expected}, got {value!r}")

    def has(self, field: str) -> bool:
        """Whether ``field`` is present (a JSON null counts as present)."""
        return field in self.values

    def integer(self, field: str, default: Any = MISSING, *, at_least: int = 1, optional: bool = False) -> Any:
        """An integer >= ``at_least`` (None allowed when ``optional``)."""
        value = self._get(field, default)
        if value is None and optional:
            return None
        if not is_int(value, at_least=at_least):
            self._bad(field, value, f"an integer >= {at_least}" + (" or null" if optional else ""))
        return int(value)

    def number(self, field: str, default: Any = MISSING, *, positive: bool = True, optional: bool = False) -> Any:
        """A finite number (> 0 when ``positive``; None allowed when ``optional``)."""
        value = self._get(field, default)
        if value is None and optional:
            return None
        if not is_number(value, finite=True) or (positive and value <= 0):
            self._bad(field, value, ("a positive number" if positive else "a finite number"))
        return float(value)

    def probability(self, field: str, default: Any = MISSING) -> float:
        """A number in [0, 1) (a dropout probability)."""
        value = self._get(field, default)
        if not is_number(value, finite=True) or not 0.0 <= value < 1.0:
            self._bad(field, value, "a number in [0, 1)")
        return float(value)

    def flag(self, field: str, default: Any = MISSING) -> bool:
        """true or false."""
        value = self._get(field, default)
        if not isinstance(value, bool):
            self._bad(field, value, "true or false")
        return value

    def choice(self, field: str, mapping: dict[Any, Any], default: Any = MISSING) -> Any:
        """``mapping[value]``; a value outside ``mapping`` is refused, listing the supported ones."""
        value = self._get(field, default)
        try:
            return mapping[value]
        except (KeyError, TypeError):
            self.refuse(field, value, f"the supported values are {sorted(mapping, key=str)}")

    def require(self, field: str, expected: Any, default: Any = MISSING) -> None:
        """Refuse ``field`` unless it equals ``expected`` (absent counts as ``default``): an option whose other
        values change the model's function in a way this package does not implement."""
        value = self._get(field, default)
        if value != expected:
            self.refuse(field, value, f"only {expected!r} is implemented")

    def only(self, allowed: Iterable[str]) -> None:
        """Refuse any field outside ``allowed`` (for nested objects whose every key changes the function)."""
        allowed = set(allowed)
        for field in sorted(self.values):
            if field not in allowed:
                self.refuse(field, self.values[field], f"unknown here; the known fields are {sorted(allowed)}")

    def token_ids(self, field: str) -> list[int]:
        """Token ids: a non-negative integer, a list of them, or null/absent (no ids)."""
        value = self.values.get(field)
        if value is None:
            return []
        ids = value if isinstance(value, list) else [value]
        if not all(is_int(i, at_least=0) for i in ids):
            self._bad(field, value, "a token id (an integer >= 0), a list of them, or null")
        return [int(i) for i in ids]
