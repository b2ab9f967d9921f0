"""Review of the Matérn distance store ('02_kernels', **Distances once for $K$ and `dK`**), of FPb's Newton loop at the
floor ('11b_fpb') and of the Hessian of the optimal VLB ('95_hyper_experiments'): cases the pages' own checks leave open."""
import tracemalloc
import numpy as np
import pytest
from vgi_lit import likelihoods
from vgi_lit.kernels import Matern32, RBF
from vgi_lit.models import GP


def _retained_bytes(make, n_models=6, n=200):
    "Bytes still allocated while `n_models` GP models of `make()` kernels (n inputs each) are alive."
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 2)); y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        models = [GP(X, y, likelihoods.Logistic(), make(1.0 + 0.1 * i)) for i in range(n_models)]
        held = tracemalloc.get_traced_memory()[0] - base
    finally: tracemalloc.stop()
    del models
    return held


def test_matern_gp_models_keep_at_most_KEEP_R2_entries_in_all(monkeypatch):
    """A GP model evaluates K(X) and may never call dK: the r² kept for a dK are bounded by `_KEEP_R2` entries in all, not
    one n × n array per live model (6 models, n = 200, `_KEEP_R2` one such array: at most one of 320 kB beyond what the
    same models hold with an RBF kernel; kept per kernel, six)."""
    monkeypatch.setattr(Matern32, "_KEEP_R2", 200 * 200)
    matern = _retained_bytes(lambda ls: Matern32(1.0, ls))
    rbf = _retained_bytes(lambda ls: RBF(1.0, ls))
    one = 200 * 200 * 8
    assert matern <= rbf + 1.5 * one, (matern, rbf, one)
