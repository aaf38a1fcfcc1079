"""AttentionMask's documents and sliding window, and the score modifiers (softcap, ALiBi) of the reference (issue 29).

Every expected value is built from the formulas of docs/attention.md by loops over (i, j), not from our own code."""

from __future__ import annotations

import math

import pytest
import torch

from transformer.backends import alibi_slopes, run_backend
from transformer.backends.reference import attention
from transformer.contracts import TypeCheckError
from transformer.masks import AttentionMask


def loop_mask(documents, window_left, window_right, causal, q_len, k_len):
    """(batch, q_len, k_len) by the definition: p(i) = k_len - q_len + i."""
    batch = 1 if documents is None else len(documents)
    out = torch.zeros(batch, q_len, k_len, dtype=torch.bool)
    for b in range(batch):
        for i in range(q_len):
            p = k_len - q_len + i
            for j in range(k_len):
                ok = True
                if documents is not None:
                    ok &= documents[b][j] == documents[b][p]
                if window_left is not None:
                    ok &= j >= p - window_left
                if window_right is not None:
                    ok &= j <= p + window_right
                if causal:
                    ok &= j <= i
                out[b, i, j] = ok
    return out


DOCS = [[0, 0, 0, 1, 2, 2, 2, 2, 5], [3, 3, 3, 3, 3, 3, 3, 4, 4]]


@pytest.mark.parametrize("q_len", [9, 4, 1])
@pytest.mark.parametrize("window", [(None, None), (2, None), (None, 1), (0, 0), (3, 2)])
def test_documents_and_window_to_dense_match_the_definition(q_len, window):
    left, right = window
    mask = AttentionMask(documents=torch.tensor(DOCS), window_left=left, window_right=right)
    expected = loop_mask(DOCS, left, right, False, q_len, 9)
    assert torch.equal(mask.to_dense(q_len, 9).expand(2, q_len, 9), expected)


def test_causal_documents_window_combine():
    mask = AttentionMask(causal=True, documents=torch.tensor(DOCS), window_left=1)
    assert torch.equal(mask.to_dense(9, 9), loop_mask(DOCS, 1, None, True, 9, 9))


def test_window_alone_is_the_language_models_sliding_window():
    from transformer.lm.positions import sliding_window_mask

    for q_len, k_len in ((7, 7), (1, 7), (3, 7)):
        mask = AttentionMask(window_left=3 - 1)  # Mistral's window of 3
        assert torch.equal(mask.to_dense(q_len, k_len), sliding_window_mask(q_len, k_len, 3, torch.device("cpu")))


def test_from_cu_seqlens_gives_one_packed_row():
    mask = AttentionMask.from_cu_seqlens(torch.tensor([0, 3, 4, 4, 8], dtype=torch.int32), 8)
    assert mask.causal
    assert mask.documents.tolist() == [[0, 0, 0, 1, 3, 3, 3, 3]]  # the empty document 2 holds no position
    assert not AttentionMask.from_cu_seqlens(torch.tensor([0, 2]), causal=False).causal


@pytest.mark.parametrize(
    ("cu", "length", "words"),
    [
        ([1, 3], None, "must start at 0, got [1, 3]"),
        ([0, 4, 3, 6], None, "must not decrease, got 3 after 4 at index 2"),
        ([0, 3, 5], 6, "add up to 5 positions, the row has length=6"),
        ([0, 3, 5], 4, "add up to 5 positions, the row has length=4"),
    ],
)
def test_from_cu_seqlens_refuses_bad_lengths(cu, length, words):
    with pytest.raises(ValueError, match="from_cu_seqlens") as info:
        AttentionMask.from_cu_seqlens(torch.tensor(cu), length)
    assert words in str(info.value)


def test_from_cu_seqlens_refuses_floats_and_2d():
    for bad in (torch.tensor([0.0, 2.0]), torch.tensor([[0, 2]])):
        with pytest.raises(ValueError, match="cu_seqlens must be a 1-D integer tensor"):
            AttentionMask.from_cu_seqlens(bad)


def test_from_position_ids_follows_transformers_rule():
    """A document starts where the position is not the previous one plus 1 (transformers' padding-free rule)."""
    positions = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2], [5, 6, 7, 8, 0, 1, 3, 4]])
    mask = AttentionMask.from_position_ids(positions)
    assert mask.causal
    assert mask.documents.tolist() == [[0, 0, 0, 1, 1, 2, 2, 2], [0, 0, 0, 0, 1, 1, 2, 2]]


def test_decreasing_documents_are_refused_naming_row_and_position():
    with pytest.raises(ValueError, match=r"batch row 1 goes from 2 to 1 at position 3"):
        AttentionMask(documents=torch.tensor([[0, 0, 1, 1], [0, 1, 2, 1]]))


@pytest.mark.parametrize("bad", [torch.tensor([0, 0, 1]), torch.tensor([[0.0, 1.0]]), torch.tensor([[True, False]])])
def test_documents_must_be_integer_rows(bad):
    with pytest.raises(ValueError, match=r"documents must be an integer tensor of shape \(batch, k_len\)"):
        AttentionMask(documents=bad)


@pytest.mark.parametrize("name", ["window_left", "window_right"])
@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_a_bad_window_is_refused(name, bad):
    with pytest.raises(ValueError, match=f"{name} must be an int >= 0 .*got {bad!r}"):
        AttentionMask(**{name: bad})


def test_check_fits_checks_the_documents_shape_and_alignment():
    mask = AttentionMask(documents=torch.zeros(2, 5, dtype=torch.long))
    mask.check_fits(2, 5, 5)
    mask.check_fits(2, 1, 5)
    with pytest.raises(TypeCheckError, match=r"mask.documents.*Int\[Tensor, 'batch k_len'\]"):
        mask.check_fits(2, 6, 6)
    with pytest.raises(TypeCheckError, match="mask.documents"):
        mask.check_fits(3, 5, 5)
    with pytest.raises(ValueError, match="need q_len <= k_len; got q_len=7, k_len=5"):
        mask.check_fits(2, 7, 5)


def test_structure_views_know_the_new_parts():
    docs = AttentionMask(documents=torch.tensor([[0, 1], [0, 0]]))
    window = AttentionMask(window_right=0)
    assert not docs.is_empty() and not window.is_empty()
    assert not docs.key_only() and not window.key_only()
    assert "documents=" in repr(docs) and "window_right=0" in repr(window)
    picked = docs.index_select(torch.tensor([1, 1, 0]))
    assert picked.documents.tolist() == [[0, 0], [0, 0], [0, 1]]
    assert window.index_select(torch.tensor([0])).window_right == 0


def test_packed_attention_equals_each_document_alone():
    """The promise of packing: a row of documents attends exactly as each document run by itself (causal)."""
    torch.manual_seed(0)
    lengths = [3, 1, 5, 2]
    q, k, v = (torch.randn(1, 2, sum(lengths), 4, dtype=torch.float64) for _ in range(3))
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    mask = AttentionMask.from_cu_seqlens(cu, sum(lengths))
    packed = run_backend("eager", q, k, v, mask, 0.0)
    for start, end in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
        alone = run_backend(
            "eager", q[..., start:end, :], k[..., start:end, :], v[..., start:end, :], AttentionMask(causal=True), 0.0
        )
        torch.testing.assert_close(packed[..., start:end, :], alone, rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------- score modifiers


def loop_attention(q, k, v, scale, softcap, slopes, mask):
    """softmax over j of cap(scale q.k) - slope |p(i) - j|, masked; zeros for a row with no key (float64 loops)."""
    batch, heads, q_len, _ = q.shape
    k_len = k.size(2)
    out = torch.zeros(batch, heads, q_len, v.size(-1), dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            slope = None if slopes is None else float(slopes[h] if slopes.dim() == 1 else slopes[b, h])
            for i in range(q_len):
                weights = []
                for j in range(k_len):
                    if mask is not None and not mask[b, i, j]:
                        weights.append(None)
                        continue
                    s = scale * float(q[b, h, i] @ k[b, h, j])
                    if softcap is not None:
                        s = softcap * math.tanh(s / softcap)
                    if slope is not None:
                        s -= slope * abs(k_len - q_len + i - j)
                    weights.append(s)
                kept = [w for w in weights if w is not None]
                if not kept:
                    continue
                top = max(kept)
                total = sum(math.exp(w - top) for w in kept)
                for j, w in enumerate(weights):
                    if w is not None:
                        out[b, h, i] += math.exp(w - top) / total * v[b, h, j]
    return out


@pytest.mark.parametrize("softcap", [None, 0.5, 3.0])
@pytest.mark.parametrize("slopes_shape", [None, "heads", "batch_heads"])
def test_reference_score_modifiers_match_the_formula(softcap, slopes_shape):
    torch.manual_seed(1)
    q = torch.randn(2, 3, 4, 5, dtype=torch.float64) * 2
    k, v = torch.randn(2, 3, 6, 5, dtype=torch.float64) * 2, torch.randn(2, 3, 6, 5, dtype=torch.float64)
    slopes = {None: None, "heads": torch.tensor([0.5, 0.25, 1.5]), "batch_heads": torch.rand(2, 3)}[slopes_shape]
    if slopes is not None:
        slopes = slopes.double()
    mask = AttentionMask(documents=torch.tensor([[0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1]]), window_left=2)
    dense = mask.to_dense(4, 6).expand(2, 4, 6)
    out, _ = attention(q, k, v, dense.unsqueeze(1), softcap=softcap, alibi_slopes=slopes, scale=0.7)
    torch.testing.assert_close(out, loop_attention(q, k, v, 0.7, softcap, slopes, dense), rtol=0, atol=1e-12)


def test_reference_score_modifiers_have_exact_gradients():
    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    slopes = torch.tensor([0.3, 0.9], dtype=torch.float64)

    def fn(q, k, v):
        return attention(q, k, v, softcap=1.5, alibi_slopes=slopes)[0]

    assert torch.autograd.gradcheck(fn, (q, k, v))
    assert torch.autograd.gradgradcheck(fn, (q, k, v))


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), True])
def test_a_bad_softcap_is_refused(bad):
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match=f"argument 'softcap' must be a finite number > 0 .*got {bad!r}"):
        attention(q, q, q, softcap=bad)


def test_slopes_must_be_one_per_query_head():
    q = torch.randn(2, 4, 3, 8)
    with pytest.raises(ValueError, match=r"one slope per query head, shape \(4,\) or \(2, 4\).*got \(2,\)"):
        attention(q, q, q, alibi_slopes=torch.ones(2))
    with pytest.raises(ValueError, match=r"got \(4, 2\)"):
        attention(q, q, q, alibi_slopes=torch.ones(4, 2))
    with pytest.raises(TypeCheckError, match="alibi_slopes"):  # the signature's Float
        attention(q, q, q, alibi_slopes=torch.ones(4, dtype=torch.long))


@pytest.mark.parametrize("heads", [1, 2, 8, 12, 20, 32])
def test_alibi_slopes_are_blooms(heads):
    """Compared with transformers' BLOOM (build_alibi_tensor: slope_h * key position for each head)."""
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    alibi = bloom.build_alibi_tensor(torch.ones(1, 3, dtype=torch.long), heads, torch.float32)
    torch.testing.assert_close(alibi_slopes(heads), alibi[:, 0, 1], rtol=1e-6, atol=0)


def test_alibi_slopes_of_a_power_of_two_are_press_et_al():
    assert alibi_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]
    with pytest.raises(ValueError, match="n_heads must be a positive int, got 0"):
        alibi_slopes(0)


def test_the_eager_backend_applies_the_score_modifiers():
    """run_backend's eager path computes the reference with the cap and the slopes (and they change the result)."""
    torch.manual_seed(3)
    q, k, v = (torch.randn(2, 2, 3, 4, dtype=torch.float64) * 3 for _ in range(3))
    slopes = torch.tensor([0.7, 0.2], dtype=torch.float64)
    for softcap, given in ((None, slopes), (0.5, None), (0.5, slopes)):
        out = run_backend("eager", q, k, v, None, 0.0, softcap=softcap, alibi_slopes=given)
        expected = loop_attention(q, k, v, 0.5, softcap, given, None)
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
        assert not torch.allclose(out, run_backend("eager", q, k, v, None, 0.0))


def test_the_kernel_gets_every_structured_part_and_modifier():
    from transformer.backends import kernel_masks
    from transformer.backends.dispatch import score_modifiers

    lengths, docs = torch.tensor([3, 2]), torch.tensor([[0, 0, 1], [0, 1, 1]])
    parts = kernel_masks(AttentionMask(causal=True, key_lengths=lengths, documents=docs, window_left=2, window_right=1))
    assert parts["causal"] is True and parts["key_lengths"] is lengths and parts["documents"] is docs
    assert (parts["window_left"], parts["window_right"]) == (2, 1)
    assert "documents" not in kernel_masks(AttentionMask(causal=True))  # passed only when given
    assert kernel_masks(AttentionMask(window_right=0))["window_right"] == 0  # 0 is a window, not "none"
    slopes = torch.ones(2)
    assert score_modifiers(2.0, slopes) == {"softcap": 2.0, "alibi_slopes": slopes}
    assert score_modifiers(None, None) == {}
