"""head_dim 80 and 96 in two power-of-two pieces (issue 27): 80 = 64 + 16, 96 = 64 + 32 instead of one 128-wide tile
(kernels/_head_dim.py chooses, kernels/_pieces.py holds the tiles). Under ``_head_dim.forced("split")`` the forward
(both load paths: tensor descriptors and pointers; the split-KV forward), dQ and dK/dV run the pieces; every check
compares with a float64 reference (the FlashAttention rule of kernel_compare.py) and asserts, from the recorded
launches, that the kernels really ran split. Also 48 = 32 + 16 and 72 = 64 + 16 (a second piece partly padding). The
committed sm_90 compile figures and the launcher's default that follows them: test_split_head_dim_resources.py."""

import pytest
import torch
from attention_reference import allowed_matrix, max_err
from kernel_compare import assert_matches_dropout_reference, compare_on_views, rand
from launch_capture import launched, launches
from philox_model import P, model_keep
from structure_reference import reference

from transformer.kernels import _backward, _forward, _head_dim, _tuning, flash_attention, flash_attention_with_lse

KERNELS = ("_fwd_kernel", "_dkdv_kernel", "_dq_kernel")


def assert_tiles(seen, head_dim, kernels=KERNELS):
    """Every kernel of ``kernels`` in the recorded launches ran the two pieces of ``head_dim``."""
    first, second = _head_dim.pieces(head_dim)
    for name in kernels:
        for kernel, args in seen:
            if kernel == name:
                assert (args["BLOCK_D"], args["BLOCK_D2"]) == (first, second), (name, args["BLOCK_D"], args["BLOCK_D2"])


@pytest.fixture(autouse=True)
def split():
    with _head_dim.forced("split"):
        yield


def test_pieces_rule():
    """The largest power of two below head_dim plus the power of two (>= 16) at or above the rest, only where that
    is narrower than the padded tile."""
    assert _head_dim.pieces(80) == (64, 16) and _head_dim.pieces(96) == (64, 32)
    assert _head_dim.pieces(72) == (64, 16) and _head_dim.pieces(48) == (32, 16) and _head_dim.pieces(40) == (32, 16)
    assert _head_dim.pieces(160) == (128, 32) and _head_dim.pieces(192) == (128, 64)
    for head_dim in (16, 24, 32, 64, 112, 120, 128, 256, 17):  # a power of two, or no saving (64 + 64 = 128)
        assert _head_dim.pieces(head_dim) is None, head_dim


def test_tile_modes_and_the_environment_variable(monkeypatch):
    assert _head_dim.tile("dq", 80) == (("BLOCK_D", 64), ("BLOCK_D2", 16))
    assert _head_dim.tile("forward", 64) == (("BLOCK_D", 64), ("BLOCK_D2", 0))  # nothing to split
    with _head_dim.forced("padded"):
        assert _head_dim.tile("dkdv", 96) == (("BLOCK_D", 128), ("BLOCK_D2", 0))
        with _head_dim.forced("auto"):  # the compile check's choice: not the split-KV forward, only at 80 and 96
            assert _head_dim.tile("forward", 96) == (("BLOCK_D", 64), ("BLOCK_D2", 32))
            assert _head_dim.tile("dkdv", 80) == _head_dim.tile("dq", 80) == (("BLOCK_D", 64), ("BLOCK_D2", 16))
            assert _head_dim.tile("split", 80) == (("BLOCK_D", 128), ("BLOCK_D2", 0))
            assert _head_dim.tile("forward", 48) == (("BLOCK_D", 64), ("BLOCK_D2", 0))  # not measured: padded
    assert _head_dim.parse_mode(None) == "auto" and _head_dim.parse_mode(" split ") == "split"
    monkeypatch.setattr(_head_dim, "_forced", [])  # no forced() block: the environment decides
    try:
        for value, expected in (("padded", 128), ("split", 64), ("", 64), ("auto", 64)):
            monkeypatch.setenv(_head_dim.TILES_ENV, value)
            _head_dim._env_mode.cache_clear()
            assert _head_dim.tile("dq", 96)[0] == ("BLOCK_D", expected), value
        monkeypatch.setenv(_head_dim.TILES_ENV, "halves")
        _head_dim._env_mode.cache_clear()
        with pytest.raises(ValueError, match=r"TYPED_TRANSFORMER_HEAD_DIM_TILES must be one of .* got 'halves'"):
            _head_dim.tile("dq", 96)
    finally:
        monkeypatch.undo()
        _head_dim._env_mode.cache_clear()
    with pytest.raises(ValueError, match="kernel must be one of"):
        _head_dim.tile("delta", 80)


def test_a_forced_mode_ends_with_its_block_even_when_the_block_raises():
    """forced: "inside this block every launch uses ``mode``": outside it (after an error in it too) the mode
    before it is back, for an outer forced block as for none."""
    before = _head_dim.tile("forward", 80)
    for mode in ("padded", "split"):
        with pytest.raises(RuntimeError, match="inside"):
            with _head_dim.forced(mode):
                raise RuntimeError("inside")
        assert _head_dim.tile("forward", 80) == before, mode
    with _head_dim.forced("padded"):
        with pytest.raises(RuntimeError):
            with _head_dim.forced("split"):
                raise RuntimeError("inside")
        assert _head_dim.tile("forward", 80) == (("BLOCK_D", 128), ("BLOCK_D2", 0))


@pytest.mark.parametrize("mode", ["padded", "split"])
def test_the_launches_carry_the_tile(mode):
    """Recorded launches (not run): the three kernels get BLOCK_D / BLOCK_D2 of the mode."""
    q, k, v = (torch.randn(1, 2, 8, 80, requires_grad=True) for _ in range(3))
    with _head_dim.forced(mode), launches(run=False) as seen:
        out = flash_attention(q, k, v)
        out.backward(torch.ones_like(out))
    expected = {"padded": (128, 0), "split": (64, 16)}[mode]
    for name in KERNELS:
        assert (launched(seen, name)["BLOCK_D"], launched(seen, name)["BLOCK_D2"]) == expected
    assert launched(seen, "_delta_kernel")["BLOCK_D"] == 128  # the elementwise delta kernel keeps one padded tile


def test_the_autotune_key_and_the_shared_memory_pruning_see_the_pieces(monkeypatch):
    """A tuned choice for one tile is never reused for the other (BLOCK_D2 is in the key), and configs are pruned by
    the columns the pieces hold: at head_dim 192 (128 + 64) in bf16 more forward configs fit than in the padded 256."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.delenv(_tuning.CONFIGS_ENV, raising=False)
    monkeypatch.setattr(_tuning, "_tuned", set())
    kernels = {"forward": _forward._fwd_kernel, "dkdv": _backward._dkdv_kernel, "dq": _backward._dq_kernel}
    tuners = {name: _tuning.build(jit_fn, name) for name, jit_fn in kernels.items()}
    for tuner in tuners.values():
        assert "BLOCK_D2" in tuner.keys
    forward = tuners["forward"]
    named = {"Q": torch.empty(1, dtype=torch.bfloat16)}
    padded = forward.early_config_prune(forward.configs, named, BLOCK_D=256)
    split = forward.early_config_prune(forward.configs, named, BLOCK_D=128, BLOCK_D2=64)
    assert split == forward.early_config_prune(forward.configs, named, BLOCK_D=192)
    assert set(padded) < set(split)
    # TYPED_TRANSFORMER_KERNEL_CONFIGS=first pins the first config that fits the pieces: in fp32 at 80 (64 + 16)
    # the forward's first, 128x64 x 3 stages; the padded 128-wide tile only gets the fourth, 128x32
    monkeypatch.setenv(_tuning.CONFIGS_ENV, "first")
    first = _tuning.build(_forward._fwd_kernel, "forward")
    named = {"Q": torch.empty(1, dtype=torch.float32)}
    assert first.early_config_prune(first.configs, named, BLOCK_D=64, BLOCK_D2=16) == [_tuning.FWD_CONFIGS[0]]
    assert first.early_config_prune(first.configs, named, BLOCK_D=128, BLOCK_D2=0) == [_tuning.FWD_CONFIGS[3]]


CASES = {  # name: (batch, heads, kv_heads, q_len, k_len, masks)
    "plain": (2, 2, 2, 37, 53, {}),
    "causal, q_len < k_len": (1, 2, 2, 29, 70, {"causal": True}),
    "causal, q_len > k_len": (1, 2, 2, 70, 29, {"causal": True}),
    "gqa, key lengths with an empty row": (2, 4, 2, 33, 45, {"key_lengths": [0, 40]}),
    "mask with fully masked rows": (1, 2, 1, 21, 34, {"mask": "rows"}),
}


def _masks(masks, batch, heads, q_len, k_len):
    out = dict(masks)
    if "key_lengths" in out:
        out["key_lengths"] = torch.tensor(out["key_lengths"])
    if out.get("mask") == "rows":  # random, with every third query row fully masked
        mask = torch.rand(batch, heads, q_len, k_len, generator=torch.Generator().manual_seed(1)) < 0.6
        mask[:, :, ::3] = False
        out["mask"] = mask
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("head_dim", [80, 96])
@pytest.mark.parametrize("case", CASES)
def test_forward_and_gradients_match_float64(case, head_dim, dtype):
    batch, heads, kv_heads, q_len, k_len, masks = CASES[case]
    bases = [rand((batch, n_heads, n, head_dim), dtype, "cpu") for n_heads, n in ((heads, q_len), (kv_heads, k_len))]
    bases = [
        bases[0],
        bases[1],
        rand((batch, kv_heads, k_len, head_dim), dtype, "cpu"),
        rand(bases[0].shape, dtype, "cpu"),
    ]
    _, _, (seen, _) = compare_on_views(bases, **_masks(masks, batch, heads, q_len, k_len))
    assert_tiles(seen, head_dim)


@pytest.mark.parametrize("head_dim", [48, 72])
@pytest.mark.parametrize("blocks", [(16, 64), (64, 16)])
def test_other_splits_and_block_shapes(head_dim, blocks):
    """48 = 32 + 16 exactly, 72 = 64 + 16 with 8 padded columns in the second piece; BLOCK_M != BLOCK_N."""
    bases = [rand((2, 2, n, head_dim), torch.float32, "cpu") for n in (45, 67, 67, 45)]
    with _tuning.interpret_blocks(*blocks):
        _, _, (seen, _) = compare_on_views(bases, causal=True, key_lengths=torch.tensor([67, 30]))
    assert_tiles(seen, head_dim)


def _bshd(q, k, v, grad_out):
    """(batch, seq, heads, head_dim) storage seen as (batch, heads, seq, head_dim), and a grad_out whose rows are
    2 * head_dim apart: non-contiguous views the kernels read through their strides."""
    return (*(t.transpose(1, 2) for t in (q, k, v)), grad_out[..., ::2, :])


@pytest.mark.parametrize("descriptors", [True, False], ids=["tma", "pointers"])
def test_non_contiguous_views_and_both_load_paths(descriptors):
    head_dim = 96
    bases = [rand((2, n, 2, head_dim), torch.float32, "cpu") for n in (31, 47, 47)]
    bases.append(rand((2, 2, 62, head_dim), torch.float32, "cpu"))
    with _tuning.tensor_descriptors(descriptors):
        _, _, (seen, given) = compare_on_views(bases, _bshd, causal=True)
    assert not given["Q"].is_contiguous() and not given["DO"].is_contiguous()
    assert launched(seen, "_fwd_kernel")["TMA"] == descriptors
    assert_tiles(seen, head_dim)


def test_descriptors_and_pointers_give_the_same_bits():
    """The split forward through tensor descriptors (two per tensor, one per piece) and through pointers."""
    q, k, v = (torch.randn(2, 4, n, 80) for n in (41, 66, 66))
    k, v = k[:, ::2], v[:, ::2]  # GQA 4/2
    results = []
    for descriptors in (True, False):
        with _tuning.tensor_descriptors(descriptors), launches() as seen:
            results.append(flash_attention_with_lse(q, k, v, causal=True, key_lengths=torch.tensor([66, 50])))
        assert launched(seen, "_fwd_kernel")["TMA"] == descriptors
        assert_tiles(seen, 80, ("_fwd_kernel",))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


def test_split_and_padded_agree_in_float64():
    """The same attention as the padded tile, to rounding, forward and gradients (float64, interpreter only)."""
    q, k, v = (torch.randn(1, 2, n, 80, dtype=torch.float64, requires_grad=True) for n in (19, 33, 33))
    results = []
    for mode in ("padded", "split"):
        with _head_dim.forced(mode):
            out, lse = flash_attention_with_lse(q, k, v, causal=True)
            results.append((out, lse, *torch.autograd.grad((out * out).sum() + lse.sum(), (q, k, v))))
    for padded, split in zip(*results, strict=True):
        assert max_err(padded, split) < 1e-12


@pytest.mark.parametrize("head_dim", [80, 96])
def test_dropout_draws_the_same_mask(head_dim):
    """With dropout the split kernels draw the padded path's mask (it depends on positions only): out, dq, dk, dv
    equal float64 attention with the NumPy model's keep mask."""
    batch, heads, q_len, k_len = 1, 2, 40, 70
    q, k, v = (torch.randn(batch, heads, n, head_dim, dtype=torch.float64) for n in (q_len, k_len, k_len))
    keep = model_keep(7, batch, heads, q_len, k_len)
    allowed = allowed_matrix(batch, heads, q_len, k_len, causal=True)
    leaves = [t.float().requires_grad_() for t in (q, k, v)]
    with launches() as seen:
        out = flash_attention(*leaves, dropout_p=P, seed=7, causal=True)
        grad_out = torch.randn_like(out)
        out.backward(grad_out)
    assert_tiles(seen, head_dim)
    assert_matches_dropout_reference(out, leaves, grad_out, (q, k, v), allowed, keep)


@pytest.mark.parametrize("head_dim", [80, 96])
def test_split_kv_decoding(head_dim):
    """The split-KV forward (3 splits of 128 keys, the last partial) and its combine, then the ordinary backward."""
    bases = [rand((2, 2, n, head_dim), torch.float32, "cpu") for n in (2, 300, 300, 2)]
    with _tuning.force_kv_splits(3):
        _, _, (seen, _) = compare_on_views(
            bases, forward_kernels=("_fwd_kernel", "_combine_kernel"), key_lengths=torch.tensor([300, 100])
        )
    assert launched(seen, "_fwd_kernel")["n_splits"] == 3
    assert_tiles(seen, head_dim)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_softcap_alibi_window_and_documents(dtype):
    """The score modifiers and the structure (kernels/_structure.py) on the split tile, against the independent
    float64 reference of structure_reference.py, forward and gradients."""
    batch, heads, q_len, k_len, head_dim = 2, 2, 30, 44, 80
    g = torch.Generator().manual_seed(4)
    q, k, v, grad = (torch.randn(batch, heads, n, head_dim, generator=g) for n in (q_len, k_len, k_len, q_len))
    q = q * 3.0  # so that the softcap binds
    documents = torch.tensor([[0] * 10 + [1] * 1 + [3] * 33, [2] * 44])
    kwargs = dict(documents=documents, window_left=9, window_right=3, softcap=2.0, causal=False, key_lengths=None)
    kwargs["alibi_slopes"] = torch.tensor([0.5, 0.125])
    leaves = [t.to(dtype, copy=True).requires_grad_() for t in (q, k, v)]
    with launches() as seen:
        out = flash_attention(*leaves, **kwargs)
        out.backward(grad.to(dtype))
    assert_tiles(seen, head_dim)
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    ref = reference(*ref_leaves, keep=None, **kwargs)[0]
    ref.backward(grad.double())
    eager_leaves = [t.to(dtype, copy=True).requires_grad_() for t in (q, k, v)]
    eager = reference(*eager_leaves, keep=None, **kwargs)[0]
    eager.backward(grad.to(dtype))
    tolerance = {torch.float32: 1e-5, torch.float16: 1e-3}[dtype]
    pairs = [(out, eager, ref)] + [
        (a.grad, b.grad, c.grad) for a, b, c in zip(leaves, eager_leaves, ref_leaves, strict=True)
    ]
    for mine, theirs, exact in pairs:
        scale = max(1.0, exact.abs().max().item())
        assert max_err(mine, exact) <= 2 * max_err(theirs, exact) + tolerance * scale
