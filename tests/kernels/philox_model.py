"""An independent model of the kernels' dropout stream in NumPy (used by test_dropout.py and test_split_kv.py)."""

import numpy as np
import torch

P = 0.3  # the dropout probability the tests use
LOW32 = np.uint64(0xFFFFFFFF)


def philox4x32(seed: int, c0, c1, c2, c3) -> list:
    """The four uint32 outputs of ``tl.philox(seed, c0, c1, c2, c3)`` (Triton 3.6 and 3.9), in NumPy.

    Key (k0, k1) = (low, high 32 bits of the 64-bit seed); 10 rounds, each
    c0, c2, c1, c3 = hi(B*c2) ^ c1 ^ k0, hi(A*c0) ^ c3 ^ k1, lo(B*c2), lo(A*c0), then the key is bumped by the
    Weyl constants."""
    seed %= 2**64
    k0, k1 = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    c = [np.asarray(x, dtype=np.uint64) & LOW32 for x in (c0, c1, c2, c3)]
    c0, c1, c2, c3 = np.broadcast_arrays(*c)
    round_a, round_b = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    for _ in range(10):
        prod_a, prod_b = round_a * c0, round_b * c2  # exact: both factors < 2**32
        c0, c1, c2, c3 = (
            (prod_b >> np.uint64(32)) ^ c1 ^ k0,
            prod_b & LOW32,
            (prod_a >> np.uint64(32)) ^ c3 ^ k1,
            prod_a & LOW32,
        )
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & LOW32, (k1 + np.uint64(0xBB67AE85)) & LOW32
    return [x.astype(np.uint32) for x in (c0, c1, c2, c3)]


def model_bits(seed, batch, heads, q_len, k_len, offset=0) -> np.ndarray:
    """(batch, heads, q_len, k_len) uint32: the 16 bits that decide each element. Element (b, h, i, j): Philox
    counter (low, high 32 bits of offset + (b * heads + h) * q_len + i, 4 * (j // 32) + (j % 8) // 2, 0); its
    output (j % 32) // 8 gives 32 bits, of which the low 16 (j even) or the high 16 (j odd) decide."""
    rows = (np.arange(batch * heads * q_len, dtype=np.uint64) + np.uint64(offset % 2**64)).reshape(-1, 1)
    keys = np.arange(k_len)
    groups = (4 * (keys // 32) + (keys % 8) // 2)[None, :].astype(np.uint64)
    outputs = philox4x32(seed, rows & LOW32, rows >> np.uint64(32), groups, 0)
    words = np.choose((keys % 32) // 8, outputs)  # output (j % 32) // 8 for every (row, key)
    return np.where(keys % 2 == 0, words & 0xFFFF, words >> 16).reshape(batch, heads, q_len, k_len)


def model_keep(seed, batch, heads, q_len, k_len, p=P, offset=0) -> torch.Tensor:
    """Bool (batch, heads, q_len, k_len): the keep mask the model predicts: kept when the element's 16 bits are at
    least floor(float32(p) * 65536)."""
    bits = model_bits(seed, batch, heads, q_len, k_len, offset)
    return torch.from_numpy(bits >= np.uint32(np.floor(np.float32(p) * np.float32(65536))))
