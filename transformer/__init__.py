"""typed-transformer: the Transformer of "Attention Is All You Need" as shape-checked PyTorch modules.

The names follow the Annotated Transformer; every ``forward`` is a checked tensor contract
(see :mod:`transformer.contracts`), and attention can run on a fused Triton kernel
(see :mod:`transformer.attention`).
"""

from . import attention  # the module (MultiHeadedAttention); calling it calls the function attention()
from .attention import MultiHeadedAttention, current_backend, scaled_dot_product_attention, use_backend
from .cache import DecoderCache, KVCache, LayerCache
from .checkpoint import Checkpoint, CheckpointError, ConfigMismatchError, load_checkpoint, save_checkpoint
from .common import moved_modules
from .common.versions import warn_if_unsupported as _warn_if_unsupported
from .config import TransformerConfig
from .contracts import (
    Bool,
    Float,
    Int,
    Shaped,
    Tensor,
    TypeCheckError,
    check,
    checked,
    checks,
    checks_enabled,
    set_checks,
)
from .decoder import Decoder, DecoderLayer
from .decoding import BeamResult, beam_search, greedy_decode, greedy_step, next_token_log_probs, sample_decode
from .embeddings import Embeddings, EmbeddingStack, LearnedPositionalEncoding, PositionalEncoding
from .encoder import Encoder, EncoderLayer
from .layers import LayerNorm, PositionwiseFeedForward, SublayerConnection, clones
from .lm import LMCache, LMConfig, LMNextTokens, TransformerLM, beam_generate, build_lm, generate
from .masks import AttentionMask, padding_mask, subsequent_mask, target_mask
from .model import EncoderDecoder, Generator, NextTokens, build_model, make_model
from .training import (
    Batch,
    LabelSmoothing,
    NoamSchedule,
    SimpleLossCompute,
    Trainer,
    TrainerConfig,
    TrainState,
    rate,
    run_epoch,
)

__version__ = "0.1.0"

__all__ = [
    # the model (the Annotated Transformer's classes)
    "TransformerConfig",
    "EncoderDecoder",
    "Encoder",
    "EncoderLayer",
    "Decoder",
    "DecoderLayer",
    "SublayerConnection",
    "LayerNorm",
    "MultiHeadedAttention",
    "PositionwiseFeedForward",
    "Embeddings",
    "EmbeddingStack",
    "PositionalEncoding",
    "LearnedPositionalEncoding",
    "Generator",
    "NextTokens",
    "make_model",
    "build_model",
    "clones",
    # attention: the reference, the drop-in, the backend choice, masks and caches
    "attention",
    "scaled_dot_product_attention",
    "use_backend",
    "current_backend",
    "AttentionMask",
    "subsequent_mask",
    "padding_mask",
    "target_mask",
    "DecoderCache",
    "LayerCache",
    "KVCache",
    # contracts (docs/contracts.md)
    "checks",
    "checks_enabled",
    "set_checks",
    "TypeCheckError",
    "check",
    "checked",
    "Float",
    "Int",
    "Bool",
    "Shaped",
    "Tensor",
    # training and checkpoints
    "Batch",
    "LabelSmoothing",
    "NoamSchedule",
    "SimpleLossCompute",
    "Trainer",
    "TrainerConfig",
    "TrainState",
    "rate",
    "run_epoch",
    "save_checkpoint",
    "load_checkpoint",
    "Checkpoint",
    "CheckpointError",
    "ConfigMismatchError",
    # decoding
    "greedy_decode",
    "greedy_step",
    "next_token_log_probs",
    "sample_decode",
    "beam_search",
    "BeamResult",
    # the decoder-only language model (docs/lm.md)
    "TransformerLM",
    "LMConfig",
    "LMCache",
    "LMNextTokens",
    "build_lm",
    "generate",
    "beam_generate",
]

moved_modules.install()  # the flat layout's module paths (transformer.sdpa, transformer.lm_config, ...) keep working
_warn_if_unsupported()  # one line when the installed torch is older than the supported range
