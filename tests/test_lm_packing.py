"""Packed rows in the language model (issue 29, section 3): several documents in one row, given as
``AttentionMask(documents=...)`` (or ``from_cu_seqlens`` / ``from_position_ids``), compute what the documents compute
alone: the loss and every parameter's gradient equal the sum over the documents run one by one (float64, 1e-10), for
learned, sinusoidal and rotary positions, with and without a sliding window, with grouped-query attention, a document
of length 1 and documents ending exactly at the row's end. The comparisons can fail: without the documents, or with
positions that do not restart, they differ."""

from __future__ import annotations

import pytest
import torch

import transformer as T
from transformer.lm import LMConfig, build_lm
from transformer.lm.positions import positions_from_documents

VOCAB = 23
# row 0: documents of 4, 1 (length 1 mid-row), 5; row 1: 7, 2, 1 (length 1 ending exactly at the row's end)
LENGTHS = [[4, 1, 5], [7, 2, 1]]


def _model(positional: str, window: int | None, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = LMConfig(
        vocab=VOCAB, n_layers=2, d_model=16, d_ff=24, n_heads=4, n_kv_heads=2, positional_encoding=positional,
        sliding_window=window, max_len=16, dropout=0.0, attention_dropout=0.0, pad_id=0,
    )  # fmt: skip
    model = build_lm(config).double()
    if positional == "learned":  # a table that is not zero at the start, so every position shows
        with torch.no_grad():
            model.embed[1].pe.normal_()
    return model


def _documents(lengths: list[list[int]]) -> torch.Tensor:
    return torch.stack([torch.repeat_interleave(torch.arange(len(row)), torch.tensor(row)) for row in lengths])


def _tokens(seed: int = 1) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randint(1, VOCAB, (len(LENGTHS), sum(LENGTHS[0])))


def _next_token_loss(log_probs: torch.Tensor, tokens: torch.Tensor, documents: torch.Tensor) -> torch.Tensor:
    """Summed -log p of every next token that lies in the same document (a document's first token is never a
    label, as when it runs alone)."""
    same = documents[:, 1:] == documents[:, :-1]
    picked = log_probs[:, :-1].gather(-1, tokens[:, 1:, None])[..., 0]
    return -(picked * same).sum()


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return grads


def _alone_loss(model, tokens, lengths_of_rows=LENGTHS) -> torch.Tensor:
    """The summed loss of every document (``lengths_of_rows``: each row's document lengths) run on its own, from
    position 0 (tests/test_pretrained_every_architecture.py uses it too)."""
    alone = torch.zeros((), dtype=torch.float64)
    for row, lengths in enumerate(lengths_of_rows):
        start = 0
        for n in lengths:
            doc = tokens[row : row + 1, start : start + n]
            alone = alone + _next_token_loss(model.generator(model(doc)), doc, torch.zeros_like(doc))
            start += n
    return alone


def _packed_and_alone(model, tokens, documents, mask):
    packed = _next_token_loss(model.generator(model(tokens, mask)), tokens, documents)
    packed.backward()
    packed_grads = _grads(model)
    alone = _alone_loss(model, tokens)
    alone.backward()
    return packed, packed_grads, alone, _grads(model)


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rotary"])
def test_a_packed_batch_has_the_loss_and_gradients_of_its_documents_alone(positional, window):
    model, tokens, documents = _model(positional, window), _tokens(), _documents(LENGTHS)
    packed, packed_grads, alone, alone_grads = _packed_and_alone(
        model, tokens, documents, T.AttentionMask(documents=documents)
    )
    torch.testing.assert_close(packed, alone, rtol=1e-10, atol=1e-10)
    assert packed_grads.keys() == alone_grads.keys() == {n for n, p in model.named_parameters() if p.requires_grad}
    for name, grad in packed_grads.items():
        torch.testing.assert_close(grad, alone_grads[name], rtol=1e-10, atol=1e-10, msg=name)


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rotary"])
def test_the_comparison_fails_without_documents_or_without_restarting_positions(positional):
    """Causal attention across documents, or the caller's positions 0..seq-1 (kept as given), change the loss. RoPE
    is relative (scores depend on p(i) - p(j) only), so for rotary positions not restarting changes only the rounding
    (about 1e-8 here): its documents-alone comparison rests on the mask."""
    model, tokens, documents = _model(positional, None), _tokens(), _documents(LENGTHS)
    slots = torch.arange(tokens.size(1)).expand_as(tokens)
    with torch.no_grad():
        alone = _alone_loss(model, tokens)
        leaky = _next_token_loss(model.generator(model(tokens)), tokens, documents)
        unrestarted = model(tokens, T.AttentionMask(documents=documents), positions=slots)
        unrestarted = _next_token_loss(model.generator(unrestarted), tokens, documents)
    assert abs(leaky - alone) > 1e-3
    if positional != "rotary":
        assert abs(unrestarted - alone) > 1e-3
    else:
        assert abs(unrestarted - alone) < 1e-6


def test_positions_restart_at_every_document():
    documents = torch.tensor([[0, 0, 1, 2, 2, 2], [5, 5, 5, 5, 5, 5]])
    expected = torch.tensor([[0, 1, 0, 0, 1, 2], [0, 1, 2, 3, 4, 5]])
    assert torch.equal(positions_from_documents(documents), expected)


def test_cu_seqlens_and_position_ids_give_the_same_packed_row():
    model, tokens = _model("rotary", 4), _tokens()[:1]
    documents = _documents(LENGTHS[:1])
    by_ids = model(tokens, T.AttentionMask(documents=documents))
    by_cu = model(tokens, T.AttentionMask.from_cu_seqlens(torch.tensor([0, 4, 5, 10]), 10))
    by_positions = model(tokens, T.AttentionMask.from_position_ids(positions_from_documents(documents)))
    torch.testing.assert_close(by_cu, by_ids, rtol=0, atol=0)
    torch.testing.assert_close(by_positions, by_ids, rtol=0, atol=0)


def test_the_tighter_window_of_the_model_and_the_mask_applies():
    """A mask's own window_left is kept when it is tighter than the model's sliding window (and vice versa)."""
    tokens = _tokens()
    narrow, wide = _model("rotary", 2), _model("rotary", 6)
    wide_with_narrow_mask = wide(tokens, T.AttentionMask(window_left=1))
    with T.use_backend("eager"):
        reference = wide(tokens, T.AttentionMask(dense=torch.ones(1, 10, 10, dtype=torch.bool).tril(0).triu(-1)))
    torch.testing.assert_close(wide_with_narrow_mask, reference, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(narrow(tokens, T.AttentionMask(window_left=4)), narrow(tokens), rtol=0, atol=0)


def test_documents_of_another_shape_or_with_padding_are_refused_by_name():
    model, tokens = _model("learned", None), _tokens()
    with pytest.raises(ValueError, match=r"'mask.documents' must be \(batch, seq\) = \(2, 10\).*got shape \(1, 10\)"):
        model(tokens, T.AttentionMask(documents=torch.zeros(1, 10, dtype=torch.long)))
    both = T.AttentionMask(documents=_documents(LENGTHS), key_mask=torch.ones(2, 10, dtype=torch.bool))
    with pytest.raises(ValueError, match="both documents and padding.*pass positions= explicitly"):
        model(tokens, both)
