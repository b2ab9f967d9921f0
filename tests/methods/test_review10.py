"""Review of the Matérn distance store ('02_kernels', **Distances once for $K$ and `dK`**), of FPb's Newton loop at the
floor ('11b_fpb') and of the Hessian of the optimal VLB ('95_hyper_experiments'): cases the pages' own checks leave open."""
import tracemalloc
import numpy as np
import pytest
from vgi_lit import likelihoods
from vgi_lit.kernels import Matern32, RBF
from vgi_lit.models import GP, GLM


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


def _scaled_logistic_glm(seed=1):
    "GENERATED: 60 rows, three features of scales 1e-3, 1 and 1e2 with weights 1e3, 1 and 1e-2; logistic, prior variance 1e8."
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(60, 3)) * np.array([1e-3, 1.0, 1e2])
    y = (rng.random(60) < 1.0 / (1.0 + np.exp(-(X @ np.array([1e3, 1.0, 1e-2]))))).astype(float)
    return GLM(X, y, likelihoods.Logistic(), prior_cov=1e8)


def test_fpb_newton_floor_judges_a_cut_step_by_its_full_newton_step(monkeypatch):
    """A step the Armijo search cut to within ROUND_ULPS units of ‖m‖∞ (the VLB's increase along δ at its rounding, entries of
    m of scales 1e-3 to 1e3) is no sign of the gradient's floor: judged by the cut step, every Newton loop of this run ended
    after a step or two at ‖g‖∞ ≈ 1e-8 and the run spent all 60 outer iterations (MAX_ITER); judged by the full step δ, as
    without the test, it meets tol = 1e-12 after 21 outer iterations, with the VLB of the loop without the test."""
    import vgi_lit.methods.fixed_point as fp
    glm = _scaled_logistic_glm(1)
    p = fp.fpb(glm, m0=-20.0, tol=1e-12, tol_rel=0.0, max_iter=60)
    assert p.stop.value == "grad_tol" and p.n_iter <= 30, (p.stop, p.n_iter, p.history[-1]["grad_m"])
    monkeypatch.setattr(fp, "_newton_floor", lambda model, m, m_new: False)
    q = fp.fpb(glm, m0=-20.0, tol=1e-12, tol_rel=0.0, max_iter=60)
    assert q.stop.value == "grad_tol" and abs(p.vlb - q.vlb) <= 1e-12 * abs(q.vlb) and p.info["n_steps"] < q.info["n_steps"]
