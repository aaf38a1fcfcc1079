"""FSDP2: parameters, gradients and optimizer state sharded over the ranks, and sharded checkpoints.

``fully_shard`` on every layer (:func:`layer_units`), then on the root, with bf16 compute and fp32 gradient reduction on
CUDA (``MixedPrecisionPolicy``); the optimizer is re-pointed at the sharded parameters. Checkpoints are sharded with
``torch.distributed.checkpoint``: every rank writes its part, rank 0 the rest (:mod:`.sharded_checkpoint`).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..checkpoint import (
    CheckpointError,
    NonFiniteWeightsError,
    check_model_matches,
    describe_nonfinite,
    encode_state,
    kept_message,
    nonfinite_tensors,
    read_config,
    swap_into_place,
)
from ..common.output_dirs import is_write_failure, make_temp_dir, remove_stale_temps, write_failure
from .sharded_checkpoint import (
    build_model,
    dcp_directory,
    read_sharded_state,
    resolve_sharded,
    verify_sharded,
    write_sharded_files,
)
from .strategy import CollectiveStrategy
from .world import World

__all__ = ["FSDPStrategy", "layer_units"]


def layer_units(model: nn.Module) -> list[nn.Module]:
    """The modules FSDP shards one by one: every element of an ``nn.ModuleList`` named ``layers``, in order
    (``Encoder.layers``, ``Decoder.layers``, a decoder-only model's ``layers``)."""
    units = []
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and name.rsplit(".", 1)[-1] == "layers":
            units.extend(module)
    return units


class FSDPStrategy(CollectiveStrategy):
    """FSDP2: parameters, gradients and optimizer state sharded over the ranks (``fully_shard`` per layer, then the
    root); bf16 compute with fp32 gradient reduction on CUDA. Checkpoints are sharded
    (``torch.distributed.checkpoint``)."""

    name = "fsdp"
    _matched_forwards = True

    def __init__(
        self, world: World, device: torch.device | str, *, owns_group: bool = False, mixed_precision: bool | None = None
    ) -> None:
        super().__init__(world, device, owns_group=owns_group)
        self.mixed_precision = self.device.type == "cuda" if mixed_precision is None else mixed_precision

    def describe(self) -> str:
        return super().describe() + (", bf16 compute" if self.mixed_precision else "")

    def prepare(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

        if isinstance(model, FSDPModule):  # sharded by the caller: the optimizer must hold the sharded parameters
            if optimizer is not None:
                _check_optimizer_holds(optimizer, model)
            self._reseed()
            return model
        names = {id(p): name for name, p in model.named_parameters()}
        with torch.no_grad():  # FSDP shards each rank's own copy: start every rank from rank 0's weights
            for tensor in [*model.parameters(), *model.buffers()]:
                dist.broadcast(tensor.data, src=0)
        mesh = init_device_mesh(self.device.type, (self.world_size,))
        policy = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if self.mixed_precision
            else MixedPrecisionPolicy()
        )
        for unit in layer_units(model):
            fully_shard(unit, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        if optimizer is not None:  # the optimizer must step the sharded parameters, not the replaced full ones
            if optimizer.state:
                raise ValueError(
                    "FSDPStrategy.prepare: the optimizer has already taken steps; shard the model first "
                    "and train afterwards"
                )
            sharded = dict(model.named_parameters())
            for group in optimizer.param_groups:
                try:
                    group["params"] = [sharded[names[id(p)]] for p in group["params"]]
                except KeyError:
                    raise ValueError(
                        "FSDPStrategy.prepare: the optimizer holds a tensor that is not one of the model's parameters"
                    ) from None
        self._reseed()
        return model

    def full_model(self, model: nn.Module) -> nn.Module | None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
        )

        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if not self.is_main:
            return None
        replica = build_model(model.config)
        replica.load_state_dict(full)
        if getattr(model, "checkpoint_assets", None):  # e.g. the tokenizer a language model is saved with
            replica.checkpoint_assets = dict(model.checkpoint_assets)
        return replica.to(self.device)

    # -- sharded checkpoints
    def save(self, path, model, optimizer, trainer_state, metadata) -> str:
        """Every rank writes its shards (DCP) into a temporary directory beside ``path``; rank 0 adds the config,
        the trainer state and ``meta.json``, then swaps the directory into place, as ``save_checkpoint`` does."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        path = os.path.abspath(os.fspath(path))
        parent = os.path.dirname(path)
        model_state, optim_state = get_state_dict(model, optimizer)
        tensors, extras = _split_optimizer_state(optim_state["state"])
        tmp = problem = None
        if self.is_main:
            if os.path.exists(path) and not os.path.isdir(path):
                problem = CheckpointError(f"checkpoint path {path} exists and is not a directory")
            else:
                try:
                    os.makedirs(parent, exist_ok=True)
                    remove_stale_temps(path)
                    tmp = make_temp_dir(path)
                except OSError as error:
                    if not is_write_failure(error):
                        raise
                    problem = write_failure(error, "the checkpoint", path, kept=kept_message(path))
        tmp, problem = self.broadcast((tmp, problem))  # every rank raises rank 0's problem: none waits for the others
        if problem is not None:
            raise problem
        try:
            dcp.save({"model": model_state, "optim": tensors}, storage_writer=dcp.FileSystemWriter(dcp_directory(tmp)))
            if self.is_main:
                state = {k: v for k, v in trainer_state.items() if k != "optimizer"}
                state["sharded_optimizer"] = {"param_groups": optim_state["param_groups"], "state": extras}
                encoded_tensors: dict[str, torch.Tensor] = {}
                encoded = encode_state(state, encoded_tensors)
                write_sharded_files(
                    tmp, model, encoded, encoded_tensors, metadata, self.world_size, int(trainer_state.get("step", 0))
                )
                swap_into_place(tmp, path)
        except BaseException as error:
            if self.is_main:
                shutil.rmtree(tmp, ignore_errors=True)
            needed = sum(_local_bytes(t) for t in model_state.values()) * self.world_size
            if is_write_failure(error, path, needed):
                raise write_failure(
                    error, "the sharded checkpoint", path, needed=needed, kept=kept_message(path)
                ) from None
            raise
        self.barrier()
        return path

    def load(self, path, model, optimizer, device) -> dict[str, Any] | None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (
            get_state_dict,
            set_state_dict,
        )

        path = os.path.abspath(os.fspath(path))
        problem = None
        if self.is_main:  # one rank verifies the files (hashes), every rank hears the verdict
            try:
                path = resolve_sharded(path)
                verify_sharded(path)
            except CheckpointError as error:
                problem = str(error)
        problem, path = self.broadcast((problem, path))
        if problem is not None:
            raise CheckpointError(problem)
        kind, saved_config = read_config(path, with_kind=True)
        check_model_matches(model, kind, saved_config, path, "FSDPStrategy.load")
        model_state, optim_state = get_state_dict(model, optimizer)  # templates: this world's shards
        tensors, _ = _split_optimizer_state(optim_state["state"])
        dcp.load({"model": model_state, "optim": tensors}, storage_reader=dcp.FileSystemReader(dcp_directory(path)))
        bad = nonfinite_tensors(model_state.items())  # this rank's shards; every rank hears the verdict
        if self.all_reduce_sum([len(bad)])[0]:
            raise NonFiniteWeightsError(
                f"checkpoint {path} holds non-finite weights (NaN or inf)"
                + (f" in {describe_nonfinite(bad)}" if bad else " in other ranks' shards")
                + ": it was saved from a run that diverged",
                bad,
            )
        state = read_sharded_state(path)
        saved = state.pop("sharded_optimizer")
        merged = {
            fqn: {**tensors.get(fqn, {}), **saved["state"].get(fqn, {})} for fqn in set(tensors) | set(saved["state"])
        }
        set_state_dict(
            model,
            optimizer,
            model_state_dict=model_state,
            optim_state_dict={"state": merged, "param_groups": saved["param_groups"]},
        )
        return state


def _local_bytes(tensor: Any) -> int:
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size() if isinstance(local, torch.Tensor) else 0


def _check_optimizer_holds(optimizer: torch.optim.Optimizer, model: nn.Module) -> None:
    own = {id(p) for p in model.parameters()}
    if any(id(p) not in own for group in optimizer.param_groups for p in group["params"]):
        raise ValueError(
            "the optimizer holds tensors that are not the sharded model's parameters: build it on "
            "model.parameters() after sharding, or give the Trainer the unsharded model"
        )


def _split_optimizer_state(state: dict[str, dict[str, Any]]) -> tuple[dict, dict]:
    """Per-parameter optimizer state split into tensors (for DCP) and everything else (for JSON)."""
    tensors = {fqn: {k: v for k, v in s.items() if isinstance(v, torch.Tensor)} for fqn, s in state.items()}
    extras = {fqn: {k: v for k, v in s.items() if not isinstance(v, torch.Tensor)} for fqn, s in state.items()}
    return tensors, {fqn: e for fqn, e in extras.items() if e}
