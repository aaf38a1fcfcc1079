"""AttentionMask: the structured mask equals its dense form, every backend computes the same function from either,
and each backend receives the most structured form it supports (no dense mask for the kernel of a Batch-fed model)."""

import re

import pytest
import torch

import transformer as T
from transformer.backends import torch_backend
from transformer.lm import build_lm
from transformer.lm.config import LMConfig
from transformer.training.batch import Batch

BACKENDS = ["eager", "torch", "triton"]  # triton: Triton's interpreter on the CPU (tests/conftest.py)


def _tokens(rows, width, pad=0, seed=0, vocab=11):
    """Token rows of the given real lengths, padded at the end with ``pad``."""
    g = torch.Generator().manual_seed(seed)
    out = torch.randint(1, vocab, (len(rows), width), generator=g)
    for i, n in enumerate(rows):
        out[i, n:] = pad
    return out


# ---------------------------------------------------------------- the mask itself
def test_padding_mask_at_the_end_becomes_key_lengths_else_a_key_mask():
    tail = _tokens([5, 3, 7], 7)
    m = T.AttentionMask.padding(tail, 0)
    assert m.key_mask is None and m.key_lengths.tolist() == [5, 3, 7] and not m.causal
    assert torch.equal(m.to_dense(4, 7).expand(3, 4, 7), T.padding_mask(tail, 0).expand(3, 4, 7))
    holes = tail.clone()
    holes[1, 0] = 0  # a pad before a real token: lengths cannot describe it
    m = T.AttentionMask.padding(holes, 0)
    assert m.key_lengths is None and torch.equal(m.key_mask, holes != 0)
    assert torch.equal(m.to_dense(4, 7).expand(3, 4, 7), T.padding_mask(holes, 0).expand(3, 4, 7))
    assert T.AttentionMask.padding(holes, None).is_empty()


@pytest.mark.parametrize("pad_rows", [[5, 2, 6], [6, 6, 6]])
def test_target_mask_in_structured_form_equals_target_mask(pad_rows):
    tgt = _tokens(pad_rows, 6)
    m = T.AttentionMask.target(tgt, 0)
    assert m.causal and m.dense is None and m.key_lengths.tolist() == pad_rows == m.query_lengths.tolist()
    assert torch.equal(m.to_dense(6, 6).expand(3, 6, 6), T.target_mask(tgt, 0))
    holes = tgt.clone()
    holes[0, 1] = 0
    assert torch.equal(T.AttentionMask.target(holes, 0).to_dense(6, 6), T.target_mask(holes, 0))
    no_pad = T.AttentionMask.target(tgt, None)
    assert no_pad.causal and not no_pad.tensors()
    assert torch.equal(no_pad.to_dense(6, 6).expand(3, 6, 6), T.target_mask(tgt, None))


def test_to_dense_of_each_part_is_its_definition():
    lengths = torch.tensor([2, 0])
    assert T.AttentionMask().to_dense(3, 4) is None
    causal = T.AttentionMask(causal=True).to_dense(3, 4)[0]
    assert causal.tolist() == [[j <= i for j in range(4)] for i in range(3)]  # top-left aligned
    keys = T.AttentionMask(key_lengths=lengths).to_dense(3, 4)
    assert keys.expand(2, 3, 4)[:, 0].tolist() == [[True, True, False, False], [False] * 4]
    queries = T.AttentionMask(query_lengths=lengths).to_dense(3, 4).expand(2, 3, 4)
    assert queries[0, :, 0].tolist() == [True, True, False] and not queries[1].any()
    dense = torch.rand(2, 3, 4) > 0.5
    both = T.AttentionMask(causal=True, key_lengths=lengths, dense=dense).to_dense(3, 4)
    assert torch.equal(both, causal & keys & dense)


def test_malformed_parts_are_refused_with_the_field_named():
    with pytest.raises(ValueError, match=r"key_lengths must be an integer tensor of shape \(batch,\), got f32\[2\]"):
        T.AttentionMask(key_lengths=torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"key_mask must be a bool tensor with 2 dims, got i64\[2,3\]"):
        T.AttentionMask(key_mask=torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="not both"):
        T.AttentionMask(key_lengths=torch.tensor([1]), key_mask=torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="causal must be a bool"):
        T.AttentionMask(causal=1)


@pytest.mark.parametrize("part", ["key_lengths", "query_lengths"])
def test_lengths_must_be_integers_and_never_negative(part):
    for lengths, shown in (
        (torch.tensor([1.0, 2.0]), "f32[2]"),
        (torch.tensor([1, 2]).to(torch.complex64), "complex64[2]"),
        (torch.tensor([True, False]), "bool[2]"),
        (torch.tensor([[1, 2]]), "i64[1,2]"),
    ):
        with pytest.raises(
            ValueError,
            match=rf"AttentionMask: {part} must be an integer tensor of shape \(batch,\), "
            rf"got {re.escape(shown)}",
        ):
            T.AttentionMask(**{part: lengths})
    for lengths, low, row in ((torch.tensor([-3]), -3, 0), (torch.tensor([4, -1, -2], dtype=torch.int32), -2, 1)):
        with pytest.raises(
            ValueError,
            match=rf"AttentionMask: {part} must be >= 0, got {low} in batch row {row} "
            rf"\({part}={re.escape(str(lengths.tolist()))}\)",
        ):
            T.AttentionMask(**{part: lengths})
    for dtype in (torch.int64, torch.int32, torch.int16, torch.uint8):
        T.AttentionMask(**{part: torch.tensor([0, 3], dtype=dtype)})  # every integer dtype, 0 included
    T.AttentionMask(**{part: torch.tensor([-3], device="meta")})  # off the host, the values are not read (no sync)


@pytest.mark.parametrize("checks_on", [True, False])
def test_lengths_longer_than_the_attention_are_refused_and_the_full_length_is_not(checks_on):
    """key_lengths up to k_len (here 7, the memory) and query_lengths up to q_len (4) are allowed, one more is refused:
    a guard (checks on or off), whichever module or model the mask reaches. Row 1 keeps 0 keys: zeros, by definition."""
    mha = T.MultiHeadedAttention(2, 32, dropout=0.0).eval()
    x, memory = torch.randn(2, 4, 32), torch.randn(2, 7, 32)
    with T.checks(checks_on):
        full = mha(
            x, memory, memory, T.AttentionMask(key_lengths=torch.tensor([7, 0]), query_lengths=torch.tensor([4, 4]))
        )
        torch.testing.assert_close(full[0], mha(x, memory, memory)[0])
        torch.testing.assert_close(full[1], mha.out_proj.bias.expand(4, 32))  # no key: zero attention, then W^O
        with pytest.raises(
            ValueError,
            match=re.escape(
                "AttentionMask: key_lengths holds 8 in batch row 1, more than the "
                "7 positions attended (k_len=7; key_lengths=[7, 8])"
            ),
        ):
            mha(x, memory, memory, T.AttentionMask(key_lengths=torch.tensor([7, 8])))
        with pytest.raises(
            ValueError,
            match=re.escape(
                "AttentionMask: query_lengths holds 5 in batch row 0, more than "
                "the 4 positions attended (q_len=4; query_lengths=[5, 2])"
            ),
        ):
            mha(x, memory, memory, T.AttentionMask(query_lengths=torch.tensor([5, 2])))
        lm = build_lm(LMConfig(vocab=11, n_layers=1, d_model=16, d_ff=16, n_heads=2, max_len=20)).eval()
        mask = T.AttentionMask(key_lengths=torch.tensor([3, 6]), query_lengths=torch.tensor([3, 5]))
        with pytest.raises(ValueError, match="key_lengths holds 6 in batch row 1, more than the 5 positions"):
            lm(torch.ones(2, 5, dtype=torch.long), mask)  # survives mask.replace(causal=True) inside the model


@pytest.mark.parametrize(
    "part, value, expected",
    [
        (
            "key_mask",
            torch.ones(2, 6, dtype=torch.bool),
            "argument 'mask.key_mask' is bool[2,6], expected Bool[Tensor, 'batch k_len'] "
            "with batch=2, q_len=4, k_len=7",
        ),
        (
            "key_lengths",
            torch.tensor([1, 2, 3]),
            "argument 'mask.key_lengths' is i64[3], expected Int[Tensor, 'batch'] with batch=2, q_len=4, k_len=7",
        ),
        (
            "dense",
            torch.ones(2, 3, 7, dtype=torch.bool),
            "argument 'mask.dense' is bool[2,3,7], expected Bool[Tensor, '#batch #q_len k_len'] "
            "with batch=2, q_len=4, k_len=7",
        ),
    ],
)
@pytest.mark.parametrize("checks_on", [True, False])
def test_a_part_that_does_not_fit_the_attention_is_a_contract_error(part, value, expected, checks_on):
    mha = T.MultiHeadedAttention(2, 32, dropout=0.0).eval()
    x, memory = torch.randn(2, 4, 32), torch.randn(2, 7, 32)
    mask = T.AttentionMask(**{part: value})
    with T.checks(checks_on):
        if checks_on:
            with pytest.raises(T.TypeCheckError) as info:
                mha(x, memory, memory, mask)
            assert str(info.value) == "MultiHeadedAttention.forward > MultiHeadedAttention.attend > " + expected
        else:  # unchecked (a switch-off contract): torch's own error or broadcasting, never our message
            try:
                mha(x, memory, memory, mask)
            except T.TypeCheckError:  # pragma: no cover - the failure this branch guards against
                pytest.fail("a contract was checked with checks off")
            except RuntimeError:
                pass


def test_index_select_follows_beam_rows_and_keeps_a_broadcast_batch():
    m = T.AttentionMask(causal=True, key_lengths=torch.tensor([3, 5]), dense=torch.ones(1, 2, 6, dtype=torch.bool))
    picked = m.index_select(torch.tensor([1, 1, 0]))
    assert picked.key_lengths.tolist() == [5, 5, 3] and picked.dense.shape == (1, 2, 6) and picked.causal


# ---------------------------------------------------------------- every backend, structured vs dense
def _model(**changes):
    torch.manual_seed(0)
    return T.make_model(11, 13, N=2, d_model=32, d_ff=64, h=2, dropout=0.0, **changes)


def _loss_and_grads(model, src, tgt, src_mask, tgt_mask):
    model.zero_grad()
    out = model(src, tgt, src_mask, tgt_mask)
    out.pow(2).sum().backward()
    return out.detach(), [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("holes", [False, True], ids=["padding-at-the-end", "padding-inside"])
def test_structured_and_dense_masks_give_the_same_outputs_and_gradients(backend, holes):
    model = _model()
    src, tgt = _tokens([7, 4, 6], 7), _tokens([5, 2, 5], 5, seed=1, vocab=13)
    if holes:
        src[0, 2], tgt[2, 1] = 0, 0
    batch = Batch(src, torch.cat([torch.ones(3, 1, dtype=torch.long), tgt], 1), pad=0)
    with T.use_backend(backend):
        structured = _loss_and_grads(model, batch.src, batch.tgt, batch.src_mask, batch.tgt_mask)
    with T.use_backend("eager"):
        dense = _loss_and_grads(model, batch.src, batch.tgt, T.padding_mask(batch.src, 0), T.target_mask(batch.tgt, 0))
    torch.testing.assert_close(structured[0], dense[0], rtol=1e-5, atol=1e-5)
    for a, b in zip(structured[1], dense[1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    padded_rows = ~T.target_mask(batch.tgt, 0).any(-1)  # padded target positions: zero self-attention rows
    assert padded_rows.any() and torch.isfinite(structured[0]).all()


def test_the_kernel_of_a_batch_fed_model_gets_causal_and_key_lengths_never_a_dense_mask(monkeypatch):
    from transformer import kernels

    calls = []
    real = kernels.flash_attention

    def spy(q, k, v, **kwargs):
        calls.append(
            {name: value for name, value in kwargs.items() if name in ("mask", "key_mask", "key_lengths", "causal")}
        )
        return real(q, k, v, **kwargs)

    monkeypatch.setattr(kernels, "flash_attention", spy)
    model = _model()
    batch = Batch(_tokens([7, 4], 7), _tokens([6, 3], 6, vocab=13), pad=0)
    with T.use_backend("triton"):
        model(batch.src, batch.tgt, batch.src_mask, batch.tgt_mask).sum().backward()
    assert len(calls) == 2 * 1 + 2 * 2  # encoder self-attention, decoder self- and cross-attention, 2 layers
    assert all(call["mask"] is None and call["key_mask"] is None for call in calls)
    causal = [call for call in calls if call["causal"]]
    assert len(causal) == 2  # the decoder's self-attention
    assert [c["key_lengths"].tolist() for c in causal] == [[5, 3]] * 2  # the decoder input drops the last token
    assert all(call["key_lengths"].tolist() == [7, 4] for call in calls if not call["causal"])


def test_torch_backend_gets_is_causal_and_no_mask_when_only_causal(monkeypatch):
    seen = []
    real = torch_backend._TORCH_SDPA  # torch's operator, as the torch backend calls it
    monkeypatch.setattr(
        torch_backend,
        "_TORCH_SDPA",
        lambda *a, **k: seen.append((k.get("attn_mask"), k.get("is_causal", False))) or real(*a, **k),
    )
    model = _model(pad_id=None)
    src, tgt = _tokens([5, 5], 5), _tokens([4, 4], 4, vocab=13)
    with T.use_backend("torch"):
        out = model(src, tgt, T.AttentionMask(), T.AttentionMask.target(tgt, None))
    with T.use_backend("eager"):
        expected = model(src, tgt, None, T.subsequent_mask(4))
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert seen and all(mask is None for mask, _ in seen)
    assert sum(causal for _, causal in seen) == 2  # the two decoder self-attentions


def test_torch_backend_gets_one_key_row_for_key_padding(monkeypatch):
    seen = []
    real = torch_backend._TORCH_SDPA
    monkeypatch.setattr(torch_backend, "_TORCH_SDPA", lambda *a, **k: seen.append(k.get("attn_mask")) or real(*a, **k))
    mha = T.MultiHeadedAttention(2, 32, dropout=0.0).eval()
    x = torch.randn(2, 5, 32)
    with T.use_backend("torch"):
        mha(x, x, x, T.AttentionMask(key_lengths=torch.tensor([3, 5])))
    assert seen[0].shape == (2, 1, 1, 5) and seen[0][:, 0, 0].tolist() == [[True] * 3 + [False] * 2, [True] * 5]


COMBINATIONS = {
    "causal": dict(causal=True),
    "key_lengths": dict(key_lengths=[5, 0]),
    "key_mask": dict(key_mask=True),
    "query_lengths": dict(query_lengths=[3, 1]),
    "dense": dict(dense=True),
    "causal+key_lengths": dict(causal=True, key_lengths=[4, 6]),
    "causal+key_mask": dict(causal=True, key_mask=True),
    "causal+key_lengths+query_lengths": dict(causal=True, key_lengths=[5, 2], query_lengths=[5, 2]),
    "key_mask+dense": dict(key_mask=True, dense=True),
    "everything": dict(causal=True, key_lengths=[6, 3], query_lengths=[4, 6], dense=True),
}


def _mask_of(parts, batch=2, q_len=6, k_len=6):
    g = torch.Generator().manual_seed(3)
    out = {}
    for name, value in parts.items():
        if name in ("key_lengths", "query_lengths"):
            out[name] = torch.tensor(value)
        elif name == "key_mask":
            out[name] = torch.rand(batch, k_len, generator=g) > 0.3
        elif name == "dense":
            out[name] = torch.rand(batch, q_len, k_len, generator=g) > 0.3
        else:
            out[name] = value
    return T.AttentionMask(**out)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("parts", list(COMBINATIONS))
def test_every_combination_of_parts_computes_its_dense_form_on_every_backend(backend, parts):
    """Each backend, given the structured mask, equals the eager reference given ``to_dense`` (forward and backward)."""
    torch.manual_seed(0)
    mha = T.MultiHeadedAttention(2, 32, dropout=0.0).eval()
    x = torch.randn(2, 6, 32, requires_grad=True)
    mask = _mask_of(COMBINATIONS[parts])
    dense = mask.to_dense(6, 6)
    assert dense is not None and not dense.all()  # the mask does hide something
    with T.use_backend(backend):
        out = mha(x, x, x, mask)
    (grad,) = torch.autograd.grad(out.pow(2).sum(), x)
    with T.use_backend("eager"):
        expected = mha(x, x, x, dense)
    (expected_grad,) = torch.autograd.grad(expected.pow(2).sum(), x)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-4, atol=1e-5)


ALIGNMENTS = {  # (q_len, k_len) -> parts: causal is top-left aligned, lengths fit the side they bound
    (3, 7): dict(causal=True, key_lengths=[6, 2], query_lengths=[3, 2]),
    (7, 3): dict(causal=True, key_lengths=[3, 1], query_lengths=[5, 7]),
    (1, 6): dict(causal=True, key_lengths=[6, 4]),  # one query (a decoding step) sees key 0 only: top-left
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", list(ALIGNMENTS), ids=[f"q{q}-k{k}" for q, k in ALIGNMENTS])
def test_structured_masks_with_more_or_fewer_queries_than_keys_mean_the_same_on_every_backend(backend, shape):
    """Cross-attention shapes: the structured mask equals its dense form (top-left causal, as torch's is_causal) on
    every backend, forward and backward, with key and query lengths that bind different sides."""
    q_len, k_len = shape
    torch.manual_seed(0)
    mha = T.MultiHeadedAttention(2, 32, dropout=0.0).eval()
    x, memory = torch.randn(2, q_len, 32, requires_grad=True), torch.randn(2, k_len, 32)
    mask = _mask_of(ALIGNMENTS[shape], q_len=q_len, k_len=k_len)
    dense = mask.to_dense(q_len, k_len)
    assert dense[0, 0].tolist() == [j <= 0 and j < int(mask.key_lengths[0]) for j in range(k_len)]
    with T.use_backend(backend):
        out = mha(x, memory, memory, mask)
    (grad,) = torch.autograd.grad(out.pow(2).sum(), x)
    with T.use_backend("eager"):
        expected = mha(x, memory, memory, dense)
    (expected_grad,) = torch.autograd.grad(expected.pow(2).sum(), x)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-4, atol=1e-5)


def test_the_views_of_a_mask():
    lengths, dense = torch.tensor([3, 1]), torch.rand(1, 4, 5) > 0.5
    mask = T.AttentionMask(causal=True, key_lengths=lengths, dense=dense)
    moved = mask.to("meta")
    assert moved.causal and moved.key_lengths.device.type == "meta" and moved.dense.device.type == "meta"
    assert mask.replace(causal=False).causal is False and mask.replace(causal=False).key_lengths is lengths
    assert T.AttentionMask().is_empty() and not T.AttentionMask(causal=True).is_empty()
    assert not T.AttentionMask(key_lengths=lengths).is_empty()
    assert T.AttentionMask(key_lengths=lengths).key_only() and T.AttentionMask(key_mask=dense[0, :2]).key_only()
    assert not mask.key_only() and not T.AttentionMask(key_lengths=lengths, query_lengths=lengths).key_only()
    assert repr(mask).startswith("AttentionMask(causal=True, key_lengths=tensor([3, 1]), dense=tensor(")
