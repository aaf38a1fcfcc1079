"""Each kind of contract violation the attention, cache and language-model modules can get is shown to the compiled
checker (transformer/contracts/traced.py) under torch.compile(fullgraph=True): a dimension name bound to two sizes, a
size that does not broadcast (``#batch``), a dtype of the wrong kind (``Float``/``Int``/``Bool``), a ``{self.x}``
size, a variadic ``*batch``, and a tuple return. Each raises eager mode's TypeCheckError, first line for first line,
while it is traced (not from an eager fallback), and the valid call still matches eager afterwards."""

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import transformer as T
from transformer.attention import attention
from transformer.cache import KVCache
from transformer.contracts import CompiledContractError
from transformer.lm import build_lm
from transformer.lm.config import LMConfig

COMPILED_NOTE = "(raised while torch.compile traced this call"


def _lines(call):
    with pytest.raises(T.TypeCheckError) as info:
        call()
    assert type(info.value) in (T.TypeCheckError, CompiledContractError)  # eager's, or the same raised while tracing
    return str(info.value).splitlines()


def _same_error_compiled(fn, valid, wrong_calls):
    """Compile ``fn`` once; every wrong call raises eager's first line while it is traced (no graph is made for it);
    the valid call (``valid()``'s arguments) matches eager before and after."""
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(fn, fullgraph=True, backend=counter)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*valid()), fn(*valid()))
        firsts = {}
        for name, args in wrong_calls.items():
            eager = _lines(lambda args=args: fn(*args))
            frames = counter.frame_count
            got = _lines(lambda args=args: compiled(*args))
            assert got[0] == eager[0], name
            assert got[1].startswith(COMPILED_NOTE), name  # raised by the traced checker, not an eager fallback
            assert counter.frame_count == frames, name  # raised while tracing: no graph for a wrong call
            firsts[name] = got[0]
        torch.testing.assert_close(compiled(*valid()), fn(*valid()))
    return firsts


def test_the_reference_attention_compiled_shows_a_dimension_a_broadcast_a_dtype_kind_and_a_variadic_batch():
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 5)
    mask = torch.rand(2, 1, 4, 6) > 0.3

    def attend(q, k, v, mask):  # the function: Dynamo cannot call the module object T.attention (a graph break)
        return attention(q, k, v, mask)[0]

    firsts = _same_error_compiled(
        attend,
        lambda: (q, k, v, mask),
        {
            "d_k bound twice": (q, k[..., :7], v, mask),
            "#batch that does not broadcast": (q, k, v, torch.rand(3, 1, 4, 6) > 0.3),
            "a float mask": (q, k, v, mask.float()),
            "*batch that differs": (q, k[:, :2], v[:, :2], mask),
        },
    )
    assert firsts["a float mask"].startswith("attention: argument 'mask' is f32[2,1,4,6], expected Bool[Tensor, ")


def test_multi_head_attention_compiled_shows_a_self_size_and_a_mismatched_length():
    mha = T.MultiHeadedAttention(2, 16, dropout=0.0).eval()
    x, memory = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    firsts = _same_error_compiled(
        mha,
        lambda: (x, memory, memory),
        {
            "{self.d_model}": (torch.randn(2, 3, 8), memory, memory),
            "k_len bound twice": (x, memory, memory[:, :4]),
        },
    )
    assert firsts["{self.d_model}"] == (
        "MultiHeadedAttention.forward: argument 'query' is f32[2,3,8], expected "
        "Float[Tensor, 'batch q_len {self.d_model}'] (self.d_model=16) with batch=2, q_len=3"
    )


def test_the_language_model_compiled_shows_an_integer_kind_and_a_mask_that_does_not_broadcast():
    torch.manual_seed(0)
    lm = build_lm(LMConfig(vocab=11, n_layers=1, d_model=16, d_ff=16, n_heads=2, max_len=20)).eval()
    tokens = torch.randint(0, 11, (2, 5))
    firsts = _same_error_compiled(
        lm,
        lambda: (tokens, None),
        {
            "float tokens": (tokens.float(), None),
            "#batch mask of 3 rows": (tokens, torch.ones(3, 5, 5, dtype=torch.bool)),
        },
    )
    assert firsts["float tokens"].startswith("TransformerLM.forward: argument 'tokens' is f32[2,5], expected Int[")


def test_the_cache_compiled_shows_a_violation_of_a_function_returning_a_tuple():
    k = torch.randn(2, 2, 3, 8)
    firsts = _same_error_compiled(
        lambda cache, k, v: cache.extend(k, v),
        lambda: (KVCache(), k, k),
        {"heads bound twice": (KVCache(), k, torch.randn(2, 4, 3, 8))},
    )
    assert firsts["heads bound twice"].startswith("KVCache.extend: argument 'v' is f32[2,4,3,8], expected Float[")
