"""Training on several processes and machines with PyTorch's own distributed engine (torchrun, DDP, FSDP2, DCP).

The :class:`~transformer.training.trainer.Trainer` runs one code path everywhere; what differs is a *strategy* object:

* :class:`SingleProcess` (the default): every operation is the identity or a no-op.
* :class:`DDPStrategy`: the model is replicated (``DistributedDataParallel``); gradients are all-reduced once per
  optimizer step (``no_sync`` on the accumulation steps); rank 0 saves the usual safetensors checkpoint.
* :class:`FSDPStrategy`: FSDP2 (``torch.distributed.fsdp.fully_shard``) on every layer, then on the root, with bf16
  compute on CUDA (``MixedPrecisionPolicy``); checkpoints are sharded with ``torch.distributed.checkpoint`` (every rank
  writes its part) and :func:`consolidate_checkpoint` turns one into the safetensors checkpoint ``decode`` reads.

Processes are started by ``torchrun`` (never by this package): :func:`torchrun_world` reads its environment
(``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), :func:`setup` (or the :func:`distributed` context manager) initialises
the process group (gloo on CPU, nccl on CUDA) and returns the strategy::

    with distributed("fsdp") as strategy:                       # under torchrun --nproc_per_node=N
        trainer = make_trainer(task, device=strategy.device)
        trainer.distribute(strategy)
        trainer.train()

Data: a batch factory that accepts a ``shard`` keyword gets ``shard=Shard(rank, world_size)`` and yields this
rank's batches (file corpora); a plain factory ``batches(generator)`` yields *global* batches, identical on every
rank (the same seed), of which each rank keeps its contiguous ``1/world_size`` of the rows (:func:`shard_batch`).
Either way the job sees exactly the batches one process would see, whatever the world size.
Gradients equal one process's: each rank's loss is weighted by its share of all the ranks' tokens
(:meth:`Strategy.token_weights`), so the averaged gradient is that of the global loss per token.

One concept per module; import everything from here:

* ``world``: :class:`World`, :func:`torchrun_world`, :class:`DistributedSetupError`;
* ``launch``: :func:`setup`, :func:`distributed`, :func:`main_process_output`, :func:`recorded_errors`,
  :func:`restarted_with_checkpoint`;
* ``sharding``: :class:`Shard`, :func:`shard_batch`, :func:`check_batch_size`;
* ``strategy``: :class:`Strategy`, :class:`SingleProcess`, :class:`DDPStrategy`; ``fsdp``: :class:`FSDPStrategy`,
  :func:`layer_units`;
* ``sharded_checkpoint``: :func:`consolidate_checkpoint`, :func:`is_sharded_checkpoint`,
  :func:`read_sharded_checkpoint`.
"""

from .fsdp import FSDPStrategy, layer_units
from .launch import STRATEGIES, distributed, main_process_output, recorded_errors, restarted_with_checkpoint, setup
from .sharded_checkpoint import (
    SHARDED_FORMAT,
    SHARDED_FORMAT_VERSION,
    consolidate_checkpoint,
    is_sharded_checkpoint,
    read_sharded_checkpoint,
)
from .sharding import Shard, check_batch_size, shard_batch
from .strategy import RANK_STATE_KEYS, DDPStrategy, SingleProcess, Strategy
from .world import DistributedSetupError, World, torchrun_world

__all__ = [
    "RANK_STATE_KEYS",
    "SHARDED_FORMAT",
    "SHARDED_FORMAT_VERSION",
    "STRATEGIES",
    "DDPStrategy",
    "DistributedSetupError",
    "FSDPStrategy",
    "Shard",
    "SingleProcess",
    "Strategy",
    "World",
    "check_batch_size",
    "consolidate_checkpoint",
    "distributed",
    "is_sharded_checkpoint",
    "layer_units",
    "main_process_output",
    "read_sharded_checkpoint",
    "recorded_errors",
    "restarted_with_checkpoint",
    "setup",
    "shard_batch",
    "torchrun_world",
]
