"""Sampling the next token: temperature, top-k and the top-p nucleus (Holtzman et al. 2020), from seeded draws.

:func:`sampler` gives the ``pick`` of :func:`~transformer.decoding.greedy.search` that draws each next token;
:func:`seeded_generator` is where the draws come from, so a seed reproduces an output; :func:`sample_decode` samples
from an encoder-decoder (the language model's ``generate(sample=True)`` uses the same ``sampler``).
"""

from __future__ import annotations

import torch
from torch import nn

from ..contracts import Bool, Int, Tensor, checked
from ..masks import AttentionMask
from .greedy import encode_and_search
from .requests import validate_sampling, validate_search

__all__ = ["TOP_P_SLACK", "sampler", "sampling_probabilities", "seeded_generator", "sample_decode"]

# Where the nucleus is cut: a prefix whose mass falls short of top_p by less than this counts as reaching it. The
# model's log-probabilities are float32 (relative error about 6e-8), so a nucleus exactly at top_p (top_p=0.75 over
# probabilities 0.5, 0.25, ...) must not depend on which way the rounding went.
TOP_P_SLACK = 1e-6


def sampler(
    temperature: float, top_k: int | None, top_p: float | None, generator: torch.Generator, *, who: str = "sampler"
):
    """``pick(log_probs)``: a token drawn from softmax(log_probs / temperature), cut to the top k and the top-p nucleus
    (the ``pick`` of :func:`search`; :func:`sample_decode` and the language model's ``generate`` use it).

    The tempered logits are computed in float64 from each row's best token (``(log_probs - max) / temperature``), so
    no temperature overflows: as it tends to 0 the draw becomes the most probable token (greedy decoding; tokens tied
    with it share the draw). Tokens tied with the k-th most probable are all kept. Log-probabilities that are NaN or
    +inf (a diverged model) raise ValueError naming the row."""
    validate_sampling(who, temperature, top_k, top_p)

    def pick(log_probs: Tensor) -> Tensor:
        probs = sampling_probabilities(log_probs, temperature, top_k, top_p).cpu()
        broken = probs.isnan().any(-1)
        if bool(broken.any()):
            row = int(broken.nonzero()[0, 0])
            raise ValueError(
                f"{who}: the next-token log-probabilities of row {row} are NaN, +inf or all -inf; "
                f"there is nothing to sample from (a diverged model?): {log_probs[row, :8].tolist()}..."
            )
        return torch.multinomial(probs, 1, generator=generator).squeeze(1).to(log_probs.device)

    return pick


def sampling_probabilities(log_probs: Tensor, temperature: float, top_k: int | None, top_p: float | None) -> Tensor:
    """The distribution (float64, rows of ``log_probs``' shape) :func:`sampler` draws each next token from:
    softmax(log_probs / ``temperature``) cut to the ``top_k`` most probable (ties with the k-th kept) and to the
    smallest prefix whose mass reaches ``top_p`` (within :data:`TOP_P_SLACK`), renormalised; what transformers'
    ``TemperatureLogitsWarper``, ``TopKLogitsWarper`` and ``TopPLogitsWarper`` give, in that order, on the same
    scores. Arguments are not validated here (:func:`sampler` does)."""
    logits = log_probs.detach().to(torch.float64)
    logits = (logits - logits.amax(-1, keepdim=True)) / temperature  # the row's best token at 0, the rest <= 0
    if top_k is not None and top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(-1) - sorted_probs  # the mass of the more probable tokens
        drop_sorted = before >= top_p - TOP_P_SLACK  # keep the smallest prefix whose mass reaches top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits.softmax(-1)


def seeded_generator(seed: int | torch.Generator | None, who: str = "seeded_generator") -> torch.Generator:
    """The draws' source: ``seed`` itself (a generator, whose stream each call continues), a new generator seeded
    with it (an int from -2**63 to 2**64 - 1, what ``torch.Generator.manual_seed`` takes), or one seeded from torch's
    default generator (None). Anything else (a bool, a float, an int out of range) raises ValueError naming ``who``'s
    argument ``seed`` and the value."""
    if isinstance(seed, torch.Generator):
        return seed
    generator = torch.Generator()
    if isinstance(seed, int) and not isinstance(seed, bool) and -(2**63) <= seed < 2**64:
        generator.manual_seed(seed)
    elif seed is None:
        generator.manual_seed(int(torch.randint(0, 2**62, (1,))))
    else:
        raise ValueError(
            f"{who}: argument 'seed' must be an int from -2**63 to 2**64 - 1, a torch.Generator or None, got {seed!r}"
        )
    return generator


@checked
def sample_decode(
    model: nn.Module,
    src: Int[Tensor, "batch src_len"],
    src_mask: Bool[Tensor, "#batch 1 src_len"] | AttentionMask | None,
    max_len: int,
    start_symbol: int,
    end_symbol: int | None = None,
    pad_symbol: int | None = None,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | torch.Generator | None = None,
    use_cache: bool = True,
    checks: str = "first",
) -> Int[Tensor, "batch {max_len}"]:
    """Sampling: each token is drawn from softmax(log_probs / ``temperature``), restricted to the ``top_k`` most
    probable tokens and to the smallest set whose probability reaches ``top_p`` (nucleus sampling, Holtzman et
    al. 2020), then renormalised. The draws come from a ``torch.Generator`` seeded by ``seed`` (an int, a generator,
    or None: torch's default seed), so a seed reproduces the output. Length, padding and ``checks`` as
    :func:`greedy_decode`.
    """
    request = validate_search(model, "sample_decode", src, max_len, start_symbol, end_symbol, pad_symbol, checks)
    pick = sampler(temperature, top_k, top_p, seeded_generator(seed, "sample_decode"), who="sample_decode")
    return encode_and_search(model, src, src_mask, request, pick, use_cache)
