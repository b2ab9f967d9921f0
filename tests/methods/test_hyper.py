"Hyperparameter learning: fit(model, learn=True) on GLM and GP, the envelope gradient, edges and refusals."
import numpy as np
import pytest

import vgi_lit
from vgi_lit.models import GLM, GP, SparseGP
from vgi_lit.kernels import RBF
from vgi_lit.likelihoods import Logistic, Gaussian
from vgi_lit.inference import Stop, EventKind
from vgi_lit.methods.hyper import learn, HyperFit


def _glm(seed=0, n=120, d=4):
    rng = np.random.default_rng(seed); X = rng.normal(size=(n, d))
    return GLM(X, np.where(X @ rng.normal(size=d) + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0), Logistic(), prior_cov=1.0)


def test_glm_prior_variance_is_a_stationary_point_of_the_optimal_vlb():
    model = _glm()
    hf = vgi_lit.fit(model, learn=True)
    assert isinstance(hf, HyperFit) and hf.converged and hf.stop is Stop.GRAD_TOL
    assert model.prior.diag()[0] == 1.0                                   # the model passed in is unchanged
    v = hf.theta["prior_var"]
    near = [vgi_lit.fit(GLM(model.X, model.y, Logistic(), prior_cov=v * f), "fpi", tol=1e-10).vlb for f in (0.97, 1.03)]
    assert hf.vlb >= max(near) and abs(hf.vlb - vgi_lit.fit(hf.model, "fpi").vlb) <= 1e-8 * abs(hf.vlb)


def test_gp_regression_learns_the_marginal_likelihood_optimum():
    "With a Gaussian likelihood the optimal VLB is the log marginal likelihood: compare with its own L-BFGS."
    from scipy.optimize import minimize
    rng = np.random.default_rng(1); X = rng.uniform(-3, 3, (40, 1)); y = np.sin(X[:, 0]) + 0.2 * rng.normal(size=40)
    model = GP(X, y, Gaussian(0.04), RBF(1.0, 1.0))
    hf = vgi_lit.fit(model, learn=True)
    def neg_lml(t):
        K = RBF(np.exp(t[0]), np.exp(t[1])).K(X) + 0.04 * np.eye(40)
        L = np.linalg.cholesky(K); a = np.linalg.solve(L, y)
        return 0.5 * a @ a + np.sum(np.log(np.diag(L))) + 20 * np.log(2 * np.pi)
    ref = minimize(neg_lml, [0.0, 0.0], method="Nelder-Mead", options=dict(xatol=1e-10, fatol=1e-12, maxiter=4000))
    assert hf.converged and abs(hf.vlb + ref.fun) <= 1e-6 * abs(ref.fun)
    assert np.allclose([hf.theta["kernel.variance"], hf.theta["kernel.lengthscale"]], np.exp(ref.x), rtol=1e-3)


def test_learn_mean_and_options():
    model = _glm(2)
    hf = learn(model, learn_mean=True)
    assert set(hf.theta) == {"prior_var", "mean"} and hf.converged
    assert learn(model, max_iter=1).stop in (Stop.MAX_ITER, Stop.GRAD_TOL)
    calls = []
    hf = learn(model, callback=lambda r: calls.append(r.iter) or len(calls) >= 2)
    assert hf.stop is Stop.CALLBACK and len(calls) == 2


def test_edges_are_reported_not_overflowed():
    "A prior variance that runs away (separable data) ends on the box with a finite value and an event."
    X = np.linspace(-2, 2, 30)[:, None]; y = np.where(X[:, 0] > 0, 1.0, -1.0)
    hf = learn(GLM(X, y, Logistic(), prior_cov=1.0), bound=6.0)
    assert np.isfinite(hf.vlb) and np.isfinite(hf.theta["prior_var"]) and hf.history.count(EventKind.BOUND_ACTIVE) == 1


def test_refusals():
    rng = np.random.default_rng(0); X = rng.normal(size=(20, 2)); y = np.sign(X[:, 0])
    with pytest.raises(ValueError, match="full prior covariance"):
        learn(GLM(X, y, Logistic(), prior_cov=np.eye(2) + 0.1))
    with pytest.raises(TypeError, match="SparseGP"):
        learn(SparseGP(X, y, Logistic(), RBF(), X[:5]))
