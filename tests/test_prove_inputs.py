"""transformer.proofs.prove with structured inputs (docs/proved-shapes.md, "Structured inputs"): a key/value cache and
an AttentionMask as example inputs whose tensors' sizes are symbolic (the cache's length `cache_len`, the mask's
parts by their names), so a cached step is proved for every cache length, a step appending several positions to a
cache of any length, the functional formulation's per-head values, and beam search's step (the rows kept, then the
next token) for every batch, number of kept rows and cache length."""

import pytest
import torch
import torch.utils._pytree as pytree
from torch import nn

import transformer as T
from transformer import AttentionMask, Bool, DecoderCache, Float, Int, Tensor, checked
from transformer.cache import KVCache
from transformer.lm.model import LMNextTokens
from transformer.lm.positions import LMCache
from transformer.proofs import prove

VOCAB, MAX_LEN = 50, 32
FORMULATIONS = {
    "rotary-gqa": dict(positional_encoding="rotary", n_kv_heads=2, norm="rms"),
    "learned": dict(positional_encoding="learned"),
}


def lm(name):
    if name == "functional":  # per-head values to d_model, summed (PerHeadValueAttention), learned positions
        config = T.LMConfig.functional(VOCAB, d_model=32, n_heads=4, n_layers=1, max_len=MAX_LEN)
    else:
        config = T.LMConfig(vocab=VOCAB, d_model=32, n_heads=4, n_layers=1, max_len=MAX_LEN, dropout=0.0)
        config = T.LMConfig(**{**config.__dict__, **FORMULATIONS[name]}) if name in FORMULATIONS else config
    return T.build_lm(config).eval()


def prompted(model, batch, length):
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(0, VOCAB, (batch, length)), cache=cache)
    return cache


class Step(nn.Module):
    """One token after a cache of any length: the step every search runs after the prompt."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    @checked
    def forward(self, token: Int[Tensor, "batch 1"], cache: LMCache) -> Float[Tensor, "batch 1 {self.model.d_model}"]:
        return self.model(token, cache=cache)


@pytest.mark.parametrize("name", ["rotary-gqa", "learned", "functional"])
def test_a_cached_step_is_proved_for_every_batch_and_every_cache_length(name):
    model = lm(name)
    report = prove(Step(model), torch.randint(0, VOCAB, (2, 1)), prompted(model, 2, 6), sizes=CACHED)
    assert report.proved, str(report)
    attend = "PerHeadValueAttention.attend" if name == "functional" else "CausalSelfAttention.attend"
    assert any(c.call.endswith(attend) for c in report.calls)


CACHED = {"batch": (1, 16), "cache_len": (1, MAX_LEN - 1)}


@pytest.mark.parametrize("name", ["rotary-gqa", "learned"])
def test_the_step_after_a_left_padded_prompt_is_proved_for_every_batch_and_cache_length(name):
    """A left-padded prompt leaves the cache its pads (``real_keys``, (batch, cache_len)) and each row's next
    position: both sized with the keys, so the next step is proved for every batch and cache length, not only the
    example's 6 (docs/proved-shapes.md, "Named by their documented axes")."""
    model = lm(name)
    real = torch.ones(2, 6, dtype=torch.bool)
    real[1, :3] = False
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.randint(0, VOCAB, (2, 6)), AttentionMask(key_mask=real), cache=cache)
    assert cache.real_keys is not None and not bool(cache.real_keys.all())
    token = torch.randint(0, VOCAB, (2, 1))
    report = prove(Step(model), token, pytree.tree_map(lambda leaf: leaf, cache), sizes=CACHED)
    assert report.proved, str(report)


@checked
def cached_scores(q: Float[Tensor, "batch 2 1 8"], cache: KVCache) -> Float[Tensor, "batch 2 1 4"]:
    return q @ cache.keys.transpose(2, 3)  # the bug: the contract holds only for a cache of 4 positions


def test_a_contract_that_holds_for_one_cache_length_is_a_counterexample_over_the_cache_s_axis():
    cache = KVCache()
    cache.extend(torch.randn(3, 2, 4, 8), torch.randn(3, 2, 4, 8))
    report = prove(cached_scores, torch.randn(3, 2, 1, 8), cache, sizes={"batch": (1, 8), "cache_len": (1, 16)})
    (found,) = report.counterexamples
    assert (found.by, found.relation) == ("the return value axis 4", "cache_len == 4")
    assert found.sizes == {"batch": 3, "cache_len": 1}
    assert found.eager.startswith("TypeCheckError: cached_scores: the return value is f32[3,2,1,1], expected")


@pytest.mark.parametrize("part", ["key_mask", "dense"])
def test_the_language_model_with_a_structured_padding_mask_is_proved_for_every_batch_and_length(part):
    """An AttentionMask input: key_mask (batch, k_len) by default, named (batch, seq) with `axes`, or its k_len
    made seq by an assumption."""
    model = lm("rotary-gqa")
    real = torch.ones(2, 8, dtype=torch.bool)
    real[0, :3] = False
    tokens = torch.randint(0, VOCAB, (2, 8))
    sizes = {"batch": (1, 16), "seq": (1, MAX_LEN)}
    if part == "key_mask":
        mask = AttentionMask(key_mask=real)
        report = prove(model, tokens, mask, sizes=sizes, axes={"mask.key_mask": ("batch", "seq")})
    else:
        mask = AttentionMask(dense=real[:, None, :] & torch.ones(8, 8, dtype=torch.bool).tril())
        report = prove(model, tokens, mask, sizes=sizes, assume=["q_len == seq", "k_len == seq"])
    assert report.proved, str(report)


class Chunk(nn.Module):
    """Several new positions after a cache of any length, at the attention (the language model takes one position at
    a time after its first call): each new query sees every cached key and the new ones up to itself, the
    bottom-right causal mask (AttentionMask(window_right=0): query i at position cache_len + i)."""

    def __init__(self, attention):
        super().__init__()
        self.attention = attention

    @checked
    def forward(self, x: Float[Tensor, "batch new 32"], cache: KVCache) -> Float[Tensor, "batch new 32"]:
        return self.attention(x, AttentionMask(window_right=0), cache=cache)


def attention_of(name):
    return lm(name).layers[0].self_attn


def filled(attention, x):
    cache = KVCache()
    with torch.no_grad():
        attention(x, AttentionMask(causal=True), cache=cache)
    return cache


@pytest.mark.parametrize("name", ["rotary-gqa", "functional"])
def test_a_step_appending_several_positions_to_a_cache_of_any_length_is_proved_and_equals_recomputation(name):
    attention = attention_of(name)
    chunk = Chunk(attention)
    report = prove(
        chunk, torch.randn(2, 3, 32), filled(attention, torch.randn(2, 5, 32)), sizes={**CACHED, "new": (1, 16)}
    )
    assert report.proved, str(report)
    with torch.no_grad():
        for cached, new in ((1, 1), (3, 4), (6, 1), (2, 7)):
            x = torch.randn(2, cached + new, 32)
            got = chunk(x[:, cached:], filled(attention, x[:, :cached]))
            whole = attention(x, AttentionMask(causal=True))[:, cached:]
            torch.testing.assert_close(got, whole, rtol=1e-5, atol=1e-6)


class BeamStep(nn.Module):
    """Beam search's step (decoding/beam.py's beam_search_steps, over LMNextTokens): keep the rows `rows` of the
    hypotheses (rows may repeat, their number need not be the batch's), then the next token's log-probabilities over
    the cache. The tokens before the last are not read with a cache: zeros of the cache's length stand for them."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    @checked
    def forward(
        self, rows: Int[Tensor, " kept"], token: Int[Tensor, "kept 1"], cache: LMCache
    ) -> Float[Tensor, "kept {self.model.config.vocab}"]:
        steps = LMNextTokens(self.model)
        steps.cache = cache
        steps.reorder(rows)
        history = torch.zeros(token.size(0), cache.length, dtype=token.dtype, device=token.device)
        return steps(torch.cat([history, token], dim=1))


@pytest.mark.parametrize("name", ["rotary-gqa", "functional"])
def test_beam_search_s_step_is_proved_for_every_batch_kept_rows_and_cache_length(name):
    model = lm(name)
    # (rows 0: the eager runs at other sizes make rows of the example's values, which must index every batch)
    rows = torch.tensor([0, 0, 0])
    sizes = {**CACHED, "kept": (1, 16)}
    report = prove(BeamStep(model), rows, torch.randint(0, VOCAB, (3, 1)), prompted(model, 2, 6), sizes=sizes)
    assert report.proved, str(report)
    assert any(c.call.endswith("Generator.decision_log_probs") for c in report.calls)


def documents_mask(batch, seq):
    """Packed documents: ids 0, 0, 1, 1, 1, 2, ... (a new document every few positions), row 0 one document."""
    ids = (torch.arange(seq) * 3 // seq).expand(batch, seq).clone()
    ids[0] = 0
    return AttentionMask(documents=ids)


@pytest.mark.parametrize("naming", ["axes", "assume"])
@pytest.mark.parametrize("name", ["rotary-gqa", "learned"])
def test_the_language_model_with_a_packed_documents_mask_is_proved_for_every_batch_and_length(name, naming):
    """AttentionMask(documents=...): the documents' own positions (positions_from_documents) and the block-diagonal
    causal mask for every length from 1 to max_len (a slice assignment there specialised seq at 2, and
    check_documents must not branch on the symbolic length); the documents named (batch, seq) with `axes`, or their
    k_len made seq by an assumption. Without the assumption the mask's length is the relation the proof needs."""
    model = lm(name)
    tokens, mask, sizes = torch.randint(0, VOCAB, (2, 8)), documents_mask(2, 8), {"batch": (1, 16), "seq": (1, MAX_LEN)}
    if naming == "axes":
        report = prove(model, tokens, mask, sizes=sizes, axes={"mask.documents": ("batch", "seq")})
    else:
        report = prove(model, tokens, mask, sizes={**sizes, "k_len": (1, MAX_LEN)}, assume=["k_len == seq"])
    assert report.proved, str(report)
    assert any(c.call.endswith("positions_from_documents") for c in report.calls)
    if naming == "assume":
        unrelated = prove(model, tokens, mask, sizes={**sizes, "k_len": (1, MAX_LEN)})
        (found,) = unrelated.counterexamples
        assert "k_len" in found.relation and "seq" in found.relation, str(unrelated)
        assert "must be (batch, seq)" in found.eager, str(unrelated)


WINDOW = 8


class WindowedStep(nn.Module):
    """One token after a sliding-window cache (LMCache.window = 8: it holds at most window - 1 = 7 positions after
    each call, Mistral's rolling buffer); the cache comes back, trimmed."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    @checked
    def forward(self, token: Int[Tensor, "batch 1"], cache: LMCache) -> tuple[Float[Tensor, "batch 1 50"], LMCache]:
        return self.model.logits(token, cache=cache), cache


def windowed_lm():
    fields = dict(positional_encoding="rotary", n_kv_heads=2, norm="rms", sliding_window=WINDOW)
    return T.build_lm(T.LMConfig(vocab=VOCAB, d_model=32, n_heads=4, n_layers=2, max_len=MAX_LEN, **fields)).eval()


@pytest.mark.parametrize("prompt", [3, WINDOW - 1, WINDOW + 4])
def test_a_windowed_cached_step_is_proved_by_cases_across_the_window_for_every_held_length(prompt):
    """The windowed cache as an input, its held length symbolic (cache_len 1..window - 1, all it can hold): the
    step's trim drops one position exactly when the cache holds window - 1 (`if drop <= 0:` in LMCache.trim, a
    branch on the size), so the whole range is not proved in one piece, and cases="split" proves it in two,
    cache_len <= window - 2 (nothing dropped) and == window - 1 (one dropped), from a cache shorter than window - 1,
    as long, and from a prompt longer (positions already dropped: the count is fixed at export)."""
    model = windowed_lm()
    cache = prompted(model, 2, prompt)
    assert (cache.held, cache.dropped) == (min(prompt, WINDOW - 1), max(0, prompt - WINDOW + 1))
    sizes = {"batch": (1, 16), "cache_len": (1, WINDOW - 1)}
    token = torch.randint(0, VOCAB, (2, 1))
    whole = prove(WindowedStep(model), token, cache, sizes=sizes)
    found = whole.counterexamples[0]  # the side the example's cache takes (from window - 1 held: the drop)
    side = f"cache_len <= {WINDOW - 2}" if cache.held < WINDOW - 1 else f"cache_len > {WINDOW - 2}"
    assert found.relation == side and "positions.py" in found.where, str(whole)
    assert found.eager.startswith("no error")  # eagerly both sides are right: a specialisation, not a shape bug
    report = prove(WindowedStep(model), token, cache, sizes=sizes, cases="split")
    assert report.proved, str(report)
    assert [case.ranges["cache_len"] for case in report.cases] == [(1, WINDOW - 2), (WINDOW - 1, WINDOW - 1)]


def test_a_windowed_cached_step_exports_on_each_side_of_the_window_and_equals_eager():
    """Exported with the cache's held length symbolic below window - 1 (nothing dropped: the program loops, the
    cache it returns one longer, until it holds window - 1), and at window - 1 after a prompt longer than the window
    (one position dropped per step): each equals eager's step. The count a window dropped is fixed at export: a
    cache that dropped another number of positions is another program, which torch refuses."""
    from transformer.proofs import export

    model = windowed_lm()
    step = WindowedStep(model)
    token = torch.randint(0, VOCAB, (2, 1))
    below = export(step, token, prompted(model, 2, 3), sizes={"batch": (1, 16), "cache_len": (1, WINDOW - 2)})
    at = export(
        step,
        token,
        prompted(model, 2, WINDOW + 4),
        sizes={"batch": (1, 16), "cache_len": (1, WINDOW - 1)},
        assume=[f"cache_len == {WINDOW - 1}"],
    )
    with torch.no_grad():
        for batch, length in ((1, 1), (3, 4)):
            cache = prompted(model, batch, length)
            reference = pytree.tree_map(lambda leaf: leaf, cache)  # the same tensors in new cache objects
            while cache.held < WINDOW - 1:
                token = torch.randint(0, VOCAB, (batch, 1))
                got, cache = below(token, cache)
                want, reference = step(token, reference)
                torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
                assert (cache.held, cache.dropped) == (reference.held, reference.dropped)
        cache = prompted(model, 3, WINDOW + 4)
        reference = pytree.tree_map(lambda leaf: leaf, cache)
        token = torch.randint(0, VOCAB, (3, 1))
        got, cache = at(token, cache)
        want, reference = step(token, reference)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
        assert (cache.held, cache.dropped, cache.length) == (WINDOW - 1, 6, WINDOW + 5)
        with pytest.raises(ValueError, match="Trying to flatten user inputs with exported input tree spec"):
            at(token, cache)  # it dropped 6 now, the program was exported for 5


class Recorded(nn.Module):
    """Multi-head attention keeping its probabilities (`record_attention`: the eager reference with the mask made
    dense as (q_len, k_len)), queries shorter than the keys under the bottom-right causal mask."""

    def __init__(self):
        super().__init__()
        self.attention = T.MultiHeadedAttention(4, 32, 0.0).eval()
        self.attention.record_attention = True

    @checked
    def forward(
        self, q: Float[Tensor, "batch q_len 32"], kv: Float[Tensor, "batch k_len 32"]
    ) -> Float[Tensor, "batch q_len 32"]:
        return self.attention(q, kv, kv, AttentionMask(window_right=0))


@pytest.mark.filterwarnings("ignore:The tensor attribute self.attention.attn was assigned during export")
def test_recorded_attention_over_more_keys_than_queries_is_proved_and_equals_the_unrecorded():
    """The recorded probabilities are (batch, heads, q_len, k_len), zero after each query's own position (query i
    at k_len - q_len + i), and the output equals the one computed without recording, for queries shorter than the
    keys (a square (k_len, k_len) mask holds only when q_len == k_len, or broadcasts a single query to k_len rows);
    proved for every batch, q_len and k_len with q_len <= k_len."""
    model = Recorded()
    q, kv = torch.randn(2, 3, 32), torch.randn(2, 7, 32)
    with torch.no_grad():
        for q_len in (1, 3):
            recorded = model(q[:, :q_len], kv)
            probabilities = model.attention.attn
            assert probabilities.shape == (2, 4, q_len, 7)
            slots = torch.arange(7 - q_len, 7)[:, None]
            assert probabilities.masked_select(torch.arange(7) > slots).eq(0).all()  # (none hidden at q_len 1)
            torch.testing.assert_close(probabilities.sum(-1), torch.ones(2, 4, q_len))
            model.attention.record_attention = False
            torch.testing.assert_close(recorded, model(q[:, :q_len], kv), rtol=1e-5, atol=1e-6)
            model.attention.record_attention = True
    sizes = {"batch": (1, 8), "q_len": (1, 16), "k_len": (1, 16)}
    report = prove(model, q, kv, sizes=sizes, assume=["q_len <= k_len"])
    assert report.proved, str(report)


class DecoderStep(nn.Module):
    """The encoder-decoder's cached decoder step: one target token after a DecoderCache (each layer's self-attention
    keys of cache_len positions, its cross-attention's of the source's src_len), over the encoded memory; the cache
    comes back."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    @checked
    def forward(
        self,
        memory: Float[Tensor, "batch src_len 16"],
        src_mask: Bool[Tensor, "batch 1 src_len"],
        token: Int[Tensor, "batch 1"],
        cache: DecoderCache,
    ) -> tuple[Float[Tensor, "batch 1 16"], DecoderCache]:
        return self.model.decode(memory, src_mask, token, None, cache=cache), cache


def decoder_inputs(model, batch, src_len, decoded):
    """Memory, source mask (the first row padded) and a DecoderCache after `decoded` target positions."""
    src = torch.randint(1, 11, (batch, src_len))
    src_mask = torch.ones(batch, 1, src_len, dtype=torch.bool)
    src_mask[0, 0, src_len // 2 + 1 :] = False
    cache = model.new_cache()
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        model.decode(memory, src_mask, torch.randint(1, 13, (batch, decoded)), None, cache=cache)
    return memory, src_mask, cache


DECODER_SIZES = {"batch": (1, 16), "src_len": (1, 32), "cache_len": (1, 31)}


def test_the_encoder_decoder_s_cached_decoder_step_is_proved_for_every_batch_source_and_cache_length(tiny_model):
    """A DecoderCache input: its self-attention keys named cache_len, its cross-attention's src_len (the memory's
    length, which the contracts relate to the source mask's); proved for every batch, source length and cache
    length."""
    memory, src_mask, cache = decoder_inputs(tiny_model, 2, 7, 4)
    report = prove(DecoderStep(tiny_model), memory, src_mask, torch.randint(1, 13, (2, 1)), cache, sizes=DECODER_SIZES)
    assert report.proved, str(report)
    assert any(c.call.endswith("DecoderLayer.forward") for c in report.calls), str(report)


class Reorder(nn.Module):
    """Beam search's reorder of a language model's cache (LMCache.reorder): the rows `rows` kept, of any number,
    with the pads and next positions of a left-padded prompt (real_keys, next_positions) kept with the keys."""

    @checked
    def forward(self, rows: Int[Tensor, " kept"], cache: LMCache) -> tuple[Bool[Tensor, "kept cache_len"], LMCache]:
        cache.reorder(rows)
        return cache.real_keys, cache


def test_the_reorder_of_a_padded_cache_by_a_beam_index_of_every_width_is_proved():
    """For every batch, number of kept rows and cache length: the keys, values, pads and next positions all follow
    the index (the values are checked eagerly: row r of the result is row rows[r] of the cache)."""
    model = lm("rotary-gqa")
    prompt = torch.randint(0, VOCAB, (3, 6))
    real = torch.ones(3, 6, dtype=torch.bool)
    real[1, :2] = False
    cache = model.new_cache()
    with torch.no_grad():
        model(prompt, AttentionMask(key_mask=real), cache=cache)
    rows = torch.tensor([1, 1, 0, 2])
    sizes = {"batch": (1, 16), "kept": (1, 16), "cache_len": (1, MAX_LEN - 1)}
    report = prove(Reorder(), torch.tensor([0, 0]), pytree.tree_map(lambda leaf: leaf, cache), sizes=sizes)
    assert report.proved, str(report)
    keys, pads, following = cache.layers[0].keys, cache.real_keys, cache.next_positions
    got, kept = Reorder()(rows, pytree.tree_map(lambda leaf: leaf, cache))
    assert torch.equal(got, pads[rows]) and torch.equal(kept.next_positions, following[rows])
    assert torch.equal(kept.layers[0].keys, keys[rows]) and kept.length == cache.length
