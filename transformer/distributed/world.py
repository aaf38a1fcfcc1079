"""Where a process stands in a torchrun job: its rank, the world size, its GPU, a restart (torchrun's environment)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DistributedSetupError", "World", "torchrun_world"]


class DistributedSetupError(ValueError):
    """A launch that cannot work: missing torchrun environment, unknown strategy, indivisible batch size..."""


@dataclass(frozen=True)
class World:
    """Where this process stands: ``rank`` of ``world_size`` processes, ``local_rank`` on its machine."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    restart_count: int = 0  # torchrun's TORCHELASTIC_RESTART_COUNT: > 0 after a restart (--max-restarts)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def torchrun_world(environ: Mapping[str, str] | None = None) -> World | None:
    """The world torchrun describes in the environment, or None when the process was not launched by torchrun.

    Raises :class:`DistributedSetupError` naming the variable when the environment is incomplete or inconsistent.
    """
    env = os.environ if environ is None else environ
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    present = [name for name in names if name in env]
    if not present:
        return None
    missing = [name for name in names if name not in env]
    if missing:
        raise DistributedSetupError(
            f"incomplete torchrun environment: {', '.join(present)} set but {', '.join(missing)} missing "
            "(launch with torchrun, which sets RANK, WORLD_SIZE and LOCAL_RANK)"
        )

    def integer(name: str, default: int | None = None) -> int:
        text = env.get(name)
        if text is None:
            assert default is not None
            return default
        try:
            return int(text)
        except ValueError:
            raise DistributedSetupError(f"{name}={text!r} is not an integer") from None

    world_size, rank, local_rank = integer("WORLD_SIZE"), integer("RANK"), integer("LOCAL_RANK")
    local_world_size = integer("LOCAL_WORLD_SIZE", world_size)
    if world_size < 1:
        raise DistributedSetupError(f"WORLD_SIZE={world_size} must be >= 1")
    if not 0 <= rank < world_size:
        raise DistributedSetupError(f"RANK={rank} must be in [0, WORLD_SIZE={world_size})")
    if not 0 <= local_rank < max(local_world_size, 1):
        raise DistributedSetupError(f"LOCAL_RANK={local_rank} must be in [0, LOCAL_WORLD_SIZE={local_world_size})")
    return World(rank, world_size, local_rank, local_world_size, integer("TORCHELASTIC_RESTART_COUNT", 0))
