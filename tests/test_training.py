"""Batch masks, label smoothing (finite, equal to cross-entropy up to a constant), Noam rate, loss, run_epoch, Trainer."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer as T
from transformer.tasks import CopyTask, data_gen
from transformer.training import (
    Batch,
    LabelSmoothing,
    NoamSchedule,
    SimpleLossCompute,
    Trainer,
    TrainerConfig,
    TrainState,
    label_smoothing_entropy,
    rate,
    run_epoch,
)


# ---------------------------------------------------------------- Batch
def test_batch_shifts_target_and_counts_tokens():
    src = torch.tensor([[1, 5, 6, 0], [1, 7, 8, 9]])
    tgt = torch.tensor([[1, 5, 6, 0, 0], [1, 7, 8, 9, 3]])
    b = Batch(src, tgt, pad=0)
    assert torch.equal(b.tgt, tgt[:, :-1]) and torch.equal(b.tgt_y, tgt[:, 1:])
    assert b.ntokens == 2 + 4
    assert b.src_mask.shape == (2, 1, 4) and b.src_mask.dtype == torch.bool
    assert b.src_mask[0, 0].tolist() == [True, True, True, False]


def test_batch_masks_padded_query_rows_unlike_the_tutorial():
    tgt = torch.tensor([[1, 4, 5, 0, 0, 0]])
    b = Batch(tgt.clone(), tgt, pad=0)
    m = b.tgt_mask[0]
    assert m.shape == (5, 5)
    # real rows: causal over real keys
    assert m[2].tolist() == [True, True, True, False, False]
    # padded rows (positions 3, 4 of the decoder input) attend to nothing (the tutorial's rows attend)
    assert not m[3].any() and not m[4].any()
    tutorial = (tgt[:, :-1] != 0).unsqueeze(-2) & T.subsequent_mask(5)
    assert tutorial[0, 3].any()  # the bug this fixes


def test_batch_default_pad_is_the_tutorials_2_and_rejects_bad_shapes():
    src = torch.tensor([[3, 2, 2]])
    assert Batch(src).src_mask[0, 0].tolist() == [True, False, False]
    assert Batch(src).tgt is None
    with pytest.raises(ValueError, match="at least 2 tokens"):
        Batch(src, torch.tensor([[1]]))
    with pytest.raises(ValueError, match="batch=1"):
        Batch(src, torch.tensor([[1, 2], [1, 2]]))


# ---------------------------------------------------------------- LabelSmoothing
@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.4])
def test_label_smoothing_equals_cross_entropy_minus_entropy(smoothing):
    torch.manual_seed(1)
    V, pad = 7, 0
    logits = torch.randn(12, V, dtype=torch.float64)
    target = torch.randint(0, V, (12,))
    target[:3] = pad
    ours = LabelSmoothing(V, pad, smoothing)(logits.log_softmax(-1), target)
    ce = F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=pad, reduction="sum")
    ntokens = int((target != pad).sum())
    assert ours.item() == pytest.approx(ce.item() - ntokens * label_smoothing_entropy(V, smoothing), rel=1e-6, abs=1e-9)
    assert ours.item() >= -1e-9  # a KL divergence


def test_label_smoothing_annotated_style_matches_the_tutorial_on_finite_inputs():
    torch.manual_seed(2)
    V, pad, s = 6, 0, 0.3
    x = torch.randn(9, V).log_softmax(-1)
    target = torch.tensor([2, 1, 0, 3, 4, 5, 0, 2, 1])
    true_dist = torch.full_like(x, s / (V - 2))
    true_dist.scatter_(1, target.unsqueeze(1), 1 - s)
    true_dist[:, pad] = 0
    true_dist[target == pad] = 0
    reference = nn.KLDivLoss(reduction="sum")(x, true_dist)
    ours = LabelSmoothing(V, pad, s, style="annotated")(x, target)
    assert ours.item() == pytest.approx(reference.item(), rel=1e-5)


def test_label_smoothing_is_finite_where_the_tutorials_is_nan():
    V, pad = 5, 0
    x = torch.full((3, V), -math.inf)
    x[:, 2] = 0.0  # the model is certain of token 2: other log-probs are -inf
    target = torch.tensor([2, 2, 0])
    tutorial = nn.KLDivLoss(reduction="sum")(x, F.one_hot(target, V).float() * (target != pad).unsqueeze(1))
    assert torch.isnan(tutorial)  # 0 * (-inf) in the tutorial's smoothing=0 path
    for style in ("torch", "annotated"):
        loss = LabelSmoothing(V, pad, 0.0, style=style)(x, target)
        assert torch.isfinite(loss) and loss.item() == 0.0
    logits = torch.randn(4, V, requires_grad=True)
    all_pad = LabelSmoothing(V, pad, 0.1)(logits.log_softmax(-1), torch.zeros(4, dtype=torch.long))
    assert all_pad.item() == 0.0
    all_pad.backward()
    assert torch.isfinite(logits.grad).all()


def test_label_smoothing_takes_flattened_or_unflattened_rows():
    x = torch.randn(2, 3, 5).log_softmax(-1)
    y = torch.tensor([[1, 2, 0], [4, 0, 0]])
    crit = LabelSmoothing(5, 0, 0.2)
    assert crit(x, y).item() == pytest.approx(crit(x.view(-1, 5), y.view(-1)).item())


def test_label_smoothing_validates_its_arguments():
    with pytest.raises(ValueError, match="smoothing"):
        LabelSmoothing(5, 0, 1.0)
    with pytest.raises(ValueError, match="padding_idx"):
        LabelSmoothing(5, 5, 0.1)
    with pytest.raises(T.TypeCheckError):
        LabelSmoothing(5, 0, 0.1)(torch.randn(3, 6), torch.zeros(3, dtype=torch.long))


# ---------------------------------------------------------------- rate and loss
def test_rate_is_the_noam_schedule():
    assert rate(0, 512, 1.0, 4000) == rate(1, 512, 1.0, 4000)
    assert rate(4000, 512, 1.0, 4000) == pytest.approx(512**-0.5 * 4000**-0.5)
    assert rate(100, 512, 2.0, 4000) == pytest.approx(2 * 512**-0.5 * 100 * 4000**-1.5)
    assert rate(16000, 512, 1.0, 4000) == pytest.approx(512**-0.5 * 16000**-0.5)
    values = [rate(s, 512, 1.0, 400) for s in range(1, 1200)]
    assert max(values) == values[399]  # rises linearly until warmup, then decays
    opt = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, NoamSchedule(512, 1.0, 400))
    for _ in range(10):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(rate(10, 512, 1.0, 400))


def test_simple_loss_compute_normalises_and_survives_zero_tokens():
    gen = T.Generator(8, 5)
    compute = SimpleLossCompute(gen, LabelSmoothing(5, 0, 0.0))
    x = torch.randn(2, 3, 8)
    y = torch.tensor([[1, 2, 0], [3, 4, 0]])
    total, node = compute(x, y, 4)
    assert node.item() == pytest.approx(total.item() / 4)
    total0, node0 = compute(x, torch.zeros(2, 3, dtype=torch.long), 0)
    assert total0.item() == 0.0 and node0.item() == 0.0


# ---------------------------------------------------------------- run_epoch and Trainer
def _copy_model():
    return T.make_model(11, 11, N=1, d_model=32, d_ff=64, h=4, dropout=0.0)


def test_run_epoch_trains_the_copy_task_and_counts_steps():
    torch.manual_seed(0)
    model = _copy_model()
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, NoamSchedule(32, 1.0, 50))
    compute = SimpleLossCompute(model.generator, LabelSmoothing(11, 0, 0.0))
    g = torch.Generator().manual_seed(0)
    model.eval()
    before, _ = run_epoch(data_gen(11, 32, 3, g), model, compute, mode="eval")
    model.train()
    state = TrainState()
    for _ in range(4):
        _, state = run_epoch(data_gen(11, 32, 30, g), model, compute, opt, sched, mode="train", accum_iter=2, train_state=state, clip_grad=1.0)
    assert state.step == 120 and state.accum_step == 60 and state.samples == 120 * 32
    assert sched.last_epoch == 60
    model.eval()
    after, _ = run_epoch(data_gen(11, 32, 3, g), model, compute, mode="eval")
    assert before > 2.0 and after < 0.5 * before


def test_run_epoch_eval_mode_does_not_touch_the_weights():
    model = _copy_model().eval()
    weights = [p.detach().clone() for p in model.parameters()]
    compute = SimpleLossCompute(model.generator, LabelSmoothing(11, 0, 0.1))
    loss, state = run_epoch(data_gen(11, 8, 2), model, compute, mode="eval")
    assert math.isfinite(loss) and state.step == 0
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters()))
    with pytest.raises(ValueError, match="optimizer"):
        run_epoch(data_gen(11, 8, 1), model, compute, mode="train")


def test_trainer_accumulates_gradients_and_evaluates_periodically():
    torch.manual_seed(0)
    task = CopyTask()
    model = _copy_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the weights must not move
    calls = []
    trainer = Trainer(model, opt, lambda g: task.batches(g, 4), criterion=LabelSmoothing(11, 0, 0.0),
                      eval_batches=lambda: task.eval_batches(1, 4), config=TrainerConfig(steps=6, accum_iter=3, eval_every=2))
    batches_seen = []
    original = trainer.make_batches

    def counting(g):
        for b in original(g):
            batches_seen.append(b)
            yield b

    trainer.make_batches = counting
    trainer.train(on_eval=lambda step, loss: calls.append(step))
    assert trainer.step == 6 and len(batches_seen) == 18
    assert calls == [2, 4, 6] and len(trainer.history.eval_loss) == 3
    with pytest.raises(ValueError, match="accum_iter"):
        TrainerConfig(accum_iter=0)
