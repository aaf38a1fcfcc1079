"""Writes the checkpoints that tests/test_lm_checkpoint_compat.py loads: tiny models saved with the code of main at
commit adf3efd (the package layout's first commit), and the outputs they gave then.

Run once with that code (``python tests/data/checkpoints/make_checkpoints.py``, from a checkout at adf3efd); the
files it writes are committed. Rerunning it with later code would only prove that code agrees with itself.
"""

from __future__ import annotations

import os
import sys

import torch
from safetensors.torch import save_file

import transformer as T
from transformer.lm import build_lm
from transformer.lm.config import LMConfig

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENS = torch.tensor([[1, 5, 3, 8, 2, 7], [4, 4, 9, 1, 6, 0]])


def models() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    lm = build_lm(
        LMConfig(
            vocab=11,
            n_layers=2,
            d_model=8,
            d_ff=12,
            n_heads=4,
            n_kv_heads=2,
            max_len=8,
            positional_encoding="learned",
            dropout=0.0,
            attention_dropout=0.0,
        )
    )
    functional = build_lm(LMConfig.functional(11, n_layers=2, d_model=8, d_ff=12, n_heads=2, max_len=8))
    encoder_decoder = T.make_model(
        T.TransformerConfig(
            src_vocab=11,
            tgt_vocab=11,
            n_encoder_layers=1,
            n_decoder_layers=2,
            d_model=8,
            d_ff=12,
            n_heads=2,
            dropout=0.0,
            attention_dropout=0.0,
            max_len=8,
        )
    )
    return {"lm": lm, "lm_functional": functional, "encoder_decoder": encoder_decoder}


def outputs(name: str, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What each model gives on TOKENS, on the eager reference (the numbers least likely to move)."""
    model.eval()
    with torch.no_grad(), T.use_backend("eager"):
        if name == "encoder_decoder":
            src_mask, tgt_mask = T.padding_mask(TOKENS, 0), T.target_mask(TOKENS, 0)
            hidden = model(TOKENS, TOKENS, src_mask, tgt_mask)
        else:
            hidden = model(TOKENS)
        return {"hidden": hidden.contiguous(), "log_probs": model.generator(hidden).contiguous()}


def main() -> None:
    for name, model in models().items():
        T.save_checkpoint(os.path.join(HERE, name), model)
        save_file(outputs(name, model), os.path.join(HERE, f"{name}.expected.safetensors"))
    print("wrote", ", ".join(models()), "into", HERE, file=sys.stderr)


if __name__ == "__main__":
    main()
