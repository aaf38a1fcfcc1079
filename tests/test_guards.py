"""What the checks switch covers (docs/contracts.md, "What the switch covers").

``checks(False)`` turns off the shape contracts (jaxtyping + beartype) and nothing else. The guards that stand
between bad input and an index error, a CUDA device-side assert or a silently meaningless result run whether
checks are on or off: token ids inside the vocabulary, sequence length within ``max_len``, non-empty sequences,
and the decoding arguments. Each test below runs both sides of the switch.
"""

import warnings

import pytest
import torch

import transformer as T
from transformer import TypeCheckError

SWITCH = pytest.mark.parametrize("checks_on", [True, False], ids=["checks-on", "checks-off"])


@pytest.fixture
def model():
    return T.make_model(11, 13, N=1, d_model=16, d_ff=32, h=4, dropout=0.0, max_len=12).eval()


def _src(length, batch=2):
    return torch.randint(1, 11, (batch, length), generator=torch.Generator().manual_seed(length))


@SWITCH
def test_shape_contracts_follow_the_switch(model, checks_on):
    src, tgt = _src(5), torch.randint(1, 13, (2, 4))
    wrong = T.target_mask(tgt, 0)[
        :, :, :1
    ]  # (batch, tgt_len, 1): broadcasts in torch, breaks '#batch #tgt_len tgt_len'
    with T.checks(checks_on):
        if checks_on:
            with pytest.raises(TypeCheckError, match=r"argument 'tgt_mask' is bool\[2,4,1\]"):
                model(src, tgt, T.padding_mask(src, 0), wrong)
        else:
            out = model(src, tgt, T.padding_mask(src, 0), wrong)
            assert out.shape == (2, 4, 16)  # unchecked: torch broadcast it, as documented


@SWITCH
@pytest.mark.parametrize("bad_id", [11, -1])
def test_token_ids_outside_the_vocabulary_are_refused_either_way(model, checks_on, bad_id):
    src = _src(5)
    src[1, 3] = bad_id
    with (
        T.checks(checks_on),
        pytest.raises(ValueError, match=rf"token id {bad_id} at position \(1, 3\) is outside the vocabulary \[0, 11\)"),
    ):
        model.encode(src, None)
    tgt = torch.randint(1, 13, (2, 4))
    tgt[0, 2] = 13
    with (
        T.checks(checks_on),
        pytest.raises(ValueError, match=r"token id 13 at position \(0, 2\) is outside the vocabulary \[0, 13\)"),
    ):
        model(_src(5), tgt, None, None)


@SWITCH
def test_sequences_longer_than_max_len_are_refused_either_way(model, checks_on):
    with T.checks(checks_on):
        assert model.encode(_src(12), None).shape == (2, 12, 16)  # exactly max_len is fine
        with pytest.raises(ValueError, match="sequence length 13 exceeds max_len=12"):
            model.encode(_src(13), None)
        with pytest.raises(ValueError, match="max_len=13 exceeds the model's max_len=12"):
            T.greedy_decode(model, _src(4), None, 13, 1)


EMPTY_CALLS = {
    "encode": (lambda m, e, s: m.encode(e, None), "EncoderDecoder.encode: argument 'src'", "batch=2, src_len=0"),
    "forward-src": (lambda m, e, s: m(e, s, None, None), "EncoderDecoder.encode: argument 'src'", "batch=2, src_len=0"),
    "forward-tgt": (lambda m, e, s: m(s, e, None, None), "EncoderDecoder.decode: argument 'tgt'", "batch=2, tgt_len=0"),
    "decode-memory": (
        lambda m, e, s: m.decode(torch.zeros(2, 0, 16), None, s, None),
        "EncoderDecoder.decode: argument 'memory'",
        "batch=2, src_len=0, d_model=16",
    ),
    "greedy_decode": (
        lambda m, e, s: T.greedy_decode(m, e, None, 5, 1),
        "greedy_decode: argument 'src'",
        "batch=2, src_len=0",
    ),
    "beam_search": (
        lambda m, e, s: T.beam_search(m, e, None, 5, 1),
        "beam_search: argument 'src'",
        "batch=2, src_len=0",
    ),
}


@SWITCH
@pytest.mark.parametrize("call", list(EMPTY_CALLS))
def test_an_empty_sequence_is_refused_naming_the_argument(model, checks_on, call):
    fn, who, shape = EMPTY_CALLS[call]
    empty, some = torch.zeros(2, 0, dtype=torch.long), _src(3)
    with T.checks(checks_on), warnings.catch_warnings():
        warnings.simplefilter("error")  # no variance warning (or any other) leaks before the error
        with pytest.raises(ValueError) as info:
            fn(model, empty, some)
    assert str(info.value) == f"{who} is an empty sequence: shape ({shape}); every sequence needs at least one position"


@SWITCH
def test_decoding_arguments_are_validated_either_way(model, checks_on):
    src = _src(4)
    with T.checks(checks_on):
        with pytest.raises(ValueError, match=r"start_symbol=13 must be a token id in \[0, 13\)"):
            T.greedy_decode(model, src, None, 5, 13)
        with pytest.raises(ValueError, match="beam_size must be a positive int, got 0"):
            T.beam_search(model, src, None, 5, 1, beam_size=0)


# --------------------------------------------------------------------------------------------------------------------
# Token ids on CUDA: checked on the device, answered asynchronously, the lookup made with clamped ids (no host sync,
# no device-side assert). No GPU here: the CUDA branch runs on CPU tensors with its two device operations replaced,
# the copy to pinned memory by a copy whose arrival the test decides.


class _AsyncCopies:
    """Stands in for the copy of each check's answer to the host: it arrives when the test says so."""

    def __init__(self):
        self.arrived, self.waited = [], 0

    def __call__(self, found):
        index = len(self.arrived)
        self.arrived.append(False)

        def wait():
            self.waited += 1
            self.arrived[index] = True

        return found.clone(), lambda: self.arrived[index], wait


@pytest.fixture
def on_device(monkeypatch):
    from transformer.contracts import guards

    copies = _AsyncCopies()
    monkeypatch.setattr(guards, "_check_on_device", lambda tokens: True)
    monkeypatch.setattr(guards, "_copy_to_host", copies)
    monkeypatch.setattr(guards, "_PENDING", [])
    return copies


@SWITCH
def test_on_cuda_a_bad_token_id_is_reported_by_a_later_call_and_the_lookup_is_clamped(model, on_device, checks_on):
    embed = model.src_embed[0]
    src = _src(5)
    src[1, 3], src[0, 4] = 11, -2  # the first bad id in row-major order is -2 at (0, 4)
    with T.checks(checks_on):
        out = embed(src)  # no error yet: the answer is on its way
        torch.testing.assert_close(out, embed.lut(src.clamp(0, 10)) * 4)  # clamped, not an index error
        embed(_src(5))  # the answer has not arrived: nothing to report yet
        on_device.arrived[0] = True
        with pytest.raises(ValueError) as info:
            embed(_src(5))
    assert str(info.value) == (
        "tokens: token id -2 at position (0, 4) is outside the vocabulary [0, 11) (vocabulary size 11); found on cpu "
        "by the asynchronous check of an earlier call, which ran with the id clamped into the vocabulary (its result "
        "is not meaningful)"
    )
    assert on_device.waited == 0  # no call waited for the device


def test_raise_pending_token_errors_waits_for_every_check(model, on_device):
    from transformer.contracts import raise_pending_token_errors

    embed = model.src_embed[0]
    embed(_src(4))
    bad = _src(4)
    bad[1, 2] = 11
    embed(bad)
    embed(_src(4))
    with pytest.raises(ValueError, match=r"token id 11 at position \(1, 2\) is outside the vocabulary \[0, 11\)"):
        raise_pending_token_errors()
    assert on_device.waited == 2  # the valid call before it, then the bad one; the one after is still pending
    raise_pending_token_errors()  # the last one was valid: nothing more to say
    assert on_device.waited == 3


def test_unanswered_device_checks_are_bounded(model, on_device, monkeypatch):
    from transformer.contracts import guards

    monkeypatch.setattr(guards, "_PENDING_LIMIT", 3)
    embed = model.src_embed[0]
    for _ in range(5):
        embed(_src(4))
    assert len(guards._PENDING) <= 3 and on_device.waited == 2  # the oldest ones were waited for


def test_on_the_cpu_the_ids_are_checked_at_once_and_returned_as_they_are(model):
    from transformer.contracts import guards

    src = _src(5)
    assert guards.validate_token_ids(src, 11, "tokens") is src  # no copy, nothing pending
    assert guards._PENDING == []
