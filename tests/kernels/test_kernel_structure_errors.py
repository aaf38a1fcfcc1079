"""Malformed documents, windows and score modifiers get a ValueError naming the argument, the expected and the actual
value (kernels/_validate.py ``validate_structure``), from flash_attention, tune and unsupported_reason alike."""

import math

import pytest
import torch

from transformer.kernels import flash_attention, tune, unsupported_reason

B, H, Q, K, D = 2, 4, 5, 7, 16


def qkv(q_len=Q, k_len=K, dtype=torch.float32):
    return (torch.randn(B, H, n, D, dtype=dtype) for n in (q_len, k_len, k_len))


def good_documents():
    return torch.tensor([[0, 0, 1, 1, 1, 4, 4], [2, 2, 2, 2, 2, 2, 2]])


BAD = [
    (dict(documents=torch.tensor([[0, 0, 1, 1, 1, 4, 4], [2, 2, 3, 5, 5, 4, 6]])),
     "documents must be non-decreasing along each row: row 1 goes from 5 at key 4 to 4 at key 5"),
    (dict(documents=good_documents().float()),
     "documents must be an int32 or int64 tensor of shape (batch, k_len)=(2, 7), got torch.float32"),
    (dict(documents=good_documents()[:, :6]), "documents must have shape (batch, k_len)=(2, 7), got (2, 6)"),
    (dict(documents=good_documents()[:1]), "documents must have shape (batch, k_len)=(2, 7), got (1, 7)"),
    (dict(documents=[0, 1]), "documents must be an int32 or int64 tensor of shape (batch, k_len)=(2, 7), got list"),
    (dict(window_left=-1), "window_left must be an int >= 0 or None (unbounded), got -1"),
    (dict(window_right=-3), "window_right must be an int >= 0 or None (unbounded), got -3"),
    (dict(window_left=2.0), "window_left must be an int >= 0 or None (unbounded), got 2.0"),
    (dict(window_right=True), "window_right must be an int >= 0 or None (unbounded), got True"),
    (dict(softcap=0.0), "softcap must be a finite float > 0 or None, got 0.0"),
    (dict(softcap=-2.0), "softcap must be a finite float > 0 or None, got -2.0"),
    (dict(softcap=math.inf), "softcap must be a finite float > 0 or None, got inf"),
    (dict(softcap=math.nan), "softcap must be a finite float > 0 or None, got nan"),
    (dict(softcap="1"), "softcap must be a finite float > 0 or None, got '1'"),
    (dict(alibi_slopes=torch.ones(2)),
     "alibi_slopes must have shape (heads,)=(4,) or (batch, heads)=(2, 4), one slope per query head, got (2)"),
    (dict(alibi_slopes=torch.ones(1, 4)),
     "alibi_slopes must have shape (heads,)=(4,) or (batch, heads)=(2, 4), one slope per query head, got (1, 4)"),
    (dict(alibi_slopes=torch.ones(4, dtype=torch.float64)),
     "alibi_slopes must be a float32 (or q's dtype torch.float32) tensor of shape (heads,)=(4,) or "
     "(batch, heads)=(2, 4), got torch.float64"),
    (dict(alibi_slopes=torch.ones(4, dtype=torch.int64)),
     "alibi_slopes must be a float32 (or q's dtype torch.float32) tensor of shape (heads,)=(4,) or "
     "(batch, heads)=(2, 4), got torch.int64"),
    (dict(alibi_slopes=torch.ones(4, requires_grad=True)),
     "alibi_slopes must not require grad: the kernel computes no gradient for the slopes"),
]  # fmt: skip


@pytest.mark.parametrize(("bad", "message"), BAD, ids=[m[:40] for _, m in BAD])
def test_malformed_structure_is_refused_with_its_name(bad, message):
    q, k, v = qkv()
    with pytest.raises(ValueError) as raised:
        flash_attention(q, k, v, **bad)
    assert str(raised.value) == message
    assert unsupported_reason(q, k, v, **bad) == message
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)").split(",")[0]):
        tune(q, k, v, **bad)


def test_documents_need_at_most_as_many_queries_as_keys():
    """The queries sit at the last q_len key positions, so documents need q_len <= k_len."""
    q, k, v = qkv(q_len=8, k_len=7)
    with pytest.raises(ValueError, match=r"^documents need q_len <= k_len .* got q_len=8, k_len=7$"):
        flash_attention(q, k, v, documents=good_documents())


def test_slopes_in_the_querys_dtype_and_structure_that_is_well_formed_pass():
    """Slopes in q's dtype (float16 here) or float32, ids with gaps and equal neighbours, windows of 0 and huge
    windows are accepted (nothing raised); int32 ids too."""
    q, k, v = qkv(dtype=torch.float16)
    documents = good_documents().to(torch.int32)
    for slopes in (torch.ones(H, dtype=torch.float16), torch.ones(B, H)):
        args = dict(documents=documents, window_left=0, window_right=10**12, softcap=1, alibi_slopes=slopes)
        assert unsupported_reason(q, k, v, **args) is None
