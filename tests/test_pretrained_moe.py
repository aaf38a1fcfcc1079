"""Mixture-of-experts checkpoint folders (Mixtral, Qwen2-MoE with its shared expert and a dense layer, Qwen3-MoE
with every second layer sparse) against transformers: logits (float32 within 1e-5 x max|logit|, float64 1e-10),
routing ties, greedy generation with the cache on a left-padded batch, gradients, the load-balancing loss, saving
back both ways; tiny random models from its config classes, never downloaded (docs/moe.md)."""

from __future__ import annotations

import pytest
import torch
from moe_helpers import moe_model, skip_if_their_aux_loss_is_softmax_twice
from pretrained_helpers import (
    assert_logits_close,
    hf_logits,
    left_padded_batch,
    our_greedy,
    our_logits,
    positions_of,
    reweighted,
    their_greedy,
)

from transformer.lm import TransformerLM
from transformer.lm.moe import MoEFeedForward, model_aux_loss
from transformer.lm.pretrained import PretrainedFormatError
from transformer.lm.pretrained.supported import ARCHITECTURES

transformers = pytest.importorskip("transformers")

CASES = {
    "mixtral-top2": ("mixtral", {}),
    "mixtral-top1-window": ("mixtral", dict(num_experts_per_tok=1, sliding_window=4)),
    "mixtral-top3-tied-head_dim": ("mixtral", dict(num_experts_per_tok=3, tie_word_embeddings=True, head_dim=12)),
    "qwen2_moe-shared-dense1": ("qwen2_moe", {}),
    "qwen2_moe-norm_topk-nobias-window": (
        "qwen2_moe", dict(norm_topk_prob=True, qkv_bias=False, use_sliding_window=True, sliding_window=4,
                          max_window_layers=0),
    ),
    "qwen3_moe-step2": ("qwen3_moe", {}),
    "qwen3_moe-top1-bias-mlp_only": ("qwen3_moe", dict(num_experts_per_tok=1, attention_bias=True,
                                                       mlp_only_layers=[1, 3], decoder_sparse_step=1)),
}  # fmt: skip
KINDS = ["mixtral", "qwen2_moe", "qwen3_moe"]
DENSE = {"mixtral": (), "qwen2_moe": (1,), "qwen3_moe": (0, 2)}


def _pair(tmp_path, dtype=torch.float32, kind="mixtral", **overrides):
    theirs = moe_model(transformers, kind, dtype, **overrides)
    theirs.save_pretrained(tmp_path / "theirs")
    return theirs, TransformerLM.from_pretrained(tmp_path / "theirs")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_equal_transformers(tmp_path, case, dtype):
    kind, overrides = CASES[case]
    theirs, ours = _pair(tmp_path, dtype, kind, **overrides)
    assert ours.weights_dtype() == dtype and ours.config.n_experts == 5
    if not overrides:
        assert ours.config.dense_layers == DENSE[kind]
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask, dtype)


def test_the_experts_matter_in_this_case(tmp_path):
    """The tokens go to every expert, with unequal weights, and two experts swapped change the logits far beyond
    the tolerance: the test above sees an expert or a router row read into the wrong place."""
    theirs, ours = _pair(tmp_path)
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        before = our_logits(ours, tokens, mask)
        block = ours.layers[0].feed_forward
        assert isinstance(block, MoEFeedForward)
        weights, chosen = block.router.choose(block.router_logits)
        assert torch.bincount(chosen.reshape(-1), minlength=5).min() > 0  # every expert gets tokens
        assert (weights[:, 0] - weights[:, 1]).abs().max() > 0.1  # weights far from uniform
        for p in (block.experts.gate_up_proj, block.experts.down_proj):
            p.copy_(p[[1, 0, 2, 3, 4]])
        after = our_logits(ours, tokens, mask)
    assert (after - before)[mask].abs().max() > 100 * 1e-5 * before.abs().max()


def test_equal_router_scores_pick_the_experts_transformers_picks(tmp_path):
    """Ties. Every router row equal: a token's router logits are equal up to the matmul's rounding, so the choice
    is a tie-break of near-equal scores; the experts differ, so another choice would change the logits. Then exact
    ties (dyadic weights and inputs: every logit the same float): transformers' float32 softmax and torch.topk pick
    experts (2, 4) of 5 on the CPU, not the lowest indices, and so do we."""
    theirs = moe_model(transformers, "mixtral")
    with torch.no_grad():
        for layer in theirs.model.layers:
            layer.mlp.gate.weight.copy_(layer.mlp.gate.weight[:1].expand(5, -1))
    theirs.save_pretrained(tmp_path)
    ours = TransformerLM.from_pretrained(tmp_path)
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask)
        row = torch.randint(-4, 5, (1, 32), generator=torch.Generator().manual_seed(1)) / 4
        theirs.model.layers[0].mlp.gate.weight.copy_(row.expand(5, -1))
        ours.layers[0].feed_forward.router.weight.copy_(row.expand(5, -1))
        hidden = torch.randint(-4, 5, (64, 32), generator=torch.Generator().manual_seed(2)) / 4
        routing = ours.layers[0].feed_forward.router(hidden)
        _, their_weights, their_experts = theirs.model.layers[0].mlp.gate(hidden)
    assert torch.equal(routing.logits, routing.logits[:, :1].expand(-1, 5))  # every logit the same float: a tie
    assert torch.equal(routing.experts, their_experts) and torch.equal(routing.weights, their_weights)
    assert torch.equal(routing.weights, torch.full_like(routing.weights, 0.5))
    assert {tuple(r) for r in routing.experts.tolist()} == {(2, 4)}


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_generation_with_our_cache_gives_transformers_tokens(tmp_path, kind):
    theirs, ours = _pair(tmp_path, kind=kind)
    tokens, mask = left_padded_batch(steps=7, pads=(0, 2, 4))
    expected = their_greedy(theirs, tokens, mask, 8)
    got = our_greedy(ours, tokens, mask, 8)
    assert torch.equal(got, expected)


def _their_grads(ours, theirs):
    """(name, our gradient in their layout, theirs) for every tensor of the file: a per-expert tensor against the
    same rows of their stacked parameter's gradient."""
    architecture = ARCHITECTURES[theirs.config.architectures[0]]
    params = dict(ours.named_parameters())
    maps = architecture.expand_maps(architecture.tensor_maps(list(params)), {n: p.shape for n, p in params.items()})
    grads = {n: p.grad for n, p in theirs.named_parameters()}
    for m in maps:
        got = m.to_theirs(tuple(params[n].grad for n in m.ours))
        name = m.theirs.replace(f".{architecture.legacy_block}.", ".mlp.")
        if m.layout == "part":
            layer, projection = name.split(".experts.")[0], name.split(".")[-2]
            stacked = "down_proj" if projection in architecture.expert_files["down_proj"] else "gate_up_proj"
            expert, first, rows = m.part
            expected = grads[f"{layer}.experts.{stacked}"][expert, first : first + rows]
        else:
            expected = grads[name]
        yield name, got, expected


@pytest.mark.parametrize("kind", KINDS)
def test_gradients_of_a_loss_equal_transformers(tmp_path, kind):
    theirs, ours = _pair(tmp_path, torch.float64, kind)
    tokens, mask = left_padded_batch()
    labels = torch.randint(3, 97, tokens.shape, generator=torch.Generator().manual_seed(5))

    def loss(logits):
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
        return (nll * mask.double()).sum()

    loss(our_logits(ours, tokens, mask)).backward()
    loss(hf_logits(theirs, tokens, mask)).backward()
    compared = 0
    for name, got, expected in _their_grads(ours, theirs):
        torch.testing.assert_close(got, expected, rtol=1e-8, atol=1e-10, msg=name)
        compared += 1
    their_experts = sum(p.numel() for n, p in theirs.named_parameters() if ".experts." in n)
    assert compared >= len(list(ours.parameters())) and their_experts > 0


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_load_balancing_loss_equals_transformers_aux_loss(tmp_path, kind, masked):
    theirs, ours = _pair(tmp_path, torch.float64, kind)
    skip_if_their_aux_loss_is_softmax_twice(transformers, theirs)
    tokens, mask = left_padded_batch()
    attention = mask if masked else torch.ones_like(mask)
    out = theirs(
        input_ids=tokens, attention_mask=attention.long(), position_ids=positions_of(attention),
        output_router_logits=True,
    )  # fmt: skip
    our_logits(ours, tokens, attention)
    ours_loss = model_aux_loss(ours, attention if masked else None)
    torch.testing.assert_close(ours_loss.double(), out.aux_loss.double(), rtol=1e-6, atol=1e-7)
    assert ours.config.router_aux_loss_coef == theirs.config.router_aux_loss_coef == 0.001
    if masked:  # the pads change the loss: the mask is read
        unmasked = model_aux_loss(ours, None)
        assert abs(unmasked.item() - ours_loss.item()) > 1e-4


@pytest.mark.parametrize("kind", KINDS)
def test_theirs_to_ours_to_theirs_keeps_the_logits(tmp_path, kind):
    theirs, ours = _pair(tmp_path, torch.float64, kind)
    folder = ours.save_pretrained(tmp_path / "ours")
    again = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()
    again.config._experts_implementation = "eager"
    assert type(again).__name__ == type(theirs).__name__ and again.dtype == torch.float64
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(hf_logits(again, tokens, mask), hf_logits(theirs, tokens, mask), mask, torch.float64)
    assert (again.config.num_experts_per_tok, len(again.model.layers)) == (2, len(theirs.model.layers))
    assert [type(layer.mlp).__name__ for layer in again.model.layers] == [
        type(layer.mlp).__name__ for layer in theirs.model.layers
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_ours_saved_is_loaded_by_transformers_with_the_same_logits(tmp_path, kind):
    """A model of ours (its own random weights), written as the architecture it was loaded as."""
    template, ours = _pair(tmp_path, kind=kind)
    reweighted(ours, forget_origin=False)
    folder = ours.save_pretrained(tmp_path / "ours")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()
    assert type(theirs).__name__ == type(template).__name__
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask)


def test_router_jitter_and_a_missing_expert_are_refused_by_name(tmp_path):
    theirs = moe_model(transformers, "mixtral", router_jitter_noise=0.1)
    theirs.save_pretrained(tmp_path / "jitter")
    with pytest.raises(PretrainedFormatError, match=r"router_jitter_noise=0\.1 is not supported"):
        TransformerLM.from_pretrained(tmp_path / "jitter")
    from safetensors.torch import load_file, save_file

    theirs = moe_model(transformers, "mixtral")
    theirs.save_pretrained(tmp_path / "cut")
    tensors = load_file(tmp_path / "cut" / "model.safetensors")
    del tensors["model.layers.1.block_sparse_moe.experts.4.w3.weight"]
    save_file(tensors, tmp_path / "cut" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(
        PretrainedFormatError, match=r"missing tensor 'model\.layers\.1\.block_sparse_moe\.experts\.4\.w3"
    ):
        TransformerLM.from_pretrained(tmp_path / "cut")


@pytest.mark.parametrize("kind", ["Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"])
def test_a_config_without_the_rounding_is_not_written_as_qwen(tmp_path, kind):
    """Qwen's routers round their top-k weights to the model's dtype (docs/moe.md, "Half precision"): an LMConfig
    that weights in float32 is not written as theirs (it would read back rounding), naming the field; with
    ``router_weights_rounded`` it is, and reads back unchanged."""
    import dataclasses

    from transformer.lm import LMConfig, build_lm

    base = LMConfig(
        vocab=40, n_layers=2, d_model=16, d_ff=24, n_heads=4, n_kv_heads=2, positional_encoding="rotary", norm="rms",
        activation="silu", ffn_gated=True, out_bias=False, ffn_bias=False, lm_head_bias=False, embedding_scale=1.0,
        pad_id=None, dropout=0.0, attention_dropout=0.0, ffn_hidden_dropout=False, layer_norm_eps=1e-6,
        n_experts=4, experts_per_token=2, expert_d_ff=24, router_norm_topk=False, router_aux_loss_coef=0.001,
        **(dict(shared_expert_d_ff=16) if kind.startswith("Qwen2") else dict(qkv_bias=False, qk_norm=True)),
    )  # fmt: skip
    with pytest.raises(PretrainedFormatError, match=rf"router_weights_rounded=False \(written as {kind} it reads "):
        build_lm(base).save_pretrained(tmp_path / "float32", architecture=kind)
    rounded = dataclasses.replace(base, router_weights_rounded=True)
    folder = build_lm(rounded).save_pretrained(tmp_path / "rounded", architecture=kind)
    back = TransformerLM.from_pretrained(folder).config
    assert back.router_weights_rounded and dataclasses.replace(back, init=rounded.init) == rounded
