"""PEFT's LoRA on our language model loaded from a Hugging Face folder (issue 43): ``LoraConfig(target_modules=
["q_proj", "v_proj"])`` wraps :class:`TransformerLM`; forward, backward (only the factors get gradients), a step
that changes the logits, ``merge_and_unload`` (a plain TransformerLM computing the adapted logits), its
``save_pretrained`` (transformers' model of the folder computes them too); and the adapter alone, saved by PEFT and
renamed for transformers (:func:`~transformer.lm.pretrained.adapters.save_adapter_for_transformers`), loaded onto
transformers' ``from_pretrained`` model, gives our adapted logits.

The base folder is a tiny random Llama (and Qwen2, with biases on q and v) from transformers' own config classes,
saved with its ``save_pretrained``. Skipped where peft is not installed (it is not a dependency of the package)."""

from __future__ import annotations

import pytest
import torch
from pretrained_helpers import hf_model

from transformer.lm import TransformerLM
from transformer.lm.pretrained import PretrainedFormatError
from transformer.lm.pretrained.adapters import save_adapter_for_transformers

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft", reason="peft is not installed: pip install peft (the LoRA tests need it)")


def _close(a, b):
    error = (a - b).abs().max().item()
    assert error <= 1e-5 * b.abs().max().item(), error


def _adapted(folder):
    """Our model of ``folder`` with LoRA on q_proj and v_proj, after one Adam step on a next-token loss."""
    torch.manual_seed(0)
    ours = TransformerLM.from_pretrained(folder)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    model = peft.get_peft_model(ours, config)
    x = torch.randint(3, 97, (2, 9), generator=torch.Generator().manual_seed(1))
    before = model.logits(x).detach()
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert {n.split(".self_attn.")[1].split(".")[0] for n in trainable} == {"q_proj", "v_proj"}
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    log_probs = torch.log_softmax(model.logits(x[:, :-1]), dim=-1)
    loss = -log_probs.gather(-1, x[:, 1:, None]).mean()
    loss.backward()
    assert all(p.grad is None for n, p in model.named_parameters() if not p.requires_grad)
    optimizer.step()
    after = model.logits(x).detach()
    assert (after - before).abs().max() > 1e-3  # lora_B moved off zero: the adapter changes the function
    return model, x, after


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_lora_on_q_and_v_trains_merges_and_saves_what_transformers_loads(kind, tmp_path):
    hf_model(transformers, kind).save_pretrained(tmp_path / "base")
    model, x, adapted = _adapted(tmp_path / "base")
    merged = model.merge_and_unload()
    assert type(merged) is TransformerLM
    _close(merged.logits(x).detach(), adapted)
    merged.save_pretrained(tmp_path / "merged")
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    with torch.no_grad():
        _close(theirs(input_ids=x).logits, adapted)


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # peft on transformers
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_the_adapter_alone_loads_onto_transformers_from_pretrained_model(kind, tmp_path):
    hf_model(transformers, kind).save_pretrained(tmp_path / "base")
    model, x, adapted = _adapted(tmp_path / "base")
    model.save_pretrained(tmp_path / "adapter")  # PEFT writes the adapter only
    architecture = model.base_model.model.pretrained_origin.architecture
    save_adapter_for_transformers(tmp_path / "adapter", tmp_path / "for_hf", architecture)
    base = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base")
    with torch.no_grad():
        plain = base(input_ids=x).logits.clone()
    loaded = peft.PeftModel.from_pretrained(base, tmp_path / "for_hf")
    with torch.no_grad():
        _close(loaded(input_ids=x).logits, adapted)
    assert (plain - adapted).abs().max() > 1e-3  # the adapter's factors were loaded, not skipped


def test_an_adapter_of_a_module_transformers_fuses_is_refused_naming_it(tmp_path):
    hf_model(transformers, "gpt2").save_pretrained(tmp_path / "base")
    ours = TransformerLM.from_pretrained(tmp_path / "base")
    config = peft.LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False)
    peft.get_peft_model(ours, config).save_pretrained(tmp_path / "adapter")
    with pytest.raises(PretrainedFormatError, match="stored by GPT2LMHeadModel as .*c_attn.weight.* in layout 'fused'"):
        save_adapter_for_transformers(tmp_path / "adapter", tmp_path / "out", "GPT2LMHeadModel")
