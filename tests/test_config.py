"""TransformerConfig rejects impossible models with messages that name the field and value."""

import json

import pytest

from transformer import TransformerConfig, make_model


def cfg(**changes):
    base = dict(src_vocab=11, tgt_vocab=11, d_model=32, d_ff=64, n_heads=4)
    base.update(changes)
    return TransformerConfig(**base)


def test_defaults_are_the_base_model():
    c = TransformerConfig(src_vocab=100, tgt_vocab=120)
    assert (c.d_model, c.d_ff, c.n_heads, c.n_encoder_layers, c.n_decoder_layers) == (512, 2048, 8, 6, 6)
    assert c.d_k == 64


def test_heads_must_divide_d_model_and_message_lists_divisors():
    with pytest.raises(ValueError) as info:
        cfg(d_model=512, n_heads=7)
    message = str(info.value)
    assert "n_heads=7" in message and "d_model=512" in message
    assert "[1, 2, 4, 8, 16, 32, 64, 128, 256, 512]" in message


@pytest.mark.parametrize(
    "field", ["src_vocab", "tgt_vocab", "n_encoder_layers", "n_decoder_layers", "d_model", "d_ff", "n_heads", "max_len"]
)
@pytest.mark.parametrize("value", [0, -3])
def test_non_positive_sizes_are_rejected(field, value):
    with pytest.raises(ValueError, match=rf"{field} must be positive, got {field}={value}"):
        cfg(**{field: value})


@pytest.mark.parametrize("value", [1.5, "8", True])
def test_sizes_must_be_ints(value):
    with pytest.raises(ValueError, match="d_ff must be an int"):
        cfg(d_ff=value)


@pytest.mark.parametrize("field", ["dropout", "attention_dropout"])
@pytest.mark.parametrize("value", [-0.1, 1.0, 2])
def test_dropout_outside_unit_interval(field, value):
    with pytest.raises(ValueError, match=rf"{field} must be a float in \[0, 1\), got {field}={value}"):
        cfg(**{field: value})


def test_odd_d_model_needs_learned_positions():
    with pytest.raises(ValueError, match="d_model=33 is odd"):
        cfg(d_model=33, n_heads=3)
    assert cfg(d_model=33, n_heads=3, positional_encoding="learned").d_model == 33


def test_tying_all_needs_equal_vocabularies():
    with pytest.raises(ValueError, match="src_vocab=11 != tgt_vocab=13"):
        cfg(tgt_vocab=13, tie_weights="all")
    assert cfg(tgt_vocab=13, tie_weights="target").tie_weights == "target"


@pytest.mark.parametrize(
    "field, value",
    [
        ("norm_placement", "middle"),
        ("positional_encoding", "rotary"),
        ("activation", "tanh"),
        ("tie_weights", "yes"),
        ("attention_backend", "cuda"),
    ],
)
def test_choices(field, value):
    with pytest.raises(ValueError, match=rf"{field} must be one of .*got '{value}'"):
        cfg(**{field: value})


def test_pad_id_must_be_in_both_vocabularies():
    with pytest.raises(ValueError, match=r"pad_id=11 must be a token id in \[0, 11\)"):
        cfg(tgt_vocab=20, pad_id=11)
    assert cfg(pad_id=None).pad_id is None


def test_layer_norm_eps_positive():
    with pytest.raises(ValueError, match="layer_norm_eps must be a positive float, got layer_norm_eps=0"):
        cfg(layer_norm_eps=0)


def test_frozen():
    c = cfg()
    with pytest.raises(AttributeError):
        c.d_model = 64


def test_round_trip_through_dict_and_json():
    c = cfg(norm_placement="post", activation="gelu", tie_weights="all", pad_id=None, dropout=0.2)
    assert TransformerConfig.from_dict(c.to_dict()) == c
    assert TransformerConfig.from_json(c.to_json()) == c
    assert json.loads(c.to_json())["norm_placement"] == "post"


def test_from_dict_rejects_unknown_fields_and_revalidates():
    data = cfg().to_dict()
    with pytest.raises(ValueError, match="unknown TransformerConfig field.*n_layer"):
        TransformerConfig.from_dict({**data, "n_layer": 3})
    with pytest.raises(ValueError, match="n_heads=5 does not divide d_model=32"):
        TransformerConfig.from_dict({**data, "n_heads": 5})


def test_replace_revalidates_and_differences_names_fields():
    c = cfg()
    with pytest.raises(ValueError, match="n_heads=3"):
        c.replace(n_heads=3)
    assert c.differences(c.replace(d_ff=128, dropout=0.0)) == {"d_ff": (64, 128), "dropout": (0.1, 0.0)}


def test_make_model_validates_through_the_config():
    with pytest.raises(ValueError, match="h=6|n_heads=6"):
        make_model(11, 11, N=1, d_model=32, d_ff=64, h=6)
    model = make_model(cfg(n_encoder_layers=1, n_decoder_layers=2))
    assert len(model.encoder.layers) == 1 and len(model.decoder.layers) == 2
    with pytest.raises(ValueError, match="takes no other arguments"):
        make_model(cfg(), 11)


# ---------------------------------------------------------------- LMConfig.ffn_hidden_dropout (docs/lm.md)
def _w2_inputs_and_ffn_outputs(ffn_hidden_dropout):
    """What the FFN's second linear map receives and what its sub-layer's dropout returns, in training mode."""
    import torch

    from transformer.lm import build_lm
    from transformer.lm.config import LMConfig

    torch.manual_seed(0)
    config = LMConfig(
        vocab=30,
        n_layers=1,
        d_model=16,
        d_ff=64,
        n_heads=2,
        dropout=0.5,
        attention_dropout=0.0,
        activation="gelu",
        ffn_hidden_dropout=ffn_hidden_dropout,
    )
    model = build_lm(config).train()
    seen = {}
    layer = model.layers[0]
    layer.feed_forward.w_2.register_forward_pre_hook(lambda m, args: seen.__setitem__("w_2 input", args[0]))
    layer.sublayer[1].dropout.register_forward_hook(lambda m, args, out: seen.__setitem__("sub-layer output", out))
    model(torch.randint(1, 30, (4, 12)))
    return {name: (t == 0).float().mean().item() for name, t in seen.items()}


@pytest.mark.parametrize("inner", [True, False])
def test_the_ffn_hidden_dropout_option_drops_the_hidden_activations_or_not(inner):
    zeros = _w2_inputs_and_ffn_outputs(inner)
    # gelu's output is never exactly 0 on these inputs: every zero reaching w_2 is a dropped activation
    assert (0.4 < zeros["w_2 input"] < 0.6) if inner else zeros["w_2 input"] == 0.0
    assert 0.4 < zeros["sub-layer output"] < 0.6  # the sub-layer's own dropout stays, either way


def test_ffn_hidden_dropout_is_validated_and_round_trips():
    from transformer.lm.config import LMConfig

    assert LMConfig(vocab=10).ffn_hidden_dropout is True  # the default: the placement the model always had
    for value in ("no", 0, None):
        with pytest.raises(ValueError, match=rf"LMConfig: ffn_hidden_dropout must be a bool, got {value!r}"):
            LMConfig(vocab=10, ffn_hidden_dropout=value)
    config = LMConfig(vocab=10, ffn_hidden_dropout=False)
    assert LMConfig.from_json(config.to_json()) == config
    assert config.differences(LMConfig(vocab=10), architecture_only=True) == {"ffn_hidden_dropout": (False, True)}
    older = {k: v for k, v in LMConfig(vocab=10).to_dict().items() if k != "ffn_hidden_dropout"}
    assert LMConfig.from_dict(older) == LMConfig(vocab=10)  # a config saved before the field existed
