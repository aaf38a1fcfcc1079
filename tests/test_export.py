"""torch.export with checks on (docs/proved-shapes.md, "torch.export"): the public models and modules export with
symbolic batch and sequence sizes, the exported program computes what eager computes at other sizes (batch 1 and
length 1 included), a wrong input to it fails with the contract's message, and a contract the example inputs break
fails export with our contract error, not torch's."""

import pytest
import torch
import torch.utils._pytree as pytree
from jaxtyping import TypeCheckError

import transformer as T
from transformer import Float, Int, Tensor, checked
from transformer.contracts.traced import CompiledContractError
from transformer.lm.positions import LMCache
from transformer.proofs import export

SIZES = {"batch": (1, 16), "seq": (1, 32)}


def lm(**fields):
    config = dict(vocab=50, d_model=32, n_heads=4, n_layers=2, max_len=32, dropout=0.0)
    return T.build_lm(T.LMConfig(**{**config, **fields})).eval()


LMS = {
    "sinusoidal": {},
    "learned": {"positional_encoding": "learned"},
    "none": {"positional_encoding": "none"},
    # rotary: RotaryEmbedding.forward's `length: int | None` is given a symbolic size (the failure)
    "rotary": {"positional_encoding": "rotary"},
    "llama-like": {
        "positional_encoding": "rotary",
        "norm": "rms",
        "ffn_gated": True,
        "activation": "silu",
        "n_kv_heads": 2,
        "qk_norm": True,
        "sliding_window": 4,  # a window shorter than the example length: TransformerLM._causal branched on seq
    },
}


def tokens(batch, seq):
    return torch.randint(0, 50, (batch, seq))


@pytest.mark.parametrize("name", LMS)
def test_the_language_model_exports_with_checks_on_and_computes_what_eager_computes(name):
    model = lm(**LMS[name])
    exported = export(model, tokens(2, 16), sizes=SIZES)
    ranges = [(int(r.lower), int(r.upper)) for r in exported.program.range_constraints.values()]
    assert sorted(ranges) == [(1, 16), (1, 32)]  # batch and seq stay symbolic: nothing was specialised
    with torch.no_grad():
        for batch, seq in ((1, 1), (3, 7), (16, 32), (2, 5)):
            x = tokens(batch, seq)
            torch.testing.assert_close(exported(x), model(x), rtol=0, atol=1e-6)


def test_a_padding_mask_exports_with_the_language_model():
    model = lm()
    mask = torch.ones(2, 1, 16, dtype=torch.bool)
    mask[0, 0, 12:] = False
    exported = export(model, tokens(2, 16), mask, sizes=SIZES)
    x, m = tokens(3, 9), torch.ones(3, 1, 9, dtype=torch.bool)
    m[1, 0, 5:] = False
    with torch.no_grad():
        torch.testing.assert_close(exported(x, m), model(x, m), rtol=0, atol=1e-6)


def encoder_decoder_inputs(batch, src_len, tgt_len):
    return (
        torch.randint(1, 11, (batch, src_len)),
        torch.randint(1, 11, (batch, tgt_len)),
        torch.ones(batch, 1, src_len, dtype=torch.bool),
        T.subsequent_mask(tgt_len).expand(batch, tgt_len, tgt_len).contiguous(),
    )


ED_SIZES = {"batch": (1, 16), "src_len": (1, 32), "tgt_len": (1, 32)}


def test_the_encoder_decoder_exports_with_checks_on_and_computes_what_eager_computes(tiny_model):
    exported = export(tiny_model, *encoder_decoder_inputs(2, 10, 9), sizes=ED_SIZES)
    assert len(exported.program.range_constraints) == 3
    with torch.no_grad():
        for sizes in ((1, 1, 1), (3, 5, 4), (2, 32, 1), (1, 1, 32)):
            inputs = encoder_decoder_inputs(*sizes)
            torch.testing.assert_close(exported(*inputs), tiny_model(*inputs), rtol=0, atol=1e-6)


def test_a_wrong_input_to_the_exported_program_fails_with_the_contract_message(tiny_model):
    exported = export(tiny_model, *encoder_decoder_inputs(2, 10, 9), sizes=ED_SIZES)
    src, tgt, _, tgt_mask = encoder_decoder_inputs(2, 10, 9)
    wrong = torch.ones(2, 1, 7, dtype=torch.bool)  # src_mask of another length than src
    with pytest.raises(TypeCheckError) as caught:
        exported(src, tgt, wrong, tgt_mask)
    assert str(caught.value).startswith("EncoderDecoder.forward: argument 'src_mask' is bool[2,1,7], expected")
    assert "src_len=10" in str(caught.value)
    assert "Guard failed" in str(caught.value.__cause__)  # torch's input guard refused it first


def test_a_contract_broken_at_the_example_sizes_fails_export_with_our_contract_error(tiny_model):
    src, tgt, _, tgt_mask = encoder_decoder_inputs(2, 10, 9)
    with pytest.raises(CompiledContractError) as caught:
        export(tiny_model, src, tgt, torch.ones(2, 1, 7, dtype=torch.bool), tgt_mask, sizes=ED_SIZES)
    assert str(caught.value).startswith(
        "EncoderDecoder.forward: argument 'src_mask' is bool[2,1,7], expected Bool[Tensor, '#batch 1 src_len']"
    )
    assert "(raised while torch.export traced this call" in str(caught.value)  # not torch.compile: export traced it


def test_plain_torch_export_of_the_language_model_with_checks_on():
    """The issue's call, as written: torch.export.export with Dims of its own."""
    model = lm(positional_encoding="rotary")
    batch, seq = torch.export.Dim("batch", min=1, max=16), torch.export.Dim("seq", min=1, max=32)
    with T.checks(True):
        program = torch.export.export(model, (tokens(2, 16),), dynamic_shapes={"tokens": {0: batch, 1: seq}})
    x = tokens(1, 1)
    with torch.no_grad():
        torch.testing.assert_close(program.module()(x), model(x), rtol=0, atol=1e-6)


def test_strict_export_through_dynamo_works_with_checks_on_too():
    model = lm(positional_encoding="rotary")
    exported = export(model, tokens(2, 16), sizes=SIZES, strict=True)
    with torch.no_grad():
        for batch, seq in ((1, 1), (3, 7)):
            x = tokens(batch, seq)
            torch.testing.assert_close(exported(x), model(x), rtol=0, atol=1e-6)


def test_the_drop_in_attention_and_multi_head_attention_export():
    attention = T.MultiHeadedAttention(4, 32, 0.0).eval()

    def inputs(batch, q_len, k_len):
        mask = torch.rand(batch, q_len, k_len) > 0.3
        mask[..., 0] = True
        return torch.randn(batch, q_len, 32), torch.randn(batch, k_len, 32), torch.randn(batch, k_len, 32), mask

    sizes = {"batch": (1, 8), "q_len": (1, 32), "k_len": (1, 32)}
    exported = export(attention, *inputs(2, 8, 10), sizes=sizes, axes={"mask": ("batch", "q_len", "k_len")})
    with torch.no_grad():
        for shape in ((1, 1, 1), (3, 5, 7), (2, 32, 3)):
            x = inputs(*shape)
            torch.testing.assert_close(exported(*x), attention(*x), rtol=0, atol=1e-6)


MASKS = {
    "key_mask": lambda batch, q_len, k_len: T.AttentionMask(
        key_mask=torch.arange(k_len) < torch.arange(batch)[:, None] + 1
    ),
    "key_lengths-window": lambda batch, q_len, k_len: T.AttentionMask(
        key_lengths=torch.arange(batch) % k_len + 1, window_left=2, window_right=0
    ),
    # packed documents: check_documents must not branch on the symbolic k_len (a mask input rebuilt under export)
    "documents": lambda batch, q_len, k_len: T.AttentionMask(
        documents=(torch.arange(k_len) >= k_len // 2).long().expand(batch, k_len).contiguous()
    ),
}


@pytest.mark.parametrize("kind", MASKS)
def test_multi_head_attention_exports_with_a_structured_mask_and_a_wrong_one_fails_with_the_contract_message(kind):
    """An AttentionMask as an input of the exported program: its tensors' axes are named by the part (key_mask:
    batch k_len), the flags and the window are fixed at export; the program computes what eager computes at other
    sizes, and a mask whose key axis is not the keys' length fails with check_fits' contract message."""
    attention = T.MultiHeadedAttention(4, 32, 0.0).eval()

    def inputs(batch, q_len, k_len, mask_len=None):
        x = torch.randn(batch, q_len, 32), torch.randn(batch, k_len, 32), torch.randn(batch, k_len, 32)
        return (*x, MASKS[kind](batch, q_len, k_len if mask_len is None else mask_len))

    sizes = {"batch": (1, 8), "q_len": (1, 32), "k_len": (1, 32)}
    exported = export(attention, *inputs(3, 8, 10), sizes=sizes)
    ranges = sorted((int(r.lower), int(r.upper)) for r in exported.program.range_constraints.values())
    assert ranges == [(1, 8), (1, 32), (1, 32)]  # batch, q_len, k_len: nothing specialised, k_len 1 included
    # (packed documents need q_len <= k_len, and keep the example's q_len != k_len, a guard of the program)
    shapes = ((1, 1, 2), (3, 5, 7), (8, 3, 32)) if kind == "documents" else ((1, 1, 1), (3, 5, 7), (8, 32, 3))
    with torch.no_grad():
        for shape in shapes:
            x = inputs(*shape)
            torch.testing.assert_close(exported(*x), attention(*x), rtol=0, atol=1e-6)
    if kind == "key_mask":
        with pytest.raises(TypeCheckError) as caught:
            exported(*inputs(2, 5, 7, mask_len=6))
        assert "argument 'mask.key_mask' is bool[2,6], expected Bool[Tensor, 'batch k_len'] with batch=2, q_len=5" in (
            str(caught.value)
        )
    elif kind == "key_lengths-window":  # the window is fixed at export: a mask with another one is another program
        with pytest.raises(ValueError, match="Trying to flatten user inputs with exported input tree spec"):
            other = T.AttentionMask(key_lengths=torch.tensor([3, 1]), window_left=3, window_right=0)
            exported(*inputs(2, 5, 7)[:3], other)


class Step(torch.nn.Module):
    """One cached decoding step: a token after the cache's positions; the cache comes back (an exported program
    changes no input: the caller carries the cache it returns)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    @checked
    def forward(self, token: Int[Tensor, "batch 1"], cache: LMCache) -> tuple[Float[Tensor, "batch 1 50"], LMCache]:
        return self.model.logits(token, cache=cache), cache


def prompted(model, batch, length):
    cache = model.new_cache()
    with torch.no_grad():
        model(tokens(batch, length), cache=cache)
    return cache


@pytest.mark.parametrize("name", ["sinusoidal", "llama-like-unwindowed"])
def test_a_cached_step_exports_with_a_cache_of_symbolic_length_and_loops_as_eager(name):
    """An LMCache as an input (and output) of the exported program, its keys' and values' length symbolic
    (cache_len): three steps fed the cache each returns equal eager's steps, from a prompt of another batch and
    length than the example's; a cache of another batch or depth fails with the package's own message."""
    fields = {**LMS["llama-like"], "sliding_window": None} if name != "sinusoidal" else {}
    model = lm(**fields)
    step = Step(model)
    exported = export(step, tokens(2, 1), prompted(model, 2, 6), sizes={"batch": (1, 16), "cache_len": (1, 29)})
    assert sorted((int(r.lower), int(r.upper)) for r in exported.program.range_constraints.values()) == [
        (1, 16),
        (1, 29),
    ]
    for batch, length in ((1, 1), (3, 9), (16, 29 - 2)):
        cache = prompted(model, batch, length)
        reference = pytree.tree_map(lambda leaf: leaf, cache)  # a copy: the same tensors in new cache objects
        with torch.no_grad():
            for _ in range(3 if length + 3 <= 30 else 1):
                token = tokens(batch, 1)
                got, cache = exported(token, cache)
                want, reference = step(token, reference)
                torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
                assert cache.length == reference.length
    with pytest.raises(ValueError, match=r"KVCache.extend: new keys \(3, .*\) do not continue the cached \(2, "):
        exported(tokens(3, 1), prompted(model, 2, 5))
    shallow = lm(**{**fields, "n_layers": 1})
    with pytest.raises(ValueError, match="TransformerLM: the cache has 1 layers, the model 2"):
        exported(tokens(2, 1), prompted(shallow, 2, 5))


class DropIn(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return T.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("structured", [False, True])
def test_the_drop_in_attention_exports_with_checks_on(structured):
    def inputs(batch, q_len, k_len):
        q, k, v = torch.randn(batch, 4, q_len, 8), torch.randn(batch, 4, k_len, 8), torch.randn(batch, 4, k_len, 8)
        key_mask = torch.ones(batch, k_len, dtype=torch.bool)
        key_mask[0, k_len // 2 + 1 :] = False
        return q, k, v, T.AttentionMask(key_mask=key_mask) if structured else key_mask[:, None, None, :]

    batch, q_len, k_len = (torch.export.Dim(n, min=1, max=32) for n in ("batch", "q_len", "k_len"))
    q, k, v, mask = inputs(2, 8, 10)
    # an AttentionMask is a pytree (transformer/common/pytrees.py): its dynamic_shapes are its parts', in the order
    # key_lengths, key_mask, query_lengths, dense, documents
    mask_shape = [None, {0: batch, 1: k_len}, None, None, None] if structured else {0: batch, 3: k_len}
    shapes = ({0: batch, 2: q_len}, {0: batch, 2: k_len}, {0: batch, 2: k_len}, mask_shape)
    with T.checks(True):
        program = torch.export.export(DropIn(), (q, k, v, mask), dynamic_shapes=shapes)
    for shape in ((1, 1, 1), (3, 5, 7), (2, 32, 3)):
        x = inputs(*shape)
        torch.testing.assert_close(program.module()(*x), DropIn()(*x), rtol=0, atol=1e-6)


def test_a_symbolic_size_fits_the_class_its_number_would_and_no_other():
    """transformer.contracts.traced_rules.fits, "class": a SymInt stands for an int (so it fits int, int | None,
    numbers.Integral, object), not for a bool or a float, as beartype would judge the int it traces."""
    import numbers

    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from transformer.contracts.traced import Contract
    from transformer.contracts.traced_rules import fits

    def f(a: int, b: int | None, c: numbers.Integral, d: object, e: bool, g: float, h: str):
        pass

    contract = Contract(f)
    size = ShapeEnv().create_unbacked_symint()
    assert isinstance(size, torch.SymInt)
    verdicts = {name: fits(hint, size, [{}, {}], {}, contract) for name, hint, _, _ in contract.checks}
    assert verdicts == {"a": True, "b": True, "c": True, "d": True, "e": False, "g": False, "h": False}


_BLOCKS = dict(positional_encoding="rotary", norm="rms", ffn_gated=True, activation="silu", n_kv_heads=2)
ARCHITECTURE_BLOCKS = {  # the blocks of issue 44's architectures, as their mappings set them (docs/lm_blocks.md)
    "gemma2": dict(
        norm_unit_offset=True,
        post_sublayer_norm=True,
        attention_softcap=50.0,
        logit_softcap=30.0,
        sliding_window=4,
        window_layers=(True, False),
        activation="gelu_tanh",
        embedding_scale_rounded=True,
    ),
    "gemma3": dict(
        norm_unit_offset=True,
        post_sublayer_norm=True,
        qk_norm=True,
        sliding_window=4,
        window_layers=(True, False),
        rope_local_theta=10000.0,
        rope_theta=1e6,
    ),
    "gpt-neox": dict(norm="layer", ffn_gated=False, activation="gelu", parallel_residual=True, rope_fraction=0.25),
    "smollm3": dict(rope_layers=(True, False)),
    "granite": dict(residual_scale=0.22, logit_divisor=8.0, embedding_scale=12.0, attention_scale=0.015625),
    "mixtral": dict(n_experts=4, experts_per_token=2),
    "qwen2-moe": dict(n_experts=4, experts_per_token=2, shared_expert_d_ff=16, router_norm_topk=False),
    "float64 experts": dict(n_experts=3, experts_per_token=1),  # the loop's eager path, not grouped_mm's
    "olmo2": dict(
        qk_norm=True,
        qk_norm_scope="projection",
        pre_sublayer_norm=False,
        post_sublayer_norm=True,
        float32_gain_and_rotation=True,
    ),  # fmt: skip
    "olmoe": dict(qk_norm=True, qk_norm_scope="projection", n_experts=4, experts_per_token=2, router_norm_topk=False),
}


@pytest.mark.parametrize("name", ARCHITECTURE_BLOCKS)
def test_every_architecture_s_blocks_export_with_checks_on_and_compute_what_eager_computes(name):
    """Gemma's norms, caps and local/global layers, GPT-NeoX's parallel residual, SmolLM3's layers without RoPE,
    Granite's multipliers and the mixtures of experts (whose traced block reads no count on the host,
    docs/moe.md): batch and length stay symbolic, and the program equals eager at other sizes."""
    fields = {**_BLOCKS, **ARCHITECTURE_BLOCKS[name]}
    if name == "gpt-neox":
        fields["n_kv_heads"] = None
    model = lm(**fields)
    if name == "float64 experts":
        model = model.double()
    exported = export(model, tokens(2, 16), sizes=SIZES)
    ranges = [(int(r.lower), int(r.upper)) for r in exported.program.range_constraints.values()]
    assert sorted(ranges) == [(1, 16), (1, 32)]
    with torch.no_grad():
        for batch, seq in ((1, 1), (3, 7), (16, 32)):
            x = tokens(batch, seq)
            expected = model(x)
            torch.testing.assert_close(exported(x), expected, rtol=0, atol=1e-5 * expected.abs().max().item())


def packed(batch, seq, documents=3):
    """A packed-documents mask: each row's ids non-decreasing, a new document every seq // documents positions
    (row 1 also at position 1, so documents of one token occur), the last row a single document."""
    ids = (torch.arange(seq) * documents // max(seq, 1)).expand(batch, seq).clone()
    if batch > 1 and seq > 1:
        ids[1, 1:] += 1
    ids[-1] = 0
    return T.AttentionMask(documents=ids)


@pytest.mark.parametrize("name", ["sinusoidal", "rotary", "llama-like"])
def test_the_language_model_with_a_packed_documents_mask_exports_for_every_length(name):
    """AttentionMask(documents=...) as an input: the documents' positions (positions_from_documents: each document
    counted from its first token) and the block-diagonal causal mask stay symbolic in seq (no Python branch on the
    length: nothing specialised, seq 1 and 2 included), the program computes what eager computes at other sizes, and
    documents of another length than the tokens fail with the language model's own message."""
    model = lm(**LMS[name])
    axes = {"mask.documents": ("batch", "seq")}
    exported = export(model, tokens(2, 16), packed(2, 16), sizes=SIZES, axes=axes)
    ranges = [(int(r.lower), int(r.upper)) for r in exported.program.range_constraints.values()]
    assert sorted(ranges) == [(1, 16), (1, 32)]
    with torch.no_grad():
        for batch, seq in ((1, 1), (2, 2), (3, 7), (16, 32), (2, 3)):
            x, mask = tokens(batch, seq), packed(batch, seq)
            want = model(x, mask)
            torch.testing.assert_close(exported(x, mask), want, rtol=0, atol=1e-6)
            if seq >= 6:  # the packing matters: the row of several documents differs from one document
                assert not torch.allclose(want, model(x, packed(batch, seq, documents=1)))
    with pytest.raises(ValueError) as caught:
        exported(tokens(2, 9), packed(2, 8))
    assert str(caught.value).startswith(
        "TransformerLM.forward: argument 'mask.documents' must be (batch, seq) = (2, 9), one document id per token, "
        "got shape (2, 8)"
    )


class PackedInside(torch.nn.Module):
    """Packed documents of a length read from a tensor (a data-dependent size, torch's unbacked `u0`), made into a
    mask inside the program."""

    def forward(self, ids, length):
        k = length.item()
        torch._check(k >= 1)
        torch._check(k <= ids.size(1))
        return T.AttentionMask(documents=ids.narrow(1, 0, k)).documents.cumsum(-1)


def test_a_documents_mask_of_a_data_dependent_length_is_built_inside_an_exported_program():
    """check_documents asks nothing of a traced mask's sizes (under a trace it only checks the dtype and rank): a
    branch on the length first (`documents.size(1) < 2`) is decided for a symbolic size, which torch takes to be at
    least 2 while tracing, but cannot be for a data-dependent one, and export fails. Eagerly the ids are checked."""
    ids = torch.tensor([[0, 0, 1, 1, 2, 2]])
    with T.checks(True):
        program = torch.export.export(PackedInside(), (ids, torch.tensor(1)))
    for k in (1, 2, 5):
        assert program.module()(ids, torch.tensor(k)).tolist() == ids[:, :k].cumsum(-1).tolist()
    with pytest.raises(ValueError, match="documents must be non-decreasing along each row"):
        PackedInside()(torch.tensor([[0, 1, 0]]), torch.tensor(3))


def test_the_encoder_decoder_s_cached_decoder_step_exports_with_a_decoder_cache_and_loops_as_eager(tiny_model):
    """A DecoderCache input (and output): batch, source length and cache length symbolic; fed the cache it returns,
    the program decodes as eager does from caches of other batches, sources and lengths; a cache of another depth
    fails with the decoder's own message, a source mask of another length with the contract's."""
    from test_prove_inputs import DECODER_SIZES, DecoderStep, decoder_inputs

    step = DecoderStep(tiny_model)
    memory, src_mask, cache = decoder_inputs(tiny_model, 2, 7, 4)
    exported = export(step, memory, src_mask, torch.randint(1, 13, (2, 1)), cache, sizes=DECODER_SIZES)
    ranges = sorted((int(r.lower), int(r.upper)) for r in exported.program.range_constraints.values())
    assert ranges == [(1, 16), (1, 31), (1, 32)]  # batch, cache_len, src_len: nothing specialised
    with torch.no_grad():
        for batch, src_len, decoded in ((1, 1, 1), (3, 9, 5), (16, 32, 28)):
            memory, src_mask, cache = decoder_inputs(tiny_model, batch, src_len, decoded)
            reference = pytree.tree_map(lambda leaf: leaf, cache)
            for _ in range(3):
                token = torch.randint(1, 13, (batch, 1))
                got, cache = exported(memory, src_mask, token, cache)
                want, reference = step(memory, src_mask, token, reference)
                torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
                assert cache.length == reference.length
        assert cache.length == 31
        shallow = T.make_model(11, 13, N=1, d_model=16, d_ff=32, h=4, dropout=0.0).eval()
        memory, src_mask, other = decoder_inputs(shallow, 2, 7, 4)
        with pytest.raises(ValueError, match="Decoder: the cache has 1 layers, the decoder 2"):
            exported(memory, src_mask, torch.randint(1, 13, (2, 1)), other)
        memory, src_mask, cache = decoder_inputs(tiny_model, 2, 7, 4)
        with pytest.raises(
            TypeCheckError, match=r"argument 'src_mask' is bool\[2,1,5\], expected Bool\[Tensor, 'batch 1 src_len'\]"
        ):
            exported(memory, src_mask[:, :, :5], torch.randint(1, 13, (2, 1)), cache)
