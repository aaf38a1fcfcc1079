"""Documents, sliding windows, softcap and ALiBi in the fused kernel (kernels/_structure.py): a randomized comparison
with an independent float64 reference written from the formulas (below), forward and gradients, fp32 and fp16, with
the FlashAttention error rule (kernel error at most twice eager PyTorch's in that precision, plus a floor).

Each feature is combined with causal, key lengths, grouped-query attention and dropout (compared with the kernel's
own keep mask, predicted by philox_model.py); the cases are drawn from a seeded generator: odd lengths, q_len !=
k_len (queries at the last q_len key positions), documents of length 1, windows of 0, non-contiguous views, both
slope shapes, and under the interpreter a random block shape per case (the block-skipping arithmetic depends on it).
"""

import random

import pytest
import torch
from kernel_compare import assert_close_to_reference
from launch_capture import launches
from philox_model import P, model_keep
from structure_reference import random_documents, reference

from transformer.kernels import _tuning, flash_attention, flash_attention_with_lse, tune

HAS_CUDA = torch.cuda.is_available()
BLOCK_SHAPES = [(32, 32), (16, 64), (64, 16), (32, 64), (16, 16)]


def draw_case(rng: random.Random, feature: str, combo: str) -> dict:
    """One random case: sizes, the feature's arguments and the combined one's (see the module docstring)."""
    heads = 4
    kv_heads = rng.choice([1, 2]) if combo == "gqa" else 4
    q_len = rng.randint(1, 45)
    low = q_len if feature == "documents" else max(1, q_len - 10)
    case = dict(batch=rng.choice([1, 2]), heads=heads, kv_heads=kv_heads, q_len=q_len, k_len=rng.randint(low, 60))
    case.update(head_dim=rng.choice([16, 24, 32]), q_gain=1.0, blocks=rng.choice(BLOCK_SHAPES))
    case.update(strided=rng.random() < 0.5, documents=None, window_left=None, window_right=None)
    case.update(softcap=None, alibi_slopes=None, causal=combo == "causal", key_lengths=None, dropout=combo == "dropout")
    if feature == "documents":
        case["documents"] = random_documents(rng, case["batch"], case["k_len"], rng.choice([torch.int32, torch.int64]))
    elif feature == "window":
        while case["window_left"] is None and case["window_right"] is None:
            case["window_left"], case["window_right"] = (rng.choice([None, 0, 1, rng.randint(2, 20)]) for _ in "lr")
    elif feature == "softcap":
        case.update(softcap=rng.choice([0.3, 1.0, 5.0]), q_gain=rng.choice([1.0, 4.0]))  # so that the cap binds
    else:
        shape = (heads,) if rng.random() < 0.5 else (case["batch"], heads)
        case["alibi_slopes"] = torch.rand(shape, generator=torch.Generator().manual_seed(rng.randint(0, 99)))
    case.update(mask=None, key_mask=None)
    if combo == "key_lengths":
        case["key_lengths"] = torch.tensor([rng.randint(0, case["k_len"]) for _ in range(case["batch"])])
    return case


STRUCTURE = ("documents", "window_left", "window_right", "softcap", "alibi_slopes", "causal", "key_lengths")
STRUCTURE += ("mask", "key_mask")


def run_case(case: dict, dtype, device, seed: int = 7):
    """((ref, eager, mine) of (out, lse, [dq, dk, dv]), every launch of the kernel's run); q, k, v are views of
    (batch, len, heads, head_dim) tensors when ``case["strided"]`` (non-contiguous)."""
    batch, heads, kv_heads = case["batch"], case["heads"], case["kv_heads"]
    q_len, k_len, head_dim = case["q_len"], case["k_len"], case["head_dim"]
    gen = torch.Generator().manual_seed(seed)
    shapes = [(batch, heads, q_len, head_dim), (batch, kv_heads, k_len, head_dim), (batch, kv_heads, k_len, head_dim)]
    bases = [torch.randn(s, generator=gen) for s in shapes] + [torch.randn(shapes[0], generator=gen)]
    bases[0] = bases[0] * case["q_gain"]
    structure = {name: case[name] for name in STRUCTURE}
    structure = {name: t.to(device) if isinstance(t, torch.Tensor) else t for name, t in structure.items()}
    keep = model_keep(seed, batch, heads, q_len, k_len).to(device) if case["dropout"] else None

    def grads(fn, dtype):
        leaves = []
        for t in bases:
            if case["strided"]:  # a (batch, len, heads, head_dim) layout seen as (batch, heads, len, head_dim)
                t = t.transpose(1, 2).contiguous().transpose(1, 2)
            leaves.append(t.to(device=device, dtype=dtype).requires_grad_(len(leaves) < 3))
        out, lse = fn(*leaves[:3])
        out.backward(leaves[3])
        return out.detach(), lse.detach(), [t.grad for t in leaves[:3]]

    ref = grads(lambda *x: reference(*x, **structure, keep=keep), torch.float64)
    eager = grads(lambda *x: reference(*x, **structure, keep=keep), dtype)
    dropout = dict(dropout_p=P, seed=seed) if case["dropout"] else {}
    blocks = _tuning.interpret_blocks(*case["blocks"]) if not HAS_CUDA else torch.enable_grad()
    with blocks, launches() as seen:
        mine = grads(lambda *x: flash_attention_with_lse(*x, **structure, **dropout), dtype)
    return (ref, eager, mine), seen


def assert_matches_reference(case: dict, dtype, device) -> list:
    """The FlashAttention rule on out, lse (finite entries; -inf exactly where the reference has it) and the three
    gradients; rows with no allowed key give exactly 0. Returns the kernel's launches."""
    (ref, eager, mine), seen = run_case(case, dtype, device)
    names = ("out", "lse", "dq", "dk", "dv")
    for name, m, e, r in zip(names, [*mine[:2], *mine[2]], [*eager[:2], *eager[2]], [*ref[:2], *ref[2]], strict=True):
        m, e, r = m.cpu(), e.cpu(), r.cpu()
        assert torch.isfinite(m).all() or name == "lse", f"{name} has non-finite values"
        if name == "lse":
            assert torch.equal(m.isinf(), r.isinf()), "lse must be -inf exactly on rows with no allowed key"
            m, e, r = (t.masked_fill(r.isinf(), 0.0) for t in (m, e, r))
        assert_close_to_reference(f"{name} {case_label(case)}", m, e, r, dtype)
    empty = ref[1].cpu().isinf()
    assert (mine[0].cpu()[empty] == 0).all(), "a row with no allowed key must output 0"
    return seen


def case_label(case: dict) -> str:
    shown = {name: case[name] for name in ("batch", "heads", "kv_heads", "q_len", "k_len", "head_dim", "blocks")}
    for name in ("window_left", "window_right", "softcap", "causal", "dropout", "strided"):
        shown[name] = case[name]
    for name in ("documents", "key_lengths", "alibi_slopes"):
        if case[name] is not None:
            shown[name] = case[name].tolist()
    return str(shown)


FEATURES = ("documents", "window", "softcap", "alibi")
COMBOS = ("causal", "key_lengths", "gqa", "dropout")


@pytest.mark.parametrize("combo", COMBOS)
@pytest.mark.parametrize("feature", FEATURES)
def test_each_feature_with_each_combination_matches_float64(feature, combo, device):
    """Per (feature, combination): two drawn cases, one in fp32 and one in fp16, forward and gradients."""
    rng = random.Random(f"{feature}-{combo}")
    for dtype in (torch.float32, torch.float16):
        assert_matches_reference(draw_case(rng, feature, combo), dtype, device)


@pytest.mark.parametrize("side", ["window_left", "window_right"])
def test_a_window_given_on_one_side_only_binds_that_side(side, device):
    """window_left alone or window_right alone (the other unbounded), without causal: the one bound given holds."""
    case = draw_case(random.Random(side), "window", "gqa")
    case.update(q_len=24, k_len=40, window_left=None, window_right=None, causal=False, dropout=False)
    case[side] = 3  # far narrower than the 40 keys: every row loses keys on that side
    assert_matches_reference(case, torch.float32, device)


def test_everything_at_once_matches_float64(device):
    """Documents, both windows, softcap and (batch, heads) slopes together, with causal, key lengths, GQA and
    dropout, in seeded random draws (causal off in half of them: top-left causal with queries at the last key
    positions leaves few allowed keys)."""
    rng = random.Random(29)
    for index in range(3):
        case = draw_case(rng, "documents", "gqa")
        window = draw_case(rng, "window", "gqa")
        case.update(window_left=window["window_left"], window_right=window["window_right"], softcap=2.0)
        case.update(alibi_slopes=torch.rand(case["batch"], case["heads"]), causal=index % 2 == 1, dropout=True)
        case["key_lengths"] = torch.tensor([rng.randint(1, case["k_len"]) for _ in range(case["batch"])])
        assert_matches_reference(case, torch.float32, device)


def test_dense_mask_and_key_mask_combine_with_documents_and_windows(device):
    """A dense (batch, 1, q_len, k_len) mask and a key mask ANDed with documents, a window, softcap and slopes."""
    rng = random.Random(11)
    for feature in ("documents", "window"):
        case = draw_case(rng, feature, "causal")
        batch, q_len, k_len = case["batch"], case["q_len"], case["k_len"]
        gen = torch.Generator().manual_seed(rng.randint(0, 99))
        case.update(mask=torch.rand(batch, 1, q_len, k_len, generator=gen) > 0.3, causal=False, softcap=3.0)
        case.update(key_mask=torch.rand(batch, k_len, generator=gen) > 0.2, alibi_slopes=torch.rand(4))
        assert_matches_reference(case, torch.float32, device)


def test_split_kv_decoding_with_documents_windows_and_modifiers(device):
    """Short queries over long keys take the split-KV forward (FlashDecoding, a second combining kernel); each
    split intersects its keys with the documents and windows: a split with no allowed key contributes nothing."""
    rng = random.Random(5)
    for feature in FEATURES:
        case = draw_case(rng, feature, "gqa")
        case.update(q_len=rng.randint(1, 4), k_len=rng.randint(150, 250), blocks=(16, 64))
        if feature == "documents":
            case["documents"] = random_documents(rng, case["batch"], case["k_len"], torch.int64)
        if feature == "window":
            case.update(window_left=rng.randint(0, 100), window_right=None)
        seen = assert_matches_reference(case, torch.float32, device)
        assert [name for name, _ in seen][:2] == ["_fwd_kernel", "_combine_kernel"], case_label(case)


def test_decoding_a_window_over_documents_reads_only_the_last_document(device):
    """One query at the last position of a packed row of three documents, window 5: only keys of the last
    document within 5 positions count, so changing every other key and value leaves the output unchanged, exactly;
    a window_right of 10**12 is the same as 0 here (no key lies after the last query).
    Under the interpreter with 16-key blocks, NaN values in the first two key blocks (outside the window) never
    reach the output: those blocks are never loaded (a loaded NaN value would give 0 * NaN = NaN)."""
    k_len = 40
    documents = torch.tensor([[0] * 12 + [1] * 20 + [2] * 8], device=device)
    q, k, v = (torch.randn(1, 2, n, 16, device=device) for n in (1, k_len, k_len))
    args = dict(documents=documents, window_left=5, window_right=0)
    blocks = _tuning.interpret_blocks(16, 16) if not HAS_CUDA else torch.enable_grad()
    with blocks:
        out, _ = flash_attention_with_lse(q, k, v, **args)
        k2, v2 = k.clone(), v.clone()
        k2[:, :, : k_len - 6], v2[:, :, : k_len - 6] = 1e4, 7.0
        assert torch.equal(flash_attention_with_lse(q, k2, v2, **args)[0], out)
        if not HAS_CUDA:
            v2[:, :, :32] = float("nan")
            assert torch.equal(flash_attention_with_lse(q, k2, v2, **args)[0], out)
        huge = dict(args, window_right=10**12)  # wider than any distance: the same as unbounded (clamped for 32 bits)
        assert torch.equal(flash_attention_with_lse(q, k, v, **huge)[0], out)
    expected, _ = reference(
        q.double(), k.double(), v.double(), documents=documents, window_left=5, window_right=0, softcap=None,
        alibi_slopes=None, causal=False, key_lengths=None, keep=None,
    )  # fmt: skip
    assert (out.double() - expected).abs().max() < 1e-5


def test_torch_compile_fullgraph_and_tune_take_the_new_arguments(device):
    """Through the registered op (what torch.compile traces, fullgraph: no graph break) the documents, windows,
    softcap and slopes give the eager call's loss and gradients; ``tune`` runs the same call ahead."""
    from attention_reference import compiled_and_eager

    q, k, v = (torch.randn(2, 4, n, 16, device=device).requires_grad_() for n in (9, 13, 13))
    structure = dict(documents=torch.tensor([[0] * 5 + [1] * 8, [3] * 13], device=device), window_left=4)
    structure.update(window_right=2, softcap=1.5, alibi_slopes=torch.rand(2, 4, device=device))

    def f(*x):
        return flash_attention(*x, causal=False, **structure).sin().sum()

    (loss, grads), (expected, expected_grads) = compiled_and_eager(f, (q, k, v))
    assert torch.allclose(loss, expected, atol=1e-5)
    for a, b in zip(grads, expected_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    tune(q, k, v, **structure)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_real_sizes_on_the_gpu(dtype):
    """At real sizes (2 x 8 heads, GQA 4, 1000 queries over 1024 keys, head_dim 64, autotuned blocks): packed
    documents, Mistral's window, softcap and slopes together, within twice eager's error against float64."""
    rng = random.Random(0)
    case = draw_case(rng, "documents", "gqa")
    case.update(batch=2, heads=8, kv_heads=2, q_len=1000, k_len=1024, head_dim=64, strided=False, causal=True)
    case.update(documents=random_documents(rng, 2, 1024, torch.int64), window_left=255, softcap=20.0)
    case.update(alibi_slopes=2.0 ** -torch.arange(1, 9, dtype=torch.float32))
    assert_matches_reference(case, dtype, "cuda")
