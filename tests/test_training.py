"""Batch masks, label smoothing (finite, equal to cross-entropy up to a constant), Noam rate, loss, run_epoch,
Trainer."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer as T
from transformer.tasks import CopyTask, data_gen
from transformer.training import (
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
from transformer.training.batch import Batch


# ---------------------------------------------------------------- Batch
def test_batch_shifts_target_and_counts_tokens():
    src = torch.tensor([[1, 5, 6, 0], [1, 7, 8, 9]])
    tgt = torch.tensor([[1, 5, 6, 0, 0], [1, 7, 8, 9, 3]])
    b = Batch(src, tgt, pad=0)
    assert torch.equal(b.tgt, tgt[:, :-1]) and torch.equal(b.tgt_y, tgt[:, 1:])
    assert b.ntokens == 2 + 4
    assert isinstance(b.src_mask, T.AttentionMask) and b.src_mask.key_lengths.tolist() == [3, 4]  # padding at the end
    assert b.src_mask.to_dense(1, 4)[:, 0].tolist() == [[True, True, True, False], [True] * 4]


def test_batch_masks_padded_query_rows_unlike_the_tutorial():
    tgt = torch.tensor([[1, 4, 5, 0, 0, 0]])
    b = Batch(tgt.clone(), tgt, pad=0)
    assert b.tgt_mask.causal and b.tgt_mask.query_lengths.tolist() == [3]  # structured: the kernel skips work
    m = b.tgt_mask.to_dense(5, 5)[0]
    assert m.shape == (5, 5) and torch.equal(m, Batch.make_std_mask(tgt[:, :-1], 0)[0])
    # real rows: causal over real keys
    assert m[2].tolist() == [True, True, True, False, False]
    # padded rows (positions 3, 4 of the decoder input) attend to nothing (the tutorial's rows attend)
    assert not m[3].any() and not m[4].any()
    tutorial = (tgt[:, :-1] != 0).unsqueeze(-2) & T.subsequent_mask(5)
    assert tutorial[0, 3].any()  # the bug this fixes


def test_batch_default_pad_is_the_tutorials_2_and_rejects_bad_shapes():
    src = torch.tensor([[3, 2, 2]])
    assert Batch(src).src_mask.to_dense(1, 3)[0, 0].tolist() == [True, False, False]
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
    """(loss_sum, loss_node) = (NLL summed over non-padding labels, that sum / norm), the NLL written out here;
    the node carries the gradient of the normalised loss. norm 0 (all padding) gives 0, not NaN."""
    gen = T.Generator(8, 5)
    compute = SimpleLossCompute(gen, LabelSmoothing(5, 0, 0.0))
    x = torch.randn(2, 3, 8)
    y = torch.tensor([[1, 2, 0], [3, 4, 0]])
    log_p = torch.log_softmax(x @ gen.proj.weight.T + gen.proj.bias, -1)
    nll = -log_p.gather(-1, y.unsqueeze(-1)).squeeze(-1)[y != 0].sum()
    total, node = compute(x, y, 4)
    assert total.item() == pytest.approx(nll.item(), rel=1e-6)
    assert node.item() == pytest.approx(nll.item() / 4, rel=1e-6)
    assert not total.requires_grad and node.requires_grad
    (grad,) = torch.autograd.grad(node, gen.proj.bias)
    (expected,) = torch.autograd.grad(nll / 4, gen.proj.bias)
    torch.testing.assert_close(grad, expected)
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
        _, state = run_epoch(
            data_gen(11, 32, 30, g),
            model,
            compute,
            opt,
            sched,
            mode="train",
            accum_iter=2,
            train_state=state,
            clip_grad=1.0,
        )
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
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))
    with pytest.raises(ValueError, match="optimizer"):
        run_epoch(data_gen(11, 8, 1), model, compute, mode="train")


def test_trainer_accumulates_gradients_and_evaluates_periodically():
    torch.manual_seed(0)
    task = CopyTask()
    model = _copy_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: the weights must not move
    calls = []
    trainer = Trainer(
        model,
        opt,
        lambda g: task.batches(g, 4),
        criterion=LabelSmoothing(11, 0, 0.0),
        eval_batches=lambda: task.eval_batches(1, 4),
        config=TrainerConfig(steps=6, accum_iter=3, eval_every=2),
    )
    batches_seen = []
    original = trainer.make_batches

    def counting(g):
        for b in original(g):
            batches_seen.append(b)
            yield b

    trainer.make_batches = counting
    weights = [p.detach().clone() for p in model.parameters()]
    trainer.train(on_eval=lambda step, loss: calls.append(step))
    assert trainer.step == 6 and len(batches_seen) == 18
    assert all(
        torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True)
    )  # lr 0: not one weight moved
    assert all(p.grad is None for p in model.parameters())  # ... though gradients were computed and cleared
    assert calls == [2, 4, 6] and len(trainer.history.eval_loss) == 3
    with pytest.raises(ValueError, match="accum_iter"):
        TrainerConfig(accum_iter=0)


# ---------------------------------------------------------------- accumulation and clipping, against SGD by hand
#
# The parameters after run_epoch / Trainer are compared with an explicit computation: each batch's gradient of
# (NLL summed over non-padding labels) / ntokens, taken with torch.autograd.grad on a copy of the model, summed
# over a group of batches, clipped by hand, and applied as p - lr * g. Batches have different token counts, so
# a loss normalised by anything but ntokens gives other gradients. Models are float64 so that the differences
# looked for (>= 1e-4) are far above rounding (LabelSmoothing computes in float32: ~1e-8).

V = 11


def _float64_model(seed=0):
    torch.manual_seed(seed)
    return T.make_model(V, V, N=1, d_model=16, d_ff=32, h=2, dropout=0.0).double()


def _padded_batches(n, seed=1, batch_size=3):
    """n copy-task-like batches (pad 0) whose rows end in padding of random length: ntokens differs per batch."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n):
        src = torch.randint(1, V, (batch_size, 7), generator=g)
        tgt = torch.randint(1, V, (batch_size, 7), generator=g)
        tgt[:, 0] = 1
        for row in range(batch_size):
            cut = int(torch.randint(3, 8, (1,), generator=g))
            src[row, cut:] = 0
            tgt[row, cut:] = 0
        batches.append(Batch(src, tgt, pad=0))
    assert len({b.ntokens for b in batches}) > 1 or n == 1
    return batches


def _batch_gradient(model, batch):
    """d/dparams of sum_{labels != pad} -log p(label) / ntokens, written out (no SimpleLossCompute, no
    LabelSmoothing)."""
    log_p = model.generator(model(batch.src, batch.tgt, batch.src_mask, batch.tgt_mask))
    labels = batch.tgt_y
    nll = -log_p.gather(-1, labels.unsqueeze(-1)).squeeze(-1)[labels != 0].sum()
    return torch.autograd.grad(nll / batch.ntokens, list(model.parameters()))


def _group_gradient(model, batches):
    return [sum(gs) for gs in zip(*(_batch_gradient(model, b) for b in batches), strict=True)]


def _global_norm(grads):
    return math.sqrt(sum(float(g.pow(2).sum()) for g in grads))


def _sgd_by_hand(model, grads, lr, clip=None):
    """p <- p - lr * g, with g scaled by min(1, clip / ||g||) (global norm over every parameter) when clip is given."""
    scale = 1.0 if clip is None else min(1.0, clip / _global_norm(grads))
    with torch.no_grad():
        for p, g in zip(model.parameters(), grads, strict=True):
            p -= lr * scale * g


def _assert_same_weights(model, reference):
    for (name, a), b in zip(model.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")


def _compute(model):
    return SimpleLossCompute(model.generator, LabelSmoothing(V, 0, 0.0))


def test_run_epoch_accumulates_full_groups_and_discards_a_trailing_partial_group():
    """7 batches, accum_iter 3: optimizer steps after batches 3 and 6, each with the *sum* of its group's
    gradients and the learning rate the schedule gives at that step (the scheduler steps once per optimizer
    step, after it). The 7th batch is a trailing partial group: documented in run_epoch as discarded (as in
    the tutorial), so it moves nothing, and its gradient is cleared, not carried into the next epoch."""
    model = _float64_model()
    reference = copy.deepcopy(model)
    batches = _padded_batches(7)
    lr = 0.5
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (step + 1))  # lr, then lr / 2, ...
    _, state = run_epoch(iter(batches), model, _compute(model), opt, sched, mode="train", accum_iter=3)
    assert (state.step, state.accum_step, state.samples) == (7, 2, 21)
    assert state.tokens == sum(b.ntokens for b in batches)
    assert sched.last_epoch == 2
    _sgd_by_hand(reference, _group_gradient(reference, batches[0:3]), lr)
    _sgd_by_hand(reference, _group_gradient(reference, batches[3:6]), lr / 2)
    _assert_same_weights(model, reference)
    # the discarded batch would have moved the weights visibly, and its gradient is gone
    assert max(float(g.abs().max()) for g in _batch_gradient(reference, batches[6])) * lr / 3 > 1e-4
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())
    # the next epoch starts from clean gradients: one step on its own 3 batches only
    more = _padded_batches(3, seed=2)
    run_epoch(iter(more), model, _compute(model), opt, sched, mode="train", accum_iter=3)
    _sgd_by_hand(reference, _group_gradient(reference, more), lr / 3)
    _assert_same_weights(model, reference)


def test_run_epoch_with_accum_iter_one_steps_on_every_batch():
    model = _float64_model(1)
    reference = copy.deepcopy(model)
    batches = _padded_batches(3, seed=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.3)
    _, state = run_epoch(iter(batches), model, _compute(model), opt, mode="train", accum_iter=1)
    assert (state.step, state.accum_step) == (3, 3)
    for b in batches:
        _sgd_by_hand(reference, _batch_gradient(reference, b), 0.3)
    _assert_same_weights(model, reference)


@pytest.mark.parametrize("clip_factor", [0.05, 0.5, 20.0], ids=["clipped-hard", "clipped", "not-clipped"])
def test_run_epoch_clips_the_global_gradient_norm(clip_factor):
    """clip_grad bounds the norm of the accumulated gradient taken over *all* parameters together: the
    update is g * clip / ||g|| when ||g|| > clip (its global norm is then clip), and g itself otherwise."""
    model = _float64_model(2)
    reference = copy.deepcopy(model)
    batches = _padded_batches(2, seed=4)
    grads = _group_gradient(reference, batches)
    norm = _global_norm(grads)
    clip = clip_factor * norm
    lr = 1.0
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    run_epoch(iter(batches), model, _compute(model), opt, mode="train", accum_iter=2, clip_grad=clip)
    update = [(b - a.detach()) / lr for a, b in zip(model.parameters(), before, strict=True)]
    assert _global_norm(update) == pytest.approx(min(clip, norm), rel=1e-6)
    _sgd_by_hand(reference, grads, lr, clip)
    _assert_same_weights(model, reference)
    if clip_factor < 1:
        # per-parameter clipping would differ: some parameter's own norm is below clip, another's above
        norms = [float(g.norm()) for g in grads]
        assert min(norms) < clip < max(norms) or clip < min(norms)


def _fixed_batches(batches):
    """A Trainer data source that ignores the generator and yields these batches in order."""
    return lambda generator: iter(batches)


@pytest.mark.parametrize("accum_iter", [1, 3])
def test_trainer_steps_on_the_sum_of_accum_iter_gradients(accum_iter):
    """Trainer.train_step: one optimizer step per accum_iter batches, with their summed gradients; its loss is
    the NLL summed over those batches divided by their total token count."""
    model = _float64_model(3)
    reference = copy.deepcopy(model)
    batches = _padded_batches(2 * accum_iter, seed=5)
    opt = torch.optim.SGD(model.parameters(), lr=0.4)
    trainer = Trainer(
        model,
        opt,
        _fixed_batches(batches),
        criterion=LabelSmoothing(V, 0, 0.0),
        config=TrainerConfig(steps=2, accum_iter=accum_iter, clip_grad=None),
    )
    loss = trainer.train()
    assert trainer.step == 2 and trainer.tokens == sum(b.ntokens for b in batches)
    first, second = batches[:accum_iter], batches[accum_iter:]
    _sgd_by_hand(reference, _group_gradient(reference, first), 0.4)
    with torch.no_grad():  # the loss of step 2 is measured at the weights after step 1
        nll = sum(
            float(
                -reference.generator(reference(b.src, b.tgt, b.src_mask, b.tgt_mask))
                .gather(-1, b.tgt_y.unsqueeze(-1))
                .squeeze(-1)[b.tgt_y != 0]
                .sum()
            )
            for b in second
        )
    assert loss == pytest.approx(nll / sum(b.ntokens for b in second), rel=1e-6)
    _sgd_by_hand(reference, _group_gradient(reference, second), 0.4)
    _assert_same_weights(model, reference)


@pytest.mark.parametrize("clip_factor", [0.1, 20.0], ids=["clipped", "not-clipped"])
def test_trainer_clips_the_global_gradient_norm(clip_factor):
    model = _float64_model(4)
    reference = copy.deepcopy(model)
    batches = _padded_batches(2, seed=6)
    grads = _group_gradient(reference, batches)
    clip = clip_factor * _global_norm(grads)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    trainer = Trainer(
        model,
        opt,
        _fixed_batches(batches),
        criterion=LabelSmoothing(V, 0, 0.0),
        config=TrainerConfig(steps=1, accum_iter=2, clip_grad=clip),
    )
    trainer.train()
    update = [b - a.detach() for a, b in zip(model.parameters(), before, strict=True)]
    assert _global_norm(update) == pytest.approx(min(clip, _global_norm(grads)), rel=1e-6)
    _sgd_by_hand(reference, grads, 1.0, clip)
    _assert_same_weights(model, reference)
