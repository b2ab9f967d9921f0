"""`optimal_vlb_hessian` (the Hessian of the optimal VLB in a GP's RBF log-parameters) against the same formula built from
dense matrices and `optimum_tangent`'s own tangent, its helpers (V from the site factor, GMRES on several right-hand sides)
against dense references, and its bad inputs."""
import warnings
import numpy as np
import pytest
from vgi_lit import likelihoods
from vgi_lit.models import GP, GLM
from vgi_lit.kernels import RBF
from vgi_lit.covariance import DenseCov, SiteCov, SMALL_LAM_K
from vgi_lit.inference import fit
from vgi_lit.methods.fixed_point import optimum_tangent
from vgi_lit.experiments.hyper_experiments import optimal_vlb_hessian, _gmres_columns
from vgi_lit.methods.fixed_point import site_dense_V

def _dense_hessian(model, m, cov):
    """The Hessian by the formula with every matrix formed: W = (Σ + Λ⁻¹)⁻¹ by a dense solve, the second derivatives of the RBF
    prior as (p, p, n, n), the tangent by `optimum_tangent` (its own V and dense solve); Σ⁻¹ by the prior's factor (Σ⁻¹ formed
    would lose digits at the jitter's condition number)."""
    k, X, Sig = model.kernel, model.X, model.prior.matrix()
    K = Sig - model.prior.jitter * np.eye(model.n)
    ls = np.broadcast_to(np.asarray(k.lengthscale, float), (X.shape[1],))
    R = [((X[:, a, None] - X[None, :, a]) / ls[a]) ** 2 for a in range(X.shape[1])] if k.ard else \
        [sum(((X[:, a, None] - X[None, :, a]) / ls[a]) ** 2 for a in range(X.shape[1]))]
    D = np.array([Sig] + [K * Ra for Ra in R]); p = len(D)
    D2 = np.empty((p, p) + Sig.shape)
    for a in range(p):
        for b in range(p):
            D2[a, b] = D[max(a, b)] if min(a, b) == 0 else D[a] * R[b - 1] - (2.0 * D[a] if a == b else 0.0)
    dm, dl = optimum_tangent(model, m, cov, D)
    lam = cov.lam; W = np.linalg.solve(Sig + np.diag(1.0 / lam), np.eye(model.n)); W = 0.5 * (W + W.T)
    r = model.prior.solve(m - model.mu)
    H = np.empty((p, p))
    for j in range(p):
        for kk in range(p):
            rdot = model.prior.solve(dm[kk] - D[kk] @ r)
            WDW = W @ D[j] @ W
            H[j, kk] = (0.5 * r @ D2[j, kk] @ r + (D[j] @ r) @ rdot - 0.5 * np.sum(W * D2[j, kk])
                        + 0.5 * np.trace(W @ D[kk] @ W @ D[j]) - 0.5 * np.sum(dl[kk] / lam**2 * np.diag(WDW)))
    return 0.5 * (H + H.T), dm, dl

@pytest.mark.parametrize("case", ["logistic", "poisson-ard"])
def test_hessian_matches_the_dense_formula(case):
    rng = np.random.default_rng(4)
    if case == "logistic":
        X = rng.normal(size=(40, 2)); y = np.where(X[:, 0] - X[:, 1] + 0.6 * rng.normal(size=40) > 0, 1.0, -1.0)
        gp = GP(X, y, likelihoods.Logistic(), RBF(2.0, 1.3))
    else:
        X = rng.uniform(0.0, 3.0, size=(35, 2)); y = rng.poisson(np.exp(0.5 + np.sin(X[:, 0]))).astype(float)
        gp = GP(X, y, likelihoods.Poisson(), RBF(1.5, np.array([1.0, 2.0])), mean=0.5)
    p = fit(gp, "fpi", tol=1e-10, tol_rel=0.0, newton=True, max_iter=500)
    H, dm, dl = optimal_vlb_hessian(gp, p.m, p.cov, rtol=1e-12)
    Hd, dmd, dld = _dense_hessian(gp, p.m, p.cov)
    assert np.array_equal(H, H.T) and dm.shape == dl.shape == dmd.shape
    assert np.max(np.abs(H - Hd)) <= 1e-8 * np.max(np.abs(Hd))
    assert np.max(np.abs(dm - dmd)) <= 1e-8 * np.max(np.abs(dmd)) and np.max(np.abs(dl - dld)) <= 1e-8 * np.max(np.abs(dld))

def test_site_dense_V_against_the_dense_covariance_with_small_sites():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(25, 1)); y = np.where(X[:, 0] > 0, 1.0, -1.0)
    gp = GP(X, y, likelihoods.Logistic(), RBF(3.0, 0.8))
    lam = rng.uniform(0.05, 0.3, size=25); lam[[2, 7, 11]] = [1e-9, 3e-7, 1e-12]          # λΣ_ii below SMALL_LAM_K on three sites
    cov = SiteCov(gp, lam)
    assert np.sum(lam * np.diag(gp.K_site()) < SMALL_LAM_K) == 3
    V, Vd = site_dense_V(gp, cov), cov.dense()
    assert np.allclose(V, Vd, rtol=0, atol=1e-10 * np.abs(Vd).max())

def test_gmres_columns_solves_each_column():
    rng = np.random.default_rng(3)
    A = np.eye(50) + 0.4 * rng.normal(size=(50, 50)) / np.sqrt(50)
    B = rng.normal(size=(50, 4)); B[:, 2] = 0.0; B[:, 3] = A @ np.eye(50)[0]              # a zero column, an easy one
    X, k, res = _gmres_columns(lambda Z: A @ Z, B, 1e-11, 50)
    assert np.allclose(X, np.linalg.solve(A, B), rtol=0, atol=1e-9) and np.all(res <= 1e-11) and np.all(X[:, 2] == 0)
    X1, k1, res1 = _gmres_columns(lambda Z: A @ Z, B, 1e-11, 2)                               # stopped early: residuals say so
    assert k1 == 2 and np.max(res1) > 1e-11
    Q, _ = np.linalg.qr(rng.normal(size=(50, 50))); S = Q @ np.diag(np.linspace(1.0, 5.0, 50)) @ Q.T
    Be = np.column_stack([rng.normal(size=50), Q[:, 7]])                                       # an eigenvector: solved in one step
    Xe, ke, rese = _gmres_columns(lambda Z: S @ Z, Be, 1e-12, 50)
    assert ke > 1 and np.allclose(Xe, np.linalg.solve(S, Be), rtol=0, atol=1e-10) and np.all(rese <= 1e-12)

def test_hessian_bad_inputs_and_unconverged_tangent():
    X = np.linspace(0, 1, 12)[:, None]; y = np.where(np.sin(6 * X[:, 0]) > 0, 1.0, -1.0)
    gp = GP(X, y, likelihoods.Logistic(), RBF(1.0, 0.3)); p = fit(gp, "fpi")
    with pytest.raises(ValueError, match="site form"): optimal_vlb_hessian(gp, p.m, DenseCov(np.linalg.cholesky(p.cov.dense())))
    glm = GLM(np.hstack([X, np.ones_like(X)]), y, likelihoods.Logistic(), prior_cov=1.0)
    with pytest.raises(ValueError, match="needs a GP"): optimal_vlb_hessian(glm, np.zeros(2), p.cov)
    with pytest.warns(RuntimeWarning, match="GMRES"): optimal_vlb_hessian(gp, p.m, p.cov, rtol=1e-14, max_krylov=1)

def test_site_dense_V_of_a_glm_in_n_space_is_its_dense_V():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(6, 9)); y = np.where(X[:, 0] > 0, 1.0, -1.0)                   # n ≤ d: the n-space form
    from vgi_lit.models import GLM
    glm = GLM(X, y, likelihoods.Logistic(), prior_cov=2.0)
    cov = SiteCov(glm, rng.uniform(0.1, 0.5, size=6))
    assert np.array_equal(site_dense_V(glm, cov), cov.dense()) and cov.dense().shape == (9, 9)
