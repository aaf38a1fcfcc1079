"""Packed language-model windows (issue 29, section 3; docs/data.md, "Packing"): a window of the token stream keeps
its documents (the store's sequences, one per file) apart. Its mask carries each token's document; a label that
begins a document (which the previous document's last token would predict) becomes the ignored label and is not
counted; the held-out labels leave the same ones out; the loss of a packed window through the training criterion is
the sum of its documents' losses alone; which windows there are (the plan of batches) does not change."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from transformer.data.corpora import TextWindows
from transformer.data.lm_batch import LMBatch
from transformer.data.token_store import write_token_store
from transformer.lm import LMConfig, build_lm
from transformer.training import LabelSmoothing

PAD = 0
# documents of 5, 1, 7 and 3 tokens (ids 1.. so no id is PAD); 16 tokens: windows of block 5 start at 0, 5, 10
DOCUMENTS = [[1, 2, 3, 4, 5], [6], [7, 8, 9, 10, 11, 12, 13], [14, 15, 16]]


def _store(tmp_path):
    return write_token_store(tmp_path / "store", DOCUMENTS, vocab_size=20)


def test_a_packed_window_carries_its_documents_and_ignores_the_labels_that_begin_one(tmp_path):
    windows = TextWindows(_store(tmp_path), 5, pack=True, ignore_index=PAD)
    assert len(windows) == 3
    # window 1: tokens 6..11 (flat 5..10): document 1 is the single token 6, document 2 starts at 7
    assert windows.documents(1).tolist() == [1, 2, 2, 2, 2, 2]
    batch = windows.make_batch([0, 1])
    assert batch.tokens.tolist() == [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
    assert batch.mask.causal and batch.mask.documents.tolist() == [[0, 0, 0, 0, 0], [1, 2, 2, 2, 2]]
    # window 0's last label (6) begins document 1; window 1's first label (7) begins document 2
    assert batch.labels.tolist() == [[2, 3, 4, 5, PAD], [PAD, 8, 9, 10, 11]]
    assert batch.ntokens == 8


def test_a_window_that_starts_exactly_at_a_document_has_no_ignored_first_label(tmp_path):
    store = write_token_store(tmp_path / "store", [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10]], vocab_size=20)
    batch = TextWindows(store, 3, pack=True, ignore_index=PAD).make_batch([1])  # flat 3..6: document 1 from its start
    assert batch.mask.documents.tolist() == [[1, 1, 1]] and batch.labels.tolist() == [[5, 6, 7]]
    assert batch.ntokens == 3


def test_unpacked_windows_are_unchanged_and_the_plan_is_the_same(tmp_path):
    store = _store(tmp_path)
    packed, unpacked = TextWindows(store, 5, pack=True, ignore_index=PAD), TextWindows(store, 5)
    assert np.array_equal(packed.lengths, unpacked.lengths) and len(packed) == len(unpacked)
    batch = unpacked.make_batch([0, 1])
    assert batch.mask.documents is None and batch.labels.tolist() == [[2, 3, 4, 5, 6], [7, 8, 9, 10, 11]]
    assert batch.ntokens == 10


def test_held_out_labels_leave_out_the_first_token_of_every_document(tmp_path):
    store = _store(tmp_path)
    assert TextWindows(store, 5).labels().tolist() == list(range(2, 17))
    packed = TextWindows(store, 5, pack=True, ignore_index=PAD).labels()
    assert packed.tolist() == [2, 3, 4, 5, 8, 9, 10, 11, 12, 13, 15, 16]  # 6, 7 and 14 begin documents


def test_the_loss_of_a_packed_window_is_the_sum_of_its_documents_losses_alone(tmp_path):
    """Through the criterion train lm uses (padding id ignored): no label is predicted across a boundary."""
    torch.manual_seed(0)
    config = LMConfig(vocab=20, n_layers=1, d_model=16, d_ff=16, n_heads=2, dropout=0.0, attention_dropout=0.0,
                      positional_encoding="learned", max_len=16, pad_id=PAD)  # fmt: skip
    model, criterion = build_lm(config).double(), LabelSmoothing(20, PAD, 0.0)
    batch = TextWindows(_store(tmp_path), 15, pack=True, ignore_index=PAD).make_batch([0])  # all 16 tokens
    packed = criterion(model.generator(model(*batch.inputs())), batch.labels)
    alone = sum(
        criterion(model.generator(model(torch.tensor([doc[:-1]]))), torch.tensor([doc[1:]]))
        for doc in DOCUMENTS
        if len(doc) > 1
    )
    torch.testing.assert_close(packed, alone, rtol=1e-6, atol=1e-6)  # the criterion sums in float32
    assert batch.ntokens == sum(len(doc) - 1 for doc in DOCUMENTS)
    unpacked = TextWindows(_store(tmp_path), 15).make_batch([0])
    assert abs(criterion(model.generator(model(*unpacked.inputs())), unpacked.labels) - alone) > 1e-2


def test_bad_packing_arguments_are_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="pack=True needs an int ignore_index.*got None"):
        TextWindows(_store(tmp_path), 5, pack=True)
    tokens = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match=r"documents must be \(batch, seq \+ 1\) = \(1, 3\).*got shape \(1, 2\)"):
        LMBatch(tokens, pad=None, documents=torch.zeros(1, 2, dtype=torch.long), ignore_index=PAD)
    with pytest.raises(ValueError, match="need pad=None.*got pad=0, ignore_index=None"):
        LMBatch(tokens, pad=0, documents=torch.zeros(1, 3, dtype=torch.long))


def test_a_continued_models_packed_loss_leaves_out_the_ignored_label(tmp_path):
    """train lm --init: the summed cross-entropy of every label (a pretrained padding id is often a real token) but
    the -100 that packing puts at a document's first token."""
    from transformer.tasks.pretrained_lm import IGNORED_LABEL, fine_tune_criterion

    torch.manual_seed(0)
    config = LMConfig(vocab=20, n_layers=1, d_model=16, d_ff=16, n_heads=2, dropout=0.0, attention_dropout=0.0,
                      positional_encoding="rotary", max_len=16, pad_id=PAD)  # fmt: skip
    model, criterion = build_lm(config).double(), fine_tune_criterion()
    batch = TextWindows(_store(tmp_path), 15, pack=True, ignore_index=IGNORED_LABEL).make_batch([0])
    assert (batch.labels == IGNORED_LABEL).sum() == len(DOCUMENTS) - 1
    packed = criterion(model.generator(model(*batch.inputs()))[0], batch.labels[0])
    alone = sum(
        criterion(model.generator(model(torch.tensor([doc[:-1]])))[0], torch.tensor(doc[1:]))
        for doc in DOCUMENTS
        if len(doc) > 1
    )
    torch.testing.assert_close(packed, alone, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("held_out", ["files", "fraction"])
@pytest.mark.parametrize("pack", [True, False])
def test_prepare_lm_data_packs_the_held_out_windows_as_the_training_ones(tmp_path, held_out, pack):
    """Both held-out paths (--valid files and --valid-fraction) get the training windows' packing, so the held-out
    loss leaves out the same document-start labels training does."""
    from transformer.tasks.text_lm import prepare_lm_data

    texts = []
    for i, body in enumerate(["the cat sat on the mat. " * 6, "a dog ran far away. " * 5, "birds sing at dawn. " * 7]):
        path = tmp_path / f"doc{i}.txt"
        path.write_text(body)
        texts.append(str(path))
    kwargs = {"valid_files": texts[2:]} if held_out == "files" else {"valid_fraction": 0.3}
    data = prepare_lm_data(
        texts[:2] if held_out == "files" else texts, str(tmp_path / "data"), kind="char", block=8, pack=pack, **kwargs
    )
    assert data.train.pack is pack and data.valid.pack is pack
