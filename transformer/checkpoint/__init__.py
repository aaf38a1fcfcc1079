"""Checkpoints: safetensors + JSON only, written atomically, loaded without unpickling anything.

A checkpoint is a directory::

    config.json               the model's kind and architecture (config.architecture(): no run-time fields)
    model.safetensors         the weights (safetensors.torch.save_model: tied weights stored once)
    state.safetensors         training-state tensors: optimizer moments, RNG states (optional)
    state.json                the rest of the training state as JSON; tensors appear as {"__tensor__": key}
    tokenizer.json ...        assets saved with the model, e.g. its tokenizer (optional)
    meta.json                 format version, user metadata (task, vocabulary...) and a SHA-256 per file

``config.json`` names the model's kind (``MODEL_KINDS``): ``"encoder_decoder"`` (a
:class:`~transformer.config.TransformerConfig`, built by :func:`~transformer.model.build_model`) or ``"lm"`` (an
:class:`~transformer.lm.LMConfig`, built by :func:`~transformer.lm.build_lm`). A ``config.json`` without a
kind, as written before there were two, is an encoder-decoder.

``save_checkpoint`` writes everything into a fresh temporary directory beside the target, fsyncs
it, then swaps it in with two ``rename`` calls; the previous checkpoint is renamed aside first and
deleted only after the new one is in place, so an interrupted save never destroys it (and
``load_checkpoint`` falls back to that aside copy if a crash hit between the two renames).

``load_checkpoint`` reads JSON with :mod:`json` and tensors with ``safetensors.torch.load_file``;
no pickle and no ``torch.load`` is involved, so loading a checkpoint never executes code. It refuses weights that
are NaN or infinite (a diverged run's), naming the tensors, unless asked to load them anyway.

Where the checkpoint of a directory is (``--resume``, a torchrun restart, loading) follows one rule,
:func:`find_checkpoint`. A disk that is full or read-only during a save raises
:class:`~transformer.common.output_dirs.OutputWriteError` (one sentence: the path, the space needed, that the previous
checkpoint is intact); temporary directories of interrupted saves are removed by the next save when provably
leftovers (:mod:`transformer.common.output_dirs`).

One concept per module; import everything from here:

* :mod:`~transformer.checkpoint.format`: the file names, ``MODEL_KINDS``, ``meta.json`` and its SHA-256 manifest.
* :mod:`~transformer.checkpoint.errors`: :class:`CheckpointError` and its kinds.
* :mod:`~transformer.checkpoint.nonfinite`: finding and naming NaN or infinite weights.
* :mod:`~transformer.checkpoint.state_codec`: a training state as JSON plus safetensors, and back.
* :mod:`~transformer.checkpoint.locate`: the one rule that finds a directory's checkpoint.
* :mod:`~transformer.checkpoint.save`: the atomic write and swap.
* :mod:`~transformer.checkpoint.load`: reading, verifying and building the model.
"""

from .errors import CheckpointError, ConfigMismatchError, NonFiniteWeightsError
from .format import (
    CONFIG_FILE,
    DEFAULT_KIND,
    FORMAT_VERSION,
    META_FILE,
    MODEL_FILE,
    MODEL_KINDS,
    RESERVED_FILES,
    STATE_JSON_FILE,
    STATE_TENSORS_FILE,
    Checkpoint,
    fsync_path,
    import_reference,
    model_kind,
    read_meta,
    read_metadata,
    sha256_file,
    verify_files,
)
from .load import check_model_matches, load_checkpoint, read_config
from .locate import checkpoint_dir, checkpoint_step, find_checkpoint, kept_message, resolve_checkpoint
from .nonfinite import describe_nonfinite, nonfinite_tensors
from .save import save_checkpoint, swap_into_place
from .state_codec import decode_state, encode_state, tensor_bytes

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "ConfigMismatchError",
    "NonFiniteWeightsError",
    "save_checkpoint",
    "load_checkpoint",
    "find_checkpoint",
    "FORMAT_VERSION",
    # the parts the distributed checkpoints, the Trainer and the CLI share
    "CONFIG_FILE",
    "MODEL_FILE",
    "STATE_TENSORS_FILE",
    "STATE_JSON_FILE",
    "META_FILE",
    "RESERVED_FILES",
    "MODEL_KINDS",
    "DEFAULT_KIND",
    "import_reference",
    "model_kind",
    "sha256_file",
    "fsync_path",
    "verify_files",
    "read_meta",
    "read_metadata",
    "read_config",
    "check_model_matches",
    "checkpoint_dir",
    "resolve_checkpoint",
    "checkpoint_step",
    "kept_message",
    "nonfinite_tensors",
    "describe_nonfinite",
    "swap_into_place",
    "encode_state",
    "decode_state",
    "tensor_bytes",
]
