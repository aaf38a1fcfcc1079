"""The Hugging Face attention function (transformer.integrations.huggingface.attention_forward) against
transformers' own ``sdpa_attention_forward`` as the oracle, on boundary data where each rule matters: masks (none,
boolean with a fully masked row, longer than the keys, float), causality (the module's flag, the argument, one query
after a cache), grouped-query heads, ``scaling``, ``softcap`` (against its formula), a sliding window and packed
documents beside the mask, and dropout (docs/integrations.md, "Hugging Face")."""

import pytest
import torch
from torch import nn

pytest.importorskip("transformers")
from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: E402

from transformer.integrations.huggingface import attention_forward  # noqa: E402


class _Module(nn.Module):
    def __init__(self, groups=1, is_causal=True):
        super().__init__()
        self.num_key_value_groups, self.is_causal = groups, is_causal


def _qkv(batch=2, heads=4, kv_heads=4, q_len=5, k_len=5, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, q_len, dim, generator=g)
    k = torch.randn(batch, kv_heads, k_len, dim, generator=g)
    v = torch.randn(batch, kv_heads, k_len, dim, generator=g)
    return q, k, v


def _padding_mask(batch, q_len, k_len, pad=2, total=None):
    """Causal and left padding: row 1's first ``pad`` keys are padding, so its first ``pad`` queries see nothing."""
    allowed = torch.ones(q_len, total or k_len, dtype=torch.bool).tril(k_len - q_len)
    mask = allowed.expand(batch, 1, -1, -1).clone()
    mask[1, :, :, :pad] = False
    return mask


def _both(module, q, k, v, mask, **kwargs):
    ours, weights = attention_forward(module, q, k, v, mask, **kwargs)
    theirs, _ = sdpa_attention_forward(module, q, k, v, mask, **kwargs)
    assert weights is None and ours.shape == theirs.shape == (q.shape[0], q.shape[2], q.shape[1], v.shape[-1])
    return ours, theirs


CASES = {
    "causal, no mask": dict(),
    "one query after a cache sees every key": dict(q_len=1, k_len=6),
    "a chunk after a cache, no mask (top-left, as transformers)": dict(q_len=3, k_len=6),
    "boolean mask with fully masked rows": dict(mask="padding"),
    "boolean mask longer than the keys (a static cache)": dict(mask="long"),
    "float mask": dict(mask="float"),
    "grouped-query heads": dict(kv_heads=2, groups=2),
    "multi-query heads": dict(kv_heads=1, groups=4),
    "a given scaling": dict(scaling=0.37),
    "a bidirectional module": dict(module_causal=False),
    "is_causal=False overrides the module": dict(is_causal=False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_attention_forward_is_transformers_sdpa_on_boundary_data(name):
    case = dict(CASES[name])
    kind = case.pop("mask", None)
    module = _Module(case.pop("groups", 1), case.pop("module_causal", True))
    extra = {key: case.pop(key) for key in ("scaling", "is_causal") if key in case}
    q, k, v = _qkv(**case)
    batch, q_len, k_len = q.shape[0], q.shape[2], k.shape[2]
    mask = None
    if kind == "padding":
        mask = _padding_mask(batch, q_len, k_len)
    elif kind == "long":
        mask = _padding_mask(batch, q_len, k_len, total=k_len + 3)
        mask[..., k_len:] = True  # positions past the keys must be cut off, not attended
    elif kind == "float":
        mask = torch.randn(batch, 1, q_len, k_len, generator=torch.Generator().manual_seed(3))
        mask[0, 0, 0, 1:] = float("-inf")
    long = kind == "long"
    ours, theirs = _both(module, q, k, v, mask[..., :k_len] if long else mask, **extra)
    if long:
        ours = attention_forward(module, q, k, v, mask, **extra)[0]  # the long mask itself, cut to the keys
    torch.testing.assert_close(ours, theirs)
    if kind == "padding":
        assert ours[1, :2].abs().max() == 0  # the fully masked queries output 0, as torch's function


def test_the_boundary_data_makes_each_rule_matter():
    q, k, v = _qkv(q_len=1, k_len=6)
    module = _Module()
    all_keys = attention_forward(module, q, k, v, None)[0]
    first_key = attention_forward(module, q, k, v, None, is_causal=False)[0]
    torch.testing.assert_close(all_keys, first_key)  # one query: causal or not, every cached key
    q, k, v = _qkv()
    causal = attention_forward(module, q, k, v, None)[0]
    assert (causal - attention_forward(_Module(is_causal=False), q, k, v, None)[0]).abs().max() > 0.1
    assert (causal - attention_forward(module, q, k, v, None, scaling=0.37)[0]).abs().max() > 0.1


def test_softcap_caps_the_scaled_scores_before_the_mask():
    q, k, v = _qkv(seed=4)
    q = q * 4  # large scores, so the cap matters
    mask = _padding_mask(2, 5, 5)
    ours = attention_forward(_Module(), q, k, v, mask, scaling=0.25, softcap=2.0)[0]
    scores = 2.0 * torch.tanh(q @ k.transpose(-1, -2) * 0.25 / 2.0)
    probs = scores.masked_fill(~mask, float("-inf")).softmax(-1).nan_to_num(0.0)
    torch.testing.assert_close(ours, (probs @ v).transpose(1, 2))
    uncapped = attention_forward(_Module(), q, k, v, mask, scaling=0.25)[0]
    assert (ours - uncapped).abs().max() > 0.1


def test_a_sliding_window_and_documents_beside_the_mask_give_the_masks_attention():
    q, k, v = _qkv(q_len=8, k_len=8, seed=5)
    window = 3
    i = torch.arange(8)
    allowed = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - window)
    mask = allowed.expand(2, 1, 8, 8).clone()
    mask[1, :, :, :2] = False
    ours = attention_forward(_Module(), q, k, v, mask, sliding_window=window)[0]
    theirs = sdpa_attention_forward(_Module(), q, k, v, mask, sliding_window=window)[0]
    torch.testing.assert_close(ours, theirs)
    # without a mask the window alone gives it: Mistral's window W sees keys i - W < j <= i (W - 1 to the left)
    ours = attention_forward(_Module(), q, k, v, None, sliding_window=window)[0]
    theirs = sdpa_attention_forward(_Module(), q, k, v, allowed.expand(2, 1, 8, 8))[0]
    torch.testing.assert_close(ours, theirs)
    positions = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 4]])  # two packed documents per row
    documents = torch.tensor([0, 0, 0, 1, 1, 1, 1, 1])
    packed = torch.ones(8, 8, dtype=torch.bool).tril() & (documents[:, None] == documents[None, :])
    ours = attention_forward(_Module(), q, k, v, None, position_ids=positions)[0]
    theirs = sdpa_attention_forward(_Module(), q, k, v, packed.expand(2, 1, 8, 8))[0]
    torch.testing.assert_close(ours, theirs)


def test_dropout_zero_is_deterministic_and_dropout_above_zero_drops():
    q, k, v = _qkv(seed=6)
    module = _Module()
    a = attention_forward(module, q, k, v, None, dropout=0.0)[0]
    torch.testing.assert_close(a, sdpa_attention_forward(module, q, k, v, None, dropout=0.0)[0])
    torch.manual_seed(0)
    dropped = attention_forward(module, q, k, v, None, dropout=0.5)[0]
    assert (dropped - a).abs().max() > 0.1
