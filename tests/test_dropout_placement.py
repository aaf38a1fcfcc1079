"""Where every dropout sits, with which probability, and that it runs in training only (section 5.4).

The paper's regularisation, as laid out by the Annotated Transformer:

* each sub-layer: ``x + Dropout(Sublayer(LayerNorm(x)))`` ("pre") or ``LayerNorm(x + Dropout(Sublayer(x)))``
  ("post"); the residual input ``x`` itself is never dropped;
* the embeddings: ``Dropout(lut(x) * sqrt(d_model) + PE)``, the sum, not either term alone;
* inside the FFN: ``W_2 Dropout(act(W_1 x + b_1)) + b_2``;
* on the attention probabilities: ``Dropout(softmax(Q K^T / sqrt(d_k)) masked) V``, then ``W^O``;
  a query row with no allowed key stays zero;
* ``TransformerConfig.dropout`` at the first three sites, ``attention_dropout`` at the last.

How the masks are known: every dropout here draws from torch's default generator (``nn.Dropout`` and
``F.scaled_dot_product_attention`` through ``bernoulli_``, the Triton kernel through a Philox seed that it
draws from the generator). :class:`Replay` seeds the generator as the module's run was seeded and draws the
very same masks again, in the order the module drew them, so each module's output is compared with an
explicit float64 formula (einsum, softmax) that uses exactly the masks the module used. Each mask is
``0`` or ``1/(1 - p)``, so the reference also pins down which ``p`` each site used.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer as T
from transformer import kernels

DTYPE = torch.float64  # the modules run in float64 so the references can be compared tightly
ATOL = 1e-9
SEEDS = (11, 12)

# "auto" is eager on a CPU; "record" is MultiHeadedAttention.record_attention = True (its own code path)
BACKENDS = ["eager", "torch", "triton", "auto"]
PATHS_OF_ATTENTION = [*BACKENDS, "record"]


# --------------------------------------------------------------------------------------------------
# Replaying the generator


class Replay:
    """torch's default generator, reseeded with ``seed``, drawing the masks a module run under the same seed drew.

    Call :meth:`dropout` and :meth:`attention` in the order the module runs its dropouts. Each returns the
    multiplicative mask: 0 where an element was dropped, ``1 / (1 - p)`` where it was kept.
    """

    def __init__(self, seed: int, backend: str = "eager") -> None:
        torch.manual_seed(seed)
        self.backend = backend

    def dropout(self, shape: tuple[int, ...], p: float) -> torch.Tensor:
        """The mask of ``nn.Dropout(p)`` (and of F.scaled_dot_product_attention) on a ``shape`` tensor."""
        return F.dropout(torch.ones(shape, dtype=DTYPE), p, training=True)

    def attention(self, shape: tuple[int, int, int, int], p: float) -> torch.Tensor:
        """The mask on (batch, heads, q_len, k_len) attention probabilities, as the backend draws it."""
        if p == 0:  # no dropout: nothing is drawn (the references of undropped outputs)
            return torch.ones(shape, dtype=DTYPE)
        if self.backend == "triton":
            return kernel_keep(shape, p) / (1 - p)
        return self.dropout(shape, p)  # eager, record, auto on a CPU, and torch's math path: bernoulli_


def kernel_keep(shape: tuple[int, int, int, int], p: float) -> torch.Tensor:
    """The kernel's keep mask (as in tests/kernels/test_dropout.py): with q = 0 every allowed probability is
    1/k_len, and v = identity makes each output row the dropped probability row. The kernel draws its seed from
    the default generator, as it did in the module, and the tensors here draw nothing."""
    batch, heads, q_len, k_len = shape
    head_dim = max(16, k_len)
    q = torch.zeros(batch, heads, q_len, head_dim)
    k = torch.zeros(batch, heads, k_len, head_dim)
    v = torch.eye(k_len, head_dim).expand(batch, heads, k_len, head_dim)
    out = kernels.flash_attention(q, k, v, dropout_p=p)[..., :k_len]
    return (out * k_len * (1 - p) > 0.5).to(DTYPE)


def assert_is_a_dropout_mask(mask: torch.Tensor, p: float) -> None:
    """0 or 1/(1-p), with both present (so a test built on it really has dropped and kept elements)."""
    values = set(mask.unique().tolist())
    assert values == {0.0, 1 / (1 - p)}, values


# --------------------------------------------------------------------------------------------------
# Explicit references, float64


def linear(x: torch.Tensor, lin: nn.Linear) -> torch.Tensor:
    return torch.einsum("...i,oi->...o", x, lin.weight) + lin.bias


def layer_norm(x: torch.Tensor, norm: T.LayerNorm) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return norm.weight * (x - mean) / torch.sqrt(var + norm.eps) + norm.bias


def gelu(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def sinusoids(positions: torch.Tensor, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))."""
    pos = positions.to(DTYPE)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=DTYPE)[None, :]
    angle = pos / 10000 ** (two_i / d_model)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)  # sin, cos interleaved


def positions(pos_module: nn.Module, offset: int, length: int) -> torch.Tensor:
    if isinstance(pos_module, T.LearnedPositionalEncoding):
        return pos_module.pe[0, offset : offset + length]
    return sinusoids(torch.arange(offset, offset + length), pos_module.d_model)


def ref_embed(embed: nn.Sequential, tokens: torch.Tensor, p: float, replay: Replay, offset: int = 0) -> torch.Tensor:
    """Dropout(lut(x) * sqrt(d_model) + PE), positions offset .. offset + seq - 1."""
    lut, pos = embed[0].lut, embed[1]
    x = lut.weight[tokens] * math.sqrt(lut.embedding_dim) + positions(pos, offset, tokens.size(1))
    return replay.dropout(tuple(x.shape), p) * x


def ref_ffn(ff: T.PositionwiseFeedForward, x: torch.Tensor, p: float, replay: Replay) -> torch.Tensor:
    """W_2 Dropout(act(W_1 x + b_1)) + b_2."""
    hidden = linear(x, ff.w_1)
    hidden = torch.clamp_min(hidden, 0.0) if ff.activation == "relu" else gelu(hidden)
    return linear(replay.dropout(tuple(hidden.shape), p) * hidden, ff.w_2)


def ref_attention(mha: T.MultiHeadedAttention, query, key, value, mask, p: float, replay: Replay):
    """Concat_i(Dropout(softmax(Q_i K_i^T / sqrt(d_k)) masked) V_i) W^O; returns (output, dropped probabilities)."""
    h, d_k = mha.h, mha.d_k
    q = linear(query, mha.q_proj).unflatten(-1, (h, d_k))
    k = linear(key, mha.k_proj).unflatten(-1, (h, d_k))
    v = linear(value, mha.v_proj).unflatten(-1, (h, d_k))
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d_k)
    allowed = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask.unsqueeze(1).expand_as(scores)
    probs = torch.where(allowed, scores.masked_fill(~allowed, -math.inf).softmax(-1), 0.0)  # empty rows: 0
    dropped = replay.attention(tuple(probs.shape), p) * probs
    heads = torch.einsum("bhqk,bkhd->bqhd", dropped, v)
    return linear(heads.flatten(-2), mha.out_proj), dropped


def ref_sublayer(sc: T.SublayerConnection, x: torch.Tensor, sublayer, p: float, replay: Replay) -> torch.Tensor:
    """pre: x + Dropout(Sublayer(LayerNorm(x))); post: LayerNorm(x + Dropout(Sublayer(x)))."""
    if sc.norm_placement == "pre":
        y = sublayer(layer_norm(x, sc.norm))
        return x + replay.dropout(tuple(y.shape), p) * y
    y = sublayer(x)
    return layer_norm(x + replay.dropout(tuple(y.shape), p) * y, sc.norm)


def ref_encoder_layer(layer: T.EncoderLayer, x, mask, p: float, p_attn: float, replay: Replay):
    x = ref_sublayer(
        layer.sublayer[0], x, lambda y: ref_attention(layer.self_attn, y, y, y, mask, p_attn, replay)[0], p, replay
    )
    return ref_sublayer(layer.sublayer[1], x, lambda y: ref_ffn(layer.feed_forward, y, p, replay), p, replay)


def ref_decoder_layer(layer: T.DecoderLayer, x, memory, src_mask, tgt_mask, p: float, p_attn: float, replay: Replay):
    x = ref_sublayer(
        layer.sublayer[0], x, lambda y: ref_attention(layer.self_attn, y, y, y, tgt_mask, p_attn, replay)[0], p, replay
    )
    x = ref_sublayer(
        layer.sublayer[1],
        x,
        lambda y: ref_attention(layer.src_attn, y, memory, memory, src_mask, p_attn, replay)[0],
        p,
        replay,
    )
    return ref_sublayer(layer.sublayer[2], x, lambda y: ref_ffn(layer.feed_forward, y, p, replay), p, replay)


def ref_model(model: T.EncoderDecoder, src, tgt, src_mask, tgt_mask, p: float, p_attn: float, replay: Replay):
    """The whole encoder-decoder in training mode, every mask replayed in the order the model draws them."""
    x = ref_embed(model.src_embed, src, p, replay)
    for layer in model.encoder.layers:
        x = ref_encoder_layer(layer, x, src_mask, p, p_attn, replay)
    memory = layer_norm(x, model.encoder.norm)
    y = ref_embed(model.tgt_embed, tgt, p, replay)
    for layer in model.decoder.layers:
        y = ref_decoder_layer(layer, y, memory, src_mask, tgt_mask, p, p_attn, replay)
    return layer_norm(y, model.decoder.norm)


def seeded(seed: int, fn, *args, **kwargs):
    torch.manual_seed(seed)
    return fn(*args, **kwargs)


# --------------------------------------------------------------------------------------------------
# The replay itself


@pytest.mark.parametrize("backend", ["eager", "torch", "triton"])
def test_replay_draws_the_masks_the_dropouts_draw(backend):
    """The helper every other test rests on: reseeding and replaying gives the mask of nn.Dropout, of
    F.scaled_dot_product_attention and of the Triton kernel (should one change how it draws, this says so first)."""
    p = 0.4
    if backend == "eager":
        drawn = seeded(3, nn.Dropout(p), torch.ones(2, 2, 5, 7, dtype=DTYPE))
    else:  # with q = 0 the probabilities are uniform (1/7), and v = identity shows each dropped row
        q, k = torch.zeros(2, 2, 5, 16, dtype=DTYPE), torch.zeros(2, 2, 7, 16, dtype=DTYPE)
        v = torch.eye(7, 16, dtype=DTYPE).expand(2, 2, 7, 16)
        sdpa = F.scaled_dot_product_attention if backend == "torch" else kernels.flash_attention
        drawn = seeded(3, sdpa, q, k, v, dropout_p=p)[..., :7] * 7
    mask = Replay(3, backend).attention((2, 2, 5, 7), p)
    assert_is_a_dropout_mask(mask, p)
    torch.testing.assert_close(drawn, mask, rtol=0, atol=1e-9)


# --------------------------------------------------------------------------------------------------
# 1. The sub-layer connection


def sublayer_connection(placement: str, p: float, d: int) -> T.SublayerConnection:
    """A SublayerConnection in training mode whose LayerNorm is not the identity's (so pre and post differ)."""
    sc = T.SublayerConnection(d, p, placement).to(DTYPE).train()
    with torch.no_grad():
        sc.norm.weight.uniform_(0.5, 1.5)
        sc.norm.bias.uniform_(-0.5, 0.5)
    return sc


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_sublayer_connection_drops_the_sublayer_output(placement):
    """pre: x + Dropout(Sublayer(LayerNorm(x))); post: LayerNorm(x + Dropout(Sublayer(x))), with the drawn mask."""
    p, d = 0.3, 16
    sc = sublayer_connection(placement, p, d)
    sublayer = nn.Sequential(nn.Linear(d, d), nn.Tanh()).to(DTYPE)  # no randomness of its own
    x = torch.randn(2, 5, d, dtype=DTYPE)
    for seed in SEEDS:
        out = seeded(seed, sc, x, sublayer)
        assert_is_a_dropout_mask(Replay(seed).dropout((2, 5, d), p), p)
        torch.testing.assert_close(out, ref_sublayer(sc, x, sublayer, p, Replay(seed)), rtol=0, atol=ATOL)
    assert not torch.equal(seeded(SEEDS[0], sc, x, sublayer), seeded(SEEDS[1], sc, x, sublayer))


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_sublayer_connection_never_drops_the_residual(placement):
    """With Sublayer = 0 a training-mode connection gives x (pre) or LayerNorm(x) (post), whatever the seed."""
    p, d = 0.5, 16
    sc = sublayer_connection(placement, p, d)
    x = torch.randn(2, 5, d, dtype=DTYPE)
    residual_only = x if placement == "pre" else layer_norm(x, sc.norm)
    for seed in SEEDS:
        out = seeded(seed, sc, x, torch.zeros_like)
        torch.testing.assert_close(out, residual_only, rtol=0, atol=ATOL)


# --------------------------------------------------------------------------------------------------
# 2. The embeddings


@pytest.mark.parametrize("offset", [0, 3], ids=["offset0", "offset3"])
@pytest.mark.parametrize("kind", ["sinusoidal", "learned"])
def test_embeddings_drop_the_sum_of_token_embedding_and_position(kind, offset):
    """Dropout(lut(x) * sqrt(d_model) + PE(offset ..)): a dropped element loses both terms, a kept one
    is the whole sum scaled by 1/(1-p) (incremental decoding passes an offset)."""
    p, d, vocab = 0.3, 16, 11
    pe_class = T.LearnedPositionalEncoding if kind == "learned" else T.PositionalEncoding
    embed = nn.Sequential(T.Embeddings(d, vocab), pe_class(d, p, max_len=20)).to(DTYPE).train()
    tokens = torch.randint(0, vocab, (2, 6))
    for seed in SEEDS:
        out = seeded(seed, lambda: embed[1](embed[0](tokens), offset=offset))
        mask = Replay(seed).dropout((2, 6, d), p)
        assert_is_a_dropout_mask(mask, p)
        assert torch.equal(out[mask == 0], torch.zeros_like(out[mask == 0]))  # nothing of either term is left
        torch.testing.assert_close(out, ref_embed(embed, tokens, p, Replay(seed), offset), rtol=0, atol=1e-6)


# --------------------------------------------------------------------------------------------------
# 3. The feed-forward network


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feed_forward_drops_after_the_activation_before_w2(activation):
    """FFN(x) = W_2 Dropout(act(W_1 x + b_1)) + b_2. (With relu, dropping before the activation would give
    the same numbers, since relu(m z) = m relu(z) for m >= 0; gelu tells them apart.)"""
    p, d, d_ff = 0.3, 16, 24
    ff = T.PositionwiseFeedForward(d, d_ff, p, activation).to(DTYPE).train()
    x = torch.randn(2, 5, d, dtype=DTYPE)
    for seed in SEEDS:
        out = seeded(seed, ff, x)
        assert_is_a_dropout_mask(Replay(seed).dropout((2, 5, d_ff), p), p)
        torch.testing.assert_close(out, ref_ffn(ff, x, p, Replay(seed)), rtol=0, atol=ATOL)


# --------------------------------------------------------------------------------------------------
# 4. The attention probabilities


def attention_inputs():
    """query (2, 5, 32), key = value (2, 6, 32), and a dense mask with padded keys and one query row with no key."""
    query = torch.randn(2, 5, 32, dtype=DTYPE)
    memory = torch.randn(2, 6, 32, dtype=DTYPE)
    mask = torch.ones(2, 5, 6, dtype=torch.bool)
    mask[1, :, 4:] = False  # padded keys
    mask[0, :, :] = torch.rand(5, 6) > 0.3
    mask[0, 2] = False  # this query may attend nothing: its row stays zero, dropout or not
    return query, memory, mask


def mask_forms(dense: torch.Tensor) -> dict[str, tuple[object, torch.Tensor | None]]:
    """Each form a mask can travel in to the attention of q_len = 5 queries over k_len = 6 keys (each backend
    takes its own route for each), with the dense (batch, q_len, k_len) mask it means, built here from scratch."""
    lengths = torch.tensor([6, 4])
    q_lengths = torch.tensor([5, 3])
    causal = torch.ones(5, 6, dtype=torch.bool).tril()[None]  # key j <= query i (top-left aligned)
    keys = torch.arange(6)[None, None, :] < lengths[:, None, None]
    queries = torch.arange(5)[None, :, None] < q_lengths[:, None, None]
    key_mask = torch.tensor([[True, False, True, True, True, True], [True, True, True, False, False, True]])
    return {
        "none": (None, None),
        "dense": (dense, dense),
        "empty": (T.AttentionMask(), None),
        "causal": (T.AttentionMask(causal=True), causal),
        "key_lengths": (T.AttentionMask(key_lengths=lengths), keys),
        "key_mask": (T.AttentionMask(key_mask=key_mask), key_mask[:, None, :]),
        "target": (T.AttentionMask(causal=True, key_lengths=lengths, query_lengths=q_lengths), causal & keys & queries),
        "structured_dense": (T.AttentionMask(dense=dense), dense),
    }


MASK_FORMS = list(mask_forms(torch.ones(2, 5, 6, dtype=torch.bool)))


def attention_module(path: str, p: float) -> T.MultiHeadedAttention:
    """h = 2 heads of d_k = 16 (the Triton kernel's smallest head), in training mode, on one backend or path."""
    mha = T.MultiHeadedAttention(2, 32, p, backend="eager" if path == "record" else path).to(DTYPE).train()
    mha.record_attention = path == "record"
    return mha


@pytest.mark.parametrize("form", MASK_FORMS)
@pytest.mark.parametrize("path", PATHS_OF_ATTENTION)
def test_attention_dropout_is_on_the_masked_softmax(path, form):
    """MultiHead = Concat_i(Dropout(softmax(Q_i K_i^T / sqrt(d_k)) masked) V_i) W^O on every backend and for
    every form of mask, with the dropout mask each backend drew."""
    p = 0.4
    mha = attention_module(path, p)
    query, memory, dense = attention_inputs()
    mask, meaning = mask_forms(dense)[form]
    outs = []
    for seed in SEEDS:
        out = seeded(seed, mha, query, memory, memory, mask)
        assert_is_a_dropout_mask(Replay(seed, path).attention((2, 2, 5, 6), p), p)
        expected, _ = ref_attention(mha, query, memory, memory, meaning, p, Replay(seed, path))
        torch.testing.assert_close(out, expected, rtol=0, atol=1e-6 if path == "triton" else ATOL)
        outs.append(out)
    assert not torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("form", ["dense", "target"])
@pytest.mark.parametrize("path", PATHS_OF_ATTENTION)
def test_a_query_with_no_key_stays_zero_under_dropout(path, form):
    """Dropout never revives a fully masked row: its attention output is 0, so the module gives W^O's bias."""
    mha = attention_module(path, 0.4)
    query, memory, dense = attention_inputs()
    mask, meaning = mask_forms(dense)[form]
    empty = ~meaning.expand(2, 5, 6).any(-1)
    assert empty.sum() >= 1
    for seed in SEEDS:
        out = seeded(seed, mha, query, memory, memory, mask)
        bias = mha.out_proj.bias.detach().expand(int(empty.sum()), -1)
        torch.testing.assert_close(out[empty], bias, rtol=0, atol=1e-12)


def test_record_attention_keeps_the_dropped_probabilities():
    """The record_attention path stores Dropout(softmax(...) masked) per head in ``self.attn``: kept entries are
    the probabilities scaled by 1/(1-p), dropped ones and masked ones 0, and the output is those probabilities
    times V, then W^O."""
    p = 0.4
    mha = attention_module("record", p)
    query, memory, mask = attention_inputs()
    out = seeded(SEEDS[0], mha, query, memory, memory, mask)
    expected, dropped = ref_attention(mha, query, memory, memory, mask, p, Replay(SEEDS[0]))
    torch.testing.assert_close(mha.attn, dropped, rtol=0, atol=ATOL)
    torch.testing.assert_close(out, expected, rtol=0, atol=ATOL)
    _, probs = ref_attention(mha, query, memory, memory, mask, 0.0, Replay(SEEDS[0]))  # undropped
    kept = mha.attn != 0
    assert kept.any() and (probs[~kept] > 0).any()  # some allowed probabilities were dropped, some kept
    torch.testing.assert_close(mha.attn[kept], probs[kept] / (1 - p), rtol=0, atol=ATOL)
    assert torch.equal(mha.attn[0, :, 2], torch.zeros(2, 6, dtype=DTYPE))  # the row with no key stays zero
    masked = ~mask.unsqueeze(1).expand_as(mha.attn)
    assert torch.equal(mha.attn[masked], torch.zeros(int(masked.sum()), dtype=DTYPE))  # masked keys too


# --------------------------------------------------------------------------------------------------
# The whole model: every site at once, each with its own probability


def tiny_config(**changes) -> T.TransformerConfig:
    """Two layers each side, h = 2 heads of d_k = 16 (the Triton kernel's smallest); ``dropout`` and
    ``attention_dropout`` differ, so a site that takes the other's p is seen."""
    base = T.TransformerConfig(
        src_vocab=11,
        tgt_vocab=13,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_model=32,
        d_ff=48,
        n_heads=2,
        dropout=0.1,
        attention_dropout=0.4,
    )
    return base.replace(**changes)


def model_inputs():
    """src (2, 7) with a padded tail, tgt (2, 5) with a padded tail (so the target mask has rows with no key)."""
    src = torch.randint(1, 11, (2, 7))
    tgt = torch.randint(1, 13, (2, 5))
    src[0, 5:] = 0
    tgt[1, 3:] = 0
    return src, tgt, T.padding_mask(src, 0), T.target_mask(tgt, 0)


def build(path: str, **changes) -> T.EncoderDecoder:
    """A model from ``tiny_config``, float64, its attention on ``path``: a backend, or "record" (the eager
    model with record_attention switched on in every MultiHeadedAttention)."""
    config = tiny_config(attention_backend="eager" if path == "record" else path, **changes)
    model = T.make_model(config).to(DTYPE)
    for module in model.modules():
        if isinstance(module, T.MultiHeadedAttention):
            module.record_attention = path == "record"
    return model


def structured(src: torch.Tensor, tgt: torch.Tensor) -> tuple[T.AttentionMask, T.AttentionMask]:
    """The same masks as AttentionMask (key lengths; causal with key and query lengths), which every backend
    takes by its own route."""
    return T.AttentionMask.padding(src, 0), T.AttentionMask.target(tgt, 0)


VARIANTS = {  # the configuration's defaults, and every other choice that moves a dropout's neighbours
    "defaults": dict(norm_placement="pre", activation="relu", positional_encoding="sinusoidal"),
    "others": dict(norm_placement="post", activation="gelu", positional_encoding="learned"),
}


@pytest.mark.parametrize(("variant", "masks"), [("defaults", "dense"), ("others", "structured")])
@pytest.mark.parametrize("path", PATHS_OF_ATTENTION)
def test_model_forward_is_the_formula_with_each_sites_own_probability(path, variant, masks):
    """A model built from TransformerConfig(dropout=0.1, attention_dropout=0.4): the embeddings, every
    sub-layer output and the inside of every FFN drop with p = 0.1, every attention's probabilities with
    p = 0.4 (the kept values' 1/(1-p) scale tells them apart), in the paper's places."""
    model = build(path, **VARIANTS[variant]).train()
    src, tgt, src_mask, tgt_mask = model_inputs()
    given = (src_mask, tgt_mask) if masks == "dense" else structured(src, tgt)
    out = seeded(SEEDS[0], model, src, tgt, *given)
    expected = ref_model(model, src, tgt, src_mask, tgt_mask, 0.1, 0.4, Replay(SEEDS[0], path))
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)
    undropped = ref_model(model, src, tgt, src_mask, tgt_mask, 0.0, 0.0, Replay(SEEDS[0], path))
    assert (out - undropped).abs().max() > 0.1  # the comparison above did see dropout


@pytest.mark.parametrize("path", PATHS_OF_ATTENTION)
def test_incremental_decoding_drops_each_new_position_as_the_formula_says(path):
    """Decoding one position at a time with a key/value cache, in training: each step embeds the new token at its
    offset and drops the sum, its self-attention probabilities over every cached position and its
    cross-attention probabilities drop with attention_dropout, each sub-layer output and the FFN with dropout.
    The reference keeps, per layer, the inputs of the sub-layer for the positions so far (its own cache)."""
    model = build(path, n_decoder_layers=1).train()
    src, tgt, src_mask, _ = model_inputs()
    memory = torch.randn(2, 7, 32, dtype=DTYPE)
    torch.manual_seed(SEEDS[0])
    cache = model.new_cache()
    steps = [model.decode(memory, src_mask, tgt[:, t : t + 1], None, cache=cache) for t in range(tgt.size(1))]

    replay = Replay(SEEDS[0], path)
    history: list[list[torch.Tensor]] = [[] for _ in model.decoder.layers]
    for t, out in enumerate(steps):
        x = ref_embed(model.tgt_embed, tgt[:, t : t + 1], 0.1, replay, offset=t)
        for layer, seen in zip(model.decoder.layers, history, strict=True):

            def self_attn(y, layer=layer, seen=seen):
                seen.append(y)  # the sub-layer's input at this position: what the cache projects into keys/values
                keys = torch.cat(seen, dim=1)
                return ref_attention(layer.self_attn, y, keys, keys, None, 0.4, replay)[0]

            x = ref_sublayer(layer.sublayer[0], x, self_attn, 0.1, replay)
            x = ref_sublayer(
                layer.sublayer[1],
                x,
                lambda y, layer=layer: ref_attention(layer.src_attn, y, memory, memory, src_mask, 0.4, replay)[0],
                0.1,
                replay,
            )
            x = ref_sublayer(
                layer.sublayer[2], x, lambda y, layer=layer: ref_ffn(layer.feed_forward, y, 0.1, replay), 0.1, replay
            )
        torch.testing.assert_close(out, layer_norm(x, model.decoder.norm), rtol=0, atol=1e-5)


def test_make_model_dropout_is_also_the_attention_dropout():
    """make_model(..., dropout=p) as in the Annotated Transformer: one P_drop, attention included."""
    model = T.make_model(11, 13, N=1, d_model=32, d_ff=48, h=2, dropout=0.3, attention_backend="eager")
    model = model.to(DTYPE).train()
    src, tgt, src_mask, tgt_mask = model_inputs()
    out = seeded(SEEDS[0], model, src, tgt, src_mask, tgt_mask)
    expected = ref_model(model, src, tgt, src_mask, tgt_mask, 0.3, 0.3, Replay(SEEDS[0]))
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)
