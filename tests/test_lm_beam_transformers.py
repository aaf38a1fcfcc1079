"""Beam search (``generate(num_beams=K, length_penalty=..., early_stopping=...)``) gives transformers' tokens, token
for token: the seeded fuzzer of ``beam_fuzz`` on its short budget (float32 exactly; bfloat16 and float16 with ties
counted, decisions in float32), every option combination on a model whose rows end at different lengths, a
left-padded batch row by row, and the refusals."""

from __future__ import annotations

import itertools
import os

import pytest
import torch
from beam_fuzz import run_beam_cases
from pretrained_helpers import hf_model, left_padded_batch

from transformer.lm import TransformerLM, generate

transformers = pytest.importorskip("transformers")

BUDGET = int(os.environ.get("TT_FUZZ_BUDGET", "1"))
KINDS = ("llama", "gpt2")  # the short budget: two architectures (the long run by hand draws all seven)


@pytest.mark.parametrize("kind", KINDS)
def test_the_fuzzer_finds_no_disagreement(kind):
    report = run_beam_cases(transformers, range(BUDGET), kinds=(kind,))
    total = report["total"]
    assert not report["disagreeing_seeds"], report
    for dtype in ("float32", "bfloat16", "float16"):
        assert total.get(f"{dtype}_rows_agreed", 0) + total.get(f"{dtype}_rows_tie", 0) >= BUDGET
    assert total.get("float32_rows_tie", 0) == 0


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("beam")
    theirs = hf_model(transformers, "llama", seed=1)
    theirs.save_pretrained(folder)
    return theirs, TransformerLM.from_pretrained(folder).eval()


def test_every_option_gives_transformers_tokens(models):
    theirs, ours = models
    prompts = torch.randint(3, 97, (3, 5), generator=torch.Generator().manual_seed(0))
    ended, lengths = 0, set()
    for row, (k, penalty, stopping) in itertools.product(
        range(3), itertools.product([2, 4], [1.0, 0.0, -0.5, 2.0], [False, True, "never"])
    ):
        prompt = prompts[row : row + 1]
        free = generate(ours, prompt, 12)[0, 5:].tolist()
        ends = [free[3], free[7]] if row % 2 else [free[5]]  # tokens the model writes: hypotheses end
        expected = theirs.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=12,
                                   num_beams=k, do_sample=False, length_penalty=penalty, early_stopping=stopping,
                                   eos_token_id=ends, pad_token_id=0)[0]  # fmt: skip
        got = generate(ours, prompt, 12, num_beams=k, length_penalty=penalty, early_stopping=stopping,
                       end_symbol=ends[0], end_symbols=ends[1:], pad_symbol=0)[0]  # fmt: skip
        assert torch.equal(got[: expected.numel()], expected), (row, k, penalty, stopping)
        assert (got[expected.numel() :] == 0).all()
        ended += expected.numel() < 17
        lengths.add(expected.numel())
    assert ended > 20 and len(lengths) > 3  # hypotheses end at many lengths: the penalty and the stopping rule matter


def test_a_left_padded_batch_is_each_row_alone(models):
    theirs, ours = models
    tokens, mask = left_padded_batch(steps=7, pads=(0, 2, 4))
    got = generate(ours, tokens, 8, attention_mask=mask.long(), num_beams=3, end_symbol=40, pad_symbol=0)
    for row in range(3):
        real = tokens[row][mask[row]][None]
        alone = generate(ours, real, 8, num_beams=3, end_symbol=40, pad_symbol=0)[0]
        expected = theirs.generate(input_ids=real, attention_mask=torch.ones_like(real), max_new_tokens=8,
                                   num_beams=3, do_sample=False, eos_token_id=40, pad_token_id=0)[0]  # fmt: skip
        pads = int((~mask[row]).sum())
        assert torch.equal(got[row, pads:], alone)
        assert torch.equal(alone[: expected.numel()], expected)


def test_beam_options_are_refused_by_name(models):
    _, ours = models
    prompt = torch.tensor([[5, 6, 7]])
    cases = [
        (dict(num_beams=0), "num_beams must be a positive int, got 0"),
        (dict(num_beams=2, early_stopping="yes"), "early_stopping must be True, False or 'never'"),
        (dict(num_beams=2, length_penalty=float("nan")), "length_penalty must be a finite number"),
        (dict(length_penalty=2.0), "length_penalty and early_stopping only apply to beam search; pass num_beams > 1"),
        (dict(num_beams=2, sample=True), r"num_beams=2 \(beam search\) takes no sample=True"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            generate(ours, prompt, 3, **kwargs)
