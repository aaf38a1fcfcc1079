"""Gradient checks in float64: backpropagation is the adjoint of the derivative.

TorchLean proves that backpropagation through a post-norm encoder block equals the adjoint
(transpose) of its derivative. Here that theorem is checked numerically on our modules:

* ``torch.autograd.gradcheck`` compares every analytic gradient with central finite
  differences, and ``gradgradcheck`` does the same for second derivatives (double backward);
* the adjoint identity ``<J dx, d> == <dx, J^T d>`` is checked with ``torch.func.jvp``
  (forward mode, J dx) against ``torch.func.vjp`` (reverse mode, J^T d), and the vjp is
  compared with the transpose of the Jacobian built column by column in forward mode;
* negative controls show that these checks bite: a function whose backward is wrong by a
  transposition or a factor fails them.

LayerNorm's side condition (a constant row has zero variance) must give finite values and
gradients, never NaN: eps sits inside the square root.

Everything is tiny (d_model 8, 2 heads, sequences of 3-4) so the file runs in seconds.
"""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.func import functional_call, jacfwd, jvp, vjp

import transformer as T

D_MODEL, HEADS, D_FF = 8, 2, 16
F64 = torch.float64


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=F64, requires_grad=True)


def _mha() -> T.MultiHeadedAttention:
    return T.MultiHeadedAttention(HEADS, D_MODEL, 0.0).double().eval()


def _ff() -> T.PositionwiseFeedForward:
    return T.PositionwiseFeedForward(D_MODEL, D_FF, 0.0).double().eval()


def _encoder_layer(placement: str) -> T.EncoderLayer:
    return T.EncoderLayer(D_MODEL, _mha(), _ff(), 0.0, placement).double().eval()


def _decoder_layer(placement: str) -> T.DecoderLayer:
    return T.DecoderLayer(D_MODEL, _mha(), _mha(), _ff(), 0.0, placement).double().eval()


def _both(fn, *inputs, fast: bool = False) -> None:
    """gradcheck and gradgradcheck; ``fast`` compares v^T J u for random u, v instead of every entry of J
    (torch's fast mode: as sharp against a wrong gradient, many times cheaper on the larger blocks)."""
    assert gradcheck(fn, inputs, fast_mode=fast)
    assert gradgradcheck(fn, inputs, fast_mode=fast)


# --------------------------------------------------------------------------- gradcheck


def test_layer_norm_gradients():
    norm = T.LayerNorm(D_MODEL).double()
    with torch.no_grad():  # non-trivial affine parameters
        norm.weight.copy_(torch.randn(D_MODEL, dtype=F64))
        norm.bias.copy_(torch.randn(D_MODEL, dtype=F64))
    _both(norm, _x(2, 3, D_MODEL))
    # gradients with respect to the parameters too
    x = torch.randn(2, 3, D_MODEL, dtype=F64)
    weight = norm.weight.detach().clone().requires_grad_(True)
    bias = norm.bias.detach().clone().requires_grad_(True)
    _both(lambda w, b: functional_call(norm, {"weight": w, "bias": b}, (x,)), weight, bias)


def test_reference_attention_gradients_with_a_mask_and_a_fully_masked_row():
    mask = torch.tensor([[[True, False, True, True], [True, True, False, False], [False, False, False, False]]])
    q, k, v = _x(1, 3, 4), _x(1, 4, 4), _x(1, 4, 3)
    assert gradcheck(lambda q, k, v: T.attention(q, k, v, mask), (q, k, v))  # every entry
    _both(lambda q, k, v: T.attention(q, k, v, mask), q, k, v, fast=True)
    _both(lambda q, k, v: T.attention(q, k, v)[0], q, k, v, fast=True)


def test_multi_head_attention_gradients():
    mha = _mha()
    x, m = _x(1, 3, D_MODEL), _x(1, 4, D_MODEL)
    causal = T.subsequent_mask(3)
    _both(lambda x: mha(x, x, x, causal), x, fast=True)  # self-attention
    _both(lambda x, m: mha(x, m, m), x, m, fast=True)  # cross-attention: gradients reach the memory too


def test_feed_forward_gradients():
    ff = _ff()
    _both(ff, _x(2, 3, D_MODEL))
    gelu = T.PositionwiseFeedForward(D_MODEL, D_FF, 0.0, activation="gelu").double().eval()
    _both(gelu, _x(2, 3, D_MODEL))


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_sublayer_connection_gradients(placement):
    sub = T.SublayerConnection(D_MODEL, 0.0, placement).double().eval()
    ff = _ff()
    _both(lambda x: sub(x, ff), _x(2, 3, D_MODEL))


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_encoder_layer_gradients(placement):
    layer = _encoder_layer(placement)
    mask = torch.tensor([[[True, True, False]]])
    x = _x(1, 3, D_MODEL)
    _both(lambda x: layer(x, mask), x, fast=True)
    if placement == "post":  # TorchLean's block: every entry of the Jacobian, too
        assert gradcheck(lambda x: layer(x, mask), (x,))


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_decoder_layer_gradients(placement):
    layer = _decoder_layer(placement)
    src_mask = torch.tensor([[[True, True, True, False]]])
    _both(lambda x, m: layer(x, m, src_mask, T.subsequent_mask(3)), _x(1, 3, D_MODEL), _x(1, 4, D_MODEL), fast=True)


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_whole_model_gradients_in_eval_mode(placement):
    """Log-probabilities of the full model, differentiated with respect to parameters on every path."""
    torch.manual_seed(1)
    model = T.make_model(7, 9, N=1, d_model=D_MODEL, d_ff=D_FF, h=HEADS, dropout=0.0, norm_placement=placement)
    model = model.double().eval()
    src = torch.tensor([[1, 2, 3, 0]])
    tgt = torch.tensor([[1, 4, 0]])
    src_mask, tgt_mask = T.padding_mask(src, 0), T.target_mask(tgt, 0)

    def log_probs(**params):
        hidden = functional_call(model, params, (src, tgt, src_mask, tgt_mask))
        return functional_call(
            model.generator,
            {k.removeprefix("generator."): v for k, v in params.items() if k.startswith("generator.")},
            (hidden,),
        )

    def param(name):
        return dict(model.named_parameters())[name].detach().clone().requires_grad_(True)

    first = [
        "src_embed.0.lut.weight",
        "encoder.layers.0.self_attn.q_proj.weight",
        "decoder.layers.0.src_attn.k_proj.weight",
        "decoder.norm.weight",
        "generator.proj.weight",
    ]
    second = ["encoder.norm.bias", "decoder.layers.0.self_attn.v_proj.bias", "generator.proj.bias"]
    for names, check in ((first, gradcheck), (second, gradgradcheck)):
        # functional_call needs every parameter the generator uses, so always pass both generator tensors
        extra = [n for n in ("generator.proj.weight", "generator.proj.bias") if n not in names]
        fixed = {n: dict(model.named_parameters())[n].detach() for n in extra}
        inputs = tuple(param(n) for n in names)
        assert check(
            lambda *ps, names=names, fixed=fixed: log_probs(**dict(zip(names, ps, strict=True)), **fixed),
            inputs,
            fast_mode=True,
        )


# --------------------------------------------------------------------------- LayerNorm's side condition


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("value", [0.0, 3.0, -1e4, 0.1])
def test_layer_norm_constant_row_is_finite_and_gives_the_bias(dtype, value):
    norm = T.LayerNorm(D_MODEL).to(dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(-2, 2, D_MODEL))
        norm.bias.copy_(torch.arange(D_MODEL, dtype=dtype))
    x = torch.full((2, 3, D_MODEL), value, dtype=dtype, requires_grad=True)
    out = norm(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, norm.bias.detach().expand_as(out), atol=1e-3, rtol=0)
    out.pow(2).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in norm.parameters())


def test_layer_norm_gradcheck_at_a_constant_row():
    """Zero variance is inside the domain where LayerNorm is smooth (eps > 0): gradcheck passes there."""
    norm = T.LayerNorm(D_MODEL, eps=1e-3).double()
    x = torch.full((1, D_MODEL), 2.5, dtype=F64, requires_grad=True)
    _both(norm, x)


# --------------------------------------------------------------------------- the adjoint identity


def _adjoint_gap(f, x: torch.Tensor, dx: torch.Tensor, d: torch.Tensor) -> float:
    """| <J dx, d> - <dx, J^T d> | relative to the terms' size (J dx by jvp, J^T d by vjp)."""
    _, j_dx = jvp(f, (x,), (dx,))
    _, pullback = vjp(f, x)
    (jt_d,) = pullback(d)
    left, right = (j_dx * d).sum(), (dx * jt_d).sum()
    scale = j_dx.norm() * d.norm() + dx.norm() * jt_d.norm()
    return float((left - right).abs().detach() / scale.detach())


def _post_norm_block():
    layer = _encoder_layer("post")
    mask = torch.tensor([[[True, True, True, False]]])
    return layer, (lambda x: layer(x, mask))


def test_adjoint_identity_on_the_post_norm_encoder_block():
    layer, f = _post_norm_block()
    assert layer.sublayer[0].norm_placement == "post"
    x = torch.randn(2, 4, D_MODEL, dtype=F64)
    for _ in range(5):
        dx, d = torch.randn_like(x), torch.randn_like(x)
        assert _adjoint_gap(f, x, dx, d) < 1e-12


def test_backprop_is_the_transpose_of_the_forward_mode_jacobian():
    """vjp(d) equals J^T d with J assembled column by column by forward-mode AD (jacfwd)."""
    _, f = _post_norm_block()
    x = torch.randn(2, 4, D_MODEL, dtype=F64)
    jacobian = jacfwd(f)(x).reshape(x.numel(), x.numel())  # rows: outputs, columns: inputs
    d = torch.randn_like(x)
    _, pullback = vjp(f, x)
    torch.testing.assert_close(pullback(d)[0].reshape(-1), jacobian.T @ d.reshape(-1), rtol=1e-10, atol=1e-12)
    # ... and the forward-mode Jacobian itself agrees with central finite differences
    dx, eps = torch.randn_like(x), 1e-6
    with torch.no_grad():
        numeric = (f(x + eps * dx) - f(x - eps * dx)) / (2 * eps)
    torch.testing.assert_close(jacobian @ dx.reshape(-1), numeric.reshape(-1), rtol=1e-6, atol=1e-7)


class _TransposeForgotten(torch.autograd.Function):
    """x @ W whose backward multiplies by W instead of W^T: a plausible hand-written-backward bug."""

    @staticmethod
    def forward(x, weight):
        return x @ weight

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.weight = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        return grad @ ctx.weight, None  # wrong: should be grad @ ctx.weight.T

    @staticmethod
    def jvp(ctx, x_tangent, weight_tangent):
        return x_tangent @ ctx.weight  # forward mode is right


class _DoubledBackward(torch.autograd.Function):
    """The identity whose backward doubles the gradient."""

    @staticmethod
    def forward(x):
        return x.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad

    @staticmethod
    def jvp(ctx, tangent):
        return tangent


def test_the_adjoint_check_bites_on_a_wrong_backward():
    layer, f = _post_norm_block()
    weight = torch.randn(D_MODEL, D_MODEL, dtype=F64)  # not symmetric: W != W^T
    x = torch.randn(1, 4, D_MODEL, dtype=F64)
    dx, d = torch.randn_like(x), torch.randn_like(x)
    assert _adjoint_gap(lambda x: f(_TransposeForgotten.apply(x, weight)), x, dx, d) > 1e-3
    assert _adjoint_gap(lambda x: f(_DoubledBackward.apply(x)), x, dx, d) > 1e-3
    # and gradcheck rejects the same bug
    xr = x.clone().requires_grad_(True)
    for fast in (False, True):
        assert not gradcheck(
            lambda x: f(_TransposeForgotten.apply(x, weight)), (xr,), raise_exception=False, fast_mode=fast
        )
    # the same checks pass once the backward is right
    assert _adjoint_gap(lambda x: f(x @ weight), x, dx, d) < 1e-12
