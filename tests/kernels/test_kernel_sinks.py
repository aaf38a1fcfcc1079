"""Attention sinks in the fused kernel (gpt-oss; docs/moe.md, "Attention sinks"): the forward's online softmax starts
from the sink (m = z_h, l = 1), so the logsumexp includes it; dq, dk, dv are the usual backward given that lse, and
the sinks' gradient d z_h = -sum_i exp(z_h - lse_i) (rowsum(dO_i * O_i) - d lse_i) is computed in torch.

The oracle is the reference backend (``transformer.backends.reference.attention(..., sinks=)``, itself equal to
transformers' gpt-oss eager attention, tests/test_attention_sinks.py) run in float64 with autograd, given the allowed
keys of tests/kernels/structure_reference.py as a dense mask and the keys and values repeated for grouped-query
attention; the kernel's error is held to the FlashAttention rule (at most twice that backend's own error in fp32 or
fp16, plus a floor). Seeded random cases combine the sinks with masks, key lengths, windows, documents, softcap,
ALiBi, grouped-query attention, causal and queries shorter than the keys, the split-KV forward and the logsumexp's
own gradient.
"""

import math
import random

import pytest
import torch
from kernel_compare import assert_close_to_reference
from structure_reference import allowed_keys, random_documents

from transformer.backends import reference as reference_backend
from transformer.kernels import _tuning, flash_attention, flash_attention_with_lse, unsupported_reason

HAS_CUDA = torch.cuda.is_available()
BLOCK_SHAPES = [(32, 32), (16, 64), (64, 16), (16, 16)]
STRUCTURE = ("documents", "window_left", "window_right", "softcap", "alibi_slopes", "causal", "key_lengths")


def draw_case(rng: random.Random) -> dict:
    """Sizes, the sinks (some far above the scores, so they take most of a row) and a random mix of the rest."""
    heads = 4
    kv_heads = rng.choice([1, 2, 4])
    q_len = rng.randint(1, 40)
    k_len = rng.randint(q_len, 56) if rng.random() < 0.7 else rng.randint(max(1, q_len - 8), q_len + 8)
    case = dict(batch=rng.choice([1, 2]), heads=heads, kv_heads=kv_heads, q_len=q_len, k_len=k_len)
    case.update(head_dim=rng.choice([16, 32]), blocks=rng.choice(BLOCK_SHAPES), causal=rng.random() < 0.4)
    case["sinks"] = [rng.choice([-4.0, 0.0, 1.5, 6.0]) + rng.uniform(-1, 1) for _ in range(heads)]
    case.update(documents=None, window_left=None, window_right=None, softcap=None, alibi_slopes=None)
    case.update(key_lengths=None, mask=None)
    if rng.random() < 0.3 and q_len <= k_len:
        case["documents"] = random_documents(rng, case["batch"], k_len, torch.int64)
    if rng.random() < 0.4:
        case["window_left"] = rng.choice([0, 3, rng.randint(1, 20)])
    if rng.random() < 0.4:
        case["softcap"] = rng.choice([0.5, 2.0])
    if rng.random() < 0.3:
        case["alibi_slopes"] = torch.rand(heads, generator=torch.Generator().manual_seed(rng.randint(0, 99)))
    if rng.random() < 0.3:
        case["key_lengths"] = torch.tensor([rng.randint(0, k_len) for _ in range(case["batch"])])
    if rng.random() < 0.3:
        gen = torch.Generator().manual_seed(rng.randint(0, 99))
        case["mask"] = torch.rand(case["batch"], 1, q_len, k_len, generator=gen) > 0.3
    return case


def _oracle(q, k, v, case, sinks):
    """(out, lse) of the reference backend with sinks, the allowed keys as a dense mask, k/v repeated for GQA."""
    batch, heads, q_len, head_dim = q.shape
    k_len = k.shape[2]
    allowed = allowed_keys(
        batch, q_len, k_len, documents=case["documents"], window_left=case["window_left"],
        window_right=case["window_right"], causal=case["causal"], key_lengths=case["key_lengths"], mask=case["mask"],
    ).expand(batch, heads, q_len, k_len)  # fmt: skip
    group = heads // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    slopes = case["alibi_slopes"]
    slopes = None if slopes is None else slopes.to(q.dtype)
    out, _ = reference_backend.attention(q, k, v, allowed, softcap=case["softcap"], alibi_slopes=slopes, sinks=sinks)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(head_dim)
    if case["softcap"] is not None:
        scores = case["softcap"] * torch.tanh(scores / case["softcap"])
    if slopes is not None:
        distance = torch.arange(q_len)[:, None] + (k_len - q_len) - torch.arange(k_len)
        scores = scores - slopes[None, :, None, None] * distance.abs().to(q.dtype)
    scores = scores.masked_fill(~allowed, float("-inf"))
    column = sinks.to(q.dtype)[None, :, None, None].expand(batch, heads, q_len, 1)
    return out, torch.cat([scores, column], -1).logsumexp(-1)


def run(case, dtype, device, lse_weight=0.0, seed=3):
    """((oracle float64, oracle in dtype, kernel) each of (out, lse, [dq, dk, dv, d_sinks])); the loss is
    sum(out * g) + lse_weight * sum(lse * g2), so the logsumexp's gradient is checked when lse_weight != 0."""
    batch, heads, kv_heads, q_len, k_len, d = (case[n] for n in ("batch", "heads", "kv_heads", "q_len", "k_len",
                                                                 "head_dim"))  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    shapes = [(batch, heads, q_len, d), (batch, kv_heads, k_len, d), (batch, kv_heads, k_len, d)]
    bases = [torch.randn(s, generator=gen) for s in shapes]
    g_out, g_lse = torch.randn(shapes[0], generator=gen), torch.randn(batch, heads, q_len, generator=gen)
    sinks = torch.tensor(case["sinks"])

    def grads(fn, dtype, on):
        leaves = [t.to(device=on, dtype=dtype).requires_grad_() for t in bases]
        z = sinks.to(device=on, dtype=dtype).requires_grad_()
        out, lse = fn(*leaves, z)
        loss = (out * g_out.to(on, dtype)).sum() + lse_weight * (lse * g_lse.to(on, lse.dtype)).sum()
        loss.backward()
        return out.detach().cpu(), lse.detach().cpu(), [t.grad.cpu() for t in (*leaves, z)]

    cpu_case = dict(case)
    ref = grads(lambda q, k, v, z: _oracle(q, k, v, cpu_case, z), torch.float64, "cpu")
    eager = grads(lambda q, k, v, z: _oracle(q, k, v, cpu_case, z), dtype, "cpu")
    structure = {n: case[n].to(device) if isinstance(case[n], torch.Tensor) else case[n] for n in STRUCTURE}
    mask = None if case["mask"] is None else case["mask"].to(device)
    blocks = _tuning.interpret_blocks(*case["blocks"]) if not HAS_CUDA else torch.enable_grad()
    with blocks:
        mine = grads(
            lambda q, k, v, z: flash_attention_with_lse(q, k, v, mask=mask, sinks=z, **structure), dtype, device
        )
    return ref, eager, mine


def assert_matches(case, dtype, device, lse_weight=0.0):
    ref, eager, mine = run(case, dtype, device, lse_weight)
    names = ("out", "lse", "dq", "dk", "dv", "d_sinks")
    for name, m, e, r in zip(names, [*mine[:2], *mine[2]], [*eager[:2], *eager[2]], [*ref[:2], *ref[2]], strict=True):
        assert torch.isfinite(m).all(), f"{name} has non-finite values: {case}"
        assert_close_to_reference(f"{name} {case}", m.float(), e.float(), r, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_sinks_match_the_reference_backend_in_float64_with_every_structure(dtype, device):
    """Seeded random cases: out, lse and the gradients of q, k, v and the sinks."""
    rng = random.Random(f"sinks-{dtype}")
    for _ in range(6):
        assert_matches(draw_case(rng), dtype, device)


def test_the_logsumexp_gradient_reaches_the_sinks(device):
    """A loss on the logsumexp too: d lse_i / d z_h = exp(z_h - lse_i) joins the sinks' gradient."""
    rng = random.Random("lse")
    for _ in range(3):
        assert_matches(draw_case(rng), torch.float32, device, lse_weight=0.7)


def test_split_kv_decoding_with_sinks(device):
    """Short queries over long keys take the split-KV forward: only the first split starts from the sink, and the
    combine adds the splits' sums (a sink in every split would count it several times)."""
    rng = random.Random("split")
    for index in range(3):
        case = draw_case(rng)
        case.update(q_len=rng.randint(1, 3), k_len=rng.randint(150, 230), blocks=(16, 64), mask=None, documents=None)
        case["window_left"] = 40 if index == 1 else None
        assert_matches(case, torch.float32, device)


def test_a_row_with_no_allowed_key_outputs_zero_and_its_lse_is_the_sink(device):
    """Every key masked for a row: the sink alone is left, so out = 0 and lse = z_h exactly (not -inf); the row
    gives the sink no gradient from the output (its value is zero) but the full d lse from the logsumexp."""
    q, k, v = (torch.randn(1, 2, n, 16, device=device) for n in (3, 5, 5))
    z = torch.tensor([0.25, -2.0], device=device, requires_grad=True)
    key_lengths = torch.tensor([0], device=device)
    out, lse = flash_attention_with_lse(q, k, v, key_lengths=key_lengths, sinks=z)
    assert torch.equal(out, torch.zeros_like(out))
    assert torch.equal(lse, z.detach()[None, :, None].expand(1, 2, 3).float())
    (grad,) = torch.autograd.grad((out.sum() + lse.sum()), z)
    assert torch.equal(grad, torch.full((2,), 3.0, device=device))


def test_a_sink_of_minus_infinity_weight_is_no_sink(device):
    """A very negative sink takes nothing: the result is the kernel without sinks, to rounding."""
    q, k, v = (torch.randn(2, 2, n, 16, device=device) for n in (7, 9, 9))
    plain = flash_attention(q, k, v, causal=True)
    sunk = flash_attention(q, k, v, causal=True, sinks=torch.full((2,), -1e4, device=device))
    torch.testing.assert_close(sunk, plain, rtol=0, atol=1e-6)


def test_bad_sinks_are_refused_by_name(device):
    q = torch.randn(1, 2, 4, 16, device=device)
    with pytest.raises(ValueError, match=r"sinks must be a float tensor of one logit per query head, shape \(heads,\)"
                       r"=\(2,\), got \(3\)"):  # fmt: skip
        flash_attention(q, q, q, sinks=torch.zeros(3, device=device))
    with pytest.raises(ValueError, match=r"sinks must be a float tensor.*got \(2\) torch.int64"):
        flash_attention(q, q, q, sinks=torch.zeros(2, dtype=torch.long, device=device))
    reason = unsupported_reason(q, q, q, sinks=torch.zeros(2, 1, device=device))
    assert reason is not None and "sinks" in reason
    assert unsupported_reason(q, q, q, sinks=torch.zeros(2, device=device)) is None


def test_the_registered_op_functorch_and_compile_give_the_eager_sinks_gradient(device):
    """The three other routes of kernels/_op.py (the registered op under a torch function mode, functorch's
    ``torch.func.grad``, ``torch.compile(fullgraph=True)``) give the eager autograd.Function's values and gradients,
    the sinks' included, bit for bit."""
    from torch.overrides import TorchFunctionMode

    class Passthrough(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, n, 16, generator=gen).to(device).requires_grad_() for n in (5, 7, 7))
    z = torch.tensor([1.0, -2.0], device=device, requires_grad=True)

    def loss(fn):
        out, lse = fn(q, k, v, z)
        return torch.autograd.grad((out * out).sum() + lse.sum(), (q, k, v, z))

    def plain(q, k, v, z):
        return flash_attention_with_lse(q, k, v, sinks=z, causal=True)

    eager = loss(plain)
    with Passthrough():
        registered = loss(plain)
    compiled = loss(torch.compile(plain, fullgraph=True))
    for got in (registered, compiled):
        for a, b in zip(got, eager, strict=True):
            assert torch.equal(a, b)
    detached = [t.detach() for t in (q, k, v)]
    func = torch.func.grad(
        lambda s: sum(t.pow(2).sum() if i == 0 else t.sum() for i, t in enumerate(plain(*detached, s)))
    )
    assert torch.equal(func(z.detach()), eager[3])
