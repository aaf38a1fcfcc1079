"""Issue 20: a tensor of the wrong floating dtype or on the wrong device is named at the entry it reaches (the
argument, both dtypes or devices), not in torch's own error deep inside. A "meta" tensor stands in for another device
(no GPU here); the checks follow the contracts' switch and allow autocast's mixed dtypes."""

import pytest
import torch

import transformer as T
from transformer.cache import KVCache
from transformer.lm import build_lm
from transformer.lm.attention import CausalSelfAttention, PerHeadValueAttention
from transformer.lm.config import LMConfig

F32, F64 = "torch.float32", "torch.float64"


def _model():
    torch.manual_seed(0)
    return T.make_model(11, 13, N=1, d_model=16, d_ff=32, h=2, dropout=0.0).eval()


def _meta(t):
    return t.to("meta")


def _cases():
    """(entry, call) -> the first words of the expected message."""
    model = _model()
    src, tgt = torch.randint(1, 11, (2, 5)), torch.randint(1, 11, (2, 3))
    src_mask = T.padding_mask(src, 0)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
    x = torch.randn(2, 3, 16)
    q, k = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    mha = T.MultiHeadedAttention(2, 16, dropout=0.0).eval()
    layer, stack = model.decoder.layers[0], model.decoder
    lm = build_lm(LMConfig(vocab=11, n_layers=1, d_model=16, d_ff=16, n_heads=2, max_len=20)).eval()
    cache = KVCache()
    cache.extend(torch.randn(2, 2, 3, 8), torch.randn(2, 2, 3, 8))
    params = "the module's parameters"
    return {
        # the issue's own case: float64 memory into a float32 model
        "decode memory": (
            lambda: model.decode(memory.double(), src_mask, tgt, None),
            f"EncoderDecoder.decode: argument 'memory' is {F64}, the model's parameters {F32}; "
            "convert one of them (e.g. memory.to(torch.float32))",
        ),
        "decode tgt device": (
            lambda: model.decode(memory, src_mask, _meta(tgt), None),
            "EncoderDecoder.decode: argument 'tgt' is on meta, the model's parameters on cpu; "
            "put them on one device (e.g. tgt.to('cpu'))",
        ),
        "encode src device": (
            lambda: model.encode(_meta(src), None),
            "EncoderDecoder.encode: argument 'src' is on meta, the model's parameters on cpu",
        ),
        "encode structured mask device": (
            lambda: model.encode(src, T.AttentionMask(key_lengths=_meta(torch.tensor([5, 4])))),
            "EncoderDecoder.encode: argument 'src_mask.key_lengths' is on meta",
        ),
        "forward tgt_mask device": (
            lambda: model(src, tgt, src_mask, _meta(T.target_mask(tgt, 0))),
            "EncoderDecoder.decode: argument 'tgt_mask' is on meta",
        ),
        # a query on another device than the keys (the reference attention), and mixed dtypes
        "attention key device": (
            lambda: T.attention(q, _meta(k), k),
            "attention: argument 'key' is on meta, argument 'query' on cpu",
        ),
        "attention value dtype": (
            lambda: T.attention(q, k, k.double()),
            f"attention: argument 'value' is {F64}, argument 'query' {F32}",
        ),
        "attention mask device": (
            lambda: T.attention(q, k, k, _meta(torch.ones(2, 3, 5, dtype=torch.bool))),
            "attention: argument 'mask' is on meta, argument 'query' on cpu",
        ),
        "mha key dtype": (
            lambda: mha(x, x.half(), x),
            f"MultiHeadedAttention.forward: argument 'key' is torch.float16, {params} {F32}",
        ),
        "mha query device": (
            lambda: mha(_meta(x), x, x),
            f"MultiHeadedAttention.forward: argument 'query' is on meta, {params} on cpu",
        ),
        "mha mask device": (
            lambda: mha(x, x, x, T.AttentionMask(query_lengths=_meta(torch.tensor([3, 3])))),
            "MultiHeadedAttention.forward: argument 'mask.query_lengths' is on meta",
        ),
        "decoder layer memory": (
            lambda: layer(x, memory.double(), None, None),
            f"DecoderLayer.forward: argument 'memory' is {F64}, {params} {F32}",
        ),
        "decoder x": (lambda: stack(x.double(), memory, None, None), f"Decoder.forward: argument 'x' is {F64}"),
        "decoder src_mask device": (
            lambda: stack(x, memory, _meta(src_mask), None),
            "Decoder.forward: argument 'src_mask' is on meta",
        ),
        "encoder layer x": (
            lambda: model.encoder.layers[0](memory.double(), None),
            f"EncoderLayer.forward: argument 'x' is {F64}",
        ),
        "encoder mask device": (
            lambda: model.encoder(memory, _meta(src_mask)),
            "Encoder.forward: argument 'mask' is on meta",
        ),
        "generator x": (
            lambda: model.generator(x.double()),
            f"Generator.forward: argument 'x' is {F64}, {params} {F32}",
        ),
        "lm tokens device": (
            lambda: lm(_meta(torch.ones(2, 4, dtype=torch.long))),
            "TransformerLM.forward: argument 'tokens' is on meta, the model's parameters on cpu",
        ),
        "lm mask device": (
            lambda: lm(torch.ones(2, 4, dtype=torch.long), _meta(torch.ones(2, 4, 4, dtype=torch.bool))),
            "TransformerLM.forward: argument 'mask' is on meta",
        ),
        "causal self-attention x": (
            lambda: CausalSelfAttention(2, 16, 0.0)(x.double(), None),
            f"CausalSelfAttention.forward: argument 'x' is {F64}, {params} {F32}",
        ),
        "per-head attention x": (
            lambda: PerHeadValueAttention(2, 16, 0.0)(x.double(), None),
            f"PerHeadValueAttention.forward: argument 'x' is {F64}, {params} {F32}",
        ),
        "cache keys dtype": (
            lambda: cache.extend(torch.randn(2, 2, 1, 8).double(), torch.randn(2, 2, 1, 8)),
            f"KVCache.extend: argument 'k' is {F64}, the cached keys {F32}",
        ),
        "cache values dtype": (
            lambda: cache.extend(torch.randn(2, 2, 1, 8), torch.randn(2, 2, 1, 8).double()),
            f"KVCache.extend: argument 'v' is {F64}, the cached keys {F32}",
        ),
        "cache values device": (
            lambda: cache.extend(torch.randn(2, 2, 1, 8), _meta(torch.randn(2, 2, 1, 8))),
            "KVCache.extend: argument 'v' is on meta, the cached keys on cpu",
        ),
    }


CASES = _cases()


@pytest.mark.parametrize("case", list(CASES))
def test_a_wrong_dtype_or_device_is_named_at_the_entry(case):
    call, message = CASES[case]
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value).startswith(message)


def test_with_checks_off_the_error_is_torchs_own():
    call, message = CASES["decode memory"]
    with T.checks(False), pytest.raises(RuntimeError) as info:  # torch's own error: the switch covers this check
        call()
    assert "memory" not in str(info.value)


def test_autocast_may_mix_floating_dtypes():
    model = _model()
    src, tgt = torch.randint(1, 11, (2, 5)), torch.randint(1, 11, (2, 3))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        memory = model.encode(src, None).bfloat16()
        assert model.decode(memory, None, tgt, None).shape == (2, 3, 16)
