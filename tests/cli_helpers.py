"""What the command-line flag tests (tests/test_cli_flags*.py) share: a small Python corpus for ``train lm``, and the
torch thread count restored after each test (``main`` sets it from ``--threads``)."""

import pytest
import torch

LINES = [
    "def add(a, b):",
    "    return a + b",
    "class Box:",
    "    def __init__(self, value):",
    "        self.value = value",
    "for i in range(3):",
    "    print(add(i, i))",
]


@pytest.fixture(autouse=True)  # autouse in the test modules that import it
def restore_threads():
    previous = torch.get_num_threads()
    yield
    torch.set_num_threads(previous)


def write_corpus(tmp_path) -> str:
    """A text file of 420 lines of Python: enough for a tokenizer, a model and a held-out share."""
    path = tmp_path / "code.py"
    path.write_text("\n".join(LINES * 60) + "\n")
    return str(path)
