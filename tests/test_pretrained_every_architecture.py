"""Issue 44's promises on every architecture that had no test of them (docs/pretrained.md): ``train lm --init``
fine-tunes a folder of Gemma 2, Gemma 3 text, GPT-NeoX, SmolLM3, Granite, Mixtral, Qwen2-MoE and Qwen3-MoE and a run
interrupted and resumed equals an uninterrupted one bit for bit; a mixture of experts trains on the cross-entropy
plus ``router_aux_loss_coef`` x the load-balancing loss (the first logged loss is transformers' ``loss`` of the first
batch, ``aux_loss`` included); ``typed-transformer export`` writes the fine-tune back as the folder's architecture,
which transformers' own class loads to our logits; and packed documents keep each architecture's windows (Mistral,
StarCoder2 and Phi-3 on every layer, Gemma 2 and 3 and gpt-oss on their sliding layers, SmolLM3 on its layers with
rotary positions): each document has the loss and gradients it has alone. (OLMo 2, OLMoE and gpt-oss are fine-tuned
in their own files.) Tiny random models built from transformers' config classes (tests/architecture_models.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from architecture_models import MOE, architecture_model, model_class_name, saved
from fine_tune_helpers import assert_exports_as, assert_resumes_exactly, first_batch, with_tokenizer, write_corpus
from moe_helpers import skip_if_their_aux_loss_is_softmax_twice
from test_cli_pretrained import WORDS
from test_lm_packing import _alone_loss as alone_loss
from test_lm_packing import _next_token_loss as next_token_loss

import transformer as T
from transformer.lm import TransformerLM, build_lm
from transformer.lm.rms_norm import RMSNorm

transformers = pytest.importorskip("transformers")

FINE_TUNED = ("gemma2", "gemma3", "gpt_neox", "smollm3", "granite", *MOE)
#: a weight of the load-balancing loss that shows in the logged loss (far above its tolerance)
AUX_COEF = 0.3


@pytest.mark.parametrize("kind", FINE_TUNED)
def test_train_lm_init_fine_tunes_resumes_exactly_and_exports_as_the_architecture(kind, tmp_path, capsys):
    fields = dict(vocab_size=len(WORDS) + 3)
    if kind in MOE:
        fields["router_aux_loss_coef"] = AUX_COEF
    folder = with_tokenizer(saved(transformers, kind, tmp_path / kind, **fields))
    corpus = write_corpus(tmp_path)
    straight = assert_resumes_exactly(folder, corpus, tmp_path, capsys, model_class_name(kind))
    if kind in MOE:
        _assert_first_loss_is_theirs_with_the_aux_loss(folder, corpus, tmp_path, straight)
    assert_exports_as(transformers, straight, tmp_path / "hf", model_class_name(kind))


def _assert_first_loss_is_theirs_with_the_aux_loss(folder, corpus, tmp_path, straight):
    """The first logged loss is transformers' ``loss`` of the first batch with ``output_router_logits``: the mean
    cross-entropy of its labels (packing's -100 left out) + router_aux_loss_coef x ``aux_loss``."""
    import json

    batch = first_batch(folder, corpus, tmp_path)
    documents = batch.mask.documents  # one file, one document: each row runs as transformers runs it, causal
    assert batch.tokens.shape[1] == 16 and bool((documents == documents[:, :1]).all())
    theirs = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    skip_if_their_aux_loss_is_softmax_twice(transformers, theirs)
    assert theirs.config.router_aux_loss_coef == AUX_COEF
    with torch.no_grad():
        out = theirs(input_ids=batch.tokens, output_router_logits=True)
    cross_entropy = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), batch.labels.flatten()).item()
    expected = cross_entropy + AUX_COEF * out.aux_loss.item()
    step, logged = json.loads((straight / "state.json").read_text())["history"]["train_loss"][0]["__tuple__"]
    assert step == 1 and logged == pytest.approx(expected, rel=1e-5)
    assert AUX_COEF * out.aux_loss.item() > 1e3 * 1e-5 * expected  # the auxiliary term is far above the tolerance


# --- packing keeps the windows ---------------------------------------------------------------------------------

WINDOWED = ("mistral", "starcoder2", "phi3", "gemma2", "gemma3", "smollm3", "gpt_oss")
# row 0: documents of 7, 1 and 6; row 1: 5, 8 and 1: each window (4 to 6) shorter than some document
LENGTHS = [[7, 1, 6], [5, 8, 1]]


def _windowed_model(kind: str, tmp_path) -> TransformerLM:
    """Ours, in float64 (the RMSNorms' statistics too: float32 as transformers' by default), loaded from the folder
    of transformers' tiny ``kind``."""
    if kind == "gpt_oss":
        from test_pretrained_gpt_oss import gpt_oss_model

        gpt_oss_model().save_pretrained(tmp_path / kind)
    else:
        architecture_model(transformers, kind).save_pretrained(tmp_path / kind)
    return _float64_statistics(TransformerLM.from_pretrained(tmp_path / kind, dtype=torch.float64))


def _float64_statistics(model: TransformerLM) -> TransformerLM:
    for norm in model.modules():
        if isinstance(norm, RMSNorm):
            norm.compute_dtype = torch.float64
    return model


def _loss_and_gradients(model, loss_of):
    model.zero_grad()
    loss = loss_of()
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("kind", WINDOWED)
def test_packed_documents_keep_the_windows_of_the_architecture(kind, tmp_path):
    """A packed row's documents (``AttentionMask(documents=...)``, as ``train lm`` packs them) have the loss and
    every gradient they have alone (float64, 1e-10); the windows act on these documents: the same weights with a
    window wider than every row give another loss alone."""
    model = _windowed_model(kind, tmp_path)
    config = model.config
    assert config.sliding_window is not None and config.sliding_window < max(map(max, LENGTHS))
    tokens = torch.randint(3, config.vocab, (2, sum(LENGTHS[0])), generator=torch.Generator().manual_seed(1))
    documents = torch.stack([torch.repeat_interleave(torch.arange(3), torch.tensor(row)) for row in LENGTHS])
    packed, packed_grads = _loss_and_gradients(
        model,
        lambda: next_token_loss(
            model.generator(model(tokens, T.AttentionMask(documents=documents))), tokens, documents
        ),
    )
    alone, alone_grads = _loss_and_gradients(model, lambda: alone_loss(model, tokens, LENGTHS))
    torch.testing.assert_close(packed, alone, rtol=1e-10, atol=1e-10)
    assert packed_grads.keys() == alone_grads.keys() and len(packed_grads) > 0
    for name, grad in packed_grads.items():
        torch.testing.assert_close(grad, alone_grads[name], rtol=1e-10, atol=1e-10, msg=name)

    unwindowed = _float64_statistics(build_lm(dataclasses.replace(config, sliding_window=64)).double())
    unwindowed.load_state_dict(model.state_dict())
    with torch.no_grad():
        moved = abs(alone_loss(unwindowed, tokens, LENGTHS) - alone).item()
    assert moved > 1e4 * 1e-10  # ten thousand times the tolerance
