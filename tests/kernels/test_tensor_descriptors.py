"""The forward's two ways of reading q, k, v and writing out (issue 27): tensor descriptors (TMA) where every stride
and the data are 16-byte aligned, pointers otherwise, chosen at launch time. Both run under the interpreter (it
executes tl.make_tensor_descriptor on the CPU), and they must give the same bits."""

import contextvars

import pytest
import torch
from attention_reference import allowed_matrix, attention
from launch_capture import launched, launches

from transformer.kernels import _args, _tuning, flash_attention, flash_attention_with_lse


def _make(batch=2, heads=4, kv_heads=2, q_len=37, k_len=53, head_dim=40, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, q_len, head_dim, generator=gen, dtype=dtype)
    k, v = (torch.randn(batch, kv_heads, k_len, head_dim, generator=gen, dtype=dtype) for _ in range(2))
    return q, k, v


def _misaligned_rows(t):
    """The same values with rows head_dim + 1 elements apart (not a multiple of 16 bytes in float32) while the batch
    and head strides stay multiples of 16 bytes: only the row stride rules descriptors out."""
    batch, heads, length, head_dim = t.shape
    s_row = head_dim + 1
    s_h = -(-length * s_row // 16) * 16
    storage = torch.zeros(batch * heads * s_h, dtype=t.dtype)
    out = storage.as_strided(t.shape, (heads * s_h, s_h, s_row, 1))
    out.copy_(t)
    assert (out.stride(1) * t.element_size()) % 16 == 0 and (s_row * t.element_size()) % 16
    return out


def _misaligned_data(t):
    """The same values, contiguous, starting 4 bytes past a 16-byte boundary (every stride aligned, the data not)."""
    flat = torch.empty(t.numel() + 1, dtype=t.dtype)[1:]
    out = flat.view(t.shape)
    out.copy_(t)
    return out


# Triton 3.4 and 3.5's interpreter checks a descriptor's strides in elements, not bytes: the CPU forward reads
# through pointers there (kernels/_tuning.interpreted_descriptors), so the tests that run descriptors on the CPU skip
interpreted = pytest.mark.skipif(
    not _tuning.interpreted_descriptors(_tuning.TRITON_VERSION),
    reason="this Triton's interpreter does not run tensor descriptors as compiled kernels do (before 3.6)",
)


def _tma_of_the_forward_launch(q, k, v, **kwargs):
    with launches() as seen:
        out = flash_attention(q, k, v, **kwargs)
    return launched(seen, "_fwd_kernel")["TMA"], out


def test_tma_ok_requires_16_byte_aligned_strides_and_data():
    q, _, _ = _make(head_dim=40)  # float32 rows of 160 bytes
    assert _args.tma_ok(q)
    assert not _args.tma_ok(_misaligned_rows(q))  # rows 164 bytes apart
    assert not _args.tma_ok(_misaligned_data(q))
    assert not _args.tma_ok(q.transpose(-1, -2))  # head_dim not contiguous
    assert not _args.tma_ok(q[:, :, :1].expand(-1, -1, 5, -1))  # rows 0 bytes apart
    assert _args.tma_ok(q.transpose(1, 2).contiguous().transpose(1, 2))  # (batch, seq, heads, dim) storage
    assert not _args.tma_ok(_make(head_dim=20, dtype=torch.float16)[0])  # 40-byte rows


@interpreted
@pytest.mark.parametrize(
    "prepare,expected",
    [
        (lambda t: t, True),
        (_misaligned_rows, False),
        (_misaligned_data, False),
        (lambda t: t.transpose(1, 2).contiguous().transpose(1, 2), True),
    ],
    ids=["contiguous", "rows-not-16-byte-aligned", "data-not-16-byte-aligned", "seq-major"],
)
def test_the_launch_chooses_descriptors_only_where_the_layout_allows(prepare, expected):
    """A launch-time condition: descriptors for aligned layouts, the pointer path for any other; the result equals the
    reference either way."""
    q, k, v = _make()
    q2, k2, v2 = (prepare(t) for t in (q, k, v))
    assert torch.equal(q2, q) and torch.equal(v2, v)
    tma, out = _tma_of_the_forward_launch(q2, k2, v2, causal=True)
    assert tma is expected
    allowed = allowed_matrix(2, 4, 37, 53, causal=True)
    expected_out, _ = attention(q.double(), k.double(), v.double(), allowed)
    assert (out.double() - expected_out).abs().max() < 1e-5


@interpreted
@pytest.mark.parametrize("head_dim", [16, 40, 64])
def test_descriptor_and_pointer_paths_give_the_same_bits(head_dim):
    """Unequal lengths, GQA, causal, key lengths shorter than k_len (the padded keys' values are NaN: both paths must
    read them as 0), a key mask, dropout, and head_dim 40 (columns past HEAD_DIM read as 0): the same output and
    logsumexp bits through descriptors and through pointers."""
    q, k, v = _make(head_dim=head_dim)
    v[1, :, 30:] = float("nan")  # keys past batch row 1's length
    k[1, :, 30:] = float("nan")
    key_lengths = torch.tensor([53, 30])
    key_mask = torch.rand(2, 53, generator=torch.Generator().manual_seed(1)) > 0.2
    results = []
    for enabled in (True, False):
        with _tuning.tensor_descriptors(enabled), launches() as seen:
            out, lse = flash_attention_with_lse(
                q, k, v, causal=True, key_lengths=key_lengths, key_mask=key_mask, dropout_p=0.2, seed=9
            )
        assert launched(seen, "_fwd_kernel")["TMA"] is enabled
        results.append((out, lse))
    assert not results[0][0].isnan().any()
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


@interpreted
def test_the_registered_op_and_split_kv_read_through_pointers():
    """torch.compile traces the registered op's body (no descriptors there), and the split-KV forward writes float32
    partials through pointers: both launch with TMA off, and agree with the eager descriptor path."""
    from transformer.kernels import _op

    q, k, v = _make(q_len=1, k_len=300)
    with _tuning.force_kv_splits(1), launches() as seen:
        out_op, _ = _op.flash_attn_fwd_interpreted(q, k, v, None, None, None, None, False, 0.25, 0.0)
    assert launched(seen, "_fwd_kernel")["TMA"] is False
    with _tuning.force_kv_splits(3), launches() as seen:
        split = flash_attention(q, k, v, scale=0.25)
    assert launched(seen, "_fwd_kernel")["TMA"] is False and launched(seen, "_fwd_kernel")["n_splits"] == 3
    with _tuning.force_kv_splits(1):
        tma, eager = _tma_of_the_forward_launch(q, k, v, scale=0.25)
    assert tma is True and torch.equal(out_op, eager)
    assert (split - eager).abs().max() < 1e-6


def test_the_forwards_autotune_key_tells_descriptors_from_pointers(monkeypatch):
    """Off the interpreter the forward is an autotuner whose key holds TMA (a config tuned for one path is not reused
    for the other); the backward kernels, which have no such switch, keep TUNE_KEY (every kernel adds BLOCK_D2, the
    head-dim tile: tests/kernels/test_split_head_dim.py)."""
    import triton

    from transformer.kernels import _backward, _forward

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    forward = _tuning.build(_forward._fwd_kernel, "forward")
    dq = _tuning.build(_backward._dq_kernel, "dq")
    assert isinstance(forward, triton.runtime.autotuner.Autotuner)
    assert forward.keys == _tuning.TUNE_KEY + ["TMA", "BLOCK_D2"] and dq.keys == _tuning.TUNE_KEY + ["BLOCK_D2"]


def test_on_cuda_descriptors_need_sm90_and_set_an_allocator(monkeypatch):
    """A CUDA device below sm_90 (no tensor memory accelerator) reads through pointers; on sm_90 the first check sets
    Triton's allocator (in-kernel descriptors need a scratch buffer) unless one is set already. (No GPU needed: the
    device's capability is faked.)"""
    import triton
    from triton.runtime import _allocation

    capabilities, allocators = {0: (8, 0), 1: (9, 0)}, []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: capabilities[index])
    monkeypatch.setattr(triton, "set_allocator", allocators.append)
    monkeypatch.setattr(_tuning, "_tma_capable", {})
    assert not _tuning.tma_enabled(torch.device("cuda", 0)) and allocators == []
    assert _tuning.tma_enabled(torch.device("cuda", 1)) and len(allocators) == 1

    def with_an_allocator_set():  # in a copy of the context: the process's allocator stays as it was
        _allocation._allocator.set(lambda size, alignment, stream: None)
        return _tuning.tma_enabled(torch.device("cuda", 1))

    assert contextvars.copy_context().run(with_an_allocator_set) and len(allocators) == 1
    with _tuning.tensor_descriptors(False):
        assert not _tuning.tma_enabled(torch.device("cuda", 1))
