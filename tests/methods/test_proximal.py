"Tests of the KL proximal method (001), its kernelised updates, the Laplace approximation and the Table 2-3 runner."
import numpy as np
import pytest
from scipy.integrate import quad
from scipy.optimize import minimize
from scipy.special import log_expit, expit

from vgi_lit import likelihoods
from vgi_lit.methods.proximal import (prox_nspace, prox_dspace, prox_step_dense, nspace_predict, woodbury_factor,
                              nspace_site_var, prox_point_conjugate)
from vgi_lit.methods.laplace import laplace_nspace, laplace_predict


def _glm(seed, n, d, scale=1.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    y = np.where(X @ rng.normal(size=d) * 3 + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y, scale * np.eye(d)


def _kl(m0, V0, m1, V1):
    L1, L0 = np.linalg.cholesky(V1), np.linalg.cholesky(V0)
    A = np.linalg.solve(L1, L0); b = np.linalg.solve(L1, m1 - m0)
    return 0.5 * (np.sum(A**2) + b @ b - len(m0)) + np.sum(np.log(np.diag(L1))) - np.sum(np.log(np.diag(L0)))


def _grad_lbfgs(X, y, Sigma, lik):
    "Independent oracle: L-BFGS on (m, chol V) of the exact VLB (the GRAD method of 000, dense)."
    d = X.shape[1]; mu = np.zeros(d); tri = np.tril_indices(d)
    def unpack(x):
        L = np.zeros((d, d)); L[tri] = x[d:]; return x[:d], L @ L.T
    def negvlb(x):
        m, V = unpack(x)
        E, _, _ = lik.expected_log_lik(y, X @ m, np.einsum('nd,de,ne->n', X, V, X))
        return -(np.sum(E) - _kl(m, V, mu, Sigma))
    x0 = np.concatenate([mu, np.linalg.cholesky(Sigma)[tri]])
    res = minimize(negvlb, x0, method='L-BFGS-B', options=dict(maxiter=50000, ftol=1e-15, gtol=1e-10))
    return -res.fun


@pytest.mark.parametrize("seed,n,d", [(0, 30, 4), (1, 10, 15), (2, 20, 12)])
def test_prox_reaches_lbfgs_optimum_glm(seed, n, d):
    X, y, S = _glm(seed, n, d, scale=2.0)
    lik = likelihoods.Logistic(); ex = lambda m, v: lik.expected_log_lik(y, m, v)
    rd = prox_dspace(X, np.linalg.inv(S), np.zeros(d), None, None, ex, tol=1e-9)
    rn = prox_nspace(X @ S @ X.T, np.zeros(n), None, ex, tol=1e-9)
    ref = _grad_lbfgs(X, y, S, lik)
    assert rd['converged'] and rn['converged']
    for r in (rd, rn):
        assert abs(r['vlb'] - ref) <= 1e-6 * abs(ref), (r['vlb'], ref)
    np.testing.assert_allclose(rd['m_site'], rn['m_site'], atol=1e-7)
    np.testing.assert_allclose(rd['v_site'], rn['v_site'], atol=1e-7)


def test_dspace_nspace_iterates_agree_step_by_step():
    X, y, S = _glm(3, 12, 30)
    lik = likelihoods.Logistic(); ex = lambda m, v: lik.expected_log_lik(y, m, v)
    for k in (1, 2, 5, 20):
        rd = prox_dspace(X, np.linalg.inv(S), np.zeros(30), None, None, ex, max_iter=k, tol=0, safeguard=False)
        rn = prox_nspace(X @ S @ X.T, np.zeros(12), None, ex, max_iter=k, tol=0, safeguard=False)
        np.testing.assert_allclose(rd['m_site'], rn['m_site'], atol=1e-11)
        np.testing.assert_allclose(rd['v_site'], rn['v_site'], atol=1e-11)
        np.testing.assert_allclose(rd['gt'], rn['gt'], atol=1e-12)


def test_nspace_matches_literal_16_17():
    X, y, S = _glm(4, 8, 6); d = 6
    lik = likelihoods.Logistic(); P0 = np.linalg.inv(S)
    m, P = np.zeros(d), P0.copy()
    for k in range(6):
        V = np.linalg.inv(P)
        _, dm, dv = lik.expected_log_lik(y, X @ m, np.einsum('nd,de,ne->n', X, V, X))
        m, P = prox_step_dense(m, P, np.zeros(d), P0, X, -dm, -2 * dv, 0.8)
    rn = prox_nspace(X @ S @ X.T, np.zeros(8), None, lambda a, b: lik.expected_log_lik(y, a, b), max_iter=6, tol=0, safeguard=False)
    np.testing.assert_allclose(rn['m_site'], X @ m, atol=1e-11)
    np.testing.assert_allclose(rn['v_site'], np.einsum('nd,de,ne->n', X, np.linalg.inv(P), X), atol=1e-11)


def test_prox_gp_reaches_lbfgs_optimum():
    rng = np.random.default_rng(5); x = np.sort(rng.uniform(-3, 3, 8))[:, None]
    K = 2.0 * np.exp(-0.5 * (x - x.T)**2 / 0.5**2) + 1e-3 * np.eye(8); y = np.where(np.sin(2 * x[:, 0]) > 0, 1.0, -1.0)
    lik = likelihoods.Logistic()
    r = prox_nspace(K, np.zeros(8), None, lambda a, b: lik.expected_log_lik(y, a, b), tol=1e-9)
    ref = _grad_lbfgs(np.eye(8), y, K, lik)
    assert r['converged'] and abs(r['vlb'] - ref) <= 1e-6 * abs(ref)


def test_gaussian_likelihood_one_step_is_conjugate_prox_point():
    """Gaussian likelihood: one prox-gradient step has Theorem 1's precision but NOT its mean (001 linearises f in
    (m, V), where the Gaussian f is quadratic in m; it is linear only in the mean parameters (m, V + mm'))."""
    X, _, S = _glm(6, 15, 3); rng = np.random.default_rng(6); y = X @ rng.normal(size=3) + 0.3 * rng.normal(size=15)
    s2 = 0.5; lik = likelihoods.Gaussian(variance=s2); beta = 0.7
    rd = prox_dspace(X, np.linalg.inv(S), np.zeros(3), None, None, lambda a, b: lik.expected_log_lik(y, a, b),
                     beta=beta, max_iter=1, tol=0, safeguard=False)
    P0 = np.linalg.inv(S); Pp = P0 + X.T @ X / s2; t1p = X.T @ y / s2
    t1, t2 = prox_point_conjugate(np.zeros(3), -0.5 * P0, t1p, -0.5 * Pp, beta)
    np.testing.assert_allclose(rd['LV'] @ rd['LV'].T, -2 * t2, atol=1e-12)
    assert np.max(np.abs(rd['m'] - np.linalg.solve(-2 * t2, t1))) > 1e-3
    full = prox_dspace(X, np.linalg.inv(S), np.zeros(3), None, None, lambda a, b: lik.expected_log_lik(y, a, b), beta=beta, tol=1e-11)
    np.testing.assert_allclose(full['m'], np.linalg.solve(Pp, t1p), atol=1e-9)      # same fixed point: the posterior


def test_prediction_20_matches_dense():
    X, y, S = _glm(7, 10, 20); lik = likelihoods.Logistic()
    r = prox_nspace(X @ S @ X.T, np.zeros(10), None, lambda a, b: lik.expected_log_lik(y, a, b), tol=1e-10)
    m = S @ X.T @ r['w']; V = np.linalg.inv(np.linalg.inv(S) + X.T @ (r['gt'][:, None] * X))
    Xs = np.random.default_rng(8).normal(size=(4, 20))
    mp, vp = nspace_predict(X @ S @ Xs.T, np.einsum('nd,de,ne->n', Xs, S, Xs), np.zeros(4), r['w'], r['factor'])
    np.testing.assert_allclose(mp, Xs @ m, atol=1e-10)
    np.testing.assert_allclose(vp, np.einsum('nd,de,ne->n', Xs, V, Xs), atol=1e-10)
    np.testing.assert_allclose(r['w'], -r['alpha'], atol=1e-9)   # 001 (20): m_* = mu_* - k_*' alpha*


def test_safeguard_monotone_and_fixed_step_agrees_when_harmless():
    X, y, S = _glm(9, 40, 5, scale=1e4)
    lik = likelihoods.Logistic(); ex = lambda a, b: lik.expected_log_lik(y, a, b)
    r = prox_nspace(X @ S @ X.T, np.zeros(40), None, ex, tol=1e-8, max_iter=3000)
    assert r['converged']
    assert np.all(np.diff([h['vlb'] for h in r['history']]) >= -1e-9 * abs(r['vlb']))


def test_laplace_vs_bruteforce():
    rng = np.random.default_rng(10); X = rng.normal(size=(25, 2)); y = np.where(X[:, 0] - X[:, 1] > 0.2 * rng.normal(size=25), 1.0, -1.0)
    S = np.array([[1.5, 0.2], [0.2, 0.7]]); Si = np.linalg.inv(S)
    lik = likelihoods.Logistic()
    def lj(z): return np.sum(log_expit(y * (X @ z))) - 0.5 * z @ Si @ z - 0.5 * np.linalg.slogdet(2 * np.pi * S)[1]
    z = minimize(lambda z: -lj(z), np.zeros(2), method='BFGS', options=dict(gtol=1e-12)).x
    p = expit(X @ z); Hs = Si + X.T @ ((p * (1 - p))[:, None] * X)            # exact Hessian of -log joint
    lz = lj(z) + np.log(2 * np.pi) - 0.5 * np.linalg.slogdet(Hs)[1]
    r = laplace_nspace(X @ S @ X.T, np.zeros(25), lambda f: lik.derivs(y, f))
    assert r['converged'] and abs(r['log_marglik'] - lz) < 1e-8 * abs(lz)
    np.testing.assert_allclose(r['f'], X @ z, atol=1e-7)
    Xs = rng.normal(size=(3, 2)); mp, vp = laplace_predict(X @ S @ Xs.T, np.einsum('nd,de,ne->n', Xs, S, Xs), np.zeros(3), r)
    np.testing.assert_allclose(mp, Xs @ z, atol=1e-7)
    np.testing.assert_allclose(vp, np.einsum('nd,de,ne->n', Xs, np.linalg.inv(Hs), Xs), rtol=1e-8)


def test_bad_inputs():
    X, y, S = _glm(11, 6, 3); lik = likelihoods.Logistic(); ex = lambda a, b: lik.expected_log_lik(y, a, b)
    K = X @ S @ X.T
    with pytest.raises(ValueError, match="beta"): prox_nspace(K, np.zeros(6), None, ex, beta=0.0)
    with pytest.raises(ValueError, match="beta"): prox_nspace(K, np.zeros(6), None, ex, beta=-1.0)
    with pytest.raises(ValueError, match="Sig_t"): prox_nspace(K[:5], np.zeros(6), None, ex)
    with pytest.raises(ValueError, match="finite"): prox_nspace(K * np.nan, np.zeros(6), None, ex)
    with pytest.raises(ValueError, match="max_iter"): prox_nspace(K, np.zeros(6), None, ex, max_iter=-1)
    with pytest.raises(ValueError, match="P_prior"): prox_dspace(X, np.eye(2), np.zeros(3), None, None, ex)
    with pytest.raises(ValueError, match=">= 0"): woodbury_factor(K, -np.ones(6))
    bad = lambda a, b: (np.zeros(6), np.zeros(6), np.ones(6))     # dE/dv > 0: gamma < 0, not log-concave
    with pytest.raises(ValueError, match="log-concave"): prox_nspace(K, np.zeros(6), None, bad)
    with pytest.raises(ValueError, match="log-concave"): laplace_nspace(K, np.zeros(6), lambda f: (f, f, np.ones(6)))


# --- expectations over the whole range the Table 3 grids reach -----------------------------------------
@pytest.mark.parametrize("v", [1e-2, 1.0, 1e2, 1e3, 1e4, 1.7e5])
def test_logistic_expectations_accurate_on_grid_range(v):
    "001's GP grid reaches σ = e⁶ (prior variance 1.6e5): E, dE/dm, dE/dv against adaptive quadrature."
    lik = likelihoods.Logistic(); s = np.sqrt(v)
    for m in [-3 * s, -30.0, -1.0, 0.0, 0.5, 7.0, 2 * s]:
        E, dm, dv = lik.expected_log_lik(np.array([1.0]), np.array([m]), np.array([v]))
        def integ(g):
            f = lambda t: g(t) * np.exp(-(t - m)**2 / (2 * v)) / np.sqrt(2 * np.pi * v)
            lo, hi = m - 12 * s, m + 12 * s
            pts = sorted({p for p in (lo, min(max(0.0, lo), hi), hi)})
            return sum(quad(f, a, b, epsabs=0, epsrel=1e-13, limit=500, points=[0.0] if a < 0 < b else None)[0]
                       for a, b in zip(pts[:-1], pts[1:]) if b > a)
        rE = integ(log_expit); rdm = integ(lambda t: expit(-t)); rdv = 0.5 * integ(lambda t: -expit(t) * expit(-t))
        assert abs(E[0] - rE) <= 1e-8 * abs(rE), (m, v, E[0], rE)
        assert abs(dm[0] - rdm) <= 1e-8 * max(abs(rdm), 1e-300) + 1e-14, (m, v, dm[0], rdm)
        assert abs(dv[0] - rdv) <= 1e-8 * abs(rdv) + 1e-14, (m, v, dv[0], rdv)


# --- fast subset of the Table 2 and 3 runner ------------------------------------------------------------
def test_table_fast_subset():
    from vgi_lit.experiments import prox_tables
    rows = prox_tables.table3('ionosphere', splits=1, grid=np.array([0.5, 1.5]), log=lambda *a: None)
    r = rows[0]
    assert r['prox']['converged'] == 4 and r['laplace']['converged'] == 4
    assert 0.1 < r['prox']['logloss'] < 0.7 and 0.1 < r['laplace']['logloss'] < 0.8
    rows = prox_tables.table2('colon', deltas=np.array([1.0, 10.0]), splits=1, log=lambda *a: None)
    assert np.isfinite(rows[0]['nll']) and 0.2 < rows[0]['logloss'] < 1.2
    rows = prox_tables.table3('housing', splits=1, grid=np.array([1.0]), lb_grid=np.array([-1.0]), log=lambda *a: None)
    assert rows[0]['prox']['converged'] == 1 and rows[0]['prox']['logloss'] < rows[0]['laplace']['logloss']


# --- through the public API: fit(model, method="prox" / "laplace") -------------------------------------
from vgi_lit import fit, GP, GLM, datasets
from vgi_lit.kernels import RBF


def _ion_gp(n=100):
    ds = datasets.load_ionosphere(data_dir=datasets.shared_data_dir())
    X = datasets.zscore(ds.X[:n]).X
    return GP(X, ds.y[:n], likelihoods.Logistic(), RBF(variance=2.0, lengthscale=np.sqrt(X.shape[1])))


def test_fit_prox_matches_grad_gp():
    gp = _ion_gp(60)
    qp, qg = fit(gp, method="prox", tol=1e-9), fit(gp, method="grad", tol=1e-8)
    assert qp.converged and qp.info['space'] == 'n'
    assert abs(qp.vlb - qg.vlb) <= 1e-6 * abs(qg.vlb), (qp.vlb, qg.vlb)
    assert qp.vlb >= qg.vlb - 1e-9 * abs(qg.vlb)
    assert abs(qp.vlb - qp.info['vlb_engine']) <= 1e-10 * abs(qp.vlb)
    np.testing.assert_allclose(qp.m, qg.m, atol=1e-3)


@pytest.mark.parametrize("n,d", [(60, 8), (20, 40)])
def test_fit_prox_matches_grad_glm_both_spaces(n, d):
    X, y, _ = _glm(12, n, d)
    glm = GLM(X * 2, y, likelihoods.Logistic(), prior_cov=1.5)
    qd, qn, qg = fit(glm, method="prox", space="d", tol=1e-9), fit(glm, method="prox", space="n", tol=1e-9), fit(glm, method="grad", tol=1e-9)
    for q in (qd, qn):
        assert q.converged and abs(q.vlb - qg.vlb) <= 1e-6 * abs(qg.vlb), (q.info['space'], q.vlb, qg.vlb)
    np.testing.assert_allclose(qd.m, qn.m, atol=1e-6)
    np.testing.assert_allclose(qd.V, qn.V, atol=1e-6)
    assert fit(glm, method="prox").info['space'] == ('n' if n < d else 'd')


def test_fit_prox_laplace_likelihood_and_bad_options():
    rng = np.random.default_rng(13); x = rng.uniform(-2, 2, (25, 1)); y = np.sin(2 * x[:, 0]) + 0.2 * rng.laplace(size=25)
    gp = GP(x, y, likelihoods.Laplace(scale=0.2), RBF(variance=1.0, lengthscale=0.7))
    qp = fit(gp, method="prox", tol=1e-8)
    assert qp.converged and qp.info['beta'] == 1.0
    # GRAD needs > 20000 L-BFGS steps on this GP (measured), so the comparison with GRAD is on a Laplace-likelihood GLM
    X = rng.normal(size=(30, 3)); yg = X @ np.array([1., -0.5, 0.3]) + 0.3 * rng.laplace(size=30)
    g = GLM(X, yg, likelihoods.Laplace(scale=0.3), prior_cov=1.0)
    qd, qn, qg = fit(g, method="prox", tol=1e-9), fit(g, method="prox", space="n", tol=1e-9), fit(g, method="grad", tol=1e-9)
    for q in (qd, qn): assert q.converged and abs(q.vlb - qg.vlb) <= 1e-9 * abs(qg.vlb)
    with pytest.raises(ValueError, match="space"): fit(gp, method="prox", space="x")
    with pytest.raises(ValueError, match="space='d'"): fit(gp, method="prox", space="d")
    with pytest.raises(ValueError, match="beta"): fit(gp, method="prox", beta=0)
    gst = GP(x, y, likelihoods.StudentT(), RBF())
    with pytest.raises(ValueError, match="log-concave"): fit(gst, method="prox")
    with pytest.raises(ValueError, match="log-concave"): fit(gst, method="laplace")


def test_fit_laplace_fields():
    gp = _ion_gp(80)
    ql, qp = fit(gp, method="laplace"), fit(gp, method="prox", tol=1e-9)
    assert ql.converged and ql.vlb < qp.vlb and np.isfinite(ql.info['log_marglik'])
    np.testing.assert_allclose(gp.site_mean(ql.m), ql.info['mode'], atol=1e-8)
    # the mode: dlogp(f) = K^-1 (f - mu)
    _, dlp, _ = gp.likelihood.derivs(gp.y, ql.info['mode'])
    np.testing.assert_allclose(gp.prior.matmul(dlp), ql.info['mode'] - gp.mu, atol=1e-6)


@pytest.mark.parametrize("v", [1e-2, 1.0, 1e2, 1e4, 1.7e5])
def test_laplace_expectations_accurate_on_grid_range(v):
    "Housing uses the Laplace likelihood with the same kernel grid: closed form vs adaptive quadrature."
    b = 0.37; lik = likelihoods.Laplace(scale=b); s = np.sqrt(v); y0 = 0.4
    for m in [-3 * s, -2.0, 0.4, 1.3, 2 * s]:
        E, dm, dv = lik.expected_log_lik(np.array([y0]), np.array([m]), np.array([v]))
        dens = lambda t: np.exp(-(t - m)**2 / (2 * v)) / np.sqrt(2 * np.pi * v)
        integ = lambda g: sum(quad(lambda t: g(t) * dens(t), a, c, epsabs=0, epsrel=1e-13, limit=500)[0]
                              for a, c in [(m - 14 * s, min(y0, m + 14 * s)), (max(y0, m - 14 * s), m + 14 * s)] if c > a)
        rE = integ(lambda t: -np.abs(y0 - t) / b - np.log(2 * b))
        rdm = integ(lambda t: np.sign(y0 - t) / b)
        rdv = -dens(y0) / b                          # ½ E[d²/df² (−|y−f|/b)] = −δ-mass at y / b
        assert abs(E[0] - rE) <= 1e-8 * abs(rE)
        assert abs(dm[0] - rdm) <= 1e-8 * abs(rdm) + 1e-12
        assert abs(dv[0] - rdv) <= 1e-8 * abs(rdv) + 1e-300
