"""attn_implementation="typed_transformer" with attention sinks (issue 44): transformers' gpt-oss passes its learned
``self.sinks`` (one logit per query head) to the attention function as ``s_aux``; ours passes them to the drop-in's
``sinks`` on every backend.

The oracle is transformers' own gpt-oss eager attention (``attn_implementation="eager"``, its
``eager_attention_forward``: the sink as one more column of the scores, the softmax in the scores' dtype). Tiny
``GptOssForCausalLM`` models from transformers' config class with random weights (the sinks around 1, so that they
take a real share of each softmax: zeroing them moves the logits by more than 1), layer 0 sliding (window 3 in
9-token rows) and layer 1 full, on a left-padded batch.
"""

from __future__ import annotations

import copy
import inspect

import pytest
import torch

import transformer as T
from transformer import kernels

transformers = pytest.importorskip("transformers")
from transformer.integrations import huggingface  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(transformers, "GptOssConfig"), reason="transformers without gpt-oss")
BACKENDS = ["eager", "torch"]
COMMON = dict(
    vocab_size=50, hidden_size=32, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=8, max_position_embeddings=48, sliding_window=3, num_local_experts=4,
    num_experts_per_tok=2, pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
)  # fmt: skip
IDS = torch.randint(3, 50, (2, 9), generator=torch.Generator().manual_seed(1))
MASK = torch.ones(2, 9, dtype=torch.long)
MASK[0, :3] = 0  # left padding
REAL = MASK.bool()


@pytest.fixture(scope="module", autouse=True)
def _registered():
    huggingface.register()


def _pair(dtype, **overrides):
    """(eager, ours): the same random weights (sinks ~ N(1, 0.3^2)), eager experts, in eval mode and ``dtype``."""
    config = transformers.GptOssConfig(**{**COMMON, **overrides})
    assert config.layer_types == overrides.get("layer_types", ["sliding_attention", "full_attention"])
    torch.manual_seed(0)
    eager = transformers.GptOssForCausalLM._from_config(copy.deepcopy(config), attn_implementation="eager")
    with torch.no_grad():
        for name, p in eager.named_parameters():
            p.normal_(1.0 if (p.dim() == 1 and "norm" in name) or name.endswith("sinks") else 0.0, 0.3)
    ours = transformers.GptOssForCausalLM._from_config(copy.deepcopy(config), attn_implementation="typed_transformer")
    ours.load_state_dict(eager.state_dict())
    for model in (eager, ours):
        model.config._experts_implementation = "eager"
    return eager.eval().to(dtype), ours.eval().to(dtype)


@pytest.fixture(scope="module")
def pairs():
    return {dtype: _pair(dtype) for dtype in (torch.float32, torch.float64)}


def _logits_and_sink_grads(model, backend):
    """The logits on the real (unpadded) positions and each layer's sinks' gradient of a weighted sum of them."""
    model.zero_grad()
    with T.use_backend(backend):
        logits = model(input_ids=IDS, attention_mask=MASK).logits[REAL]
    weights = torch.linspace(-1, 1, logits.numel(), dtype=logits.dtype).view(logits.shape)
    (logits * weights).sum().backward()
    return logits.detach(), [layer.self_attn.sinks.grad.clone() for layer in model.model.layers]


TOLERANCE = {torch.float32: 2e-6, torch.float64: 1e-12}  # relative to the largest value


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_logits_and_the_sinks_gradients_equal_gpt_oss_eager_attention(pairs, dtype, backend):
    eager, ours = pairs[dtype]
    want, want_grads = _logits_and_sink_grads(eager, "eager")
    got, got_grads = _logits_and_sink_grads(ours, backend)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * want.abs().max().item())
    for layer, (got_grad, want_grad) in enumerate(zip(got_grads, want_grads, strict=True)):
        assert want_grad.abs().max() > 1e-2  # the loss depends on every layer's sinks
        scale = want_grad.abs().max().item()
        torch.testing.assert_close(got_grad, want_grad, rtol=tol, atol=tol * scale, msg=f"layer {layer}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_in_half_precision_the_logits_are_as_close_to_float64_as_eagers(pairs, dtype, backend):
    """In bfloat16/float16 (the sinks in that dtype too) gpt-oss's eager attention computes its softmax in the half
    dtype, our eager backend in float32: both are within the half dtype's rounding of the float64 logits, ours no
    further than 1.5x eager's own distance (dropping the sinks moves them by more than 0.1, far beyond)."""
    truth = pairs[torch.float64][0]
    eager, ours = _pair(dtype)
    assert ours.model.layers[0].self_attn.sinks.dtype == dtype
    with torch.no_grad():
        want = truth(input_ids=IDS, attention_mask=MASK).logits[REAL]
        theirs = eager(input_ids=IDS, attention_mask=MASK).logits[REAL].double()
        with T.use_backend(backend):
            got = ours(input_ids=IDS, attention_mask=MASK).logits[REAL].double()
    eager_error, our_error = (theirs - want).abs().max().item(), (got - want).abs().max().item()
    assert eager_error < 0.05 * want.abs().max().item()
    assert our_error <= 1.5 * eager_error, (our_error, eager_error)


def test_the_sinks_and_the_window_matter_in_this_case(pairs):
    """Zeroing the sinks, or running without the window, moves the logits far beyond the tolerance above."""
    eager, ours = pairs[torch.float64]
    with torch.no_grad():
        want = eager(input_ids=IDS, attention_mask=MASK).logits[REAL]
        no_sinks = copy.deepcopy(ours)
        for layer in no_sinks.model.layers:
            layer.self_attn.sinks.zero_()
        moved_by_sinks = (no_sinks(input_ids=IDS, attention_mask=MASK).logits[REAL] - want).abs().max()
        _, unwindowed = _pair(torch.float64, layer_types=["full_attention"] * 2)
        moved_by_window = (unwindowed(input_ids=IDS, attention_mask=MASK).logits[REAL] - want).abs().max()
    assert moved_by_sinks > 0.1 and moved_by_window > 0.01


def test_the_layers_sinks_reach_the_drop_in_with_the_window(pairs, monkeypatch):
    """What the model passes as ``s_aux`` is each layer's own parameter, given to the drop-in as ``sinks`` (not a
    copy: its gradient reaches the parameter), beside the sliding layer's window."""
    seen = []
    real = huggingface.scaled_dot_product_attention

    def spy(*args, attn_mask=None, sinks=None, **kwargs):
        seen.append((attn_mask, sinks))
        return real(*args, attn_mask=attn_mask, sinks=sinks, **kwargs)

    monkeypatch.setattr(huggingface, "scaled_dot_product_attention", spy)
    ours = pairs[torch.float64][1]
    with torch.no_grad():
        ours(input_ids=IDS, attention_mask=MASK)
    assert [sinks is layer.self_attn.sinks for (_, sinks), layer in zip(seen, ours.model.layers, strict=True)] == [
        True,
        True,
    ]
    assert seen[0][0].window_left == 2  # layer 0 slides (window 3): an AttentionMask with the padding as dense
    assert not seen[0][0].dense[0, :, :3].any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_generation_gives_eagers_tokens(pairs, backend):
    eager, ours = pairs[torch.float32]
    settings = dict(attention_mask=MASK, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad(), T.use_backend(backend):
        got = ours.generate(IDS, **settings)
    with torch.no_grad():
        want = eager.generate(IDS, **settings)
    assert got.shape == (2, 17) and torch.equal(got, want)


def test_bad_sinks_are_refused_naming_s_aux():
    q = torch.randn(1, 4, 3, 8)
    module = torch.nn.Module()
    with pytest.raises(ValueError, match=r"s_aux \(attention sinks\) must be a float tensor of shape \(4,\).*got "
                       r"shape \(2,\) torch.float32"):  # fmt: skip
        huggingface.attention_forward(module, q, q, q, None, s_aux=torch.zeros(2))
    with pytest.raises(ValueError, match=r"shape \(4,\).*got shape \(1, 4\)"):
        huggingface.attention_forward(module, q, q, q, None, s_aux=torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"float tensor of shape \(4,\).*got shape \(4,\) torch.int64"):
        huggingface.attention_forward(module, q, q, q, None, s_aux=torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"s_aux \(attention sinks\) must be a tensor of shape \(4,\).*got list"):
        huggingface.attention_forward(module, q, q, q, None, s_aux=[0.0] * 4)
    with pytest.raises(ValueError, match=r"s_aux \(attention sinks\) must be on the queries' device cpu, got meta"):
        huggingface.attention_forward(module, q, q, q, None, s_aux=torch.zeros(4, device="meta"))


NEEDS_KERNEL = pytest.mark.skipif(
    "sinks" not in inspect.signature(kernels.flash_attention).parameters,
    reason="the kernel's issue-44 sinks are not merged",
)


@NEEDS_KERNEL
def test_the_kernel_under_the_interpreter_gives_eagers_logits_and_sinks_gradients():
    """The kernel (head_dim 16, its smallest) in float32 on the padded batch with the sliding layer."""
    eager, ours = _pair(torch.float32, hidden_size=64, head_dim=16)
    want, want_grads = _logits_and_sink_grads(eager, "eager")
    got, got_grads = _logits_and_sink_grads(ours, "triton")
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())
    for got_grad, want_grad in zip(got_grads, want_grads, strict=True):
        scale = want_grad.abs().max().item()
        torch.testing.assert_close(got_grad, want_grad, rtol=1e-4, atol=1e-4 * scale)
