"""Example inputs and ranges for a model of the package, as ``typed-transformer prove CHECKPOINT_DIR`` proves a
checkpoint's model: every batch from 1 to 64 and every length from 1 to the model's ``max_len`` (at most 512)."""

from __future__ import annotations

import torch
from torch import nn

from ..masks import subsequent_mask

#: the longest length a checkpoint's proof covers by default (the model's max_len when shorter)
LONGEST = 512


def examples_for(model: nn.Module) -> dict:
    """``{"target", "args", "sizes"}`` for a :class:`~transformer.lm.model.TransformerLM` or an
    :class:`~transformer.model.EncoderDecoder` (as a prove factory returns them); ``ValueError`` for another."""
    from ..lm.model import TransformerLM
    from ..model import EncoderDecoder

    config = getattr(model, "config", None)
    if isinstance(model, TransformerLM):
        longest = min(model.max_len, LONGEST)
        length = min(8, longest)
        tokens = torch.randint(0, config.vocab, (2, length))
        return {"target": model, "args": (tokens,), "sizes": {"batch": (1, 64), "seq": (1, longest)}}
    if isinstance(model, EncoderDecoder):
        longest = min(config.max_len, LONGEST)
        src_len, tgt_len = min(7, longest), min(6, longest)
        args = (
            torch.randint(0, config.src_vocab, (2, src_len)),
            torch.randint(0, config.tgt_vocab, (2, tgt_len)),
            torch.ones(2, 1, src_len, dtype=torch.bool),
            subsequent_mask(tgt_len).expand(2, tgt_len, tgt_len).contiguous(),
        )
        sizes = {"batch": (1, 64), "src_len": (1, longest), "tgt_len": (1, longest)}
        return {"target": model, "args": args, "sizes": sizes}
    raise ValueError(f"a checkpoint of a {type(model).__name__} has no example inputs to prove with")
