"Mean-field CTM: every block update raises the bound (E-step cycles, EM iterations), the M-step maximises it, bad input."
import numpy as np, pytest, scipy.sparse as sp
from vgi_lit.models import GaussianPrior
from scipy.special import xlogy
from vgi_lit.methods.ctm import newton_direction, damped_newton
from vgi_lit.methods.ctm_meanfield import (_lambda_newton, _nu2_newton, _phi, _expz, doc_bound, estep, mstep, init_beta,
                                           MeanFieldOptions, MeanFieldPosterior, fit_ctm_meanfield)
from vgi_lit.methods.ctm import CTMOptions
from vgi_lit.inference import Stop
from vgi_lit.models.ctm import CTM
from vgi_lit import fit, io


def _ref_lambda(lam, nu2, phibar, N, zeta, pr, tol=1e-10, max_iter=50):
    "Reference: one document's λ update by the scalar `damped_newton` (one K−1 system per call)."
    f = lambda l: -0.5 * pr.maha(l - pr.mu) + l @ phibar - N / zeta * np.exp(l + 0.5 * nu2).sum()
    def direction(l):
        e = N / zeta * np.exp(l + 0.5 * nu2)
        g = -pr.solve(l - pr.mu) + phibar - e
        return g, newton_direction(pr.L, e, g)
    return damped_newton(f, direction, lam, tol, max_iter, 1e-12)


def _ref_nu2(lam, nu2, N, zeta, pr, tol=1e-12, max_iter=100):
    "Reference: one document's ν² update, Newton in t = log ν²."
    p = pr.precision_diag; b = N / zeta * np.exp(lam); t = np.log(nu2)
    for _ in range(max_iter):
        et = np.exp(t); ex = b * et * np.exp(0.5 * et)
        step = np.minimum(-(0.5 - 0.5 * p * et - 0.5 * ex) / (-0.5 * p * et - 0.5 * ex * (1 + 0.5 * et)), 2.0)
        t = t + step
        if np.abs(step).max() < tol: break
    return np.exp(t)


def _ref_phi(lam, lbw):
    a = np.append(lam, 0.0)[:, None] + lbw; p = np.exp(a - a.max(axis=0)); return p / p.sum(axis=0)


def estep_doc(ids, cnts, lbeta, pr, lam, nu2, var_tol=1e-6, max_iter=20):
    "Reference: one document's E-step, the document-by-document loop (λ, ν², ζ, φ (K, W), L_d, cycles)."
    lbw = lbeta[:, ids]; c = np.asarray(cnts, dtype=np.float64); N = c.sum()
    lam, nu2 = lam.copy(), nu2.copy(); old = -np.inf; phi = _ref_phi(lam, lbw)
    for it in range(1, max_iter + 1):
        zeta = 1 + np.exp(lam + 0.5 * nu2).sum(); lam = _ref_lambda(lam, nu2, (phi * c).sum(axis=1)[:-1], N, zeta, pr)
        zeta = 1 + np.exp(lam + 0.5 * nu2).sum(); nu2 = _ref_nu2(lam, nu2, N, zeta, pr)
        zeta = 1 + np.exp(lam + 0.5 * nu2).sum(); phi = _ref_phi(lam, lbw)
        bnd = doc_bound(c, lbw, pr, lam, nu2, zeta, phi)
        if abs(bnd - old) <= var_tol * abs(bnd): break
        old = bnd
    return lam, nu2, zeta, phi, bnd, it


def _synthetic(seed=0, D=40, K=4, V=30, N=60):
    "Counts drawn from the CTM itself (correlated logistic-normal proportions)."
    rng = np.random.default_rng(seed)
    beta = rng.dirichlet(np.full(V, 0.3), size=K); A = rng.normal(size=(K - 1, K - 1)); Sig = A @ A.T / K + 0.5 * np.eye(K - 1)
    eta = rng.multivariate_normal(np.zeros(K - 1), Sig, size=D); th = np.exp(np.c_[eta, np.zeros(D)]); th /= th.sum(1, keepdims=True)
    X = np.array([rng.multinomial(N, th[d] @ beta) for d in range(D)])
    X[:, X.sum(0) == 0] = 0; X = X[:, X.sum(0) > 0]
    return sp.csr_matrix(X), K


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_prior_products_and_lambda_update_against_dense_algebra(seed):
    """pdiag = diag Σ⁻¹, solve(x) = Σ⁻¹x and maha(x) = xᵀΣ⁻¹x against dense solves; the λ update ends where the dense
    gradient of f(λ) vanishes (a wrong Σ⁻¹x in the gradient stops the safeguarded Newton iteration early, off the optimum)."""
    rng = np.random.default_rng(seed); n = 4
    A = rng.standard_normal((n, n)); Sig = A @ A.T + 0.5 * np.eye(n); mu = rng.standard_normal(n)
    pr = GaussianPrior(mu, Sig); x = rng.standard_normal(n)
    np.testing.assert_allclose(pr.precision_diag, np.diag(np.linalg.solve(Sig, np.eye(n))), rtol=1e-10)
    np.testing.assert_allclose(pr.solve(x), np.linalg.solve(Sig, x), rtol=1e-10)
    np.testing.assert_allclose(pr.maha(x), x @ np.linalg.solve(Sig, x), rtol=1e-10)
    nu2, phibar, N, zeta = rng.uniform(0.2, 1.0, n), rng.uniform(1, 5, n), 30.0, 4.0
    lam = _lambda_newton(mu.copy(), nu2, phibar, N, zeta, pr)
    g = -np.linalg.solve(Sig, lam - mu) + phibar - N / zeta * np.exp(lam + 0.5 * nu2)
    assert np.max(np.abs(g)) < 1e-6, g


def test_estep_cycles_never_lower_the_bound():
    C, K = _synthetic(1)
    rng = np.random.default_rng(0); beta = init_beta(C, K, seed=0); lbeta = np.log(beta)
    pr = GaussianPrior(rng.normal(size=K - 1) * 0.3, np.eye(K - 1) * 2.0)
    for d in range(5):
        ids, c = C[d].indices, C[d].data
        lam, nu2 = rng.normal(size=K - 1), rng.uniform(0.1, 5, K - 1); seq = []
        for _ in range(15):
            lam, nu2, zeta, phi, b, _ = estep_doc(ids, c, lbeta, pr, lam, nu2, var_tol=0.0, max_iter=1)
            seq.append(b)
        assert np.all(np.diff(seq) >= -1e-9 * np.abs(seq[1:])), seq


def test_em_trace_is_monotone_and_converges():
    C, K = _synthetic(2, D=25, N=40)
    post = fit(CTM(C, K, seed=1), "mean-field", max_iter=100, tol=1e-3)
    b = post.history.vlb[1:]
    assert np.all(np.diff(b) >= -1e-8 * np.abs(b[1:])) and post.stop == Stop.REL_TOL and post.converged
    assert np.all(np.isfinite(post.m)) and post.S.min() > 0 and np.allclose(post.beta.sum(1), 1)
    assert np.all(np.linalg.eigvalsh(post.Sigma) > 0) and post.m.shape == (C.shape[0], K - 1)
    assert isinstance(post, MeanFieldPosterior) and post.objective == "meanfield_bound" and post.vlb == b[-1]


def test_held_parameters_warm_start_and_file(tmp_path):
    "learn=False keeps μ, Σ, β at the model's values; a run continued from a result's state equals one longer run; save/load."
    C, K = _synthetic(6, D=12, N=30)
    model = CTM(C, K, seed=2)
    held = fit(model, "mean-field", learn=False, max_iter=3)
    assert np.array_equal(held.beta, model.beta) and np.array_equal(held.Sigma, model.Sigma) and np.array_equal(held.mu, model.mu)
    one = fit(model, "mean-field", max_iter=2, tol=0.0)
    two = fit(model, "mean-field", max_iter=1, tol=0.0, state0=fit(model, "mean-field", max_iter=1, tol=0.0).state)
    np.testing.assert_allclose(two.m, one.m, rtol=1e-9, atol=1e-12); np.testing.assert_allclose(two.beta, one.beta, rtol=1e-9)
    est = fit(model, "mean-field", max_iter=2, options=MeanFieldOptions(vlb_samples=5))
    v56 = [r["vlb56"] for r in est.history if "vlb56" in r]
    assert len(v56) == 3 and all(v > b for v, b in zip(v56[1:], est.history.vlb[1:]))   # the start's too; (56) sums z out: above mean field's bound
    io.save(one, tmp_path / "mf.npz"); back = io.load(tmp_path / "mf.npz")
    assert type(back) is MeanFieldPosterior and back.objective == "meanfield_bound" and back.vlb == one.vlb
    np.testing.assert_array_equal(back.m, one.m); np.testing.assert_array_equal(back.beta, one.beta)


def test_mstep_maximises_the_bound_over_parameters():
    C, K = _synthetic(3)
    beta = init_beta(C, K, seed=0); pr = GaussianPrior(np.zeros(K - 1), np.eye(K - 1)); lbeta = np.log(beta)
    st = []
    for d in range(C.shape[0]):
        ids, c = C[d].indices, C[d].data
        st.append((ids, c) + estep_doc(ids, c, lbeta, pr, np.zeros(K - 1), np.ones(K - 1))[:4])
    lam = np.array([s[2] for s in st]); nu2 = np.array([s[3] for s in st])
    stats = np.zeros_like(beta)
    for ids, c, _, _, _, phi in st: stats[:, ids] += phi * c
    mu, Sig, B = mstep(lam, nu2, stats)
    total = lambda mu_, Sig_, B_: sum(doc_bound(c, np.log(B_)[:, ids], GaussianPrior(mu_, Sig_), l, v, z, phi) for ids, c, l, v, z, phi in st)
    best = total(mu, Sig, B); rng = np.random.default_rng(0)
    for _ in range(5):
        E = rng.normal(size=Sig.shape) * 0.02
        B2 = B * np.exp(rng.normal(size=B.shape) * 0.05); B2 /= B2.sum(1, keepdims=True)
        assert best > total(mu + 0.05 * rng.normal(size=mu.shape), Sig, B)
        assert best > total(mu, Sig + E @ E.T + 1e-3 * np.eye(K - 1), B) and best > total(mu, Sig * 0.97, B)
        assert best > total(mu, Sig, B2)


def test_estep_bounds_match_doc_bound_and_callback_stops():
    C, K = _synthetic(4, D=15)
    beta = init_beta(C, K, seed=2)
    lam, nu2, bounds, stats, _ = estep(C, np.zeros(K - 1), np.eye(K - 1), beta)
    pr = GaussianPrior(np.zeros(K - 1), np.eye(K - 1))
    for d in range(3):
        ids, c = C[d].indices, C[d].data
        phi = _phi(lam[d], np.log(beta)[:, ids].T).T
        assert np.isclose(bounds[d], doc_bound(c.astype(float), np.log(beta)[:, ids], pr, lam[d], nu2[d], _expz(lam[d], nu2[d]), phi))
    assert np.isclose(stats.sum(), C.sum())
    post = fit(CTM(C, K), "mean-field", max_iter=10, callback=lambda rec: rec.iter == 2)
    assert post.stop == Stop.CALLBACK and post.n_iter == 2 and len(post.history) == 3     # the start and two EM steps


def test_bad_input():
    C, K = _synthetic(5, D=10)
    with pytest.raises(ValueError, match="model must be a CTM"): fit_ctm_meanfield(C)
    with pytest.raises(ValueError, match="empty columns"): fit(CTM(sp.hstack([C, sp.csr_matrix((10, 1), dtype=C.dtype)]).tocsr(), K), "mean-field")
    with pytest.raises(ValueError, match="S0 must"): fit(CTM(C, K), "mean-field", options=MeanFieldOptions(S0=0.0))
    with pytest.raises(ValueError, match="vlb_samples must"): fit(CTM(C, K), "mean-field", options=MeanFieldOptions(vlb_samples=-1))
    with pytest.raises(ValueError, match="state0 must"): fit(CTM(C, K), "mean-field", state0=fit(CTM(C, K), "h-mc-ssvi", max_iter=1, options=CTMOptions(cov="full")).state)
    with pytest.raises(TypeError, match="setting of MeanFieldOptions"): fit(CTM(C, K), "mean-field", S0=1.0)
    with pytest.raises(ValueError, match="strictly positive"): estep(C, np.zeros(K - 1), np.eye(K - 1), np.zeros((K, C.shape[1])))
    with pytest.raises(ValueError, match="positive definite"): estep(C, np.zeros(K - 1), -np.eye(K - 1), init_beta(C, K))


@pytest.mark.parametrize("seed, var_tol, max_iter", [(0, 1e-6, 20), (1, 1e-9, 40), (2, 0.0, 3)])
def test_batched_estep_equals_the_document_loop(seed, var_tol, max_iter):
    """The stacked E-step (all documents at once, each stopping on its own tests) against the reference loop over documents:
    λ, ν², L_d, the word-topic statistics and the cycles agree to rounding, with an empty and a one-word document."""
    C, K = _synthetic(seed, D=20, N=50)
    C = C.tolil(); C[3, :] = 0; C[5, :] = 0; C[5, 2] = 7; C = C.tocsr(); C.eliminate_zeros()
    rng = np.random.default_rng(seed); D, V = C.shape
    beta = rng.dirichlet(np.ones(V), size=K)
    A = rng.normal(size=(K - 1, K - 1)); Sig = A @ A.T / K + 0.5 * np.eye(K - 1); mu = rng.normal(size=K - 1) * 0.3
    lam0, nu20 = rng.normal(size=(D, K - 1)), rng.uniform(0.1, 10, (D, K - 1))
    lam, nu2, bounds, stats, cycles = estep(C, mu, Sig, beta, lam0, nu20, var_tol, max_iter)
    pr = GaussianPrior(mu, Sig); lbeta = np.log(beta); st = np.zeros_like(beta); cyc = []
    for d in range(D):
        ids, c = C[d].indices, C[d].data
        l, v, _, phi, b, it = estep_doc(ids, c, lbeta, pr, lam0[d], nu20[d], var_tol, max_iter)
        np.testing.assert_allclose(lam[d], l, rtol=1e-10, atol=1e-10); np.testing.assert_allclose(nu2[d], v, rtol=1e-10)
        np.testing.assert_allclose(bounds[d], b, rtol=1e-12, atol=1e-10); st[:, ids] += phi * c; cyc.append(it)
    np.testing.assert_allclose(stats, st, rtol=1e-10, atol=1e-12)
    assert cycles == sum(cyc) and (max_iter == 3 or len(set(cyc)) > 1), cyc     # documents stop at different cycles


def test_stacked_updates_equal_one_document_at_a_time():
    "_lambda_newton and _nu2_newton on a stack equal the reference update of each row; _phi rows equal the column softmax."
    rng = np.random.default_rng(7); D, n = 9, 5
    A = rng.normal(size=(n, n)); pr = GaussianPrior(rng.normal(size=n), A @ A.T / n + 0.3 * np.eye(n))
    lam, nu2 = rng.normal(size=(D, n)) * 2, rng.uniform(1e-3, 20, (D, n)); phibar = rng.uniform(0, 30, (D, n))
    N = phibar.sum(1) + rng.uniform(0, 30, D); N[0] = 0.0; zeta = 1 + np.exp(lam + 0.5 * nu2).sum(1)
    L1 = _lambda_newton(lam, nu2, phibar, N, zeta, pr); V1 = _nu2_newton(L1, nu2, N, zeta, pr)
    for d in range(D):
        np.testing.assert_allclose(L1[d], _ref_lambda(lam[d], nu2[d], phibar[d], N[d], zeta[d], pr), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(V1[d], _ref_nu2(L1[d], nu2[d], N[d], zeta[d], pr), rtol=1e-10)
    lbw = np.log(rng.dirichlet(np.ones(8), size=n + 1))
    np.testing.assert_allclose(_phi(lam[2], lbw.T).T, _ref_phi(lam[2], lbw), rtol=1e-13)


def test_estep_max_iter_must_be_positive():
    C, K = _synthetic(6, D=5)
    with pytest.raises(ValueError, match="max_iter"): estep(C, np.zeros(K - 1), np.eye(K - 1), init_beta(C, K), max_iter=0)
