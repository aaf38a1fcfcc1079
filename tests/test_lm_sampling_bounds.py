"""Edge values of two documented bounds (blind review of issue 31: both survived every test).

* ``sampler``'s docstring: the draw is "cut to the top k" -- for EVERY k from 1 to past the vocabulary, on
  probabilities with no ties, exactly the k most probable tokens can be drawn (k = vocab - 1 drops exactly the least
  probable one; k >= vocab keeps all).
* ``TransformerLM.forward(positions=...)``: positions must lie in [0, max_len) -- max_len - 1 is accepted, max_len
  and -1 are one ValueError naming the range, with every positional scheme.
"""

from __future__ import annotations

import pytest
import torch

from transformer.decoding.sampling import sampler
from transformer.lm import LMConfig, build_lm

PROBS = torch.tensor([0.10, 0.30, 0.05, 0.25, 0.20, 0.10 - 1e-3, 1e-3 + 0.0])  # distinct, unsorted
ORDER = PROBS.argsort(descending=True).tolist()


@pytest.mark.parametrize("top_k", range(1, len(PROBS) + 2))
def test_top_k_draws_exactly_the_k_most_probable_tokens_for_every_k(top_k):
    assert len(set(PROBS.tolist())) == len(PROBS)
    pick = sampler(1.0, top_k, None, torch.Generator().manual_seed(top_k))
    log_probs = PROBS.log().expand(6000, -1)
    drawn = set(pick(log_probs).tolist())
    assert drawn == set(ORDER[:top_k])


@pytest.mark.parametrize("scheme", ["sinusoidal", "learned", "rotary", "none"])
def test_positions_must_lie_in_zero_to_max_len(scheme):
    cfg = LMConfig(vocab=11, n_layers=1, d_model=8, d_ff=8, n_heads=2, max_len=6, positional_encoding=scheme)
    model = build_lm(cfg).eval()
    tokens = torch.tensor([[1, 2, 3]])
    last = torch.tensor([[3, 4, 5]])  # up to max_len - 1: accepted
    assert model(tokens, positions=last).shape == (1, 3, 8)
    for bad, shown in ((torch.tensor([[4, 5, 6]]), "from 4 to 6"), (torch.tensor([[-1, 0, 1]]), "from -1 to 1")):
        with pytest.raises(ValueError, match=rf"'positions' must lie in \[0, max_len=6\), got values {shown}"):
            model(tokens, positions=bad)
