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


def test_optimal_vlb_hessian_refuses_a_krylov_budget_of_no_steps():
    """`max_krylov` = 0 ran no GMRES step and returned λ̇ = 0 with residuals reported 0, so no warning: a Hessian off by
    0.07 in its variance entry, silently (12 inputs, logistic, RBF); a negative one failed inside NumPy. Both are refused."""
    from vgi_lit.inference import fit
    from vgi_lit.experiments.hyper_experiments import optimal_vlb_hessian
    X = np.linspace(0, 1, 12)[:, None]; y = np.where(np.sin(6 * X[:, 0]) > 0, 1.0, -1.0)
    gp = GP(X, y, likelihoods.Logistic(), RBF(1.0, 0.3)); p = fit(gp, "fpi", tol=1e-10, tol_rel=0.0)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="max_krylov"): optimal_vlb_hessian(gp, p.m, p.cov, max_krylov=bad)
    for bad in (-1e-8, float("nan")):
        with pytest.raises(ValueError, match="rtol"): optimal_vlb_hessian(gp, p.m, p.cov, rtol=bad)
    H = optimal_vlb_hessian(gp, p.m, p.cov, rtol=1e-12)[0]
    with pytest.warns(RuntimeWarning, match="GMRES"): Hk = optimal_vlb_hessian(gp, p.m, p.cov, rtol=1e-12, max_krylov=1)[0]
    assert np.max(np.abs(Hk - H)) > 1e-6                                       # one step is not the solve: the warning is due
