"""The copy task (the tutorial's check: 1..10 decodes to 1..10) and the dates task, trained briefly."""

import datetime

import pytest
import torch

from transformer.tasks import CopyTask, DatesTask, UnknownTokenError, get_task, make_trainer, task_from_metadata


@pytest.fixture(scope="module")
def trained_copy():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    task = CopyTask()
    trainer = make_trainer(task, steps=300, seed=0, eval_every=100)
    before = trainer.evaluate()
    trainer.train()
    torch.set_num_threads(previous)
    return task, trainer, before


def test_copy_data_is_the_tutorials():
    task = CopyTask()
    src, tgt = task.sample(torch.Generator().manual_seed(0), 16)
    assert src.shape == (16, 10) and torch.equal(src, tgt)
    assert (src[:, 0] == 1).all() and src.min() >= 1 and src.max() <= 10


def test_short_copy_training_lowers_the_loss_and_decodes_exactly(trained_copy):
    task, trainer, before = trained_copy
    losses = [loss for _, loss in trainer.history.eval_loss]
    assert before > 2.0
    assert losses[-1] < 0.3 < before and losses[-1] < losses[0]
    assert task.translate(trainer.model, ["1 2 3 4 5 6 7 8 9 10"]) == ["1 2 3 4 5 6 7 8 9 10"]
    assert task.exact_match(trainer.model, 200) >= 0.9


def test_copy_text_encoding_and_unknown_tokens():
    task = CopyTask()
    assert task.encode_source("2 3 4") == [1, 2, 3, 4]  # the start symbol is prepended
    with pytest.raises(UnknownTokenError, match="unknown token '11' at position 2"):
        task.encode_source("1 2 11")
    with pytest.raises(UnknownTokenError, match="empty input"):
        task.encode_source("   ")


def test_dates_examples_and_held_out_split():
    task = DatesTask()
    date = datetime.date(1987, 3, 21)
    assert task.words(date, 0) == ["twenty-first", "of", "march", "1", "9", "8", "7"]
    assert task.words(date, 1)[:3] == ["march", "twenty-first", ","]
    assert "".join(task.iso(date)) == "1987-03-21"
    g = torch.Generator().manual_seed(0)
    src, tgt = task.sample(g, 300)
    held_src, held_tgt = task.sample(g, 300, held_out=True)

    def ordinal(row):
        return datetime.date.fromisoformat(task.decode_target(row.tolist())).toordinal()

    assert not any(task.is_held_out(ordinal(r)) for r in tgt)
    assert all(task.is_held_out(ordinal(r)) for r in held_tgt)
    assert task.tokenize("March 21st, 1987")[-4:] == ["1", "9", "8", "7"]
    assert task.encode_source("fifth of june 1912")[:3] == [task.src_vocab.index[w] for w in ("fifth", "of", "june")]
    with pytest.raises(UnknownTokenError, match="'fifthh'"):
        task.encode_source("fifthh of june 1912")


def test_dates_task_learns_to_rewrite_held_out_dates():
    task = DatesTask()
    trainer = make_trainer(task, steps=350, seed=0, eval_every=0)
    trainer.train()
    accuracy = task.exact_match(trainer.model, 200)
    assert accuracy >= 0.9, accuracy
    assert task.translate(trainer.model, ["fifth of june 1912"]) == ["1912-06-05"]


def test_task_registry_round_trips_metadata():
    for name in ("copy", "dates"):
        task = get_task(name)
        assert type(task_from_metadata(task.to_metadata())) is type(task)
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        get_task("nope")
