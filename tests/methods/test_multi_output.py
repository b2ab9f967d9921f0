"""Multi-output regression (`vgi_lit.methods.multi_output`, the coregionalised prior of `vgi_lit.models.multi`): the fit
equals the exact Gaussian posterior (dense, written independently here) over seeds, sizes, priors and spaces; bad input."""
import numpy as np
import pytest
from vgi_lit.inference import fit
from vgi_lit.kernels import RBF
from vgi_lit.models.multi import MultiGLM, MultiGP, CoregionalGP, KronPrior, MultiCov
from vgi_lit.models.lgm import PriorCov
from vgi_lit.methods.multi_output import MultiGaussian
from vgi_lit.methods.multiclass import fpi_multi, solve_stationarity


def dense_posterior(Sig, mu, Hrows, y, noise):
    "Exact posterior of w ~ N(mu, Sig) given y_i = H_i w + N(0, noise) on the observed entries (NaN: missing)."
    Hs, ys, Rs = [], [], []
    for H, yi in zip(Hrows, y):
        o = ~np.isnan(yi)
        Hs.append(H[o]); ys.append(yi[o]); Rs.append(noise[np.ix_(o, o)])
    H = np.vstack(Hs); yv = np.concatenate(ys)
    R = np.zeros((len(yv), len(yv))); k = 0
    for Ri in Rs: R[k:k + len(Ri), k:k + len(Ri)] = Ri; k += len(Ri)
    P = np.linalg.inv(Sig) + H.T @ np.linalg.solve(R, H)
    V = np.linalg.inv(P); m = V @ (np.linalg.solve(Sig, mu) + H.T @ np.linalg.solve(R, yv))
    G = H @ Sig @ H.T + R; r = yv - H @ mu
    lml = -0.5 * len(yv) * np.log(2 * np.pi) - 0.5 * np.linalg.slogdet(G)[1] - 0.5 * r @ np.linalg.solve(G, r)
    return m, V, lml


def data(seed, n, C, frac_missing):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 2)); A = rng.normal(size=(C, C)); noise = A @ A.T / C + 0.2 * np.eye(C)
    Y = np.sin(X @ rng.normal(size=(2, C))) + rng.normal(size=(n, C)) * 0.3
    Y[rng.random((n, C)) < frac_missing] = np.nan
    return rng, X, Y, noise


@pytest.mark.parametrize("seed, C, space", [(0, 2, 'n'), (1, 3, 'n'), (2, 4, 'n'), (3, 3, 'w')])
def test_coregional_fit_is_exact(seed, C, space):
    rng, X, Y, noise = data(seed, 15, C, 0.25)
    W = rng.normal(size=(C, 2)); kappa = rng.uniform(0.05, 0.5, C)
    mod = CoregionalGP(X, Y, MultiGaussian(noise), RBF(lengthscale=1.3), W, kappa, mean=0.3, jitter=1e-6)
    post = fpi_multi(mod, space=space)
    Sig = np.kron(W @ W.T + np.diag(kappa), mod.kernel.K(X) + 1e-6 * np.mean(mod.kernel.Kdiag(X)) * np.eye(15))
    Hrows = [np.kron(np.eye(C), np.eye(15)[i][None]) for i in range(15)]
    m, V, lml = dense_posterior(Sig, np.full(C * 15, 0.3), Hrows, Y, noise)
    assert np.allclose(post.m, m, atol=1e-7 * np.abs(m).max()) and np.allclose(post.V, V, atol=1e-7 * np.abs(V).max())
    assert abs(post.vlb - lml) < 1e-7 * abs(lml)
    assert fit(mod).method == "fpi"
    if seed == 1:                                             # GRAD and the Newton solve take the Kronecker prior too
        g = fit(mod, "grad", tol=1e-9)
        assert abs(g.vlb - lml) < 1e-7 * abs(lml) and np.allclose(g.m, m, atol=1e-5 * np.abs(m).max()), (g.vlb, lml)
        sm, sV = solve_stationarity(mod)[:2]
        assert np.allclose(sm, m, atol=1e-8 * np.abs(m).max()) and np.allclose(sV, V, atol=1e-8 * np.abs(V).max())


def test_glm_and_independent_gps_are_exact():
    rng, X, Y, noise = data(5, 20, 3, 0.2)
    mg = MultiGLM(X, Y, MultiGaussian(noise), prior_cov=2.0)
    post = fit(mg)
    Hrows = [np.kron(np.eye(3), X[i][None]) for i in range(20)]
    m, V, lml = dense_posterior(2.0 * np.eye(6), np.zeros(6), Hrows, Y, noise)
    assert np.allclose(post.m, m, atol=1e-10) and np.allclose(post.V, V, atol=1e-10) and abs(post.vlb - lml) < 1e-9 * abs(lml)
    gp = MultiGP(X, Y, MultiGaussian(noise), [RBF(), RBF(lengthscale=0.5), RBF(variance=2.0)])
    post = fit(gp)
    m, V, lml = dense_posterior(gp.prior_dense(), gp.mu, [np.kron(np.eye(3), np.eye(20)[i][None]) for i in range(20)], Y, noise)
    assert np.allclose(post.m, m, atol=1e-8) and np.allclose(post.V, V, atol=1e-8) and abs(post.vlb - lml) < 1e-8 * abs(lml)


def test_kron_prior_and_coregional_predictions():
    rng = np.random.default_rng(7)
    B = np.array([[1.0, 0.5], [0.5, 2.0]]); K0 = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, 0.2], [0.1, 0.2, 1.5]])
    kp = KronPrior(B, PriorCov(K0, 3)); v = rng.normal(size=(2, 3, 2))
    assert np.allclose(kp.solve(kp.matmul(v)), v) and np.isclose(kp.logdet(), np.linalg.slogdet(np.kron(B, K0))[1])
    _, X, Y, noise = data(8, 10, 2, 0.0)
    mod = CoregionalGP(X, Y, MultiGaussian(noise), RBF(), W=[[1.0], [0.4]], kappa=0.2)
    post = fit(mod); mean, cov = post.predict(X)
    assert np.allclose(mean, mod.site_mean(post.m), atol=1e-6) and np.allclose(cov, post.cov.site_cov(), atol=1e-6)
    wpost = fpi_multi(mod, space='w')                                             # a weight-space MultiCov is taken to site space
    assert np.allclose(mod.predict_latent(wpost.m, wpost.cov, X[:3])[1], cov[:3], atol=1e-6)


def test_bad_input():
    _, X, Y, noise = data(9, 6, 2, 0.0)
    lik = MultiGaussian(noise)
    cases = [
        (lambda: MultiGaussian(np.ones((2, 3))), ValueError, "square"),
        (lambda: MultiGaussian([[1.0, 0.2], [0.1, 1.0]]), ValueError, "symmetric"),
        (lambda: MultiGaussian([[1.0, np.nan], [np.nan, 1.0]]), ValueError, "NaN"),
        (lambda: MultiGaussian([[1.0, 2.0], [2.0, 1.0]]), ValueError, "Σ_ε"),
        (lambda: lik.check_y(Y[:, 0]), ValueError, "shape"),
        (lambda: lik.check_y(np.where(Y > 0, np.inf, Y)), ValueError, "inf"),
        (lambda: lik.check_y(np.array([["a", "b"]] * 6)), ValueError, "numbers"),
        (lambda: MultiGP(X[:4], Y, lik, RBF()), ValueError, "rows"),
        (lambda: CoregionalGP(X, Y, lik, RBF(), W=[[1.0, 0.0]], kappa=0.1), ValueError, "W must be"),
        (lambda: CoregionalGP(X, Y, lik, RBF(), W=[[1.0], [1.0]], kappa=[0.1, -0.1]), ValueError, "non-negative"),
        (lambda: CoregionalGP(X, Y, lik, RBF(), W=[[1.0], [1.0]], kappa=[0.1, 0.1, 0.1]), ValueError, "length 2"),
        (lambda: CoregionalGP(X, Y, lik, RBF(), W=[[1.0], [1.0]], kappa=0.0), ValueError, "coregionalisation matrix B"),
        (lambda: CoregionalGP(X, Y, lik, "rbf", W=[[1.0], [1.0]], kappa=0.1), TypeError, "K\\(X"),
        (lambda: KronPrior([[1.0, 0.0]], PriorCov(1.0, 3)), ValueError, "square"),
        (lambda: lik.expected_log_lik(Y, Y[:, :1], np.zeros((6, 2, 2))), ValueError, "site means"),
    ]
    for make, err, msg in cases:
        with pytest.raises(err, match=msg): make()
    mod = CoregionalGP(X, Y, lik, RBF(), W=[[1.0], [0.5]], kappa=0.1)
    with pytest.raises(ValueError, match="unknown method 'prox'"): fit(mod, method="prox")
