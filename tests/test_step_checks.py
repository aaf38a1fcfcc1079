"""Which decoding steps run with the contracts checked: the searches' ``checks`` argument ("first", "always",
"never"; transformer.decoding.CheckedSteps), for every search of the encoder-decoder and of the language model.

A tripwire inside the model's step (a checked probe whose annotation is made wrong at chosen steps, without changing
what the model computes) shows which steps were checked: a checked step raises TypeCheckError, an unchecked one
passes it silently."""

import re

import pytest
import torch
from jaxtyping import TypeCheckError
from torch import nn

import transformer as T
from transformer.contracts import Float, Tensor, checked, checks_enabled, validate_token_ids
from transformer.decoding import STEP_CHECKS, CheckedSteps, beam_search, greedy_decode, sample_decode
from transformer.lm import build_lm
from transformer.lm.config import LMConfig
from transformer.lm.generation import beam_generate, generate

MAX_LEN = 9  # the encoder-decoder's searches: 8 steps after the start symbol; the LM's: 8 new tokens


class Probe(nn.Module):
    """An identity whose contract reads ``self.width``: set it wrong and a checked call raises."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width

    @checked
    def forward(self, x: Float[Tensor, "batch seq {self.width}"]) -> Float[Tensor, "batch seq {self.width}"]:
        return x


class Tripwire(nn.Module):
    """Runs the feed-forward network it replaces; its probe's contract is wrong at the calls in ``trip_at``."""

    def __init__(self, feed_forward: nn.Module, d_model: int, trip_at: set[int]) -> None:
        super().__init__()
        self.feed_forward, self.probe = feed_forward, Probe(d_model)
        self.d_model, self.trip_at, self.calls = d_model, trip_at, 0

    def forward(self, x: Tensor) -> Tensor:
        self.probe.width = self.d_model + (1 if self.calls in self.trip_at else 0)
        self.calls += 1
        return self.feed_forward(self.probe(x))


def _lm():
    torch.manual_seed(0)
    config = LMConfig(
        vocab=19, n_layers=2, d_model=32, d_ff=48, n_heads=2, max_len=40, dropout=0.0, attention_dropout=0.0
    )
    return build_lm(config).eval()


def _encoder_decoder():
    torch.manual_seed(0)
    return T.make_model(11, 13, N=2, d_model=32, d_ff=64, h=4, dropout=0.0, max_len=64).eval()


def _arm(model, trip_at):
    """Put a tripwire into the first decoder layer (called once per decoding step; the encoder runs before)."""
    layer = model.layers[0] if isinstance(model, T.TransformerLM) else model.decoder.layers[0]
    layer.feed_forward = Tripwire(layer.feed_forward, layer.size, set(trip_at))
    return model


_SRC = torch.tensor([[3, 4, 5, 6, 7], [8, 9, 10, 2, 0]])
_PROMPT = torch.tensor([[3, 4, 5, 6], [7, 8, 9, 10]])

DEFAULT = object()  # run a search without passing ``checks``


# Each search: (build a model, run it with ``checks=policy``, or without ``checks`` when policy is DEFAULT). No end
# symbol, or one the model never reaches: every search takes all 8 steps.
def _policy(policy):
    return {} if policy is DEFAULT else {"checks": policy}


SEARCHES = {
    "generate": (_lm, lambda m, policy: generate(m, _PROMPT, MAX_LEN - 1, **_policy(policy))),
    "generate (sample)": (
        _lm,
        lambda m, policy: generate(m, _PROMPT, MAX_LEN - 1, sample=True, seed=3, **_policy(policy)),
    ),
    "generate (no cache)": (
        _lm,
        lambda m, policy: generate(m, _PROMPT, MAX_LEN - 1, use_cache=False, **_policy(policy)),
    ),
    "generate (stop sequences)": (
        _lm,
        lambda m, policy: generate(
            m, _PROMPT, MAX_LEN - 1, end_symbol=0, stop_sequences=[[1, 2, 1]], **_policy(policy)
        ),
    ),
    "beam_generate": (
        _lm,
        lambda m, policy: beam_generate(m, _PROMPT[:1], MAX_LEN - 1, beam_size=2, **_policy(policy))[0],
    ),
    "greedy_decode": (
        _encoder_decoder,
        lambda m, policy: greedy_decode(m, _SRC, T.padding_mask(_SRC, 0), MAX_LEN, 1, **_policy(policy)),
    ),
    "sample_decode": (
        _encoder_decoder,
        lambda m, policy: sample_decode(m, _SRC, T.padding_mask(_SRC, 0), MAX_LEN, 1, seed=3, **_policy(policy)),
    ),
    "beam_search": (
        _encoder_decoder,
        lambda m, policy: (
            beam_search(m, _SRC[:1], T.padding_mask(_SRC[:1], 0), MAX_LEN, 1, beam_size=2, **_policy(policy)).tokens
        ),
    ),
}


def _run(name, policy, trip_at=()):
    build, search = SEARCHES[name]
    return search(_arm(build(), trip_at), policy)


@pytest.mark.parametrize("name", SEARCHES)
@pytest.mark.parametrize("step", [0, 1])
@pytest.mark.parametrize("policy", ["first", "always"])
def test_a_wrong_shape_in_the_first_two_steps_is_named_by_first_as_by_always(name, step, policy):
    with pytest.raises(TypeCheckError) as caught:
        _run(name, policy, trip_at={step})
    with pytest.raises(TypeCheckError) as expected:
        _run(name, "always", trip_at={step})
    assert "Probe.forward" in str(caught.value) or "width" in str(caught.value)
    assert str(caught.value) == str(expected.value)


@pytest.mark.parametrize("name", SEARCHES)
def test_always_checks_every_step_first_and_never_do_not(name):
    reference = _run(name, "always")
    for step in (2, 5, MAX_LEN - 2):
        with pytest.raises(TypeCheckError):
            _run(name, "always", trip_at={step})
        if name.startswith("beam") and step == 2:
            continue  # the beam fills up at step 2 (batch 1, then 2 hypotheses... ): "first" checks it (below)
        assert torch.equal(_run(name, "first", trip_at={step}), reference)
    assert torch.equal(_run(name, "never", trip_at={0, 1, 2, 5}), reference)


@pytest.mark.parametrize("name", SEARCHES)
def test_the_default_is_first(name):
    """Without ``checks``: step 1 checked, step 5 (same batch) not."""
    with pytest.raises(TypeCheckError):
        _run(name, DEFAULT, trip_at={1})
    assert torch.equal(_run(name, DEFAULT, trip_at={5}), _run(name, "always"))


@pytest.mark.parametrize("name", SEARCHES)
def test_no_policy_switches_checks_on(name):
    with T.checks(False):
        reference = _run(name, "always")
        assert torch.equal(_run(name, "always", trip_at={0, 1, 3}), reference)


class _Recorder:
    """A step function recording, per call, whether contracts were on."""

    def __init__(self):
        self.checked: list[bool] = []
        self.reordered: list[Tensor] = []

    def __call__(self, ys):
        self.checked.append(checks_enabled())
        return torch.zeros(ys.size(0), 5)

    def reorder(self, index):
        self.reordered.append(index)


def test_first_checks_again_every_step_whose_batch_changes():
    steps = CheckedSteps(_Recorder(), "first", "test")
    for batch in (1, 4, 4, 4, 3, 3, 3, 4, 4):
        steps(torch.zeros(batch, 2, dtype=torch.long))
    assert steps.steps.checked == [True, True, False, False, True, False, False, True, False]
    steps.reorder(torch.tensor([0, 0]))
    assert torch.equal(steps.steps.reordered[0], torch.tensor([0, 0]))
    assert checks_enabled()  # the switch comes back after each unchecked step


def test_always_and_never_on_every_step():
    for policy, expected in (("always", True), ("never", False)):
        steps = CheckedSteps(_Recorder(), policy, "test")
        for batch in (1, 4, 4, 3):
            steps(torch.zeros(batch, 2, dtype=torch.long))
        assert steps.steps.checked == [expected] * 4


@pytest.mark.parametrize("name", ["beam_search", "beam_generate"])
def test_first_checks_the_step_where_the_beam_grows(name):
    """A beam wider than the vocabulary: batch 1, then every token (up to the beam), then the full beam at step 2,
    after beam search's reorder: "first" checks that step, "never" does not."""
    wide = {
        "beam_search": lambda m, policy: (
            beam_search(m, _SRC[:1], T.padding_mask(_SRC[:1], 0), MAX_LEN, 1, beam_size=20, checks=policy).tokens
        ),
        "beam_generate": lambda m, policy: beam_generate(m, _PROMPT[:1], MAX_LEN - 1, beam_size=20, checks=policy)[0],
    }[name]
    build, _ = SEARCHES[name]
    model = _arm(build(), set())
    batches = []
    model_ff = (model.layers[0] if isinstance(model, T.TransformerLM) else model.decoder.layers[0]).feed_forward
    model_ff.register_forward_pre_hook(lambda module, args: batches.append(args[0].size(0)))
    reference = wide(model, "always")
    assert batches[0] == 1 and batches[1] != batches[2] == batches[3], batches  # the beam grows at step 2
    with pytest.raises(TypeCheckError):
        wide(_arm(build(), {2}), "first")
    assert torch.equal(wide(_arm(build(), {3}), "first"), reference)  # step 3: the same batch as step 2
    assert torch.equal(wide(_arm(build(), {2}), "never"), reference)


@pytest.mark.parametrize("model", ["lm", "encoder-decoder"])
@pytest.mark.parametrize("policy", STEP_CHECKS)
def test_the_cache_bookkeeping_guard_runs_on_unchecked_steps(model, policy):
    """A step given a prefix that does not continue the cache is refused, checked step or not."""
    if model == "lm":
        lm = _lm()
        steps, prefix, holder = CheckedSteps(lm.next_tokens(), policy, "test"), _PROMPT, "LMCache"
    else:
        ed = _encoder_decoder()
        memory = ed.encode(_SRC, T.padding_mask(_SRC, 0))
        steps = CheckedSteps(ed.next_tokens(memory, T.padding_mask(_SRC, 0)), policy, "test")
        prefix, holder = torch.ones(2, 1, dtype=torch.long), "DecoderCache"
    with torch.no_grad():
        for _ in range(3):  # the prompt, then two one-token steps: the checked ones under "first"
            token = steps(prefix).argmax(-1, keepdim=True)
            prefix = torch.cat([prefix, token], dim=1)
        with pytest.raises(
            ValueError,
            match=rf"{holder} holds {prefix.size(1) - 1} positions but ys has "
            rf"{prefix.size(1) + 1}",
        ):
            steps(torch.cat([prefix, prefix[:, -1:]], dim=1))  # a token skipped


def test_guards_run_on_unchecked_steps():
    """Guards are not contracts: a token id out of range raises at step 4 whatever the policy."""

    def step(ys):
        validate_token_ids(ys, 5, "ys")
        return torch.zeros(ys.size(0), 5)

    step.reorder = lambda index: None
    for policy in STEP_CHECKS:
        steps = CheckedSteps(step, policy, "test")
        for _ in range(4):
            steps(torch.ones(2, 3, dtype=torch.long))
        with pytest.raises(ValueError, match="token id 7"):
            steps(torch.full((2, 3), 7))


@pytest.mark.parametrize("name", SEARCHES)
@pytest.mark.parametrize("value", [None, True, 0, ["first"]])
def test_a_policy_that_is_not_a_string_is_refused_with_checks_off(name, value):
    function = name.split(" ")[0]
    with (
        T.checks(False),
        pytest.raises(
            ValueError,
            match=rf"{function}: checks must be one of .*, got "
            rf"{re.escape(repr(value))}",
        ),
    ):
        _run(name, value)


@pytest.mark.parametrize("name", SEARCHES)
@pytest.mark.parametrize("switch", [True, False])
def test_an_unknown_policy_is_refused_naming_the_argument(name, switch):
    function = name.split(" ")[0]
    with (
        T.checks(switch),
        pytest.raises(
            ValueError,
            match=rf"{function}: checks must be one of 'first', 'always', "
            r"'never', got 'sometimes'",
        ),
    ):
        _run(name, "sometimes")
