"""The linear model of coregionalisation (`LMCPrior`, `LMCGP` of `vgi_lit.models.multi`): Q = 1 is the coregionalised GP
(fits to rounding), a Gaussian LMC's optimal VLB is the exact log marginal likelihood (dense Gaussian algebra written here),
GRAD, FPi and the Newton solve of the stationarity conditions agree, and bad input is refused by name."""
import numpy as np
import pytest
from vgi_lit.inference import fit, methods_for
from vgi_lit.kernels import RBF, Matern32
from vgi_lit.models.lgm import PriorCov
from vgi_lit.models.multi import CoregionalGP, LMCGP, LMCPrior, MultiCov, MultiLGM
from vgi_lit.softmax import Softmax
from vgi_lit.methods.multi_output import MultiGaussian
from vgi_lit.methods.multiclass import solve_stationarity

W1, K1 = [[1.0], [0.7], [-0.4]], [0.2, 0.3, 0.5]
W2 = [[0.3, 0.1], [-0.5, 0.2], [0.4, 0.6]]


def data(seed, n=12):
    rng = np.random.default_rng(seed)
    return rng, rng.normal(size=(n, 2)), rng.integers(0, 3, n)


def lmc(X, y, lik, **kw):
    return LMCGP(X, y, lik, [RBF(lengthscale=1.5), Matern32(0.5, 0.7)], [W1, W2], [K1, 0.05], **kw)


def test_q1_is_the_coregional_gp():
    rng, X, y = data(0)
    a = fit(CoregionalGP(X, y, Softmax(3, n_gh=8), RBF(lengthscale=1.5), W1, K1), tol=1e-10)
    b = fit(LMCGP(X, y, Softmax(3, n_gh=8), [RBF(lengthscale=1.5)], [W1], [K1]), tol=1e-10)
    assert a.converged and b.converged and b.model.kind == "multi_coreg" and set(methods_for(b.model)) >= {"fpi", "grad"}
    assert abs(a.vlb - b.vlb) <= 1e-12 * abs(a.vlb), (a.vlb, b.vlb)
    assert np.allclose(a.m, b.m, rtol=0, atol=1e-10) and np.allclose(a.V, b.V, rtol=0, atol=1e-10)
    Xs = rng.normal(size=(5, 2))
    for u, v in zip(a.predict(Xs), b.predict(Xs)): assert np.allclose(u, v, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("seed, space", [(1, 'n'), (2, 'w')])
def test_gaussian_lmc_is_exact(seed, space):
    rng, X, _ = data(seed)
    Y = np.sin(X @ rng.normal(size=(2, 3))) + 0.3 * rng.normal(size=(12, 3)); Y[rng.random((12, 3)) < 0.25] = np.nan
    A = rng.normal(size=(3, 3)); noise = A @ A.T / 3 + 0.2 * np.eye(3)
    mod = lmc(X, Y, MultiGaussian(noise), mean=0.3, jitter=1e-6)
    post = fit(mod, space=space, tol=1e-10)
    # Σ written out from the kernels, independently of LMCPrior
    Ks = [k.K(X) + 1e-6 * np.mean(k.Kdiag(X)) * np.eye(12) for k in (RBF(lengthscale=1.5), Matern32(0.5, 0.7))]
    Bs = [np.array(W1) @ np.array(W1).T + np.diag(K1), np.array(W2) @ np.array(W2).T + 0.05 * np.eye(3)]
    Sig = sum(np.kron(B, K) for B, K in zip(Bs, Ks))
    yv = Y.T.ravel(); o = ~np.isnan(yv); H = np.eye(36)[o]
    R = np.kron(noise, np.eye(12))[np.ix_(o, o)]
    G = H @ Sig @ H.T + R; r = yv[o] - 0.3
    lml = -0.5 * o.sum() * np.log(2 * np.pi) - 0.5 * np.linalg.slogdet(G)[1] - 0.5 * r @ np.linalg.solve(G, r)
    V = Sig - Sig @ H.T @ np.linalg.solve(G, H @ Sig); m = 0.3 + Sig @ H.T @ np.linalg.solve(G, r)
    assert abs(post.vlb - lml) <= 1e-12 * abs(lml), (post.vlb, lml, abs(post.vlb - lml) / abs(lml))
    assert np.allclose(post.m, m, rtol=0, atol=1e-9 * np.abs(m).max()) and np.allclose(post.V, V, rtol=0, atol=1e-9 * np.abs(V).max())


def test_grad_fpi_and_newton_agree():
    _, X, y = data(3, n=10)
    mod = lmc(X, y, Softmax(3, n_gh=8))                                    # a small rule: the three solvers share the model
    f, g = fit(mod, tol=1e-10), fit(mod, "grad", tol=1e-7)
    assert f.converged and g.converged
    assert abs(f.vlb - g.vlb) <= 1e-9 * abs(f.vlb), (f.vlb, g.vlb)
    assert np.allclose(f.m, g.m, atol=1e-5) and np.allclose(f.V, g.V, atol=1e-5)
    sm, sV, res = solve_stationarity(mod)
    assert res < 1e-9 and np.allclose(sm, f.m, atol=1e-8) and np.allclose(sV, f.V, atol=1e-8)


def test_site_space_and_weight_space_agree():
    rng, X, y = data(4)
    mod = lmc(X, y, Softmax(3))
    lam = rng.normal(size=(12, 3, 3)); lam = lam @ np.swapaxes(lam, 1, 2) / 3
    Vd = np.linalg.inv(np.linalg.inv(mod.prior_dense()) + mod.curvature_sum(lam))
    for space in ('n', 'w'):
        cv = MultiCov(mod, lam, space)
        assert np.allclose(cv.dense(), Vd) and np.isclose(cv.logdet(), np.linalg.slogdet(Vd)[1])
        assert np.allclose(cv.site_cov(), np.stack([Vd[i::12, i::12] for i in range(12)]))


def test_bad_input():
    _, X, y = data(5, n=6)
    lik, P = Softmax(3), PriorCov(np.eye(6), 6)
    cases = [
        (lambda: LMCGP(X, y, lik, RBF(), [W1], [K1]), TypeError, "list of Q"),
        (lambda: LMCGP(X, y, lik, [RBF()], [W1, W2], [K1]), ValueError, "lists of Q = 1"),
        (lambda: LMCGP(X, y, lik, [RBF()], [[[1.0, 0.0]]], [K1]), ValueError, "W\\[0\\] must be"),
        (lambda: LMCGP(X, y, lik, [RBF()], [W1], [[0.1, -0.1, 0.1]]), ValueError, "kappa\\[0\\] must be non-negative"),
        (lambda: LMCGP(X, y, lik, [RBF()], [W1], [[0.1, 0.1]]), ValueError, "length 3"),
        (lambda: LMCGP(X, y, lik, [RBF()], [W1], [0.0]), ValueError, "LMC prior covariance"),
        (lambda: LMCGP(X, y, lik, ["rbf"], [W1], [K1]), TypeError, "K\\(X"),
        (lambda: LMCGP(X, y, lik, [RBF()], [W1], [K1], jitter=-1.0), ValueError, "jitter"),
        (lambda: LMCPrior([np.eye(3)], [P, P]), ValueError, "same length"),
        (lambda: LMCPrior([np.eye(3), np.eye(2)], [P, P]), ValueError, "B\\[1\\]"),
        (lambda: LMCPrior([np.array([[1.0, 0.5], [0.4, 1.0]])], [P]), ValueError, "not symmetric"),
        (lambda: LMCPrior([np.diag([1.0, -1.0])], [P]), ValueError, "positive semi-definite"),
        (lambda: LMCPrior([np.eye(2), np.eye(2)], [P, PriorCov(np.eye(4), 4)]), ValueError, "same size"),
        (lambda: LMCPrior([np.eye(2)], [np.eye(6)]), TypeError, "PriorCov"),
        (lambda: MultiLGM(y, lik, 0.0, LMCPrior([np.eye(2)], [P]), 0.0, 0.0), ValueError, "C = 2"),
    ]
    for make, err, msg in cases:
        with pytest.raises(err, match=msg): make()
