"""No import circle inside the language model's package (issue 44): ``lm/model.py`` does not import
``lm/pretrained/`` (which imports it); the loader registers itself (``register_folder_io``), and
``TransformerLM.from_pretrained`` / ``save_pretrained`` keep working."""

from __future__ import annotations

import torch
from pretrained_helpers import hf_model  # noqa: F401  (the tests' path)
from test_import_directions import _cycles, _package_graph

from transformer.lm import LMConfig, TransformerLM, build_lm


def _graph() -> dict[str, set[str]]:
    """Module -> the modules of transformer.lm it imports (tests/test_import_directions.py's ``_package_graph``)."""
    return _package_graph("transformer.lm")


def test_the_language_model_package_has_no_import_circle():
    graph = _graph()
    assert (
        "transformer.lm.pretrained.load" in graph and "transformer.lm.model" in graph["transformer.lm.pretrained.load"]
    )
    assert _cycles(graph) == []


def test_the_cycle_finder_sees_a_planted_circle():
    graph = _graph()
    graph["transformer.lm.model"] = graph["transformer.lm.model"] | {"transformer.lm.pretrained"}
    assert any("transformer.lm.model" in c and "transformer.lm.pretrained" in c for c in _cycles(graph))


def test_from_pretrained_and_save_pretrained_still_go_through_the_model(tmp_path):
    config = LMConfig(
        vocab=50, n_layers=2, d_model=16, d_ff=32, n_heads=2, norm="rms", positional_encoding="rotary",
        ffn_gated=True, activation="silu", dropout=0.0, attention_dropout=0.0, embedding_scale=1.0,
        qkv_bias=False, out_bias=False, ffn_bias=False, lm_head_bias=False, ffn_hidden_dropout=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = build_lm(config).eval()
    folder = model.save_pretrained(tmp_path / "llama")
    back = TransformerLM.from_pretrained(folder)
    tokens = torch.tensor([[1, 2, 3, 4]])
    assert torch.equal(back.logits(tokens), model.logits(tokens))


def test_a_seeded_model_initialises_as_one_layer_copied():
    """``decoder_layers`` builds each layer from the random state layer 0 was built from: the weights are those of
    the stack built as one layer's copies (as before the layers were built one by one), biases included."""
    import copy

    from transformer.lm.blocks import decoder_layer, initialise

    config = LMConfig(vocab=30, n_layers=3, d_model=16, d_ff=24, n_heads=2)
    torch.manual_seed(7)
    model = build_lm(config)
    torch.manual_seed(7)
    first = decoder_layer(config, 0)
    copied = build_lm(config)
    copied.layers = torch.nn.ModuleList([first] + [copy.deepcopy(first) for _ in range(2)])
    torch.random.set_rng_state(_state_after_one_layer(config))
    initialise(copied, config)
    for i in range(3):
        assert all(torch.equal(model.layers[i].state_dict()[k], v) for k, v in copied.layers[i].state_dict().items())
    assert torch.equal(model.layers[1].self_attn.q_proj.bias, model.layers[0].self_attn.q_proj.bias)


def _state_after_one_layer(config: LMConfig) -> torch.Tensor:
    """The random state build_lm reaches before ``initialise`` when the stack is one layer built (and copied)."""
    from transformer.embeddings import EmbeddingStack
    from transformer.lm.blocks import decoder_layer, positional_table
    from transformer.lm.layers import ScaledEmbeddings
    from transformer.model import Generator

    torch.manual_seed(7)
    decoder_layer(config, 0)
    table = positional_table(config)
    EmbeddingStack(ScaledEmbeddings(config.d_model, config.vocab, config.lambda_e), table)
    Generator(config.d_model, config.vocab, bias=config.lm_head_bias)
    return torch.random.get_rng_state()
