"""attn_implementation="typed_transformer" in Hugging Face transformers models, against attn_implementation="eager".

Tiny models built from configs in code (never downloaded), each from its own copy of the config (``_from_config``
writes the choice into the config it is given), the same weights in both. Compared on the real (unpadded) positions:
transformers' eager attention averages a fully padded query row where SDPA (and we) return 0. The error rule: our
float32 error against a float64 reference (transformers' "sdpa", torch's function) is at most twice eager float32's,
plus a small floor.
"""

import copy
import subprocess
import sys

import pytest
import torch

import transformer as T

transformers = pytest.importorskip("transformers")
from transformer.integrations import huggingface  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _registered():
    assert huggingface.register() == "typed_transformer"


def _pair(model_class, config):
    """(eager, ours, the float64 reference), the same weights, each built from its own copy of the config.

    The reference is transformers' "sdpa" (torch's function) in float64: its eager attention casts the scores to
    float32 for the softmax, where float64's most negative mask value becomes -inf and a padded row NaN."""
    torch.manual_seed(0)
    eager = model_class._from_config(copy.deepcopy(config), attn_implementation="eager")
    ours = model_class._from_config(copy.deepcopy(config), attn_implementation="typed_transformer")
    ours.load_state_dict(eager.state_dict())
    exact = model_class._from_config(copy.deepcopy(config), attn_implementation="sdpa")
    exact.load_state_dict(eager.state_dict())
    exact.to(torch.float64)
    assert ours.config._attn_implementation == "typed_transformer" and eager.config._attn_implementation == "eager"
    return eager.eval(), ours.eval(), exact.eval()


def _within_rule(mine, eager, exact, what):
    err = (mine.double() - exact).abs().max().item()
    eager_err = (eager.double() - exact).abs().max().item()
    assert err <= 2 * eager_err + 1e-5 * max(1.0, exact.abs().max().item()), (what, err, eager_err)


def _run(model, inputs, real, output):
    """The output on the real positions and every parameter's gradient of a loss on them."""
    model.zero_grad()
    out = output(model(**inputs))[real]
    (out.double() * torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view(out.shape)).sum().backward()
    return out.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _compare(models, inputs, real, output):
    (eager, eager_grads), (ours, ours_grads), (exact, exact_grads) = (_run(m, inputs, real, output) for m in models)
    _within_rule(ours, eager, exact, "output")
    assert ours_grads.keys() == exact_grads.keys() and len(ours_grads) > 5
    for name in exact_grads:
        _within_rule(ours_grads[name], eager_grads[name], exact_grads[name], name)


@pytest.fixture(scope="module")
def llama():
    config = transformers.LlamaConfig(
        vocab_size=61,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return _pair(transformers.LlamaForCausalLM, config)


def _left_padded(vocab):
    ids = torch.randint(3, vocab, (3, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[0, :4], mask[1, :1] = 0, 0  # left padding, two lengths
    return ids, mask


def test_llama_gqa_rope_left_padding_matches_eager_logits_and_gradients(llama):
    ids, mask = _left_padded(61)
    assert llama[1].model.layers[0].self_attn.num_key_value_groups == 4
    _compare(llama, {"input_ids": ids, "attention_mask": mask}, mask.bool(), lambda o: o.logits)


def test_llama_generate_with_its_cache_gives_eagers_tokens(llama):
    ids, mask = _left_padded(61)
    eager, ours, _ = llama
    settings = dict(attention_mask=mask, max_new_tokens=6, min_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = eager.generate(ids, **settings)
        got = ours.generate(ids, **settings)
    assert want.shape == (3, 15) and torch.equal(got, want)


@pytest.fixture(scope="module")
def gpt2():
    config = transformers.GPT2Config(
        vocab_size=53, n_positions=32, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
    )
    return _pair(transformers.GPT2LMHeadModel, config)


def test_gpt2_matches_eager_logits_and_gradients(gpt2):
    ids = torch.randint(0, 53, (2, 8), generator=torch.Generator().manual_seed(2))
    _compare(gpt2, {"input_ids": ids}, torch.ones(2, 8, dtype=torch.bool), lambda o: o.logits)


@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_one_new_token_after_a_cache_sees_every_cached_key(which, request):
    """A decoding step (one query, a cache of earlier keys) gives the logits of the full recompute."""
    eager, ours, _ = request.getfixturevalue(which)
    ids = torch.randint(3, 50, (2, 8), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        want = eager(input_ids=ids).logits[:, -1]
        prefix = ours(input_ids=ids[:, :-1], use_cache=True)
        step = ours(input_ids=ids[:, -1:], past_key_values=prefix.past_key_values).logits[:, -1]
    torch.testing.assert_close(step, want, atol=1e-5, rtol=1e-5)


def test_gpt2_generate_gives_eagers_tokens(gpt2):
    ids = torch.randint(0, 53, (2, 4), generator=torch.Generator().manual_seed(3))
    settings = dict(max_new_tokens=5, min_new_tokens=5, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        assert torch.equal(gpt2[1].generate(ids, **settings), gpt2[0].generate(ids, **settings))


def test_gpt2_on_the_kernel_under_the_interpreter_matches_eager(gpt2):
    """head_dim 16: the kernel takes it (TRITON_INTERPRET=1 on the CPU); use_backend chooses as everywhere."""
    ids = torch.randint(0, 53, (1, 6), generator=torch.Generator().manual_seed(4))
    with T.use_backend("triton"):
        _compare(gpt2, {"input_ids": ids}, torch.ones(1, 6, dtype=torch.bool), lambda o: o.logits)


def test_bert_bidirectional_with_padding_matches_eager(monkeypatch):
    config = transformers.BertConfig(
        vocab_size=47,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=48,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    models = _pair(transformers.BertModel, config)
    ids = torch.randint(1, 47, (2, 7), generator=torch.Generator().manual_seed(5))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 4:] = 0  # right padding
    _compare(models, {"input_ids": ids, "attention_mask": mask}, mask.bool(), lambda o: o.last_hidden_state)
    with torch.no_grad():  # no padding: transformers may build no mask at all; attention stays bidirectional
        full = torch.ones(2, 7, dtype=torch.long)
        torch.testing.assert_close(
            models[1](input_ids=ids, attention_mask=full).last_hidden_state,
            models[0](input_ids=ids, attention_mask=full).last_hidden_state,
            atol=1e-5,
            rtol=1e-5,
        )
    calls = []  # BERT's attention is bidirectional: our drop-in gets the padding mask and is_causal=False
    real = huggingface.scaled_dot_product_attention
    monkeypatch.setattr(
        huggingface,
        "scaled_dot_product_attention",
        lambda *a, **kw: calls.append((kw["attn_mask"] is not None, kw["is_causal"])) or real(*a, **kw),
    )
    with torch.no_grad():
        models[1](input_ids=ids, attention_mask=mask)
    assert calls == [(True, False)] * 2


def test_attention_dropout_reaches_the_drop_in_while_training_only(monkeypatch):
    config = transformers.GPT2Config(
        vocab_size=53, n_positions=32, n_embd=32, n_layer=1, n_head=2, attn_pdrop=0.25, resid_pdrop=0.0, embd_pdrop=0.0
    )
    model = transformers.GPT2LMHeadModel._from_config(config, attn_implementation="typed_transformer")
    seen = []
    real = huggingface.scaled_dot_product_attention
    monkeypatch.setattr(
        huggingface, "scaled_dot_product_attention", lambda *a, **kw: seen.append(kw["dropout_p"]) or real(*a, **kw)
    )
    ids = torch.randint(0, 53, (2, 6), generator=torch.Generator().manual_seed(6))
    model.train()
    first, second = model(input_ids=ids).logits, model(input_ids=ids).logits
    model.eval()
    model(input_ids=ids)
    assert seen == [0.25, 0.25, 0.0] and not torch.allclose(first, second)


def test_register_under_another_name_registers_both_functions_under_that_name():
    """register(name): attention function and mask function under ``name`` (returned), so
    attn_implementation=name works; the default name stays registered too."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    assert huggingface.register("typed_transformer_other") == "typed_transformer_other"
    assert AttentionInterface()["typed_transformer_other"] is huggingface.attention_forward
    assert "typed_transformer_other" in AttentionMaskInterface()
    assert AttentionInterface()["typed_transformer"] is huggingface.attention_forward


def test_a_missing_or_old_transformers_gets_the_version_and_the_command(monkeypatch):
    def missing(name):
        raise huggingface.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(huggingface.metadata, "version", missing)
    with pytest.raises(
        ImportError,
        match=r"needs transformers>=4\.53\.0, which is not installed; install it with: "
        r"pip install \"typed-transformer\[hf\]\"",
    ):
        huggingface.register()
    monkeypatch.setattr(huggingface.metadata, "version", lambda name: "4.52.4")
    with pytest.raises(ImportError, match=r"needs transformers>=4\.53\.0, found 4\.52\.4; upgrade with: pip install"):
        huggingface.register()


def test_importing_the_integrations_imports_neither_transformers_nor_the_kernel():
    code = (
        "import sys, transformer; before = set(sys.modules); "
        "import transformer.integrations.huggingface, transformer.integrations.sdpa_registry; "
        "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('transformers', 'triton') "
        "or m.startswith('transformer.kernels')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.skipif(
    tuple(int(part) for part in transformers.__version__.split(".")[:2]) < (5, 15),
    reason="T5 runs on the attention interface from transformers 5.15 on: before, T5ForConditionalGeneration refuses "
    "every attn_implementation but eager in its own words ('does not support an attention implementation ...')",
)
def test_t5_relative_position_bias_with_padding_matches_eager():
    """T5 hands its learned position bias to the attention function (``position_bias``): an additive float mask,
    combined with the padding and causal masks as transformers' SDPA path does (torch's function runs it)."""
    config = transformers.T5Config(
        vocab_size=43,
        d_model=32,
        d_kv=16,
        d_ff=48,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=2,
        dropout_rate=0.0,
        decoder_start_token_id=0,
        pad_token_id=0,
    )
    models = _pair(transformers.T5ForConditionalGeneration, config)
    g = torch.Generator().manual_seed(8)
    ids, labels = torch.randint(1, 43, (2, 7), generator=g), torch.randint(1, 43, (2, 5), generator=g)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[0, 5:] = 0
    inputs = {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": labels}
    _compare(models, inputs, torch.ones(2, 5, dtype=torch.bool), lambda o: o.logits)
