"""The host path's shortcuts (issue 27, host cost per call) change no result: the validation cache still checks what
varies per call, the one-output autograd graph gives the gradients of the two-output one, and an autotuner's
remembered choice launches the same config with the same arguments as the autotuner itself."""

import pytest
import torch
import triton

from transformer.kernels import _args, _forward, _validate, flash_attention, flash_attention_with_lse


def _qkv(q_len=12, k_len=20, head_dim=16, grad=False):
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 2, q_len, head_dim, generator=gen)
    k, v = (torch.randn(2, 2, k_len, head_dim, generator=gen) for _ in range(2))
    return [t.requires_grad_(grad) for t in (q, k, v)]


def test_q_k_v_are_checked_once_per_signature_and_the_rest_every_call(monkeypatch):
    q, k, v = _qkv(q_len=13, k_len=21)
    calls = []
    real = _validate._validate_qkv
    monkeypatch.setattr(_validate, "_validate_qkv", lambda *args: calls.append(1) or real(*args))
    _validate._GOOD_QKV.clear()
    for _ in range(3):
        _validate.validate(q, k, v)
    assert len(calls) == 1
    with pytest.raises(ValueError, match="mask of shape"):  # the same q, k, v: the mask is still checked
        _validate.validate(q, k, v, mask=torch.ones(3, 13, 21, dtype=torch.bool))
    with pytest.raises(ValueError, match="dropout_p must be a float"):
        _validate.validate(q, k, v, dropout_p=1.5)
    with pytest.raises(ValueError, match="key_lengths must have shape"):
        _validate.validate(q, k, v, key_lengths=torch.ones(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="head_dim"):  # another signature is checked in full
        _validate.validate(q[..., :8], k[..., :8], v[..., :8])
    with pytest.raises(ValueError, match=r"k.dtype must equal q.dtype"):
        _validate.validate(q, k.double(), v)
    assert len(calls) == 3


def test_flash_attention_alone_has_one_output_in_the_graph_and_the_same_gradients():
    """flash_attention (out only) records a one-output autograd node; its gradients are the bits of the two-output
    node's (flash_attention_with_lse) when the logsumexp is unused."""
    grads = []
    for fn in (flash_attention, lambda *a, **kw: flash_attention_with_lse(*a, **kw)[0]):
        q, k, v = _qkv(grad=True)
        out = fn(q, k, v, causal=True, dropout_p=0.2, seed=5)
        out.backward(torch.cos(out.detach()))
        grads.append((out.grad_fn.name(), out.detach(), q.grad, k.grad, v.grad))
    assert grads[0][0] == "_EagerFlashAttentionOutBackward"
    assert grads[1][0] == "_EagerFlashAttentionBackward"
    for a, b in zip(grads[0][1:], grads[1][1:], strict=True):
        assert torch.equal(a, b)


class _Timed(triton.runtime.Autotuner):
    """An autotuner over the interpreted kernel whose 'timing' prefers ``best`` (no GPU needed) and counts runs."""

    def __init__(self, fn, configs, best):
        super().__init__(fn, fn.arg_names, configs, ["Q_BUCKET", "HEAD_DIM", "CAUSAL"], None, None)
        self.best, self.runs = best, 0

    def _bench(self, *args, config, **meta):
        return [1.0 if config is self.best else 2.0] * 3

    def run(self, *args, **kwargs):
        self.runs += 1
        return super().run(*args, **kwargs)


def test_an_autotuners_choice_is_remembered_and_launched_directly(monkeypatch):
    """The first call per launcher key goes through the autotuner (it 'times' both configs); later calls launch its
    chosen config directly, with the bits the autotuner's own launch gave; another key asks the autotuner again."""
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n}) for m, n in ((16, 64), (32, 16))]
    tuner = _Timed(_forward._fwd_kernel, configs, configs[1])
    monkeypatch.setattr(_forward, "fwd_kernel", tuner)
    monkeypatch.setattr(_forward, "INTERPRETED", False)  # an autotuner passes its own BLOCK_M / BLOCK_N
    _args.forget()
    q, k, v = _qkv(q_len=40, k_len=70)
    first = flash_attention(q, k, v, causal=True)
    assert tuner.runs == 1 and tuner.best_config is configs[1]
    again = flash_attention(q, k, v, causal=True)
    assert tuner.runs == 1  # the autotuner was not asked again
    assert torch.equal(first, again)
    monkeypatch.setattr(_forward, "fwd_kernel", _forward._fwd_kernel)
    monkeypatch.setattr(_forward, "INTERPRETED", True)
    from transformer.kernels import _tuning

    with _tuning.interpret_blocks(32, 16):  # the chosen config, launched as a plain interpreted kernel
        assert torch.equal(flash_attention(q, k, v, causal=True), first)
    with _tuning.interpret_blocks(16, 64):  # the other config sums in another order: the choice mattered
        assert not torch.equal(flash_attention(q, k, v, causal=True), first)
    monkeypatch.setattr(_forward, "fwd_kernel", tuner)
    monkeypatch.setattr(_forward, "INTERPRETED", False)
    flash_attention(q, k, v, causal=False)  # another key: the autotuner runs again
    assert tuner.runs == 2
    _args.forget()
