"""transformer.proofs.prove and `typed-transformer prove` (docs/proved-shapes.md): a size-specific shape bug that no
call at the example sizes shows is found, with the relation it needs, sizes that break it and the eager contract
error at those sizes; the fix is proved; the package's own models are proved over their ranges."""

import textwrap

import pytest
import sympy
import torch
from torch import nn

import transformer as T
from transformer import Float, Int, Tensor, checked
from transformer.cli import main
from transformer.proofs import prove


class Pooled(nn.Module):
    """The mean over the sequence, with a size-1 bug: ``squeeze()`` drops the batch axis too when batch is 1."""

    def __init__(self, fixed: bool = False) -> None:
        super().__init__()
        self.fixed = fixed

    @checked
    def forward(self, x: Float[Tensor, "batch seq 8"]) -> Float[Tensor, "batch 8"]:
        pooled = x.mean(1, keepdim=True)
        return pooled.squeeze(1) if self.fixed else pooled.squeeze()


def test_a_batch_one_bug_that_the_example_sizes_miss_is_a_counterexample_with_its_eager_contract_error():
    model = Pooled()
    model(torch.randn(4, 5, 8))  # every call at the usual sizes passes
    report = prove(model, torch.randn(4, 5, 8), sizes={"batch": (1, 64), "seq": (1, 512)})
    assert not report.proved and report.exit_code == 1
    (found,) = report.counterexamples
    assert found.call == "Pooled.forward"
    assert found.relation == "batch != 1"
    assert found.sizes == {"batch": 1, "seq": 5}
    # torch traces squeeze() size-obliviously (a symbolic size is taken not to be 1, no guard): the eager runs at
    # the low ends of the ranges find it
    assert found.by == "an eager run at the low ends of the ranges"
    assert found.eager.startswith("TypeCheckError: Pooled.forward: the return value is f32[8], expected")
    text = str(report)
    assert "Pooled.forward: an eager run at the low ends of the ranges holds only when batch != 1" in text
    assert "broken by batch=1, seq=5" in text


def test_the_fix_is_proved_for_every_size_in_the_ranges():
    report = prove(Pooled(fixed=True), torch.randn(4, 5, 8), sizes={"batch": (1, 64), "seq": (1, 512)})
    assert report.proved and report.exit_code == 0
    assert [c.call for c in report.calls] == ["Pooled.forward"]
    assert "PROVED for every size in the ranges" in str(report)


@checked
def scores(q: Float[Tensor, "batch n 8"], k: Float[Tensor, "batch n 8"]) -> Float[Tensor, "batch n n"]:
    return q @ k.transpose(1, 2)


class Attends(nn.Module):
    @checked
    def forward(
        self, q: Float[Tensor, "batch q_len 8"], k: Float[Tensor, "batch k_len 8"]
    ) -> Float[Tensor, "batch q_len k_len"]:
        return scores(q, k)  # the bug: a function that needs as many queries as keys


def test_a_contract_that_holds_only_under_a_relation_names_the_argument_the_axis_and_the_relation():
    q, k = torch.randn(2, 6, 8), torch.randn(2, 6, 8)  # the tests' usual sizes: q_len == k_len
    sizes = {"batch": (1, 8), "q_len": (1, 32), "k_len": (1, 32)}
    report = prove(Attends(), q, k, sizes=sizes)
    (found,) = report.counterexamples
    assert found.call == "Attends.forward > scores"
    assert found.by == "argument 'k' axis n"
    assert found.relation in ("k_len == q_len", "q_len == k_len")
    assert found.sizes["q_len"] != found.sizes["k_len"]
    assert found.eager.startswith("TypeCheckError: Attends.forward > scores: argument 'k' is f32[")
    assert prove(Attends(), q, k, sizes=sizes, assume=["k_len == q_len"]).proved  # the relation assumed


def test_bad_input_names_what_is_wrong():
    x = torch.randn(4, 5, 8)
    with pytest.raises(
        ValueError, match=r"no axis of the example inputs carries 'tokens'; .* carry \['batch', 'seq'\]"
    ):
        prove(Pooled(), x, sizes={"tokens": (1, 8)})
    with pytest.raises(ValueError, match=r"axis 0 \(batch\) is 4, outside the range batch=1..2"):
        prove(Pooled(), x, sizes={"batch": (1, 2)})
    with pytest.raises(ValueError, match=r"assume: 'seq <' is not a relation"):
        prove(Pooled(), x, sizes={"batch": (1, 8)}, assume=["seq <"])
    with pytest.raises(ValueError, match="is not a checked function"):
        prove(nn.Linear(8, 8), x, sizes={"batch": (1, 8)})


# The package's own models, proved over their ranges: every batch from 1, every length from 1 to max_len.
MAX_LEN = 32
LMS = {
    "sinusoidal": {},
    "learned": {"positional_encoding": "learned"},
    "rotary-gqa-window": {"positional_encoding": "rotary", "n_kv_heads": 2, "sliding_window": 4, "norm": "rms"},
}


@pytest.mark.parametrize("name", LMS)
def test_the_language_models_are_proved_for_every_batch_and_every_length_up_to_max_len(name):
    config = dict(vocab=50, d_model=32, n_heads=4, n_layers=1, max_len=MAX_LEN, dropout=0.0)
    model = T.build_lm(T.LMConfig(**{**config, **LMS[name]})).eval()
    report = prove(model, torch.randint(0, 50, (2, 16)), sizes={"batch": (1, 64), "seq": (1, MAX_LEN)})
    assert report.proved, str(report)
    assert any(c.call.endswith("CausalSelfAttention.attend") for c in report.calls)


@pytest.mark.parametrize("name", ["sinusoidal", "rotary-gqa-window"])
def test_the_language_models_next_token_step_is_proved_for_every_batch_and_length(name):
    """The step every search runs (``next_token_log_probs``: the last position's float32 log-probabilities), batch
    from 1 and every number of steps up to max_len: a batch-1 shape bug there (a ``squeeze()`` of the last position)
    fails the proof although no call at the usual batch sizes shows it."""
    config = dict(vocab=50, d_model=32, n_heads=4, n_layers=1, max_len=MAX_LEN, dropout=0.0)
    model = T.build_lm(T.LMConfig(**{**config, **LMS[name]})).eval()
    tokens = torch.randint(0, 50, (2, 16))
    report = prove(model.next_token_log_probs, tokens, sizes={"batch": (1, 64), "steps": (1, MAX_LEN)})
    assert report.proved, str(report)
    assert any(c.call.endswith("Generator.decision_log_probs") for c in report.calls)


def test_the_encoder_decoder_and_multi_head_attention_are_proved(tiny_model):
    batch, src_len, tgt_len = 2, 10, 9
    inputs = (
        torch.randint(1, 11, (batch, src_len)),
        torch.randint(1, 11, (batch, tgt_len)),
        torch.ones(batch, 1, src_len, dtype=torch.bool),
        T.subsequent_mask(tgt_len).expand(batch, tgt_len, tgt_len).contiguous(),
    )
    sizes = {"batch": (1, 64), "src_len": (1, 64), "tgt_len": (1, 64)}
    report = prove(tiny_model, *inputs, sizes=sizes)
    assert report.proved, str(report)
    assert any("DecoderLayer.forward" in c.call for c in report.calls)
    attention = T.MultiHeadedAttention(4, 16, 0.0).eval()
    q, kv = torch.randn(2, 3, 16), torch.randn(2, 7, 16)  # queries shorter than keys
    mask = torch.ones(2, 3, 7, dtype=torch.bool)
    sizes = {"batch": (1, 64), "q_len": (1, 64), "k_len": (1, 64)}
    unnamed = prove(attention, q, kv, kv, mask, sizes=sizes)  # the mask's annotation is "...": its axes stay fixed
    assert unnamed.counterexamples[0].relation == "batch == 2"
    assert prove(attention, q, kv, kv, mask, sizes=sizes, axes={"mask": ("batch", "q_len", "k_len")}).proved


FACTORY = """
import torch
from torch import nn
from transformer import Float, Int, Tensor, checked

class Pooled(nn.Module):
    @checked
    def forward(self, x: Float[Tensor, "batch seq 8"]) -> Float[Tensor, "batch 8"]:
        return x.mean(1, keepdim=True).squeeze({axis})

def model():
    return {{"target": Pooled(), "args": (torch.randn(4, 5, 8),), "sizes": {{"batch": (1, 64), "seq": (1, 64)}}}}
"""


@pytest.mark.parametrize("axis, status", [("", 1), ("1", 0)])
def test_the_prove_command_prints_the_report_and_exits_0_proved_1_counterexample(
    axis, status, tmp_path, monkeypatch, capsys
):
    (tmp_path / f"factory_{status}.py").write_text(textwrap.dedent(FACTORY.format(axis=axis)))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["prove", f"factory_{status}:model", "--sizes", "batch=1..16,seq=1..32"]) == status
    out = capsys.readouterr().out
    assert out.startswith("prove Pooled.forward over batch=1..16, seq=1..32: ")
    assert ("broken by batch=1, seq=5" in out) == (status == 1)


def test_the_prove_command_refuses_bad_input_with_status_2(tmp_path, monkeypatch, capsys):
    (tmp_path / "factory_bad.py").write_text(textwrap.dedent(FACTORY.format(axis="1")))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["prove", "factory_bad:model", "--sizes", "batch=1..x"]) == 2
    assert "--sizes: 'batch=1..x' is not NAME=LOW..HIGH" in capsys.readouterr().err
    assert main(["prove", "no_such_module_here:model"]) == 2
    assert main(["prove", "factory_bad:model", "--sizes", "width=1..8"]) == 2
    assert "no axis of the example inputs carries 'width'" in capsys.readouterr().err


BRANCHING_FACTORY = """
import torch
from torch import nn
from transformer import Float, Tensor, checked

class Halves(nn.Module):
    @checked
    def forward(self, x: Float[Tensor, "batch seq 8"]) -> Float[Tensor, "batch seq 8"]:
        if x.shape[1] > 4:  # two paths, both right
            return x * 2
        return x + x

def model():
    return {"target": Halves(), "args": (torch.randn(2, 6, 8),), "sizes": {"batch": (1, 8), "seq": (1, 16)}}
"""


def test_the_prove_command_proves_by_cases(tmp_path, monkeypatch, capsys):
    (tmp_path / "factory_cases.py").write_text(textwrap.dedent(BRANCHING_FACTORY))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["prove", "factory_cases:model"]) == 1
    assert "the model's code holds only when seq > 4" in capsys.readouterr().out
    assert main(["prove", "factory_cases:model", "--cases", "split"]) == 0
    out = capsys.readouterr().out
    assert "PROVED for every size in the ranges, by 2 cases covering the ranges" in out
    assert "case prove Halves.forward over batch=1..8, seq=1..4 assuming seq <= 4: PROVED" in out
    assert main(["prove", "factory_cases:model", "--cases", "seq <= 4", "--cases", "seq >= 5"]) == 0
    assert main(["prove", "factory_cases:model", "--cases", "seq <= 3", "--cases", "seq >= 5"]) == 2
    assert "leave out the sizes {'seq': 4}" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["lm", "encoder-decoder"])
def test_the_prove_command_proves_a_checkpoint_for_every_batch_and_length_up_to_max_len(kind, tmp_path, capsys):
    if kind == "lm":
        config = T.LMConfig(vocab=40, d_model=16, n_heads=2, n_layers=1, max_len=24, dropout=0.0)
        model, header = T.build_lm(config), "prove TransformerLM.forward over batch=1..64, seq=1..24: PROVED"
    else:
        model = T.make_model(11, 13, N=1, d_model=16, d_ff=32, h=2, dropout=0.0, max_len=20)
        header = "prove EncoderDecoder.forward over batch=1..64, src_len=1..20, tgt_len=1..20: PROVED"
    T.save_checkpoint(tmp_path / "ckpt", model)
    assert main(["prove", str(tmp_path / "ckpt")]) == 0
    assert capsys.readouterr().out.startswith(header)


class Branches(nn.Module):
    """A Python branch on a size: short sequences take a path that keeps one position too few."""

    @checked
    def forward(self, x: Float[Tensor, "batch seq 8"]) -> Float[Tensor, "batch seq 8"]:
        if x.shape[1] > 4:
            return x * 2
        return torch.cat([x[:, 1:], x[:, :1]], dim=1)[:, : x.shape[1] - 1]  # the bug, on the short path only


def test_a_python_branch_on_a_size_is_a_failure_of_the_proof_with_the_source_line():
    report = prove(Branches(), torch.randn(2, 6, 8), sizes={"batch": (1, 8), "seq": (1, 32)})
    (found,) = report.counterexamples
    assert (found.by, found.relation, found.sizes) == ("the model's code", "seq > 4", {"batch": 2, "seq": 1})
    assert found.source == "if x.shape[1] > 4:"
    assert found.eager.startswith("TypeCheckError: Branches.forward: the return value is f32[2,0,8], expected")


class Selects(nn.Module):
    @checked
    def forward(self, x: Float[Tensor, "batch seq"]) -> Float[Tensor, " kept"]:
        return x[x > 0]  # a data-dependent size


def test_a_data_dependent_size_is_said_in_the_report():
    report = prove(Selects(), torch.randn(2, 6), sizes={"batch": (1, 8), "seq": (1, 32)})
    assert report.proved  # `kept` is whatever x > 0 selects: the contract holds for every size it can have
    assert "not covered: data-dependent sizes (u0): a contract's name bound to one holds for any value" in str(report)


def test_the_counterexample_search_reads_torch_s_integer_functions_and_respects_assumptions():
    from torch.utils._sympy.functions import FloorDiv, Mod

    from transformer.proofs.sizes import Assumption, counterexample

    s0, s1 = sympy.Symbol("s0", integer=True, positive=True), sympy.Symbol("s1", integer=True, positive=True)
    names, ranges = {"s0": "k_len", "s1": "block"}, {"k_len": (1, 100), "block": (1, 8)}
    examples = {"k_len": 64, "block": 8}
    divisible = sympy.Eq(Mod(s0, s1), 0)  # a key length a multiple of the block
    assert counterexample(divisible, names, ranges, examples, []) == {"k_len": 1, "block": 2}
    assumed = [Assumption("block == 1")]
    assert counterexample(divisible, names, {"k_len": (1, 100), "block": (1, 1)}, examples, assumed) is None
    halves = sympy.Eq(2 * FloorDiv(s0, 2), s0)  # an even key length
    assert counterexample(halves, names, ranges, examples, [Assumption("k_len % 2 == 0")]) is None
    assert counterexample(halves, names, ranges, examples, []) == {"k_len": 1, "block": 8}


class CachedStep(nn.Module):
    """A prompt into an empty key/value cache, then one token: a query shorter than the keys."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    @checked
    def forward(
        self, prompt: Int[Tensor, "batch seq"], token: Int[Tensor, "batch 1"]
    ) -> Float[Tensor, "batch 1 d_model"]:
        cache = self.lm.new_cache()
        self.lm(prompt, cache=cache)
        return self.lm(token, cache=cache)


def cached_lm(**fields):
    config = dict(vocab=50, d_model=32, n_heads=4, n_layers=1, max_len=32, dropout=0.0)
    return T.build_lm(T.LMConfig(**{**config, **fields})).eval()


def test_a_step_with_a_key_value_cache_is_proved_for_every_prompt_length():
    step = CachedStep(cached_lm(positional_encoding="rotary", n_kv_heads=2))
    report = prove(
        step, torch.randint(0, 50, (2, 8)), torch.randint(0, 50, (2, 1)), sizes={"batch": (1, 16), "seq": (1, 31)}
    )
    assert report.proved, str(report)
    assert [c.times for c in report.calls if c.call == "CachedStep.forward > TransformerLM.forward"] == [2]


def test_a_sliding_window_cache_specialises_on_the_prompt_length_and_the_report_says_where():
    """LMCache.trim keeps min(held, window - 1) keys (transformer/lm/positions.py, `if drop <= 0:`): a piecewise size
    torch's symbolic shape reasoning cannot keep symbolic (a sym_max form specialises on whether the minimum is 1
    instead), so over the whole range the proof reports the branch, with its line. Eagerly both paths are right
    (the re-run says so): a specialisation, not a shape bug."""
    step = CachedStep(cached_lm(positional_encoding="rotary", sliding_window=4))
    report = prove(
        step, torch.randint(0, 50, (2, 8)), torch.randint(0, 50, (2, 1)), sizes={"batch": (1, 16), "seq": (1, 31)}
    )
    (found,) = report.counterexamples
    assert (found.by, found.relation, found.source) == ("the model's code", "seq > 3", "if drop <= 0:")
    assert found.where.startswith("transformer/lm/positions.py:") and found.sizes["seq"] <= 3
    assert found.eager.startswith("no error")


WINDOW_CASES = ["seq <= 2", "seq == 3", "seq >= 4"]  # window 4: the step's held keys are min(seq + 1, 3)


def test_a_sliding_window_step_is_proved_by_cases_at_the_window_for_every_prompt_length():
    """Split where the trim branches (prompt <= window - 2: nothing dropped; == window - 1: the step's token drops
    one; >= window: the prompt drops some), each piece is proved; `cases="split"` finds the same pieces itself."""
    step = CachedStep(cached_lm(positional_encoding="rotary", sliding_window=4))
    prompt, token = torch.randint(0, 50, (2, 8)), torch.randint(0, 50, (2, 1))
    sizes = {"batch": (1, 16), "seq": (1, 31)}
    given = prove(step, prompt, token, sizes=sizes, cases=WINDOW_CASES)
    assert given.proved, str(given)
    assert [c.assumptions[-1] for c in given.cases] == WINDOW_CASES
    assert [c.ranges["seq"] for c in given.cases] == [(1, 2), (3, 3), (4, 31)]
    text = str(given)
    assert text.startswith("prove CachedStep.forward over batch=1..16, seq=1..31: PROVED for every size in the ranges")
    assert (
        "by 3 cases covering the ranges" in text
        and "  case prove CachedStep.forward over batch=1..16, seq=3..3" in text
    )
    found = prove(step, prompt, token, sizes=sizes, cases="split")
    assert found.proved and [c.ranges["seq"] for c in found.cases] == [(1, 2), (3, 3), (4, 31)]
    assert not prove(step, prompt, token, sizes=sizes, cases=["seq <= 3", "seq >= 4"]).proved  # 3 needs its own
    with pytest.raises(ValueError, match=r"the cases \['seq <= 2', 'seq >= 4'\] leave out the sizes \{'seq': 3\}"):
        prove(step, prompt, token, sizes=sizes, cases=["seq <= 2", "seq >= 4"])


def test_split_cases_do_not_split_away_a_branch_whose_other_path_breaks_a_contract():
    """`cases="split"` splits only where eager code takes the other path without error (a specialisation): a branch
    whose short path is a bug (Branches) stays the counterexample, with its eager contract error; given cases prove
    the long path and find the bug on the short one."""
    x, sizes = torch.randn(2, 6, 8), {"batch": (1, 8), "seq": (1, 32)}
    report = prove(Branches(), x, sizes=sizes, cases="split")
    assert not report.proved and [c.ranges["seq"] for c in report.cases] == [(1, 32)]
    assert report.counterexamples[0].eager.startswith("TypeCheckError: Branches.forward: the return value is")
    short, long = prove(Branches(), x, sizes=sizes, cases=["seq <= 4", "seq >= 5"]).cases
    assert long.proved
    assert short.failure.startswith("the example inputs break a contract: Branches.forward: the return value is")


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("prompt", [3, 4, 5])  # window - 1, window, window + 1
def test_a_windowed_cache_at_the_window_s_boundary_equals_recomputation_without_a_cache(prompt, padded):
    """The trimmed cache against the un-trimmed reference (the whole sequence recomputed under the window mask), for a
    prompt as long as window - 1, window and window + 1, then three one-token steps; left padding hides the first
    tokens of row 0, so the pads the trim keeps (real_keys) must line up with the keys it keeps."""
    torch.manual_seed(0)
    lm = cached_lm(positional_encoding="rotary", sliding_window=4, n_kv_heads=2)
    tokens = torch.randint(0, 50, (2, prompt + 3))
    real = torch.ones(2, prompt + 3, dtype=torch.long)
    if padded:
        real[0, : min(2, prompt - 1)] = 0
    cache = lm.new_cache()
    with torch.no_grad():
        steps = [lm(tokens[:, :prompt], real[:, :prompt] if padded else None, cache=cache)[:, -1]]
        steps += [lm(tokens[:, t : t + 1], cache=cache)[:, -1] for t in range(prompt, prompt + 3)]
        for i, got in enumerate(steps):
            end = prompt + i
            reference = lm(tokens[:, :end], real[:, :end] if padded else None)[:, -1]
            torch.testing.assert_close(got, reference, rtol=1e-5, atol=1e-5)
    assert cache.held == 3 and cache.length == prompt + 3
