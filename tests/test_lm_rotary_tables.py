"""RoPE's cos/sin tables are built for the lengths in use (transformer/lm/rotary.py, issue 43): a model whose
``max_len`` is 131072 (Llama 3.1's ``max_position_embeddings``) no longer builds 131072 rows (128 MiB at head width
128) at its first forward; the tables grow when a longer sequence comes, every row is the number a full table holds
(logits equal to a model whose table was built up to ``max_len``, bit for bit), given positions far past the
sequence's length and the cache's steps read the right rows, and under torch.compile the table is built up to
``max_len`` once, so that lengths do not recompile it."""

from __future__ import annotations

import os

import pytest
import torch

from transformer.common.versions import TORCH_VERSION
from transformer.lm import LMConfig, build_lm, generate
from transformer.lm.rotary import MIN_TABLE_ROWS, RotaryEmbedding

LONG_CONTEXT = dict(
    vocab=29, n_layers=2, d_model=32, d_ff=40, n_heads=2, head_dim=128, positional_encoding="rotary", norm="rms",
    activation="silu", ffn_gated=True, qkv_bias=False, out_bias=False, ffn_bias=False, lm_head_bias=False,
    embedding_scale=1.0, dropout=0.0, attention_dropout=0.0, max_len=131072, pad_id=0,
)  # fmt: skip
SCALINGS = {
    "none": {},
    "linear": {"rope_scaling": "linear", "rope_factor": 4.0},
    "llama3": {"rope_scaling": "llama3", "rope_factor": 8.0, "rope_low_freq_factor": 1.0,
               "rope_high_freq_factor": 4.0, "rope_original_max_len": 8192},
    "yarn": {"rope_scaling": "yarn", "rope_factor": 4.0, "rope_original_max_len": 4096, "rope_beta_fast": 32.0,
             "rope_beta_slow": 1.0},
}  # fmt: skip


def _model(max_len: int = 131072, seed: int = 0, **fields) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_lm(LMConfig(**{**LONG_CONTEXT, "max_len": max_len, **fields})).eval()


def _twin_with_full_table(model: torch.nn.Module) -> torch.nn.Module:
    """The same weights, with the table built up to max_len first (what every model did before issue 43)."""
    twin = build_lm(model.config).eval()
    twin.load_state_dict(model.state_dict())
    twin.rotary.tables(model.config.max_len)
    assert twin.rotary._cos.size(0) == model.config.max_len
    return twin


def _table_bytes(rotary: RotaryEmbedding) -> int:
    return sum(t.numel() * t.element_size() for t in (rotary._cos, rotary._sin) if t is not None)


def test_a_131072_position_model_builds_a_small_table_at_its_first_forward():
    model = _model()
    assert model.rotary._cos is None  # nothing built when the model is built or loaded
    with torch.no_grad():
        model(torch.randint(1, 29, (2, 8)))
    assert model.rotary._cos.shape == (MIN_TABLE_ROWS, 128)
    assert _table_bytes(model.rotary) == 2 * MIN_TABLE_ROWS * 128 * 4  # 64 KiB, not 2 x 131072 x 128 x 4 = 128 MiB


@pytest.mark.parametrize("scaling", list(SCALINGS))
def test_logits_equal_those_of_a_full_table_bit_for_bit_and_the_table_grows_with_the_length(scaling):
    model = _model(max_len=4096, **SCALINGS[scaling])
    twin = _twin_with_full_table(model)
    torch.manual_seed(1)
    rows = []
    for length in (8, 200, 8, 1030):  # short, longer (grows to 256), short again (kept), past a power of two
        tokens = torch.randint(1, 29, (2, length))
        with torch.no_grad():
            torch.testing.assert_close(model(tokens), twin(tokens), rtol=0, atol=0)
        rows.append(model.rotary._cos.size(0))
    assert rows == [64, 256, 256, 2048]


@pytest.mark.parametrize("scaling", list(SCALINGS))
def test_every_row_of_a_small_table_is_the_row_of_the_full_table(scaling):
    model = _model(max_len=4096, **SCALINGS[scaling])
    full_cos, full_sin = (t.clone() for t in _twin_with_full_table(model).rotary.tables(1))
    for length in (1, 63, 64, 65, 1000):
        rotary = RotaryEmbedding.from_config(model.config)
        cos, sin = rotary.tables(length)
        assert cos.size(0) == rotary.table_rows(length) >= length
        torch.testing.assert_close(cos, full_cos[: cos.size(0)], rtol=0, atol=0)
        torch.testing.assert_close(sin, full_sin[: sin.size(0)], rtol=0, atol=0)


def test_the_table_rows_are_the_next_power_of_two_within_max_len():
    rotary = RotaryEmbedding(8, max_len=3000)
    assert [rotary.table_rows(n) for n in (0, 1, 64, 65, 128, 129, 2049, 3000, 5000)] == [
        64, 64, 64, 128, 128, 256, 3000, 3000, 5000,
    ]  # fmt: skip
    assert RotaryEmbedding(8, max_len=16).table_rows(5) == 16


def test_given_positions_far_past_the_length_read_their_own_rows():
    model = _model(max_len=4096)
    twin = _twin_with_full_table(model)
    tokens = torch.randint(1, 29, (1, 5))
    positions = torch.tensor([[4000, 4001, 4002, 4003, 4095]])
    with torch.no_grad():
        torch.testing.assert_close(
            model(tokens, positions=positions), twin(tokens, positions=positions), rtol=0, atol=0
        )
    assert model.rotary._cos.size(0) == 4096


def test_generation_with_the_cache_past_the_first_table_equals_the_full_table():
    model, prompt = _model(max_len=4096), torch.randint(1, 29, (2, 3))
    twin = _twin_with_full_table(model)
    with torch.no_grad():
        ours = generate(model, prompt, 90)  # positions 3 .. 92: the table grows from 64 to 128 rows on the way
        assert torch.equal(ours, generate(twin, prompt, 90))
    assert model.rotary._cos.size(0) == 128


def test_under_torch_compile_the_table_is_built_to_max_len_once_and_lengths_do_not_recompile_it():
    """What happens under torch.compile (Dynamo's own "eager" backend: tracing, no code generation): the first
    compiled call builds the table up to max_len (a table that grew with the lengths would change a tensor the graph
    guards on at every power of two); a second length recompiles once, as any model does (Dynamo marks the length
    dynamic), and no later length recompiles. (torch 2.9 does not keep the table a compiled call sets on the module:
    each compiled call computes it in the graph, as before issue 43.)"""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = _model(max_len=4096)
    twin = _twin_with_full_table(model)
    compiled = torch.compile(model, backend="eager")
    graphs = []
    for length in (5, 9, 17, 100, 300):
        tokens = torch.randint(1, 29, (1, length))
        with torch.no_grad():
            torch.testing.assert_close(compiled(tokens), twin(tokens), rtol=1e-6, atol=1e-6)
        graphs.append(counters["stats"]["unique_graphs"])
        # kept on the module, with max_len rows; torch 2.9 keeps no attribute a compiled forward sets (the graph
        # computes the table inside itself at each call, as it did before the tables grew)
        assert model.rotary._cos.size(0) == 4096 if model.rotary._cos is not None else TORCH_VERSION < (2, 13)
    assert graphs[-1] == graphs[1] <= 2
    torch._dynamo.reset()


def test_a_131072_position_folder_loads_and_runs_a_short_forward_small_and_without_dynamo(tmp_path):
    """In a fresh process (what a user's script is): ``from_pretrained`` of a Llama folder whose
    ``max_position_embeddings`` is 131072, then an 8-token forward, hold 64 table rows and import no
    ``torch._dynamo`` (0.8 s and 75 MiB when it is imported)."""
    import subprocess
    import sys

    config = LMConfig(**{**LONG_CONTEXT, "ffn_hidden_dropout": False, "tie_weights": False, "pad_id": None})
    torch.manual_seed(0)
    build_lm(config).save_pretrained(tmp_path / "llama")
    script = (
        "import sys, torch\n"
        "from transformer.lm import TransformerLM\n"
        f"model = TransformerLM.from_pretrained({str(tmp_path / 'llama')!r})\n"
        "with torch.no_grad():\n"
        "    model(torch.randint(1, 29, (1, 8)))\n"
        "print(model.config.max_len, model.rotary._cos.size(0), 'torch._dynamo' in sys.modules)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    max_len, rows, dynamo = done.stdout.split()
    assert (max_len, rows) == ("131072", str(MIN_TABLE_ROWS))
    # on every torch and einops the package takes (einops 0.8.0 imported it at its first call: no einops on this path)
    assert dynamo == "False"
