"""Fine-tuning a mixture of experts (docs/moe.md, "Training"): the training loss is transformers' (mean
cross-entropy plus ``router_aux_loss_coef`` times the load-balancing loss) with the same gradients, evaluation's is
the cross-entropy alone, and ``train lm --init`` continues a Mixtral folder with that loss and resumes exactly."""

from __future__ import annotations

import json

import pytest
import torch
from moe_helpers import moe_model, skip_if_their_aux_loss_is_softmax_twice
from safetensors.torch import load_file
from test_cli_pretrained import TRAIN, WORDS, _write_tokenizer

from transformer.cli import main
from transformer.lm import LMConfig, TransformerLM, build_lm
from transformer.lm.moe import WithLoadBalancing, model_aux_loss
from transformer.tasks.pretrained_lm import IGNORED_LABEL, fine_tune_criterion

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("kind", ["mixtral", "qwen2_moe"])
def test_the_training_loss_and_its_gradients_are_transformers(tmp_path, kind):
    theirs = moe_model(transformers, kind, torch.float64, router_aux_loss_coef=0.3)  # a weight that shows
    skip_if_their_aux_loss_is_softmax_twice(transformers, theirs)
    theirs.save_pretrained(tmp_path)
    ours = TransformerLM.from_pretrained(tmp_path).train()  # no dropout in these models: train mode adds the loss
    theirs.train()
    tokens = torch.randint(3, 97, (3, 9), generator=torch.Generator().manual_seed(4))
    labels = torch.randint(3, 97, (3, 9), generator=torch.Generator().manual_seed(5))
    out = theirs(input_ids=tokens, labels=labels, output_router_logits=True)  # labels shifted inside
    ours_labels = torch.cat([labels[:, 1:], torch.full((3, 1), IGNORED_LABEL)], dim=1)
    criterion = fine_tune_criterion(ours)
    assert isinstance(criterion, WithLoadBalancing) and criterion.coef == 0.3
    log_probs = ours.generator(ours(tokens))
    loss = criterion(log_probs.reshape(-1, 97), ours_labels.reshape(-1)) / (3 * 8)
    # transformers' cross-entropy runs on the logits cast to float32, its loss is float32
    torch.testing.assert_close(loss.float(), out.loss, rtol=1e-6, atol=1e-7)
    assert 0.3 * out.aux_loss > 1e-2  # the auxiliary term is far above the tolerance
    loss.backward()
    out.loss.backward()
    torch.testing.assert_close(
        ours.layers[0].feed_forward.router.weight.grad, theirs.model.layers[0].mlp.gate.weight.grad, rtol=1e-5,
        atol=1e-7,
    )  # fmt: skip
    ours.eval()
    with torch.no_grad():
        log_probs = ours.generator(ours(tokens))
        plain = torch.nn.functional.nll_loss(log_probs.reshape(-1, 97), ours_labels.reshape(-1), reduction="sum")
        assert criterion(log_probs.reshape(-1, 97), ours_labels.reshape(-1)) == plain  # evaluation: CE alone
        assert model_aux_loss(ours) > 0


@pytest.fixture(scope="module")
def mixtral_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mixtral") / "model"
    folder.mkdir(parents=True)
    config = LMConfig(
        vocab=len(WORDS) + 3, n_layers=2, d_model=32, d_ff=24, n_heads=4, n_kv_heads=2, max_len=64,
        positional_encoding="rotary", norm="rms", activation="silu", ffn_gated=True, qkv_bias=False, out_bias=False,
        ffn_bias=False, lm_head_bias=False, embedding_scale=1.0, pad_id=None, dropout=0.0, attention_dropout=0.0,
        ffn_hidden_dropout=False, n_experts=4, experts_per_token=2, router_aux_loss_coef=0.02,
    )  # fmt: skip
    torch.manual_seed(0)
    build_lm(config).save_pretrained(folder)
    _write_tokenizer(folder)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": 1}))
    return folder


def test_train_lm_init_fine_tunes_a_mixtral_folder_and_resumes_exactly(mixtral_folder, tmp_path, capsys):
    corpus = tmp_path / "text.txt"
    corpus.write_text("\n".join(["def add ( a , b ) : return a + b", "the box is the value of the self"] * 40) + "\n")
    straight, split = tmp_path / "straight", tmp_path / "split"
    base = ["train", "lm", "--init", str(mixtral_folder), "--text", str(corpus), "--eval-every", "2", *TRAIN]
    base += ["--lr", "1e-3"]
    assert main([*base, "--steps", "4", "--out", str(straight)]) == 0
    assert "pretrained MixtralForCausalLM" in capsys.readouterr().out
    assert main([*base, "--steps", "2", "--out", str(split)]) == 0
    assert main([*base, "--steps", "4", "--out", str(split), "--resume"]) == 0
    assert f"resumed from {split} at step 2" in capsys.readouterr().out
    a, b = load_file(straight / "model.safetensors"), load_file(split / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert "layers.1.feed_forward.experts.gate_up_proj" in a
    pretrained = TransformerLM.from_pretrained(mixtral_folder)
    assert not torch.equal(a["layers.0.feed_forward.router.weight"], pretrained.layers[0].feed_forward.router.weight)
    histories = [json.loads((d / "state.json").read_text())["history"] for d in (straight, split)]
    assert histories[0] == histories[1]
