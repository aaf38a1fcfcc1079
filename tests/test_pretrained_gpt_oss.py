"""gpt-oss checkpoint folders (``GptOssForCausalLM``; docs/moe.md, "gpt-oss") against transformers: logits (float32
within 1e-5 x max|logit|, float64 1e-10; transformers' eager attention, the one with the sinks, is the oracle),
greedy generation with our cache on a left-padded batch, gradients of every tensor, the load-balancing loss, saving
back both ways, routing ties, and the fields refused by name. Tiny random models from its config class with
alternating sliding and full layers, clamped experts whose clamp binds, and sinks that take a real share of each
row; never downloaded."""

from __future__ import annotations

import copy

import pytest
import torch
from pretrained_helpers import (
    VOCAB,
    assert_gradients_equal,
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
from transformer.lm.moe.clamped_experts import ClampedSwiGLUExperts
from transformer.lm.pretrained import PretrainedFormatError

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(not hasattr(transformers, "GptOssConfig"), reason="transformers without gpt-oss")

ARCHITECTURE = "GptOssForCausalLM"
COMMON = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=24, num_hidden_layers=4, num_attention_heads=4,
    num_key_value_heads=2, head_dim=8, max_position_embeddings=48, rms_norm_eps=0.02, bos_token_id=1,
    eos_token_id=2, pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
    num_local_experts=5, num_experts_per_tok=2, sliding_window=4, swiglu_limit=2.0,
)  # fmt: skip
CASES = {
    "alternating": {},
    "top1-nobias-all-full": dict(
        num_experts_per_tok=1, attention_bias=False, layer_types=["full_attention"] * 4, head_dim=12
    ),
    # gpt-oss's own rope: yarn, factor 32, truncate false (the real-valued correction range), theta 150000
    "yarn-truncate-false": dict(rope_parameters=None),
    "top3-tied-all-sliding": dict(
        num_experts_per_tok=3, tie_word_embeddings=True, layer_types=["sliding_attention"] * 4, swiglu_alpha=1.1
    ),
}


def gpt_oss_model(dtype=torch.float32, seed: int = 0, **overrides):
    """A random tiny gpt-oss in eval mode: every weight N(0, 0.3^2) (the norms around 1, the sinks around 1 so
    that they take a real share of each softmax), eager attention (the sinks') and eager experts in float64."""
    config = transformers.GptOssConfig(**{**COMMON, **overrides})
    torch.manual_seed(seed)
    model = transformers.GptOssForCausalLM._from_config(copy.deepcopy(config), attn_implementation="eager")
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(1.0 if (p.dim() == 1 and "norm" in name) or name.endswith("sinks") else 0.0, 0.3)
    reading_the_config(model)
    if dtype == torch.float64:
        model.config._experts_implementation = "eager"
    return model.eval().to(dtype)


def reading_the_config(model):
    """transformers before 5.5 hard-codes alpha 1.702 and limit 7.0 in its experts (the values of every released
    gpt-oss config) instead of reading ``swiglu_alpha`` and ``swiglu_limit``: set them from the config, as later
    versions read them, so that the oracle computes the config's function on every version."""
    for module in model.modules():
        if type(module).__name__ == "GptOssExperts":
            module.alpha = getattr(model.config, "swiglu_alpha", 1.702)
            module.limit = model.config.swiglu_limit
    return model


def _pair(tmp_path, dtype=torch.float32, **overrides):
    theirs = gpt_oss_model(dtype, **overrides)
    theirs.save_pretrained(tmp_path / "theirs")
    return theirs, TransformerLM.from_pretrained(tmp_path / "theirs")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_equal_transformers(tmp_path, case, dtype):
    theirs, ours = _pair(tmp_path, dtype, **CASES[case])
    config = ours.config
    assert ours.weights_dtype() == dtype and config.n_experts == 5 and config.attention_sinks
    assert config.router_softmax_topk and config.router_bias and config.expert_swiglu_limit == 2.0
    if case == "yarn-truncate-false":
        assert config.rope_scaling == "yarn" and not config.rope_yarn_truncate and config.rope_factor == 32.0
    if not CASES[case]:
        assert config.window_layers == (True, False, True, False) and config.sliding_window == 4
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask, dtype)


def test_the_sinks_the_clamp_the_biases_and_the_experts_matter_in_this_case(tmp_path):
    """Each part, changed, moves the logits far beyond the tolerance: the sinks (set very negative: no sink), the
    clamp (no limit), the experts' biases (zeroed), two experts swapped; so the test above sees each read right."""
    theirs, ours = _pair(tmp_path)
    tokens, mask = left_padded_batch()
    block = ours.layers[0].feed_forward
    assert isinstance(block, MoEFeedForward) and isinstance(block.experts, ClampedSwiGLUExperts)
    with torch.no_grad():
        before = our_logits(ours, tokens, mask)
        tolerance = 100 * 1e-5 * before.abs().max()

        def moved(change) -> float:
            saved = {n: p.clone() for n, p in ours.named_parameters()}
            limits = [(layer.feed_forward.experts, layer.feed_forward.experts.limit) for layer in ours.layers]
            change()
            after = our_logits(ours, tokens, mask)
            for n, p in ours.named_parameters():
                p.copy_(saved[n])
            for experts, limit in limits:
                experts.limit = limit
            return (after - before)[mask].abs().max()

        experts = block.experts
        assert moved(lambda: [layer.self_attn.sinks.fill_(-1e4) for layer in ours.layers]) > tolerance
        assert moved(lambda: [setattr(layer.feed_forward.experts, "limit", 1e9) for layer in ours.layers]) > tolerance
        assert moved(lambda: experts.gate_up_proj_bias.zero_()) > tolerance
        assert moved(lambda: experts.down_proj_bias.zero_()) > tolerance
        swap = [1, 0, 2, 3, 4]
        assert moved(lambda: [p.copy_(p[swap]) for p in (experts.gate_up_proj, experts.down_proj)]) > tolerance
        weights, chosen = block.router.choose(block.router_logits)
    assert torch.bincount(chosen.reshape(-1), minlength=5).min() > 0  # every expert gets tokens
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.size(0)))


def test_greedy_generation_with_our_cache_gives_transformers_tokens(tmp_path):
    """Past the window of 4 on the sliding layers: our cache's window and the sinks in every step."""
    theirs, ours = _pair(tmp_path)
    tokens, mask = left_padded_batch(steps=7, pads=(0, 2, 4))
    assert torch.equal(our_greedy(ours, tokens, mask, 8), their_greedy(theirs, tokens, mask, 8))


def test_gradients_of_every_tensor_equal_transformers(tmp_path):
    """float64: the sinks', the router's bias and the experts' stacked weights and biases included."""
    theirs, ours = _pair(tmp_path, torch.float64)
    assert_gradients_equal(theirs, ours, ARCHITECTURE, every_tensor=True)
    assert ours.layers[1].self_attn.sinks.grad.abs().min() > 0


def test_load_balancing_loss_equals_transformers_aux_loss(tmp_path):
    theirs, ours = _pair(tmp_path, torch.float64)
    tokens, mask = left_padded_batch()
    out = theirs(
        input_ids=tokens, attention_mask=mask.long(), position_ids=positions_of(mask), output_router_logits=True
    )
    our_logits(ours, tokens, mask)
    torch.testing.assert_close(model_aux_loss(ours, mask).double(), out.aux_loss.double(), rtol=1e-6, atol=1e-7)
    # the file's coefficient (transformers' default: 0.001 from 5.5 on, 0.9 in 5.4)
    assert ours.config.router_aux_loss_coef == theirs.config.router_aux_loss_coef > 0


def test_equal_router_logits_pick_the_experts_transformers_picks(tmp_path):
    """Exact ties (dyadic router rows, inputs and a zero bias: every logit the same float): both are torch.topk of
    the logits, so the same experts, with weights 1/k each."""
    theirs, ours = _pair(tmp_path)
    row = torch.randint(-4, 5, (1, 32), generator=torch.Generator().manual_seed(1)) / 4
    hidden = torch.randint(-4, 5, (64, 32), generator=torch.Generator().manual_seed(2)) / 4
    with torch.no_grad():
        for router in (theirs.model.layers[0].mlp.router, ours.layers[0].feed_forward.router):
            router.weight.copy_(row.expand(5, -1))
            router.bias.zero_()
        routing = ours.layers[0].feed_forward.router(hidden)
        _, their_weights, their_experts = theirs.model.layers[0].mlp.router(hidden)
    assert torch.equal(routing.logits, routing.logits[:, :1].expand(-1, 5))
    assert torch.equal(routing.experts, their_experts) and torch.equal(routing.weights, their_weights)
    assert torch.equal(routing.weights, torch.full_like(routing.weights, 0.5))


def test_theirs_to_ours_to_theirs_keeps_the_logits(tmp_path):
    theirs, ours = _pair(tmp_path, torch.float64)
    folder = ours.save_pretrained(tmp_path / "ours")
    again = reading_the_config(
        transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    )
    again.config._experts_implementation = "eager"
    assert type(again).__name__ == ARCHITECTURE and again.dtype == torch.float64
    assert again.config.layer_types == theirs.config.layer_types
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(hf_logits(again, tokens, mask), hf_logits(theirs, tokens, mask), mask, torch.float64)


def test_ours_saved_is_loaded_by_transformers_with_the_same_logits(tmp_path):
    """A model of ours (its own random weights), written as gpt-oss."""
    _, ours = _pair(tmp_path)
    reweighted(ours, forget_origin=False)
    folder = ours.save_pretrained(tmp_path / "ours")
    theirs = reading_the_config(
        transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    )
    assert type(theirs).__name__ == ARCHITECTURE
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask)


def test_quantised_experts_and_bad_layer_types_are_refused_by_name(tmp_path):
    theirs = gpt_oss_model()
    theirs.save_pretrained(tmp_path / "plain")
    import json

    for name, change, message in (
        ("mxfp4", {"quantization_config": {"quant_method": "mxfp4"}}, r"quantization_config=.*MXFP4"),
        ("types", {"layer_types": ["sliding_attention"] * 3}, r"layer_types=.*expected 4 entries"),
    ):  # fmt: skip
        folder = tmp_path / name
        folder.mkdir()
        for f in (tmp_path / "plain").iterdir():
            (folder / f.name).write_bytes(f.read_bytes())
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(PretrainedFormatError, match=message):
            TransformerLM.from_pretrained(folder)


def test_train_lm_init_fine_tunes_with_the_aux_loss_resumes_exactly_and_exports_as_gpt_oss(tmp_path, capsys):
    """``train lm --init`` on a gpt-oss folder: the training loss is the cross-entropy plus router_aux_loss_coef x the
    load-balancing loss (fine_tune_criterion), 2 + 2 steps with a resume equal 4 straight bit for bit, the router,
    experts and sinks move; ``export`` writes it back as gpt-oss, which transformers loads to our logits."""
    import json

    from safetensors.torch import load_file
    from test_cli_pretrained import TRAIN, WORDS, _write_tokenizer

    from transformer.checkpoint import load_checkpoint
    from transformer.cli import main
    from transformer.lm.moe import WithLoadBalancing
    from transformer.tasks.pretrained_lm import fine_tune_criterion

    folder = tmp_path / "gpt_oss"
    gpt_oss_model(vocab_size=len(WORDS) + 3, pad_token_id=None, router_aux_loss_coef=0.02).save_pretrained(folder)
    _write_tokenizer(folder)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 1}))
    pretrained = TransformerLM.from_pretrained(folder)
    assert isinstance(fine_tune_criterion(pretrained), WithLoadBalancing)
    corpus = tmp_path / "text.txt"
    corpus.write_text("\n".join(["def add ( a , b ) : return a + b", "the box is the value of the self"] * 40) + "\n")
    straight, split = tmp_path / "straight", tmp_path / "split"
    base = ["train", "lm", "--init", str(folder), "--text", str(corpus), "--eval-every", "2", *TRAIN, "--lr", "1e-3"]
    assert main([*base, "--steps", "4", "--out", str(straight)]) == 0
    assert f"pretrained {ARCHITECTURE}" in capsys.readouterr().out
    assert main([*base, "--steps", "2", "--out", str(split)]) == 0
    assert main([*base, "--steps", "4", "--out", str(split), "--resume"]) == 0
    assert f"resumed from {split} at step 2" in capsys.readouterr().out
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for name in ("layers.0.feed_forward.router.bias", "layers.1.self_attn.sinks",
                 "layers.1.feed_forward.experts.gate_up_proj_bias"):  # fmt: skip
        assert not torch.equal(a[name], dict(pretrained.named_parameters())[name].detach()), name
    histories = [json.loads((d / "state.json").read_text())["history"] for d in (straight, split)]
    assert histories[0] == histories[1]

    hf_dir = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(straight), "--to", str(hf_dir)]) == 0
    theirs = reading_the_config(
        transformers.AutoModelForCausalLM.from_pretrained(hf_dir, attn_implementation="eager").eval()
    )
    assert type(theirs).__name__ == ARCHITECTURE
    ours = load_checkpoint(straight).model
    tokens, mask = left_padded_batch()
    tokens = tokens % (len(WORDS) + 3)
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask)


def test_yarn_without_truncation_is_not_yarn_with_it_and_is_written_back(tmp_path):
    """gpt-oss's yarn keeps the correction range real: truncating it (transformers' default) gives other
    frequencies, so the case above reads the flag; written back, the file says ``truncate: false`` again."""
    import dataclasses

    from transformer.lm.rotary import RotaryEmbedding

    theirs, ours = _pair(tmp_path, rope_parameters=None)
    truncated = dataclasses.replace(ours.config, rope_yarn_truncate=True)
    real, floored = (RotaryEmbedding.from_config(c).inv_freq for c in (ours.config, truncated))
    assert (real / floored - 1).abs().max() > 0.5  # one frequency a third of the truncated one
    folder = ours.save_pretrained(tmp_path / "ours")
    import json

    written = json.loads((folder / "config.json").read_text())["rope_parameters"]
    assert written["rope_type"] == "yarn" and written["truncate"] is False
