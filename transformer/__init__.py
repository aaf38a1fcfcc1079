"""typed-transformer: the Transformer of "Attention Is All You Need" as shape-checked PyTorch modules.

The names follow the Annotated Transformer; every ``forward`` is a checked tensor contract
(see :mod:`transformer.contracts`), and attention can run on a fused Triton kernel
(see :mod:`transformer.attention`).
"""

from .attention import MultiHeadedAttention, attention, scaled_dot_product_attention, use_backend
from .checkpoint import Checkpoint, CheckpointError, ConfigMismatchError, load_checkpoint, save_checkpoint
from .config import TransformerConfig
from .contracts import TypeCheckError, checks, checks_enabled, set_checks
from .decoder import Decoder, DecoderLayer
from .decoding import BeamResult, DecoderCache, beam_search, greedy_decode, greedy_step, next_token_log_probs
from .embeddings import Embeddings, LearnedPositionalEncoding, PositionalEncoding
from .encoder import Encoder, EncoderLayer
from .layers import LayerNorm, PositionwiseFeedForward, SublayerConnection, clones
from .masks import padding_mask, subsequent_mask, target_mask
from .model import EncoderDecoder, Generator, build_model, make_model
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
    "PositionalEncoding",
    "LearnedPositionalEncoding",
    "Generator",
    "make_model",
    "build_model",
    "clones",
    "attention",
    "scaled_dot_product_attention",
    "use_backend",
    "subsequent_mask",
    "padding_mask",
    "target_mask",
    "checks",
    "checks_enabled",
    "set_checks",
    "TypeCheckError",
]

__all__ += [
    "Batch",
    "LabelSmoothing",
    "NoamSchedule",
    "SimpleLossCompute",
    "Trainer",
    "TrainerConfig",
    "TrainState",
    "rate",
    "run_epoch",
    "greedy_decode",
    "greedy_step",
    "next_token_log_probs",
    "beam_search",
    "BeamResult",
    "DecoderCache",
    "save_checkpoint",
    "load_checkpoint",
    "Checkpoint",
    "CheckpointError",
    "ConfigMismatchError",
]
