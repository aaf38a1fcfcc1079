"""attn_implementation="typed_transformer" with what transformers' SDPA refuses or ignores (issue 29): Mistral's
sliding window, Gemma 2's softcap and sliding/global layers, and packed (padding-free) batches as transformers passes
them (restarting ``position_ids``, FlashAttention's ``cu_seq_lens_q/k``).

Tiny models built from transformers' config classes with random weights, in float64, against
``attn_implementation="eager"`` (whose softmax runs in float32: hence 1e-6, where a wrong window or a missing cap
moves the logits by 1e-2 and more), and packed rows against each document run alone (exact to 1e-10). Packed inputs
run with ``use_cache=False``: transformers' own masks look for documents only without a cache (flash_attention_2 and
we always do; tested below).
"""

from __future__ import annotations

import copy
import inspect

import pytest
import torch

import transformer as T
from transformer import kernels
from transformer.masks import AttentionMask

transformers = pytest.importorskip("transformers")
from transformer.integrations import huggingface  # noqa: E402

BACKENDS = ["eager", "torch"]
NEEDS_KERNEL = pytest.mark.skipif(
    "documents" not in inspect.signature(kernels.flash_attention).parameters,
    reason="the kernel's issue-29 arguments are not merged",
)


@pytest.fixture(scope="module", autouse=True)
def _registered():
    huggingface.register()


def _pair(model_class, config):
    torch.manual_seed(0)
    eager = model_class._from_config(copy.deepcopy(config), attn_implementation="eager", dtype=torch.float64)
    ours = model_class._from_config(copy.deepcopy(config), attn_implementation="typed_transformer", dtype=torch.float64)
    ours.load_state_dict(eager.state_dict())
    return eager.eval(), ours.eval()


@pytest.fixture(scope="module")
def mistral():
    config = transformers.MistralConfig(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=3,  # well inside the 9-token rows
    )
    return _pair(transformers.MistralForCausalLM, config)


@pytest.fixture(scope="module")
def gemma2():
    config = transformers.Gemma2Config(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,  # layer 0 sliding, layer 1 global
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        sliding_window=3,
        attn_logit_softcapping=1.5,  # small: the cap bends most scores
        final_logit_softcapping=None,
    )
    assert config.layer_types == ["sliding_attention", "full_attention"]
    return _pair(transformers.Gemma2ForCausalLM, config)


IDS = torch.randint(3, 50, (2, 9), generator=torch.Generator().manual_seed(1))
PACKED = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 4], [0, 1, 0, 1, 2, 3, 4, 5, 6]])  # documents of 4+5 and 2+7 tokens


def _logits_and_grads(model, backend, real, **inputs):
    """The logits on the ``real`` positions and every parameter's gradient of a loss on them."""
    model.zero_grad()
    with T.use_backend(backend):
        logits = model(**inputs).logits[real]
    weights = torch.linspace(-1, 1, logits.numel(), dtype=torch.float64).view(logits.shape)
    (logits * weights).sum().backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _compare_with_eager(pair, backend, real, tol=1e-6, **inputs):
    """Logits on the ``real`` positions and every gradient within ``tol`` of eager's, relative to their largest."""
    eager, ours = pair
    want, want_grads = _logits_and_grads(eager, "eager", real, **inputs)
    got, got_grads = _logits_and_grads(ours, backend, real, **inputs)
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * want.abs().max().item())
    assert got_grads.keys() == want_grads.keys() and len(got_grads) > 5
    for name, grad in want_grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=tol, atol=tol * grad.abs().max().item(), msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model", ["mistral", "gemma2"])
def test_window_and_softcap_match_eager_logits_and_gradients(model, backend, request):
    _compare_with_eager(request.getfixturevalue(model), backend, slice(None), input_ids=IDS)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model", ["mistral", "gemma2"])
def test_a_padded_batch_matches_eager_on_its_real_tokens(model, backend, request):
    """In float32: transformers' eager attention in float64 turns a fully padded row into NaN (its float32 softmax of
    float64's most negative value), which the values then spread. In float64 the real tokens of a left-padded row
    equal the row alone (RoPE and the window are relative)."""
    pair = request.getfixturevalue(model)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, :3] = 0  # left padding
    in_float32 = tuple(copy.deepcopy(m).float() for m in pair)
    _compare_with_eager(in_float32, backend, mask.bool(), 2e-5, input_ids=IDS, attention_mask=mask)
    with torch.no_grad(), T.use_backend(backend):
        padded = pair[1](input_ids=IDS, attention_mask=mask).logits[0, 3:]
        alone = pair[1](input_ids=IDS[:1, 3:]).logits[0]
    torch.testing.assert_close(padded, alone, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model", ["mistral", "gemma2"])
def test_a_packed_batch_matches_eager_and_each_document_alone(model, backend, request):
    pair = request.getfixturevalue(model)
    _compare_with_eager(pair, backend, slice(None), input_ids=IDS, position_ids=PACKED, use_cache=False)
    assert not torch.equal(PACKED[:, 4], torch.tensor([4, 4]))  # the rows restart: more than one document each
    with torch.no_grad(), T.use_backend(backend):
        packed = pair[1](input_ids=IDS, position_ids=PACKED, use_cache=False).logits
        for row, cut in ((0, 4), (1, 2)):
            for part in (slice(0, cut), slice(cut, 9)):
                alone = pair[1](input_ids=IDS[row : row + 1, part]).logits[0]
                torch.testing.assert_close(packed[row, part], alone, rtol=1e-10, atol=1e-10)


def test_cu_seq_lens_give_the_documents_as_flash_attention_2_takes_them(mistral):
    ids, cu = IDS[:1], torch.tensor([0, 4, 9], dtype=torch.int32)
    varlen = dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=5, max_length_k=5)
    with torch.no_grad():
        by_cu = mistral[1](input_ids=ids, **varlen).logits  # no position_ids: transformers' mask is one document
        by_positions = mistral[1](input_ids=ids, position_ids=PACKED[:1], use_cache=False).logits
        first_alone = mistral[1](input_ids=ids[:, :4]).logits
    torch.testing.assert_close(by_cu[:, :4], first_alone, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(by_cu, by_positions, rtol=1e-8, atol=1e-8)  # RoPE is relative: positions 4.. or 0..


def test_restarting_positions_are_documents_with_a_cache_too(mistral):
    """transformers' own masks ignore the restarts when a cache is built (use_cache=True, the default in eval):
    documents then see each other there. Here (as in flash_attention_2) a restart is a document boundary always."""
    with torch.no_grad():
        ours = mistral[1](input_ids=IDS[:1], position_ids=PACKED[:1]).logits
        eager = mistral[0](input_ids=IDS[:1], position_ids=PACKED[:1]).logits
        second_alone = mistral[1](input_ids=IDS[:1, 4:]).logits
    torch.testing.assert_close(ours[:, 4:], second_alone, rtol=1e-10, atol=1e-10)
    assert (eager[:, 4:] - second_alone).abs().max() > 1e-3  # the leak this avoids


def test_the_structure_reaches_the_drop_in_as_an_attention_mask(mistral, monkeypatch):
    """What the kernel needs to skip blocks: documents and the window as fields, not only a dense mask."""
    seen = []
    real = huggingface.scaled_dot_product_attention

    def spy(*args, attn_mask=None, **kwargs):
        seen.append(attn_mask)
        return real(*args, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(huggingface, "scaled_dot_product_attention", spy)
    with torch.no_grad():
        mistral[1](input_ids=IDS, position_ids=PACKED, use_cache=False)
    mask = seen[0]
    assert isinstance(mask, AttentionMask) and mask.causal and mask.window_left == 2
    assert mask.documents.tolist() == [[0] * 4 + [1] * 5, [0] * 2 + [1] * 7]


def test_unequal_cu_seq_lens_or_a_batch_of_rows_are_refused():
    q = torch.randn(1, 2, 5, 8)
    cu = torch.tensor([0, 2, 5])
    with pytest.raises(ValueError, match="cu_seq_lens_q equal to cu_seq_lens_k.*cu_seq_lens_k=\\[0, 5\\]"):
        huggingface.attention_forward(torch.nn.Module(), q, q, q, None, cu_seq_lens_q=cu, cu_seq_lens_k=cu[::2])
    q2 = torch.randn(2, 2, 5, 8)
    with pytest.raises(ValueError, match="one packed row \\(batch 1\\), got batch=2"):
        huggingface.attention_forward(torch.nn.Module(), q2, q2, q2, None, cu_seq_lens_q=cu, cu_seq_lens_k=cu)


def test_softcap_reaches_the_attention():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 4, 8, generator=g, dtype=torch.float64) * 3 for _ in range(3))
    module = torch.nn.Module()
    module.is_causal = False
    out, _ = huggingface.attention_forward(module, q, k, v, None, scaling=0.5, softcap=2.0)
    scores = 2.0 * torch.tanh(0.5 * q @ k.transpose(-1, -2) / 2.0)
    torch.testing.assert_close(out, (scores.softmax(-1) @ v).transpose(1, 2), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("model", ["mistral", "gemma2"])
def test_generate_with_a_sliding_window_cache_gives_eagers_tokens(model, request):
    eager, ours = request.getfixturevalue(model)
    settings = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        assert torch.equal(ours.generate(IDS, **settings), eager.generate(IDS, **settings))


@NEEDS_KERNEL
@pytest.mark.parametrize("model", ["mistral", "gemma2"])
def test_a_packed_windowed_batch_on_the_kernel_under_the_interpreter(model):
    """The kernel (head_dim 16, its smallest) on a packed batch with a window (and Gemma 2's softcap): float32
    logits and gradients within float32 rounding of eager's float64 ones."""
    common = dict(vocab_size=50, hidden_size=64, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4)
    if model == "mistral":
        config = transformers.MistralConfig(**common, num_key_value_heads=2, sliding_window=3)
        pair = _pair(transformers.MistralForCausalLM, config)
    else:
        config = transformers.Gemma2Config(
            **common, num_key_value_heads=2, head_dim=16, sliding_window=3, attn_logit_softcapping=1.5
        )
        pair = _pair(transformers.Gemma2ForCausalLM, config)
    eager, ours = pair
    inputs = dict(input_ids=IDS, position_ids=PACKED, use_cache=False)
    want, want_grads = _logits_and_grads(eager, "eager", slice(None), **inputs)
    got, got_grads = _logits_and_grads(ours.float(), "triton", slice(None), **inputs)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
    for name, grad in want_grads.items():
        scale = grad.abs().max().item()
        torch.testing.assert_close(got_grads[name].double(), grad, rtol=1e-3, atol=1e-3 * scale, msg=name)


def test_a_batch_where_only_one_row_is_packed_splits_that_row(mistral):
    """Row 0 restarts its positions (two documents), row 1 does not (one): row 0's documents are still apart,
    with the default cache too, and row 1 is one document."""
    positions = torch.stack([torch.tensor([0, 1, 2, 3, 0, 1, 2, 3, 4]), torch.arange(9)])
    with torch.no_grad():
        both = mistral[1](input_ids=IDS, position_ids=positions).logits
        second_alone = mistral[1](input_ids=IDS[:1, 4:]).logits[0]
        row_alone = mistral[1](input_ids=IDS[1:]).logits[0]
    torch.testing.assert_close(both[0, 4:], second_alone, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(both[1], row_alone, rtol=1e-10, atol=1e-10)
