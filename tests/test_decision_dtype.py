"""Next-token decisions in float32 whatever the model's dtype: a float16 or bfloat16 model's step log-probabilities
are the float32 log-softmax of its logits (as transformers' ``generate`` casts the logits to float32 before
choosing), so greedy decoding, sampling and beam scores tell apart two candidates whose logits differ but whose
log-probabilities would round to a tie in the model's dtype (the lower id won that tie); float32 and float64 models
decide on the very values they did before.

The data is built so the promise matters: the head's weights are zero and its bias puts two candidates a hair
apart (token 3 just below token 7), the rest of the vocabulary flat, so each step's log-probabilities are about
-log(vocab) and the two candidates' round to the same bfloat16 (and float16) number; every test first asserts
that tie.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import transformer as T
from transformer.common.dtypes import decision_dtype
from transformer.decoding import greedy_decode
from transformer.lm import build_lm
from transformer.lm.config import LMConfig
from transformer.lm.generation import beam_generate, generate

VOCAB = 40
LOW, HIGH = 3, 7  # token HIGH's logit is a hair above token LOW's
#: the two logits: distinct in bfloat16 and in float16, their log-softmax (about -3.7) a tie in both
TIED = {torch.bfloat16: (0.0625, 0.0625 + 2**-10), torch.float16: (0.0625, 0.0625 + 2**-11)}
LOW_PRECISION = [torch.bfloat16, torch.float16]


def _tied_model(dtype: torch.dtype):
    """A tiny LM in ``dtype`` whose logits are the same at every position: 0, but LOW's and HIGH's of ``TIED``."""
    torch.manual_seed(0)
    config = LMConfig(
        vocab=VOCAB, n_layers=1, d_model=16, d_ff=32, n_heads=2, max_len=32, dropout=0.0, attention_dropout=0.0,
        lm_head_bias=True, tie_weights=False,
    )  # fmt: skip
    model = build_lm(config).eval()
    with torch.no_grad():
        model.generator.proj.weight.zero_()
        model.generator.proj.bias.zero_()
        model.generator.proj.bias[LOW], model.generator.proj.bias[HIGH] = TIED[dtype]
    return model.to(dtype)


def _logits(model) -> torch.Tensor:
    return model.logits(torch.tensor([[1, 2]]))[0, -1]


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_the_data_ties_in_the_model_dtype_and_not_in_float32(dtype):
    logits = _logits(_tied_model(dtype))
    assert logits.dtype == dtype and logits[HIGH] > logits[LOW]  # distinct logits in the model's dtype
    rounded = F.log_softmax(logits, dim=-1)
    assert rounded[HIGH] == rounded[LOW] and int(rounded.argmax()) == LOW  # the tie the lower id wins
    exact = F.log_softmax(logits.float(), dim=-1)
    assert exact[HIGH] > exact[LOW] and int(exact.argmax()) == HIGH


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_the_step_log_probabilities_of_a_low_precision_model_are_float32(dtype):
    model = _tied_model(dtype)
    ys = torch.tensor([[1, 2], [4, 5]])
    log_probs = model.next_token_log_probs(ys)
    assert log_probs.dtype == torch.float32
    expected = F.log_softmax(model.logits(ys)[:, -1].float(), dim=-1)  # transformers': the logits cast, then chosen
    assert torch.equal(log_probs, expected)
    assert torch.equal(model.next_tokens()(ys), expected)  # the step function of every search, with its cache


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float32_and_float64_models_decide_on_the_values_they_always_did(dtype):
    torch.manual_seed(1)
    model = build_lm(LMConfig(vocab=VOCAB, n_layers=1, d_model=16, d_ff=32, n_heads=2, max_len=32)).eval().to(dtype)
    ys = torch.tensor([[1, 2, 9], [4, 5, 6]])
    log_probs = model.next_token_log_probs(ys)
    assert log_probs.dtype == dtype
    assert torch.equal(log_probs, model.generator(model(ys)[:, -1]))  # what decoding always took, bit for bit
    assert decision_dtype(dtype) == dtype


def test_decision_dtype_is_float32_for_half_precisions_only():
    assert decision_dtype(torch.bfloat16) == decision_dtype(torch.float16) == torch.float32
    assert decision_dtype(torch.float32) == torch.float32 and decision_dtype(torch.float64) == torch.float64


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_greedy_generation_picks_the_higher_of_two_candidates_tied_in_the_model_dtype(dtype):
    model = _tied_model(dtype)
    prompt = torch.tensor([[1, 2], [5, 6]])
    out = generate(model, prompt, 5)
    assert out[:, 2:].eq(HIGH).all(), out  # the lower id would win the rounded tie at every step
    assert generate(model, prompt, 5, use_cache=False)[:, 2:].eq(HIGH).all()


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_sampling_filters_in_float32_top_k_1_and_a_cold_temperature_keep_only_the_higher(dtype):
    """Top-k keeps every token tied with the k-th: on rounded log-probabilities top_k=1 kept both candidates, and a
    temperature near 0 shared the draw between them; over 16 rows and 6 steps one would have drawn the lower."""
    model = _tied_model(dtype)
    prompt = torch.randint(3, VOCAB, (16, 2), generator=torch.Generator().manual_seed(0))
    top1 = generate(model, prompt, 6, sample=True, top_k=1, seed=0)
    assert top1[:, 2:].eq(HIGH).all()
    cold = generate(model, prompt, 6, sample=True, temperature=1e-6, seed=0)
    assert cold[:, 2:].eq(HIGH).all()
    nucleus = generate(model, prompt, 6, sample=True, top_p=1e-3, seed=0)  # the smallest nucleus: the best token
    assert nucleus[:, 2:].eq(HIGH).all()


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_beam_scores_are_float32_log_probabilities(dtype):
    model = _tied_model(dtype)
    prompt = torch.tensor([[1, 2]])
    out, score = beam_generate(model, prompt, 3, beam_size=2)
    assert out[0, 2:].tolist() == [HIGH, HIGH, HIGH]
    step = F.log_softmax(_logits(model).float(), dim=-1)[HIGH].item()
    assert score == pytest.approx(3 * step, abs=1e-6)  # rounded to the dtype, a step is off by up to 1e-2
    assert abs(F.log_softmax(_logits(model), dim=-1)[HIGH].item() - step) > 1e-4


def test_the_encoder_decoder_decides_in_float32_too():
    torch.manual_seed(0)
    model = T.make_model(VOCAB, VOCAB, N=1, d_model=16, d_ff=32, h=2, dropout=0.0).eval()
    with torch.no_grad():
        model.generator.proj.weight.zero_()
        model.generator.proj.bias.zero_()
        model.generator.proj.bias[LOW], model.generator.proj.bias[HIGH] = TIED[torch.bfloat16]
    model = model.to(torch.bfloat16)
    src = torch.tensor([[5, 6, 7, 8]])
    out = greedy_decode(model, src, None, 4, start_symbol=1)
    assert out[0, 1:].eq(HIGH).all()
