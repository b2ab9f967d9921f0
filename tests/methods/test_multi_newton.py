"Newton steps of FPi for the multi-latent models: the same optimum as FPi on every model form (GP, GLM rows, coupled prior, a likelihood without the label shift), the learner's optimum, bad input."
import warnings
import numpy as np
import pytest
from sklearn.datasets import load_iris, load_wine
from vgi_lit.kernels import RBF
from vgi_lit.softmax import Softmax
from vgi_lit.models.multi import MultiGP, MultiGLM, CoregionalGP
from vgi_lit.methods.multi_output import MultiGaussian
from vgi_lit.methods.multiclass import fpi_multi
from vgi_lit.methods.multi_hyper import learn_multi


def _iris(n):
    X, y = load_iris(return_X_y=True); X = (X - X.mean(0)) / X.std(0)
    idx = np.linspace(0, 149, n).astype(int)
    return X[idx], y[idx]


def _same_optimum(model, start_model, rel_m=1e-5):
    "FPi with Newton (always tried) and without, both warm-started at the optimum of `start_model`: the same optimum; Newton took steps."
    p0 = fpi_multi(start_model, tol=1e-4, max_iter=500, tol_rel=0.0, newton=True)                  # a start, quickly
    w = dict(m0=model.mu + model.prior_matmul(p0.r), lam0=p0.cov.lam, tol=1e-8, max_iter=500, tol_rel=0.0)
    a, b = fpi_multi(model, **w), fpi_multi(model, newton=True, **w)
    assert a.converged and b.converged
    assert abs(a.vlb - b.vlb) <= 1e-10 * abs(a.vlb)
    assert np.max(np.abs(a.m - b.m)) <= rel_m * max(1.0, np.max(np.abs(a.m)))
    assert sum(r.step == "newton" for r in b.history) >= 1 and b.n_iter <= a.n_iter
    return a, b


def test_newton_glm_rows():
    "A MultiGLM (sites H_i = I ⊗ x_iᵀ, not e_i): the cross blocks H_iVH_jᵀ by products with X."
    X, y = _iris(30); Xa = np.c_[np.ones(30), X]
    _same_optimum(MultiGLM(Xa, y, Softmax(3), prior_cov=5.0), MultiGLM(Xa, y, Softmax(3), prior_cov=4.5))


def test_newton_coupled_prior():
    "A CoregionalGP (one coupled prior): the same optimum with Newton steps."
    X, y = _iris(30); W = np.array([[1.0], [0.5], [-0.5]])
    _same_optimum(CoregionalGP(X, y, Softmax(3), RBF(20.0, 1.5), W, [1.0, 1.0, 1.0]),
                  CoregionalGP(X, y, Softmax(3), RBF(18.0, 1.5), W, [1.0, 1.0, 1.0]))


def test_newton_no_label_shift():
    "A multi-output Gaussian (E_i moves with a shift of every output): all six directions of V differenced; the Newton step is exact."
    X, _ = _iris(30); rng = np.random.default_rng(0)
    Y = np.c_[np.sin(X[:, 0]), np.cos(X[:, 1]), X[:, 2]] + 0.3 * rng.standard_normal((30, 3))
    S = np.array([[0.2, 0.05, 0.0], [0.05, 0.3, 0.02], [0.0, 0.02, 0.25]])
    a, b = _same_optimum(MultiGP(X, Y, MultiGaussian(S), RBF(2.0, 1.0)), MultiGP(X, Y, MultiGaussian(S), RBF(1.5, 1.0)))
    assert b.n_iter <= 2 and [r.get('site_evals') for r in b.history if r.step == "newton"][0] == 6


def test_newton_options():
    X, y = _iris(30); gp = MultiGP(X, y, Softmax(3), RBF(4.0, 1.0))
    with pytest.raises(ValueError, match="newton"): fpi_multi(gp, newton="yes")
    with pytest.raises(ValueError, match="site_jac"): fpi_multi(gp, site_jac=np.zeros((30, 9, 5)))          # newton=False
    with pytest.raises(ValueError, match="site_jac"): fpi_multi(gp, newton=None, site_jac=np.zeros((30, 9, 5)))   # not the pair
    p = fpi_multi(gp, newton=True, tol=1e-8)
    JU, Ut = p.info['site_jacobian']
    assert JU.shape == (30, 9, 5) and Ut.shape == (5, 9)
    q = fpi_multi(gp, newton=None, tol=1e-8, m0=p.m, lam0=p.cov.lam, site_jac=p.info['site_jacobian'])   # Newton at once
    assert q.converged and q.n_iter <= 1 and abs(q.vlb - p.vlb) <= 1e-10 * abs(p.vlb)
    assert 'site_jacobian' not in fpi_multi(gp, tol=1e-6).info                                         # newton=False: as before


def _learned(X, y, **inner):
    from vgi_lit.apps.tables import median_distance
    gp = MultiGP(X, y, Softmax(3), RBF(4.0, median_distance(X)))
    return learn_multi(gp, inner=inner or None)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["iris", "wine"])
def test_learner_same_optimum(name):
    "The learner with Newton's inner steps (the default) and with FPi and Anderson alone: the same learned values and F."
    X, y = (load_iris if name == "iris" else load_wine)(return_X_y=True); X = (X - X.mean(0)) / X.std(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        new, old = _learned(X, y), _learned(X, y, newton=False)
    assert new.converged and old.converged
    assert abs(new.vlb - old.vlb) <= 1e-6 * abs(old.vlb)
    th_n, th_o = (np.log(list(p.info['theta'].values())) for p in (new, old))
    assert np.max(np.abs(th_n - th_o)) < 1e-3
    assert new.info['n_inner'] < old.info['n_inner']
