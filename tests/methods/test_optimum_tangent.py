"""`optimum_tangent` (the derivative of the FPi optimum in the prior's parameters) against central differences of
tightly converged optima, its GMRES path against the dense solve, and its bad inputs."""
import numpy as np
import pytest
from vgi_lit import likelihoods
from vgi_lit.models import GP, GLM, SparseGP
from vgi_lit.kernels import RBF
from vgi_lit.covariance import DenseCov
from vgi_lit.inference import fit
from vgi_lit.methods.fixed_point import optimum_tangent
from vgi_lit.experiments.hyper_experiments import tangent_warm_starts

def _poisson_gp(th, n=30):
    "GENERATED: Poisson counts at 30 inputs on [0, 5], rate e^{1 + sin x}; RBF at log-parameters th."
    x = np.linspace(0.0, 5.0, n)[:, None]
    y = np.random.default_rng(1).poisson(np.exp(1.0 + np.sin(x[:, 0]))).astype(float)
    return GP(x, y, likelihoods.Poisson(), RBF(1.0, 1.0).with_params(th), mean=1.0)

def _opt(th, start=None):
    mod = _poisson_gp(th)
    return mod, fit(mod, "fpi", tol=1e-11, tol_rel=0.0, newton=True, max_iter=3000, **(start or {}))

def test_tangent_matches_central_differences():
    th = np.array([0.5, 0.2])
    mod, p = _opt(th)
    dK = mod.kernel.dK(mod.X)
    dK = dK + 1e-8 * np.mean(np.diagonal(dK, axis1=1, axis2=2), 1)[:, None, None] * np.eye(mod.n)   # the relative jitter moves too
    dm, dl = optimum_tangent(mod, p.m, p.cov, dK)
    assert dm.shape == dl.shape == (2, mod.n)
    dm_k, dl_k = optimum_tangent(mod, p.m, p.cov, dK, direct_max=0)                                 # GMRES
    assert np.allclose(dm_k, dm, rtol=0, atol=1e-8 * np.abs(dm).max()) and np.allclose(dl_k, dl, rtol=0, atol=1e-8 * np.abs(dl).max())
    one = optimum_tangent(mod, p.m, p.cov, dK[1])                                                     # one direction: (n,) each
    assert one[0].shape == (mod.n,) and np.allclose(one[1], dl[1])
    h = 1e-4
    for j in range(2):
        e = np.zeros(2); e[j] = h; warm = dict(m0=p.m, lam0=p.cov.lam)
        (_, pp), (_, pm) = _opt(th + e, warm), _opt(th - e, warm)
        fd_m, fd_l = (pp.m - pm.m) / (2 * h), (pp.cov.lam - pm.cov.lam) / (2 * h)
        assert np.max(np.abs(dm[j] - fd_m)) <= 1e-6 * np.max(np.abs(fd_m))
        assert np.max(np.abs(dl[j] - fd_l)) <= 1e-6 * np.max(np.abs(fd_l))

def test_tangent_bad_inputs():
    mod, p = _opt(np.array([0.0, 0.0]))
    dK = mod.kernel.dK(mod.X)
    with pytest.raises(ValueError, match="dSigma"): optimum_tangent(mod, p.m, p.cov, dK[:, :5, :5])
    with pytest.raises(ValueError, match="site form"): optimum_tangent(mod, p.m, DenseCov(np.eye(mod.n)), dK)
    X = np.linspace(0, 1, 12)[:, None]; y = np.where(X[:, 0] > 0.5, 1.0, -1.0)
    glm = GLM(np.hstack([X, np.ones_like(X)]), y, likelihoods.Logistic(), prior_cov=1.0)
    pg = fit(glm, "fpi")
    with pytest.raises(ValueError, match="GP"): optimum_tangent(glm, pg.m, pg.cov, np.zeros((2, 2)))
    sp = SparseGP(X, y, likelihoods.Logistic(), RBF(1.0, 1.0), X[::3])
    ps = fit(sp, "fpi")
    with pytest.raises(ValueError, match="GP"): optimum_tangent(sp, ps.m, ps.cov, np.zeros((sp.d, sp.d)))

def test_tangent_warm_starts_bad_inputs():
    X = np.linspace(0, 1, 12)[:, None]; y = np.sin(3 * X[:, 0])
    with pytest.raises(ValueError, match="only free"):            # the Gaussian noise variance is free too
        tangent_warm_starts(GP(X, y, likelihoods.Gaussian(0.1), RBF(1.0, 1.0)))
    glm = GLM(np.hstack([X, np.ones_like(X)]), np.where(y > 0, 1.0, -1.0), likelihoods.Logistic(), prior_cov=1.0)
    with pytest.raises(ValueError, match="needs a GP"): tangent_warm_starts(glm)

def test_tangent_parts_are_its_intermediates():
    mod, p = _opt(np.array([0.5, 0.2]))
    dK = mod.kernel.dK(mod.X)
    dm, dl, parts = optimum_tangent(mod, p.m, p.cov, dK, parts=True)
    dm0, dl0 = optimum_tangent(mod, p.m, p.cov, dK)
    assert np.array_equal(dm, dm0) and np.array_equal(dl, dl0)
    V = p.cov.dense(); C = np.eye(mod.n) - V * p.cov.lam[None, :]                  # C = I − VΛ
    assert np.allclose(parts["V"], V, rtol=0, atol=1e-10 * np.abs(V).max())
    for j in range(2):
        assert np.allclose(parts["CD"][j], C @ dK[j], rtol=0, atol=1e-9 * np.abs(dK[j]).max())
        assert np.allclose(parts["dv"][j], np.diag(C @ dK[j] @ C.T), rtol=0, atol=1e-9 * np.abs(dK[j]).max())

def test_optimal_vlb_hessian_ard_against_differences_of_the_gradient():
    from vgi_lit.methods.hyper import HyperParams
    from vgi_lit.experiments.hyper_experiments import optimal_vlb_hessian
    rng = np.random.default_rng(2)
    X = rng.uniform(0.0, 3.0, size=(30, 2)); y = rng.poisson(np.exp(0.5 + np.sin(X[:, 0]) - 0.3 * X[:, 1])).astype(float)
    gp = GP(X, y, likelihoods.Poisson(), RBF(1.5, np.array([1.0, 2.0])), mean=0.5)
    hp = HyperParams(gp); th = hp.theta0
    def opt(t, **kw): mod = hp.build(t); return mod, fit(mod, "fpi", tol=1e-9, tol_rel=0.0, newton=True, max_iter=300, **kw)
    mod, p = opt(th)
    H, dm, dl = optimal_vlb_hessian(mod, p.m, p.cov)
    assert H.shape == (3, 3) and dm.shape == dl.shape == (3, gp.n) and np.array_equal(H, H.T)
    fd = np.empty((3, 3)); h = 1e-3
    for k in range(3):
        e = np.zeros(3); e[k] = h
        (mp, pp), (mm, pm) = (opt(th + s * e, m0=p.m, lam0=p.cov.lam) for s in (1, -1))
        assert all(q.converged or 'rounding floor' in q.message for q in (pp, pm)), (pp.message, pm.message)   # optimal to float64
        fd[:, k] = (hp.grad(mp, pp.m, pp.cov) - hp.grad(mm, pm.m, pm.cov)) / (2 * h)
    assert np.max(np.abs(H - fd)) <= 1e-5 * np.max(np.abs(fd))

def test_outer_newton_and_hessian_bad_inputs():
    from vgi_lit.kernels import Matern32
    from vgi_lit.experiments.hyper_experiments import optimal_vlb_hessian, outer_newton
    X = np.linspace(0, 1, 12)[:, None]; y = np.sin(3 * X[:, 0])
    with pytest.raises(ValueError, match="only free"): outer_newton(GP(X, y, likelihoods.Gaussian(0.1), RBF(1.0, 1.0)))
    yb = np.where(y > 0, 1.0, -1.0)
    glm = GLM(np.hstack([X, np.ones_like(X)]), yb, likelihoods.Logistic(), prior_cov=1.0)
    with pytest.raises(ValueError, match="needs a GP"): outer_newton(glm)
    gm = GP(X, yb, likelihoods.Logistic(), Matern32(1.0, 1.0)); pm = fit(gm, "fpi")
    with pytest.raises(ValueError, match="RBF"): optimal_vlb_hessian(gm, pm.m, pm.cov)
    gr = GP(X, yb, likelihoods.Logistic(), RBF(1.0, 1.0)); pr = fit(gr, "fpi")
    lam0 = np.array(pr.cov.lam); lam0[0] = 0.0
    from vgi_lit.covariance import SiteCov
    with pytest.raises(ValueError, match="λ > 0"): optimal_vlb_hessian(gr, pr.m, SiteCov(gr, lam0))
