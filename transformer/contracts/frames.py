"""The checked calls in progress, innermost last: the call a ``check(...)`` inside a checked function binds with.

A checked call pushes a frame for the duration of its function (``transformer.contracts.decorator`` in eager mode,
``transformer.contracts.traced`` while torch.compile traces); ``transformer.contracts.within.check`` reads the
innermost one: its dimension names (the memo of jaxtyping's ``jaxtyped``) and its arguments (for ``{self.x}``).
"""

from __future__ import annotations

import threading


class _EagerCalls(threading.local):
    """Per thread: one frame per checked call in progress, ``[contract, args, kwargs, memo, bound]``. The memo
    (``[sizes by name, variadic shapes by name]``) and the arguments by name are None until a check needs them:
    a call whose function makes no check pays for one append and one pop."""

    def __init__(self) -> None:
        self.frames: list[list] = []


EAGER = _EagerCalls()
#: while torch.compile traces: one ``(memo, bound)`` per checked call being traced (traced code: Dynamo replays its
#: net change, none, after the graph)
TRACED: list[tuple] = []
