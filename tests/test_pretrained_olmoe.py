"""OLMoE (``OlmoeForCausalLM``) checkpoint folders against transformers (issue 44): tiny random models from its own
config class (no download): logits on a left-padded batch (float32 within 1e-5 x max|logit|, float64 within 1e-10;
bfloat16 close, not claimed bit for bit), QK-norm over the whole projection matters there, routing ties broken as
transformers breaks them, greedy generation with our cache token for token (float32 and bfloat16), gradients, the
load-balancing loss and the training loss (with ``router_aux_loss_coef``) equal, saving back both ways, its options
refused by name, and ``train lm --init`` fine-tuning an OLMoE folder with the auxiliary loss and resuming exactly
(docs/pretrained.md, docs/moe.md)."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import torch
from moe_helpers import skip_if_their_aux_loss_is_softmax_twice, their_router_rounds
from olmo_helpers import load_memory_rise, olmo_model, olmo_pair
from pretrained_helpers import (
    VOCAB,
    assert_logits_close,
    hf_logits,
    left_padded_batch,
    our_greedy,
    our_logits,
    positions_of,
    reweighted,
    their_greedy,
)
from test_pretrained_moe import _their_grads

from transformer.lm import LMConfig, TransformerLM, build_lm
from transformer.lm.moe import MoEFeedForward, WithLoadBalancing, model_aux_loss
from transformer.lm.pretrained import PretrainedFormatError
from transformer.lm.pretrained.supported import architecture_for

transformers = pytest.importorskip("transformers")

CASES = {
    "top2": {},
    "top1-norm_topk-bias-tied": dict(num_experts_per_tok=1, norm_topk_prob=True, attention_bias=True,
                                     tie_word_embeddings=True),
    "top3-norm_topk-mqa-3layers": dict(num_experts_per_tok=3, norm_topk_prob=True, num_key_value_heads=1,
                                       num_hidden_layers=3),
}  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_equal_transformers(tmp_path, case, dtype):
    theirs, ours = olmo_pair(transformers, tmp_path, "olmoe", dtype, **CASES[case])
    c = ours.config
    assert ours.pretrained_origin.architecture == "OlmoeForCausalLM" and ours.weights_dtype() == dtype
    assert (c.n_experts, c.dense_layers, c.qk_norm_scope, c.pre_sublayer_norm) == (5, (), "projection", True)
    assert c.router_norm_topk == CASES[case].get("norm_topk_prob", False) and c.router_aux_loss_coef == 0.01
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask, dtype)


def test_bfloat16_logits_are_transformers_with_the_rounding_its_router_does(tmp_path):
    """Their router rounds the top-k weights to bfloat16 (5.17 and later; ``router_weights_rounded``, set by the
    loader): our bfloat16 logits are theirs bit for bit, and without the rounding they are not. Against 5.4 (float32
    weights) ours round otherwise: within 2^-5 of the largest logit (docs/moe.md, "Half precision")."""
    theirs, ours = olmo_pair(transformers, tmp_path, "olmoe", torch.bfloat16)
    assert ours.weights_dtype() == torch.bfloat16 and ours.config.router_weights_rounded
    other = build_lm(dataclasses.replace(ours.config, router_weights_rounded=False)).to(torch.bfloat16).eval()
    other.load_state_dict(ours.state_dict())
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        expected = hf_logits(theirs, tokens, mask)[mask]
        rounded, unrounded = our_logits(ours, tokens, mask)[mask], our_logits(other, tokens, mask)[mask]
    if their_router_rounds("olmoe"):
        assert torch.equal(rounded, expected) and not torch.equal(unrounded, expected)
    else:
        assert (rounded - expected).abs().max() <= 2**-5 * expected.abs().max()


def test_the_whole_projection_norm_and_the_experts_matter_here(tmp_path):
    """QK-norm per head (its gains the first d_k of the projection's) moves the logits far beyond the tolerance;
    tokens go to every expert with unequal weights, and two experts swapped move the logits too."""
    theirs, ours = olmo_pair(transformers, tmp_path, "olmoe")
    tokens, mask = left_padded_batch()
    state = ours.state_dict()
    for name in [n for n in state if n.endswith(("q_norm.weight", "k_norm.weight"))]:
        state[name] = state[name][: ours.config.d_k]
    per_head = build_lm(dataclasses.replace(ours.config, qk_norm_scope="head")).eval()
    per_head.load_state_dict(state)
    with torch.no_grad():
        before = our_logits(ours, tokens, mask)
        tolerance = 1e-5 * before.abs().max()
        assert (our_logits(per_head, tokens, mask) - before)[mask].abs().max() > 100 * tolerance
        block = ours.layers[0].feed_forward
        assert isinstance(block, MoEFeedForward)
        weights, chosen = block.router.choose(block.router_logits)
        assert torch.bincount(chosen.reshape(-1), minlength=5).min() > 0
        assert (weights[:, 0] - weights[:, 1]).abs().max() > 0.1
        for p in (block.experts.gate_up_proj, block.experts.down_proj):
            p.copy_(p[[1, 0, 2, 3, 4]])
        assert (our_logits(ours, tokens, mask) - before)[mask].abs().max() > 100 * tolerance


def test_equal_router_scores_pick_the_experts_transformers_picks(tmp_path):
    """Ties: every router row equal (logits equal up to the matmul's rounding) gives their logits; exact ties
    (dyadic weights and inputs: every logit the same float) pick what their float32 softmax and torch.topk pick, on
    the CPU experts (2, 4) of 5, not the lowest indices, each weight 1/5 (norm_topk_prob false)."""
    theirs = olmo_model(transformers, "olmoe")
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
    assert torch.equal(routing.logits, routing.logits[:, :1].expand(-1, 5))
    assert torch.equal(routing.experts, their_experts) and torch.equal(routing.weights, their_weights.float())
    assert torch.equal(routing.weights, torch.full_like(routing.weights, 0.2))
    assert {tuple(r) for r in routing.experts.tolist()} == {(2, 4)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_greedy_generation_with_our_cache_gives_transformers_tokens(tmp_path, dtype):
    theirs, ours = olmo_pair(transformers, tmp_path, "olmoe", dtype)
    tokens, mask = left_padded_batch(steps=7, pads=(0, 2, 4))
    expected = their_greedy(theirs, tokens, mask, 10)
    assert torch.equal(our_greedy(ours, tokens, mask, 10), expected)


def test_gradients_of_a_loss_equal_transformers(tmp_path):
    theirs, ours = olmo_pair(transformers, tmp_path, "olmoe", torch.float64)
    tokens, mask = left_padded_batch()
    labels = torch.randint(3, VOCAB, tokens.shape, generator=torch.Generator().manual_seed(5))

    def loss(logits):
        nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
        return (nll * mask.double()).sum()

    loss(our_logits(ours, tokens, mask)).backward()
    loss(hf_logits(theirs, tokens, mask)).backward()
    compared = 0
    for name, got, expected in _their_grads(ours, theirs):
        torch.testing.assert_close(got, expected, rtol=1e-8, atol=1e-10, msg=name)
        compared += 1
    assert compared >= len(list(ours.parameters()))
    assert ours.layers[0].self_attn.q_norm.weight.grad.abs().max() > 0


@pytest.mark.parametrize("masked", [False, True])
def test_load_balancing_loss_equals_transformers_aux_loss(tmp_path, masked):
    theirs, ours = olmo_pair(transformers, tmp_path, "olmoe", torch.float64)
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
    if masked:
        assert abs(model_aux_loss(ours, None).item() - ours_loss.item()) > 1e-4


def test_the_training_loss_and_its_gradients_are_transformers(tmp_path):
    """The fine-tuning loss: mean cross-entropy plus router_aux_loss_coef (OLMoE's default 0.01, here 0.3 so that
    it shows) times the load-balancing loss, with their router's gradients."""
    from transformer.tasks.pretrained_lm import IGNORED_LABEL, fine_tune_criterion

    theirs = olmo_model(transformers, "olmoe", torch.float64, router_aux_loss_coef=0.3)
    skip_if_their_aux_loss_is_softmax_twice(transformers, theirs)
    theirs.save_pretrained(tmp_path)
    ours = TransformerLM.from_pretrained(tmp_path).train()
    theirs.train()
    tokens = torch.randint(3, VOCAB, (3, 9), generator=torch.Generator().manual_seed(4))
    labels = torch.randint(3, VOCAB, (3, 9), generator=torch.Generator().manual_seed(5))
    out = theirs(input_ids=tokens, labels=labels, output_router_logits=True)
    ours_labels = torch.cat([labels[:, 1:], torch.full((3, 1), IGNORED_LABEL)], dim=1)
    criterion = fine_tune_criterion(ours)
    assert isinstance(criterion, WithLoadBalancing) and criterion.coef == 0.3
    log_probs = ours.generator(ours(tokens))
    loss = criterion(log_probs.reshape(-1, VOCAB), ours_labels.reshape(-1)) / (3 * 8)
    torch.testing.assert_close(loss.float(), out.loss, rtol=1e-6, atol=1e-7)
    assert 0.3 * out.aux_loss > 1e-2
    loss.backward()
    out.loss.backward()
    torch.testing.assert_close(
        ours.layers[0].feed_forward.router.weight.grad, theirs.model.layers[0].mlp.gate.weight.grad, rtol=1e-5,
        atol=1e-7,
    )  # fmt: skip


def test_theirs_to_ours_to_theirs_keeps_the_logits(tmp_path):
    theirs, ours = olmo_pair(transformers, tmp_path / "theirs", "olmoe", torch.float64, norm_topk_prob=True)
    folder = ours.save_pretrained(tmp_path / "ours")
    again = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()
    again.config._experts_implementation = "eager"
    assert type(again).__name__ == "OlmoeForCausalLM" and again.dtype == torch.float64
    assert (again.config.num_experts, again.config.norm_topk_prob, again.config.router_aux_loss_coef) == (5, True, 0.01)
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(hf_logits(again, tokens, mask), hf_logits(theirs, tokens, mask), mask, torch.float64)


def test_ours_saved_is_loaded_by_transformers_with_the_same_logits(tmp_path):
    """A model of ours (its own random weights; the folder forgotten), written as the architecture its config alone
    chooses: OLMoE."""
    _, ours = olmo_pair(transformers, tmp_path / "theirs", "olmoe")
    reweighted(ours)
    assert architecture_for(ours.config).name == "OlmoeForCausalLM"
    folder = ours.save_pretrained(tmp_path / "ours")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval()
    assert type(theirs).__name__ == "OlmoeForCausalLM"
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(clip_qkv=8.0), r"field clip_qkv=8\.0 is not supported: clamping"),
        (dict(sliding_window=4), r"field sliding_window=4 is not supported: OLMoE's mask has no window"),
        (dict(head_dim=12), r"field head_dim=12 is not supported: OLMoE's q_norm and k_norm are .* = 8 per head"),
    ],
    ids=["clip_qkv", "sliding_window", "head_dim"],
)
def test_options_olmoe_computes_otherwise_are_refused_by_name(tmp_path, overrides, message):
    olmo_model(transformers, "olmoe").save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **overrides}))
    with pytest.raises(PretrainedFormatError, match=message):
        TransformerLM.from_pretrained(tmp_path)


@pytest.fixture(scope="module")
def olmoe_folder(tmp_path_factory):
    from test_cli_pretrained import WORDS, _write_tokenizer

    folder = tmp_path_factory.mktemp("olmoe") / "model"
    folder.mkdir(parents=True)
    config = LMConfig(
        vocab=len(WORDS) + 3, n_layers=2, d_model=32, d_ff=24, n_heads=4, n_kv_heads=2, max_len=64,
        positional_encoding="rotary", norm="rms", activation="silu", ffn_gated=True, qkv_bias=False, out_bias=False,
        ffn_bias=False, lm_head_bias=False, embedding_scale=1.0, pad_id=None, dropout=0.0, attention_dropout=0.0,
        ffn_hidden_dropout=False, qk_norm=True, qk_norm_scope="projection", n_experts=4, experts_per_token=2,
        router_norm_topk=False, router_aux_loss_coef=0.02, layer_norm_eps=1e-5, router_weights_rounded=True,
    )  # fmt: skip
    torch.manual_seed(0)
    build_lm(config).save_pretrained(folder)
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["OlmoeForCausalLM"]
    _write_tokenizer(folder)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 1}))
    return folder


def test_train_lm_init_fine_tunes_an_olmoe_folder_with_its_aux_loss_and_resumes_exactly(olmoe_folder, tmp_path, capsys):
    from safetensors.torch import load_file
    from test_cli_pretrained import TRAIN

    from transformer.cli import main
    from transformer.tasks.pretrained_lm import fine_tune_criterion

    corpus = tmp_path / "text.txt"
    corpus.write_text("\n".join(["def add ( a , b ) : return a + b", "the box is the value of the self"] * 40) + "\n")
    straight, split = tmp_path / "straight", tmp_path / "split"
    base = ["train", "lm", "--init", str(olmoe_folder), "--text", str(corpus), "--eval-every", "2", *TRAIN]
    base += ["--lr", "1e-3"]
    assert main([*base, "--steps", "4", "--out", str(straight)]) == 0
    assert "pretrained OlmoeForCausalLM" in capsys.readouterr().out
    assert main([*base, "--steps", "2", "--out", str(split)]) == 0
    assert main([*base, "--steps", "4", "--out", str(split), "--resume"]) == 0
    assert f"resumed from {split} at step 2" in capsys.readouterr().out
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    pretrained = TransformerLM.from_pretrained(olmoe_folder)
    assert not torch.equal(a["layers.0.feed_forward.router.weight"], pretrained.layers[0].feed_forward.router.weight)
    criterion = fine_tune_criterion(pretrained)  # what train lm --init trains with: CE + 0.02 x the aux loss
    assert isinstance(criterion, WithLoadBalancing) and criterion.coef == 0.02
    histories = [json.loads((d / "state.json").read_text())["history"] for d in (straight, split)]
    assert histories[0] == histories[1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads VmHWM from /proc/self/status")
def test_loading_an_olmoe_folder_keeps_the_memory_bound(tmp_path):
    """The bound with the experts most of the checkpoint (8 experts x 2 layers, about 110 MiB of 130): the files'
    per-expert tensors read into our stacked parameters rise at most 1.3x the checkpoint."""
    config = LMConfig(
        vocab=4000, n_layers=2, d_model=512, d_ff=1152, n_heads=8, n_kv_heads=2, max_len=2048, dropout=0.0,
        attention_dropout=0.0, norm="rms", positional_encoding="rotary", embedding_scale=1.0, activation="silu",
        ffn_gated=True, ffn_hidden_dropout=False, qkv_bias=False, out_bias=False, ffn_bias=False, lm_head_bias=False,
        pad_id=None, qk_norm=True, qk_norm_scope="projection", n_experts=8, experts_per_token=2,
        router_norm_topk=False, router_aux_loss_coef=0.01, router_weights_rounded=True,
    )  # fmt: skip
    ratio, run = load_memory_rise(config, tmp_path / "olmoe")
    assert json.loads((tmp_path / "olmoe" / "config.json").read_text())["architectures"] == ["OlmoeForCausalLM"]
    assert ratio <= 1.3, f"peak rise {ratio:.3f}x the checkpoint"


def test_a_folder_without_the_optional_fields_reads_transformers_defaults(tmp_path):
    """Fields a config.json may leave out read as transformers' olmoe config fills them in (rms_norm_eps 1e-5,
    attention_bias false, an untied head, max_position_embeddings, silu, norm_topk_prob false,
    router_aux_loss_coef 0.01), with its own model, loaded from the same edited folder, as the oracle."""
    olmo_model(transformers, "olmoe", torch.float64).save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    config = json.loads(path.read_text())
    for field in (
        "rms_norm_eps",
        "attention_bias",
        "tie_word_embeddings",
        "max_position_embeddings",
        "hidden_act",
        "norm_topk_prob",
        "router_aux_loss_coef",
    ):
        config.pop(field)
    path.write_text(json.dumps(config))
    theirs = transformers.AutoModelForCausalLM.from_pretrained(path.parent, attn_implementation="sdpa").eval()
    theirs.config._experts_implementation = "eager"
    ours = TransformerLM.from_pretrained(tmp_path)
    assert ours.config.layer_norm_eps == theirs.config.rms_norm_eps == 1e-5
    assert ours.config.max_len == theirs.config.max_position_embeddings and not ours.config.tie_weights
    assert ours.config.router_aux_loss_coef == theirs.config.router_aux_loss_coef == 0.01
    assert ours.config.router_norm_topk is theirs.config.norm_topk_prob is False
    tokens, mask = left_padded_batch()
    with torch.no_grad():
        assert_logits_close(our_logits(ours, tokens, mask), hf_logits(theirs, tokens, mask), mask, torch.float64)


def test_a_fine_tune_exports_as_olmoe_and_transformers_computes_our_logits(olmoe_folder, tmp_path, capsys):
    """``typed-transformer export`` writes a ``train lm --init`` fine-tune of the folder back as OlmoeForCausalLM, which
    transformers loads to our logits (float32 within 1e-5 x max|logit|)."""
    from fine_tune_helpers import assert_fine_tune_exports_as
    from olmo_helpers import skip_unless_transformers_builds

    skip_unless_transformers_builds(transformers, "OlmoeConfig")

    def eager_experts(theirs):
        theirs.config._experts_implementation = "eager"

    assert_fine_tune_exports_as(transformers, "OlmoeForCausalLM", olmoe_folder, tmp_path, eager_experts)
