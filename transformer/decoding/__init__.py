"""Decoding as search over one step function: greedy (exact length), sampling, beam search; one concept per module,
import everything from here.

A step function ``steps(ys) -> log_probs`` gives the log-probabilities (batch, vocab) of the token after the
tokens ``ys`` (batch, t), and ``steps.reorder(index)`` keeps the batch rows ``index``. The model supplies it
(:meth:`EncoderDecoder.next_tokens`, with the modules' own key/value cache, or a full recompute with
``use_cache=False``); this package only searches. (The decoder *module*, the stack of decoder layers, is
:mod:`transformer.decoder`.)

* :mod:`~transformer.decoding.steps`: the step function's protocol and :class:`CheckedSteps`, the step-check policy.
* :mod:`~transformer.decoding.requests`: validating a request (lengths, token ids, padding, sampling and beam
  options), shared by the encoder-decoder's searches and the language model's generation.
* :mod:`~transformer.decoding.greedy`: the search loop :func:`search`, :func:`greedy_step`, :func:`greedy_decode`.
* :mod:`~transformer.decoding.sampling`: :func:`sampler` (temperature, top-k, top-p), the distribution it draws
  from (:func:`sampling_probabilities`), :func:`seeded_generator`, :func:`sample_decode`.
* :mod:`~transformer.decoding.beam`: :func:`beam_search_steps`, :func:`beam_search`.
* :mod:`~transformer.decoding.beam_transformers`: :func:`transformers_beam_search`, transformers' beam search
  (its length penalty and ``early_stopping``), decision for decision.
* :mod:`~transformer.decoding.stop_strings`: :class:`StopStrings` (a row ends once its text holds a string, as
  transformers' ``stop_strings``) and :func:`token_bytes`, each token's bytes.
* :mod:`~transformer.decoding.streaming`: :class:`TextStreamer`, the text of a generation given out as it comes, at
  valid UTF-8 boundaries (transformers' ``TextStreamer``).

Every search grows ``ys`` one token per step from ``start_symbol``. The result has exactly ``max_len``
columns (start symbol included, as in the Annotated Transformer): with an ``end_symbol``, positions after a
row's end symbol hold ``pad_symbol``, never cut. :func:`greedy_step` states the one-token-per-step contract:
``(batch, steps) -> (batch, steps+1)``, checked by jaxtyping while checks are on and by a ValueError always.

Every search takes ``checks``, which steps run with the model's contracts checked (:class:`CheckedSteps`):
``"first"`` (the default) checks the first two steps (the prompt into an empty cache, then the first one-token step)
and every step whose batch differs from the step before, and runs the rest unchecked; ``"always"`` checks every
step; ``"never"`` none. A step after the second differs from it only in the number of positions attended, so
``"first"`` names a wrong shape that shows at every step exactly as ``"always"`` does, and spends the checks once per
search instead of once per token; a fault that appears only at some later length needs ``"always"``. The policy only
switches checks off: under ``checks(False)`` nothing is checked. The guards (token ids, lengths, the cache's
bookkeeping) run at every step whatever it says.
"""

from ..cache import DecoderCache
from .beam import BeamResult, beam_search, beam_search_steps, length_penalty_factor
from .beam_transformers import EARLY_STOPPING, transformers_beam_search
from .greedy import (
    append_token,
    encode_and_search,
    full_batch_mask,
    greedy_decode,
    greedy_step,
    next_token_log_probs,
    search,
    start_tokens,
)
from .requests import (
    GenerationRequest,
    SearchRequest,
    default_pad_symbol,
    validate_beam,
    validate_end_symbols,
    validate_generation,
    validate_max_len,
    validate_sampling,
    validate_search,
    validate_token_id,
    validate_transformers_beam,
)
from .sampling import TOP_P_SLACK, sample_decode, sampler, sampling_probabilities, seeded_generator
from .steps import STEP_CHECKS, CheckedSteps, StepFunction, validate_step_checks
from .stop_strings import StopStrings, token_bytes
from .streaming import TextStreamer

__all__ = [
    "TextStreamer",
    "transformers_beam_search",
    "EARLY_STOPPING",
    "validate_transformers_beam",
    "StopStrings",
    "token_bytes",
    "StepFunction",
    "greedy_decode",
    "greedy_step",
    "next_token_log_probs",
    "sample_decode",
    "beam_search",
    "BeamResult",
    "DecoderCache",
    "search",
    "beam_search_steps",
    "sampler",
    "sampling_probabilities",
    "CheckedSteps",
    "STEP_CHECKS",
    "validate_step_checks",
    "validate_sampling",
    "validate_beam",
    "seeded_generator",
    "TOP_P_SLACK",
    "SearchRequest",
    "validate_search",
    "GenerationRequest",
    "validate_generation",
    "validate_end_symbols",
    "validate_max_len",
    "validate_token_id",
    "default_pad_symbol",
    "append_token",
    "encode_and_search",
    "start_tokens",
    "full_batch_mask",
    "length_penalty_factor",
]
