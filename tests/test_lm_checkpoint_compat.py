"""Checkpoints written before the package layout load after it, and their models compute what they did then.

``tests/data/checkpoints/`` holds three tiny models (a grouped-query LM, the functional-transformer LM with its
per-head values and ``std`` norm, and an encoder-decoder) saved with ``transformer.save_checkpoint`` by the code of
main at commit adf3efd, with the outputs they gave on fixed tokens (``make_checkpoints.py`` wrote them). A refactor
that moves a parameter (``layers.0.sublayer.0.norm.weight``...) or changes what a module computes fails here.
"""

from __future__ import annotations

import os

import pytest
import torch
from safetensors.torch import load_file

import transformer as T
from transformer.checkpoint import load_checkpoint
from transformer.lm import TransformerLM

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "checkpoints")
TOKENS = torch.tensor([[1, 5, 3, 8, 2, 7], [4, 4, 9, 1, 6, 0]])  # as make_checkpoints.py
KINDS = {"lm": TransformerLM, "lm_functional": TransformerLM, "encoder_decoder": T.EncoderDecoder}


def _outputs(name: str, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    model.eval()
    with torch.no_grad(), T.use_backend("eager"):
        if name == "encoder_decoder":
            hidden = model(TOKENS, TOKENS, T.padding_mask(TOKENS, 0), T.target_mask(TOKENS, 0))
        else:
            hidden = model(TOKENS)
        return {"hidden": hidden, "log_probs": model.generator(hidden)}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_a_checkpoint_written_before_the_layout_loads_and_gives_the_recorded_outputs(name):
    loaded = load_checkpoint(os.path.join(HERE, name))
    assert isinstance(loaded.model, KINDS[name])
    stored = load_file(os.path.join(HERE, name, "model.safetensors"))
    own = loaded.model.state_dict()
    assert set(stored) <= set(own)  # the parameter names of then are today's
    stored_storage = {own[key].data_ptr() for key in stored}
    assert all(tensor.data_ptr() in stored_storage for tensor in own.values())  # the rest are tied weights, stored once
    expected = load_file(os.path.join(HERE, f"{name}.expected.safetensors"))
    got = _outputs(name, loaded.model)
    for key in ("hidden", "log_probs"):
        torch.testing.assert_close(got[key], expected[key], rtol=1e-6, atol=1e-6)
