"""Block skipping: a (query block, key block) tile wholly outside every query's document or window is never loaded,
in the forward and dQ loops (over key blocks) and in the dK/dV loop (over query blocks).

``kernels/_visits.py`` runs the loops' own range helpers (``key_blocks`` and ``query_blocks`` of kernels/_common.py)
for every block; the tiles they visit are compared with the tiles that hold an allowed score (from the independent
reference in structure_reference.py) and with closed formulas. NaN inputs in skipped blocks then show that the
kernels really do not read them."""

import random

import pytest
import torch
from structure_reference import allowed_keys, random_documents

from transformer.kernels import _tuning, flash_attention

HAS_CUDA = torch.cuda.is_available()
BLOCKS = [(16, 16), (16, 32), (32, 16), (64, 32)]


def needed_tiles(allowed: torch.Tensor, block_m: int, block_n: int) -> torch.Tensor:
    """Bool (batch, query blocks, key blocks): the tiles holding at least one allowed score."""
    batch, _, q_len, k_len = allowed.shape
    rows, cols = -(-q_len // block_m), -(-k_len // block_n)
    padded = torch.zeros(batch, rows * block_m, cols * block_n, dtype=torch.bool)
    padded[:, :q_len, :k_len] = allowed[:, 0]
    return padded.view(batch, rows, block_m, cols, block_n).any(4).any(2)


def visits(batch, q_len, k_len, block_m, block_n, **structure):
    """(forward/dQ tiles, dK/dV tiles) the kernels' loops visit."""
    from transformer.kernels._visits import visited

    return tuple(visited(batch, q_len, k_len, block_m, block_n, key_major=major, **structure) for major in (0, 1))


def structure_of(**given) -> dict:
    return dict(dict(documents=None, window_left=None, window_right=None, causal=False, key_lengths=None), **given)


@pytest.mark.parametrize(("block_m", "block_n"), BLOCKS)
def test_packed_documents_visit_exactly_the_tiles_with_an_allowed_score(block_m, block_n):
    """Packed rows (causal and not, q_len == k_len, documents of length 1 included) and sliding windows (Mistral's
    causal window, a two-sided one): both loops visit exactly the tiles that hold an allowed score."""
    rng = random.Random(block_m * 100 + block_n)
    for _ in range(6):
        length = rng.randint(1, 150)
        documents = random_documents(rng, 2, length, torch.int64)
        cases = [structure_of(documents=documents, causal=causal) for causal in (False, True)]
        cases += [structure_of(window_left=rng.randint(0, 40), causal=True)]
        cases += [structure_of(window_left=rng.randint(0, 40), window_right=rng.randint(0, 40))]
        cases += [structure_of(documents=documents, window_left=rng.randint(0, 40), causal=True)]
        for structure in cases:
            needed = needed_tiles(allowed_keys(2, length, length, **structure), block_m, block_n)
            forward, key_major = visits(2, length, length, block_m, block_n, **structure)
            assert torch.equal(forward, needed), (length, structure)
            assert torch.equal(key_major, needed), (length, structure)


@pytest.mark.parametrize(("block_m", "block_n"), BLOCKS)
def test_no_tile_with_an_allowed_score_is_ever_skipped(block_m, block_n):
    """Random combinations, q_len != k_len (queries at the last positions, or more queries than keys for windows),
    key lengths and causal: every tile holding an allowed score is visited by both loops."""
    rng = random.Random(block_m + block_n)
    for _ in range(25):
        q_len, k_len = rng.randint(1, 120), rng.randint(1, 120)
        documents = random_documents(rng, 2, k_len, torch.int32) if q_len <= k_len and rng.random() < 0.7 else None
        windows = [rng.choice([None, 0, rng.randint(1, 50)]) for _ in "lr"]
        lengths = torch.tensor([rng.randint(0, k_len) for _ in "ab"]) if rng.random() < 0.5 else None
        structure = structure_of(documents=documents, window_left=windows[0], window_right=windows[1])
        structure.update(causal=rng.random() < 0.5, key_lengths=lengths)
        needed = needed_tiles(allowed_keys(2, q_len, k_len, **structure), block_m, block_n)
        forward, key_major = visits(2, q_len, k_len, block_m, block_n, **structure)
        assert not (needed & ~forward).any() and not (needed & ~key_major).any(), (q_len, k_len, structure)


def test_the_count_of_visited_tiles_is_the_formula():
    """A row of documents of 3, 1 and 2 blocks (blocks 16 x 16): causal visits n(n + 1)/2 tiles per document of n
    blocks, 6 + 1 + 3 = 10 of 21 (causal alone); not causal n^2, 9 + 1 + 4 = 14 of 36. A window of W keys
    (causal, window_left = W - 1 = 31) visits at most 3 key blocks per query block: 1 + 2 + 3 * 4 = 15."""
    documents = torch.tensor([[0] * 48 + [1] * 16 + [2] * 32])
    causal = visits(1, 96, 96, 16, 16, **structure_of(documents=documents, causal=True))
    assert [int(t.sum()) for t in causal] == [10, 10]
    assert int(visits(1, 96, 96, 16, 16, **structure_of(causal=True))[0].sum()) == 21
    assert [int(t.sum()) for t in visits(1, 96, 96, 16, 16, **structure_of(documents=documents))] == [14, 14]
    window = visits(1, 96, 96, 16, 16, **structure_of(window_left=31, causal=True))
    assert [int(t.sum()) for t in window] == [15, 15]


def test_nan_in_another_documents_blocks_never_reaches_this_document():
    """Two documents of one 16-row block each (blocks 16 x 16): NaN queries, keys and values in the first leave
    the second's output and its gradients (dq through the dQ loop, dk and dv through the dK/dV loop) finite and
    equal to the second document run alone. A loaded NaN would spread (0 * NaN = NaN) even through masked scores."""
    torch.manual_seed(0)
    q, k, v, grad = (torch.randn(1, 2, 32, 16) for _ in range(4))
    for t in (q, k, v):
        t[:, :, :16] = float("nan")
    documents = torch.tensor([[5] * 16 + [6] * 16])
    blocks = _tuning.interpret_blocks(16, 16) if not HAS_CUDA else torch.enable_grad()
    results = []
    with blocks:
        for rows, docs in ((slice(0, 32), documents), (slice(16, 32), None)):
            leaves = [t[:, :, rows].clone().requires_grad_(True) for t in (q, k, v)]
            out = flash_attention(*leaves, documents=docs)
            out.backward(grad[:, :, rows])
            results.append([x[:, :, -16:] for x in (out.detach(), *(t.grad for t in leaves))])
    for packed, alone in zip(*results, strict=True):
        assert torch.isfinite(packed).all()
        assert torch.allclose(packed, alone, atol=1e-6, rtol=0)
