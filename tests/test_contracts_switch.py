"""The contracts switch: checks on by default, ``set_checks``, the ``checks(...)`` block, the environment variable,
``fn.unchecked``, and each thread and asyncio task with its own setting."""

import asyncio
import os
import subprocess
import sys
import threading

import pytest
import torch

import transformer as T
from transformer import TypeCheckError
from transformer.contracts import Float, Tensor, checked

BAD_X = torch.randn(2, 5, 8)  # wrong d_model for a 16-wide layer norm
BROADCASTS = torch.randn(2, 5, 1)  # breaks '*batch {self.features}' of a 16-wide layer norm, yet torch broadcasts it


def test_checks_on_by_default():
    assert T.checks_enabled()
    with pytest.raises(TypeCheckError):
        T.LayerNorm(16)(BAD_X)


def test_set_checks_turns_every_contract_off():
    model = T.make_model(11, 11, N=1, d_model=16, d_ff=32, h=4)
    src = torch.randint(1, 11, (2, 4))
    mask = T.padding_mask(src, 0)
    T.set_checks(False)
    assert not T.checks_enabled()
    # a mask shaped (batch, src_len, 1) breaks the contract '#batch #src_len src_len' but broadcasts in torch:
    # unchecked, it runs (and is no longer our business)
    model.encode(src, mask.transpose(1, 2))
    T.set_checks(True)
    with pytest.raises(TypeCheckError, match="argument 'src_mask' is bool\\[2,4,1\\]"):
        model.encode(src, mask.transpose(1, 2))


def test_checks_context_manager_restores_previous_state():
    norm = T.LayerNorm(16)
    with T.checks(False):
        with pytest.raises(RuntimeError):  # torch's own error, not a contract
            norm(BAD_X)
        with T.checks(True):
            with pytest.raises(TypeCheckError):
                norm(BAD_X)
        assert not T.checks_enabled()
    assert T.checks_enabled()
    with pytest.raises(ValueError), T.checks(False):
        raise ValueError("boom")
    assert T.checks_enabled()


def test_unchecked_call_skips_the_checker_entirely():
    calls = []

    @checked
    def f(x: Float[Tensor, "n"]) -> Float[Tensor, "n"]:  # noqa: F821 (a jaxtyping dimension)
        calls.append(1)
        return x

    with T.checks(False):
        assert f("not a tensor") == "not a tensor"
    assert calls == [1]
    with pytest.raises(TypeCheckError, match="f: argument 'x' is"):
        f("not a tensor")


def test_return_value_is_checked():
    @checked
    def shrink(x: Float[Tensor, "b n"]) -> Float[Tensor, "b n"]:
        return x[:, :1]

    with pytest.raises(TypeCheckError, match=r"shrink: the return value is f32\[2,1\].*with b=2, n=3"):
        shrink(torch.randn(2, 3))


@pytest.mark.parametrize("value, expected", [("0", False), ("off", False), ("1", True), ("", True)])
def test_environment_variable(value, expected):
    env = {**os.environ, "TYPED_TRANSFORMER_CHECKS": value}
    code = "import transformer; print(transformer.checks_enabled())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(expected)


# --------------------------------------------------------------------------------------------------------------------
# The switch: a process-wide default (set_checks, the environment variable) under a per-context override
# (checks(...), a contextvars.ContextVar), so each thread and each asyncio task runs with its own setting.


def _outcome(norm):
    """'checked' when the contract refused BROADCASTS, 'ran' when it went through unchecked (torch broadcasts it)."""
    try:
        norm(BROADCASTS)
    except TypeCheckError:
        return "checked"
    return "ran"


def test_each_thread_sees_its_own_checks_setting():
    norm = T.LayerNorm(16)
    inside, leave = threading.Barrier(3), threading.Barrier(3)
    seen = {}

    def worker(name, enabled):
        with T.checks(enabled):
            inside.wait()  # every block has been entered: one shared setting would now be the last one set
            seen[name] = (T.checks_enabled(), _outcome(norm))
            leave.wait()
        seen[name + ", after its block"] = T.checks_enabled()

    threads = [threading.Thread(target=worker, args=args) for args in (("off", False), ("on", True))]
    for thread in threads:
        thread.start()
    inside.wait()
    seen["main, no block"] = (T.checks_enabled(), _outcome(norm))
    leave.wait()
    for thread in threads:
        thread.join()
    assert seen == {
        "off": (False, "ran"),
        "on": (True, "checked"),
        "main, no block": (True, "checked"),
        "off, after its block": True,
        "on, after its block": True,
    }


def test_each_asyncio_task_sees_its_own_checks_setting():
    norm = T.LayerNorm(16)
    seen = {}

    async def task(name, enabled, entered, other_entered):
        with T.checks(enabled):
            entered.set()
            await other_entered.wait()  # the other task is inside its own block now, in the same thread
            seen[name] = (T.checks_enabled(), _outcome(norm))
            await asyncio.sleep(0)
            seen[name + ", after a switch of task"] = T.checks_enabled()

    async def report():
        return T.checks_enabled()

    async def main():
        a, b = asyncio.Event(), asyncio.Event()
        await asyncio.gather(task("off", False, a, b), task("on", True, b, a))
        seen["main"] = T.checks_enabled()
        with T.checks(False):
            child = asyncio.create_task(report())  # a task copies the context it is created in
        seen["child created in a checks(False) block"] = await child

    asyncio.run(main())
    assert seen == {
        "off": (False, "ran"),
        "on": (True, "checked"),
        "off, after a switch of task": False,
        "on, after a switch of task": True,
        "main": True,
        "child created in a checks(False) block": False,
    }


def test_set_checks_sets_the_default_and_a_checks_block_overrides_it():
    try:
        T.set_checks(False)
        seen = []
        thread = threading.Thread(target=lambda: seen.append(T.checks_enabled()))
        thread.start()
        thread.join()
        assert seen == [False]  # a thread with no block of its own follows the process-wide default
        with T.checks(True):
            T.set_checks(False)
            assert T.checks_enabled()  # the block's setting wins over the default
            with T.checks(False):
                assert not T.checks_enabled()
            assert T.checks_enabled()  # the inner block restored the outer one's setting (its token)
        assert not T.checks_enabled()  # outside every block: the default
    finally:
        T.set_checks(True)
