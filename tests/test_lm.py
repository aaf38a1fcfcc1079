"""The decoder-only language model: the functional transformer's formulation written head by head in plain PyTorch
is the function our model computes; the paper's W^O form is the per-head form with rank-d_k value maps; every
backend computes the same function, the kernel receiving causal=True and no dense mask; the cache changes nothing."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer as T
from transformer.lm import TransformerLM, build_lm
from transformer.lm.attention import PerHeadValueAttention
from transformer.lm.config import LMConfig

BACKENDS = ["eager", "torch", "triton"]  # triton: Triton's interpreter on the CPU (tests/conftest.py)
SIZES = dict(n_layers=2, d_model=32, d_ff=48, n_heads=2, max_len=24)  # d_k = 16: the kernel's smallest head


# ---------------------------------------------------------------- the functional transformer, head by head
def _standardize(x, eps):
    return (x - x.mean(-1, keepdim=True)) / (x.std(-1, correction=0, keepdim=True) + eps)


def functional_transformer(p, x, lambda_e, lambda_pe, tau, eps=1e-5):
    """awf/functional-transformer's `transformer(cfg, params, x)` for one sequence x (L,), in plain PyTorch: logits."""
    L = x.shape[0]
    mask = torch.log(torch.tril(torch.ones(L, L, dtype=torch.float64)))  # 0 to attend, -inf to ignore
    embeddings = lambda_e * p["embeddings"][x] + lambda_pe * p["positional_encodings"][:L]
    for layer in p["layers"]:
        t1 = layer["norm_self_attn"]["gain"] * _standardize(embeddings, eps) + layer["norm_self_attn"]["bias"]
        for head in layer["heads"]:
            query = t1 @ head["query"]["weight"] + head["query"]["bias"]
            key = t1 @ head["key"]["weight"] + head["key"]["bias"]
            score = query @ key.T + mask
            attn = torch.softmax(tau * score, dim=1)
            value = t1 @ head["value"]["weight"] + head["value"]["bias"]
            embeddings = embeddings + attn @ value
        t2 = layer["norm_ff"]["gain"] * _standardize(embeddings, eps) + layer["norm_ff"]["bias"]
        t2 = torch.relu(t2 @ layer["ffn1"]["weight"] + layer["ffn1"]["bias"])
        embeddings = embeddings + t2 @ layer["ffn2"]["weight"] + layer["ffn2"]["bias"]
    embeddings = params_norm(p["pre_output_norm"], _standardize(embeddings, eps))
    return embeddings @ p["output"]["weight"] + p["output"]["bias"]


def params_norm(norm, x):
    return norm["gain"] * x + norm["bias"]


def _random_params(vocab, d_model, n_layers, n_heads, d_ff, max_len, seed):
    """Parameters in the functional transformer's layout, every one random (positions and biases non-zero)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64) * 0.3  # noqa: E731
    lin = lambda i, o: {"weight": r(i, o), "bias": r(o)}  # noqa: E731
    norm = lambda: {"gain": 1 + r(d_model), "bias": r(d_model)}  # noqa: E731
    d_k = d_model // n_heads
    return {
        "embeddings": r(vocab, d_model) * 3,
        "positional_encodings": r(max_len, d_model),
        "layers": [
            {
                "norm_self_attn": norm(),
                "norm_ff": norm(),
                "ffn1": lin(d_model, d_ff),
                "ffn2": lin(d_ff, d_model),
                "heads": [
                    {"query": lin(d_model, d_k), "key": lin(d_model, d_k), "value": lin(d_model, d_model)}
                    for _ in range(n_heads)
                ],
            }
            for _ in range(n_layers)
        ],
        "pre_output_norm": norm(),
        "output": lin(d_model, vocab),
    }


def _load_functional(model: TransformerLM, p) -> None:
    """Map the functional layout's parameters into our modules (x @ W in theirs, W x in nn.Linear)."""

    def linear(module, params):
        module.weight.copy_(params["weight"].T)
        module.bias.copy_(params["bias"])

    def norm(module, params):
        module.weight.copy_(params["gain"])
        module.bias.copy_(params["bias"])

    with torch.no_grad():
        model.embed[0].lut.weight.copy_(p["embeddings"])
        model.embed[1].pe.copy_(p["positional_encodings"].unsqueeze(0))
        for layer, lp in zip(model.layers, p["layers"], strict=True):
            norm(layer.sublayer[0].norm, lp["norm_self_attn"])
            norm(layer.sublayer[1].norm, lp["norm_ff"])
            attn = layer.self_attn
            for i, head in enumerate(lp["heads"]):
                rows = slice(i * attn.d_k, (i + 1) * attn.d_k)
                attn.q_proj.weight[rows] = head["query"]["weight"].T
                attn.q_proj.bias[rows] = head["query"]["bias"]
                attn.k_proj.weight[rows] = head["key"]["weight"].T
                attn.k_proj.bias[rows] = head["key"]["bias"]
                attn.value_weight[i] = head["value"]["weight"]
                attn.value_bias[i] = head["value"]["bias"]
            linear(layer.feed_forward.w_1, lp["ffn1"])
            linear(layer.feed_forward.w_2, lp["ffn2"])
        norm(model.norm, p["pre_output_norm"])
        linear(model.generator.proj, p["output"])


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("scales", [None, (0.7, 1.9, 0.4)], ids=["init-defaults", "other-lambdas-and-tau"])
def test_the_functional_transformer_head_by_head_is_the_function_our_model_computes(seed, scales):
    vocab, L = 13, 9
    fields = dict(SIZES)
    if scales is not None:
        fields.update(embedding_scale=scales[0], positional_scale=scales[1], attention_scale=scales[2])
    config = LMConfig.functional(vocab, **fields)
    assert (config.norm, config.value_projection, config.positional_init, config.layer_norm_eps) == (
        "std",
        "per_head",
        "zeros",
        1e-5,
    )
    assert config.lambda_e == (scales[0] if scales else 32**-0.5) and config.tau == (scales[2] if scales else 0.25)
    model = build_lm(config).double().eval()
    p = _random_params(vocab, 32, 2, 2, 48, 24, seed)
    _load_functional(model, p)
    x = torch.randint(0, vocab, (3, L), generator=torch.Generator().manual_seed(seed))
    expected = torch.stack(
        [
            F.log_softmax(functional_transformer(p, row, config.lambda_e, config.positional_scale, config.tau), -1)
            for row in x
        ]
    )
    with T.use_backend("eager"):
        got = model.generator(model(x))
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


def test_the_functional_formulation_starts_from_its_initialisation():
    model = build_lm(LMConfig.functional(50, **SIZES))
    assert torch.count_nonzero(model.embed[1].pe) == 0  # positions start at zero
    assert abs(float(model.embed[0].lut.weight.detach().std()) - 1.0) < 0.1  # N(0, 1) embeddings
    attn = model.layers[0].self_attn
    assert isinstance(attn, PerHeadValueAttention) and attn.value_weight.shape == (2, 32, 32)
    bound = 1 / math.sqrt(32)
    largest = float(attn.value_weight.detach().abs().max())
    assert 0.9 * bound < largest <= bound
    assert torch.count_nonzero(attn.q_proj.bias) == 0 and torch.count_nonzero(attn.value_bias) == 0


def test_the_functional_initialisation_bounds_every_linear_by_its_fan_in():
    """init="functional": U(+-1/sqrt(fan_in)) weights, zero biases, for every Linear of the model (the feed-forward
    d_model -> d_ff and d_ff -> d_model, the projections, the generator): fan_in, not fan_out, sets each bound."""
    torch.manual_seed(0)
    model = build_lm(LMConfig.functional(50, d_model=32, n_layers=1, n_heads=2, d_ff=128, max_len=16))
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert {(m.in_features, m.out_features) for m in linears} >= {(32, 128), (128, 32)}  # fan_in != fan_out
    for m in linears:
        bound = 1 / math.sqrt(m.in_features)
        largest = float(m.weight.detach().abs().max())
        assert 0.9 * bound < largest <= bound, (m.in_features, m.out_features, largest, bound)
        assert m.bias is None or torch.count_nonzero(m.bias) == 0


# ---------------------------------------------------------------- W^O is the rank-d_k special case
def _paper_to_per_head(paper: TransformerLM, per_head: TransformerLM) -> None:
    """W_i = W^V_i W^O_i, b_i = b^V_i W^O_i (+ b^O once: each row of A_i sums to 1); everything else copied."""
    state = {k: v for k, v in paper.state_dict().items() if ".v_proj." not in k and ".out_proj." not in k}
    missing, unexpected = per_head.load_state_dict(state, strict=False)
    assert unexpected == [] and all("value_" in name for name in missing)
    with torch.no_grad():
        for source, target in zip(paper.layers, per_head.layers, strict=True):
            a, b = source.self_attn, target.self_attn
            for i in range(a.h):
                rows = slice(i * a.d_k, (i + 1) * a.d_k)
                w_v, b_v = a.v_proj.weight[rows].T, a.v_proj.bias[rows]  # (d_model, d_k), (d_k,)
                w_o = a.out_proj.weight[:, rows].T  # (d_k, d_model)
                b.value_weight[i] = w_v @ w_o
                b.value_bias[i] = b_v @ w_o + (a.out_proj.bias if i == 0 else 0)


@pytest.mark.parametrize(
    "changes",
    [{}, {"norm_placement": "post", "positional_encoding": "learned"}, {"attention_scale": 0.3, "norm": "std"}],
)
def test_the_output_projection_form_is_the_per_head_form_with_rank_d_k_value_maps(changes):
    config = LMConfig(vocab=17, dropout=0.0, attention_dropout=0.0, **SIZES, **changes)
    torch.manual_seed(3)
    paper = build_lm(config).double().eval()
    per_head = build_lm(config.replace(value_projection="per_head")).double().eval()
    _paper_to_per_head(paper, per_head)
    for w in per_head.layers[0].self_attn.value_weight:
        assert int(torch.linalg.matrix_rank(w)) == config.d_k  # each head's map has rank d_k
    x = torch.randint(0, 17, (2, 11))
    torch.testing.assert_close(per_head(x), paper(x), rtol=1e-10, atol=1e-10)
    mask = T.AttentionMask(key_lengths=torch.tensor([11, 7]))  # padding: the same function on the real positions
    torch.testing.assert_close(per_head(x, mask)[1, :7], paper(x, mask)[1, :7], rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- every backend, the kernel without a dense mask
def _configs():
    return {
        "paper": LMConfig(vocab=23, dropout=0.0, attention_dropout=0.0, **SIZES),
        "functional": LMConfig.functional(23, **SIZES),
    }


@pytest.mark.parametrize("form", ["paper", "functional"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_backend_computes_the_same_model_with_the_same_gradients(form, backend):
    torch.manual_seed(0)
    model = build_lm(_configs()[form])
    with torch.no_grad():
        model.embed[1].pe.normal_() if form == "functional" else None
    x = torch.randint(0, 23, (2, 13))
    mask = T.AttentionMask.target(torch.where(torch.arange(13) < torch.tensor([[13], [9]]), x, 0), 0)
    results = {}
    for name in ("eager", backend):
        model.zero_grad()
        with T.use_backend(name):
            out = model(x, mask)
        # random weights: a plain sum of the final LayerNorm's output has (almost) no gradient, so every gradient
        # behind it would be rounding noise and the comparison would say nothing
        w = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
        ((out[0] * w[0]).sum() + (out[1, :9] * w[1, :9]).sum()).backward()
        results[name] = (out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None])
    torch.testing.assert_close(results[backend][0][0], results["eager"][0][0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(results[backend][0][1, :9], results["eager"][0][1, :9], rtol=1e-5, atol=1e-5)
    for a, b in zip(results[backend][1], results["eager"][1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("form, heads", [("paper", 2), ("functional", 2 * 3)])
def test_the_kernel_receives_causal_and_no_dense_mask(form, heads, monkeypatch):
    from transformer import kernels

    calls = []
    real = kernels.flash_attention

    def spy(q, k, v, **kwargs):
        calls.append((q.shape[1], {n: kwargs.get(n) for n in ("mask", "key_mask", "key_lengths", "causal")}))
        return real(q, k, v, **kwargs)

    monkeypatch.setattr(kernels, "flash_attention", spy)
    model = build_lm(_configs()[form]).eval()
    x = torch.randint(1, 23, (2, 10))
    with T.use_backend("triton"):
        model(x)
        padded = x.clone()
        padded[1, 6:] = 0
        model(padded, T.AttentionMask.padding(padded, 0))
    assert len(calls) == 2 * 2  # two layers, two forwards
    assert all(h == heads for h, _ in calls)  # per head: each head once per chunk of [X, 1] (h * (h + 1) problems)
    assert all(c["causal"] is True and c["mask"] is None and c["key_mask"] is None for _, c in calls)
    assert [c["key_lengths"] for _, c in calls[:2]] == [None, None]
    assert all(c["key_lengths"].tolist() == [10, 6] for _, c in calls[2:])


def test_the_per_head_form_with_attention_dropout_refuses_the_kernel_by_name_and_auto_avoids_it():
    model = build_lm(LMConfig.functional(23, attention_dropout=0.1, **SIZES)).train()
    x = torch.randint(0, 23, (2, 6))
    with T.use_backend("triton"), pytest.raises(ValueError, match="per-head value form with attention dropout"):
        model(x)
    attn = model.layers[0].self_attn
    q = k = v = torch.randn(2, 2, 6, 16)
    from transformer import lm_attention

    with torch.no_grad():
        assert lm_attention.resolve_backend("auto", q, k, v, None, 0.1, 0.25) in ("torch", "eager")
    assert attn.backend == "auto"


def test_a_dense_mask_gains_causality_and_a_structured_one_its_causal_flag():
    model = build_lm(_configs()["paper"]).eval()
    x = torch.randint(0, 23, (2, 8))
    everything = torch.ones(2, 8, 8, dtype=torch.bool)  # a mask that would let positions see the future
    torch.testing.assert_close(model(x, everything), model(x))
    torch.testing.assert_close(model(x, T.AttentionMask()), model(x))
    changed = x.clone()
    changed[:, 5] = (changed[:, 5] + 1) % 23
    torch.testing.assert_close(model(changed)[:, :5], model(x)[:, :5])  # position t sees tokens 0..t only
    assert not torch.allclose(model(changed)[:, 5], model(x)[:, 5])


# ---------------------------------------------------------------- the cache
@pytest.mark.parametrize("form", ["paper", "functional"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_prompt_then_one_position_at_a_time_equals_the_full_forward(form, backend):
    torch.manual_seed(1)
    model = build_lm(_configs()[form]).eval()
    with torch.no_grad():
        model.embed[1].pe.normal_() if form == "functional" else None
    x = torch.randint(0, 23, (3, 12))
    with T.use_backend(backend):
        full = model(x)
        cache = model.new_cache()
        parts = [model(x[:, :5], cache=cache)] + [model(x[:, t : t + 1], cache=cache) for t in range(5, 12)]
    assert cache.length == 12
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="2 new positions after 12 cached ones"):
        model(x[:, :2], cache=cache)
    with pytest.raises(ValueError, match="with a cache, pass mask=None"):
        model(x[:, :1], T.AttentionMask(causal=True), cache=model.new_cache())


# ---------------------------------------------------------------- config and guards
@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(vocab=10, d_model=30, n_heads=4), "n_heads=4 does not divide d_model=30"),
        (dict(vocab=10, d_model=31, n_heads=1), "d_model=31 is odd: sinusoidal"),
        (dict(vocab=10, positional_init="zeros"), "positional_init='zeros' needs positional_encoding='learned'"),
        (dict(vocab=10, attention_scale=0.0), "attention_scale must be a positive float"),
        (dict(vocab=10, value_projection="sum"), "value_projection must be one of 'output', 'per_head'"),
        (dict(vocab=10, pad_id=10), r"pad_id=10 must be a token id in \[0, 10\)"),
        (dict(vocab=0), "vocab must be positive"),
        (dict(vocab=10, dropout=1.0), r"dropout must be a float in \[0, 1\)"),
    ],
)
def test_an_impossible_config_is_refused_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        LMConfig(**fields)


def test_the_config_round_trips_and_its_backend_is_not_architecture():
    config = LMConfig.functional(40, **SIZES)
    assert LMConfig.from_json(config.to_json()) == config
    assert "attention_backend" not in config.architecture()
    assert config.replace(attention_backend="eager").differences(config, architecture_only=True) == {}
    with pytest.raises(ValueError, match="unknown LMConfig field"):
        LMConfig.from_dict({"vocab": 3, "heads": 2})


@pytest.mark.parametrize("checks_on", [True, False])
def test_token_ids_length_and_empty_input_are_guarded_either_way(checks_on):
    model = build_lm(_configs()["paper"]).eval()
    with T.checks(checks_on):
        with pytest.raises(ValueError, match=r"token id 23 at position \(0, 2\) is outside the vocabulary \[0, 23\)"):
            model(torch.tensor([[1, 2, 23]]))
        with pytest.raises(ValueError, match="sequence length 25 exceeds max_len=24"):
            model(torch.ones(1, 25, dtype=torch.long))
        with pytest.raises(ValueError, match=r"TransformerLM.forward: argument 'tokens' is an empty sequence"):
            model(torch.ones(2, 0, dtype=torch.long))


def test_a_wrong_shape_is_a_contract_error_naming_the_argument():
    model = build_lm(_configs()["paper"]).eval()
    with pytest.raises(T.TypeCheckError, match="argument 'mask'"):
        model(torch.ones(2, 5, dtype=torch.long), torch.ones(2, 5, 4, dtype=torch.bool))


def test_gradients_of_the_per_head_attention_in_float64():
    torch.manual_seed(0)
    attn = PerHeadValueAttention(2, 32, 0.0).double()
    x = torch.randn(2, 5, 32, dtype=torch.float64, requires_grad=True)
    mask = T.AttentionMask(causal=True, key_lengths=torch.tensor([5, 3]), query_lengths=torch.tensor([5, 3]))
    assert torch.autograd.gradcheck(lambda x: attn(x, mask), (x,))


def test_under_attention_dropout_the_per_head_form_is_the_reference_with_the_same_dropped_probabilities():
    """sum_i D(A_i) (X W_i + b_i) exactly, D the dropout: the bias is weighted by each row's kept mass D(A_i) 1, and
    padded query rows (no key) get no bias."""
    torch.manual_seed(0)
    attn = PerHeadValueAttention(2, 32, 0.5).double().train()
    with torch.no_grad():
        attn.value_bias.normal_()
    attn.record_attention = True  # the eager reference, keeping the dropped-out probabilities
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    mask = T.AttentionMask(causal=True, key_lengths=torch.tensor([6, 4]), query_lengths=torch.tensor([6, 4]))
    out = attn(x, mask)
    probs = attn.attn  # (batch, heads, q_len, k_len), after dropout
    assert (probs.sum(-1) > 1.2).any()  # dropout did rescale some rows
    expected = sum(probs[:, i] @ (x @ attn.value_weight[i] + attn.value_bias[i]) for i in range(2))
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    assert out[1, 4:].abs().max() == 0  # padded query rows: nothing, not the bias


def test_tied_weights_share_the_embedding_with_the_output():
    model = build_lm(LMConfig(vocab=23, tie_weights=True, **SIZES))
    assert model.generator.proj.weight is model.embed[0].lut.weight


def test_an_lm_cache_refuses_what_it_cannot_continue():
    from transformer.lm import LMCache

    model = build_lm(LMConfig(vocab=23, dropout=0.0, attention_dropout=0.0, **SIZES)).eval()
    tokens = torch.randint(0, 23, (2, 5))
    with pytest.raises(ValueError, match="LMCache: n_layers must be a positive int, got 0"):
        LMCache(0)
    with pytest.raises(ValueError, match="the cache has 1 layers, the model 2"):
        model(tokens, cache=LMCache(1))
    cache = model.new_cache()
    with pytest.raises(ValueError, match=r"with a cache, pass mask=None"):
        model(tokens, torch.ones(2, 5, 5, dtype=torch.bool), cache=cache)
    model(tokens[:, :3], cache=cache)  # a prompt into the empty cache
    assert cache.length == 3
    with pytest.raises(ValueError, match="2 new positions after 3 cached ones"):
        model(tokens[:, 3:], cache=cache)
    with pytest.raises(ValueError, match=r"LMCache holds 3 positions but ys has 5; expected 0 \(a prompt\) or 4"):
        model.next_token_log_probs(tokens, cache)


def test_after_one_cached_position_a_cache_takes_one_position_at_a_time_in_the_lm_and_the_decoder():
    """The bound of StackCache.self_attention_mask, shared by TransformerLM and Decoder, is 'after the first call',
    not 'after more than one position': two new positions after exactly one cached one are refused (their causal
    mask would not line up with the cache)."""
    model = build_lm(LMConfig(vocab=23, dropout=0.0, attention_dropout=0.0, **SIZES)).eval()
    tokens = torch.randint(0, 23, (2, 3))
    cache = model.new_cache()
    model(tokens[:, :1], cache=cache)
    with pytest.raises(ValueError, match="TransformerLM: 2 new positions after 1 cached ones"):
        model(tokens[:, 1:], cache=cache)
    encoder_decoder = T.make_model(11, 13, N=1, d_model=32, d_ff=48, h=2, dropout=0.0).eval()
    memory = encoder_decoder.encode(torch.randint(1, 11, (2, 5)), None)
    cache = encoder_decoder.new_cache()
    encoder_decoder.decode(memory, None, tokens[:, :1] % 13, None, cache=cache)
    with pytest.raises(ValueError, match="Decoder: 2 new positions after 1 cached ones"):
        encoder_decoder.decode(memory, None, tokens[:, 1:] % 13, None, cache=cache)
