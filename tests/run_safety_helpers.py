"""What the run-safety tests (tests/test_run_safety_*.py) share: a tiny copy-task trainer and a copy of its weights."""

from transformer.tasks import CopyTask, make_trainer

TINY = dict(batch_size=4, n_encoder_layers=1, n_decoder_layers=1, d_model=16, d_ff=32, n_heads=2, eval_every=0)


def tiny_trainer(steps=6, **changes):
    return make_trainer(CopyTask(), steps=steps, **{**TINY, **changes})


def params(model):
    return {name: p.detach().clone() for name, p in model.named_parameters()}
