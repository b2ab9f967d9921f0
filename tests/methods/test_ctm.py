"""The correlated topic model (vgi_lit.methods.ctm): bad input, the derivatives of the log-mixture terms against finite
differences over seeds and sizes, every method and covariance on generated documents, the bound rising on Reuters,
held-out fits, and (slow) recovery of generating topics."""
import itertools
import numpy as np
from vgi_lit.models import GaussianPrior, closed_form_prior
from vgi_lit.methods.svi import Adagrad
import pytest
from scipy import sparse
from vgi_lit.corpora import load_reuters
from vgi_lit.inference import Stop, EventKind
from vgi_lit.methods.ctm import (CTM, fit_ctm, fit_documents, xi_stats, xi_stats_log, doc_loglik, corpus_loglik, logistic_map,
                                 simple_stats, ctm_vlb, init_state, topic_proportions, word_probs, alpha_grad,
                                 beta_from_alpha, docs_step, DocRows, xi_stats_batch, psd_part, METHODS, COVS,
                                 newton_direction, damped_newton)
from scipy.linalg import solve_triangular, cho_solve
from vgi_lit.quadrature import gh_nodes
from vgi_lit.vlb import kl_gauss


def generate_ctm(D, N, beta, mu, Sigma, seed):
    "Counts (D × V) of documents of N words drawn from a CTM."
    rng = np.random.default_rng(seed)
    theta = logistic_map(rng.multivariate_normal(mu, Sigma, size=D))
    z = np.array([rng.multinomial(N, th) for th in theta])
    return sparse.csr_matrix(np.array([sum(rng.multinomial(n, beta[k]) for k, n in enumerate(zd)) for zd in z]))


@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(0)
    beta = rng.dirichlet(np.full(12, 0.3), size=3)
    return generate_ctm(30, 40, beta, np.zeros(2), np.eye(2), 1)


@pytest.fixture(scope="module")
def reuters():
    return load_reuters(download=False)


def test_bad_input_is_a_clear_error(small):
    "The algorithms' settings (the model's own bad input is tested in tests/models)."
    cases = [(lambda: fit_ctm(CTM(small, 3), method="mc"), "method"), (lambda: fit_ctm(CTM(small, 3), cov="band"), "cov"),
             (lambda: fit_ctm(CTM(small, 3), batch_size=0), "batch_size"), (lambda: fit_ctm(CTM(small, 3), n_mc=0), "n_mc")]
    for f, word in cases:
        with pytest.raises(ValueError, match=word): f()
    # a vocabulary word that never occurs: the simple bound's closed-form β would give it probability 0
    C0 = sparse.csr_matrix(np.array([[1, 0, 2], [2, 0, 1]]))
    with pytest.raises(ValueError, match="never occur"): fit_ctm(CTM(C0, 2), method="simple", max_iter=1)
    with pytest.raises(ValueError, match="last column"): beta_from_alpha(np.ones((2, 3)))
    b, lb = beta_from_alpha(np.array([[1.0, -2.0, 0.0], [800.0, -800.0, 0.0]]), with_log=True)
    np.testing.assert_allclose(b.sum(1), 1.0); np.testing.assert_allclose(np.exp(lb), b); assert np.all(np.isfinite(lb))


@pytest.mark.parametrize("K", [2, 4, 7])
@pytest.mark.parametrize("seed", range(3))
def test_xi_derivatives_against_finite_differences(K, seed):
    rng = np.random.default_rng(seed); V = 10
    lb = np.log(rng.dirichlet(np.ones(V), K)); ids = np.sort(rng.choice(V, 6, replace=False)); cnts = rng.integers(1, 5, 6).astype(float)
    eta = 2 * rng.standard_normal((3, K - 1))
    full, diag = xi_stats(eta, ids, cnts, lb, "full"), xi_stats(eta, ids, cnts, lb, "diag")
    f = lambda e: xi_stats(e[None], ids, cnts, lb, None)
    I, h = np.eye(K - 1), 1e-5
    for s in range(3):
        g = np.array([(f(eta[s] + h * I[j]).value[0] - f(eta[s] - h * I[j]).value[0]) / (2 * h) for j in range(K - 1)])
        H = np.array([(f(eta[s] + h * I[j]).grad[0] - f(eta[s] - h * I[j]).grad[0]) / (2 * h) for j in range(K - 1)])
        np.testing.assert_allclose(full.grad[s], g, atol=1e-7)
        np.testing.assert_allclose(full.hess[s], H, atol=1e-7)
        np.testing.assert_allclose(diag.hess[s], np.diagonal(full.hess[s]), atol=1e-13)
    np.testing.assert_allclose(full.cr.sum(0), cnts, rtol=1e-12)              # responsibilities sum to 1 over topics
    lg = xi_stats_log(eta, ids, cnts, lb, "full")
    for f in ("value", "grad", "hess", "cr"): np.testing.assert_allclose(getattr(full, f), getattr(lg, f), rtol=1e-10, atol=1e-12)
    a = lb[:, ids] @ cnts                                                    # the simple bound's term Σ_k a_k h_k
    v, gs, Hs, _ = simple_stats(eta, a, "full")
    fs = lambda e: float(logistic_map(e) @ a)
    for s in range(3):
        g = np.array([(fs(eta[s] + h * I[j]) - fs(eta[s] - h * I[j])) / (2 * h) for j in range(K - 1)])
        H = np.array([(simple_stats((eta[s] + h * I[j])[None], a, None)[1][0] - simple_stats((eta[s] - h * I[j])[None], a, None)[1][0]) / (2 * h) for j in range(K - 1)])
        np.testing.assert_allclose(gs[s], g, atol=1e-7); np.testing.assert_allclose(Hs[s], H, atol=1e-7)


def test_extreme_eta_is_finite():
    lb = np.log(np.full((3, 4), 0.25)); st = xi_stats(np.array([[1e3, -1e3], [-800.0, -900.0]]), np.array([0, 3]), np.array([2.0, 1.0]), lb, "full")
    assert np.all(np.isfinite(st.value)) and np.all(np.isfinite(st.grad)) and np.all(np.isfinite(st.hess))
    np.testing.assert_allclose(st.value, 3 * np.log(0.25))                  # every topic alike: ξ = log 0.25 for any η


def test_loglik_against_word_positions(small):
    rng = np.random.default_rng(4); beta = rng.dirichlet(np.ones(12), 3); eta = rng.standard_normal((30, 5, 2))
    out = corpus_loglik(small, eta, beta)
    for d in (0, 7, 29):
        row = small.getrow(d); words = np.repeat(row.indices, row.data)
        brute = [np.sum(np.log(logistic_map(e) @ beta[:, words])) for e in eta[d]]
        np.testing.assert_allclose(out[d], brute, rtol=1e-12)
        np.testing.assert_allclose(doc_loglik(row.indices, row.data, eta[d], beta), brute, rtol=1e-12)


@pytest.mark.parametrize("method,cov", list(itertools.product(METHODS, COVS)))
def test_every_method_raises_the_bound(small, method, cov):
    r = fit_ctm(CTM(small, 3, seed=0), method, cov, max_iter=3, tol=0, seed=0)
    assert r.stop is Stop.MAX_ITER and r.n_iter == 3 and len(r.history) == 4
    assert r.history.vlb[-1] > r.history.vlb[0]
    D = small.shape[0]
    assert r.m.shape == (D, 2) and r.S.shape == ((D, 2) if cov == "diag" else (D, 2, 2))
    np.testing.assert_allclose(r.beta.sum(1), 1.0); assert np.all(r.beta > 0)
    np.linalg.cholesky(r.Sigma)
    assert np.isclose(r.vlb, ctm_vlb(r.model, r.state, 10, r.info["seed"] + 1))      # the reported bound is the state's
    if method == "simple": assert r.history[-1]["simple_vlb"] < r.history.vlb[-1]


def test_reuters_bound_rises_in_seconds(reuters):
    model = CTM(reuters.counts, 5, seed=0)
    r = fit_ctm(model, "h-mc-ssvi", "diag", max_iter=2, tol=0, seed=0)
    v = r.history.vlb
    assert np.all(np.diff(v) > 0), v
    assert (v[-1] - v[0]) / model.n_words.sum() > 0.3                          # nats per word
    assert r.history.time[-1] < 60


def test_fixed_parameters_and_budget(small):
    model = CTM(small, 3, seed=0)
    r = fit_ctm(model, "h-mc-ssvi", "diag", max_iter=2, learn=False, tol=0)
    assert np.array_equal(r.mu, model.mu) and np.array_equal(r.Sigma, model.Sigma) and np.array_equal(r.beta, model.beta)
    r2 = fit_ctm(model, "h-mc-ssvi", "diag", max_iter=2, tol=0, state0=r.state)     # a warm start continues from it
    assert r2.history.vlb[0] == pytest.approx(r.history.vlb[-1])
    rf = fit_ctm(model, "s-dsvi", "full", max_iter=1, tol=0)                      # no precisions: H-MC-SSVI forms them from L
    rf2 = fit_ctm(model, "h-mc-ssvi", "full", max_iter=1, tol=0, state0=rf.state, blas_threads=None)
    assert rf2.history.vlb[0] == pytest.approx(rf.history.vlb[-1]) and rf2.state.P is not None
    np.testing.assert_allclose(rf2.state.P @ rf2.state.S, np.broadcast_to(np.eye(2), rf2.state.S.shape), atol=1e-8)   # P and L agree
    assert rf2.history.vlb[-1] > rf2.history.vlb[0]
    assert fit_ctm(model, max_iter=50, tol=0, max_seconds=1e-9).stop is Stop.MAX_SECONDS
    assert fit_ctm(model, max_iter=50, tol=0, callback=lambda rec: rec["sweep"] >= 1).stop is Stop.CALLBACK


def test_fit_documents_raises_each_documents_bound(small):
    rng = np.random.default_rng(5); beta = rng.dirichlet(np.ones(12), 3); mu, Sigma = np.array([0.2, -0.1]), np.array([[1.0, 0.3], [0.3, 0.8]])
    ev = CTM(small, 3, mu=mu, Sigma=Sigma, beta=beta); D = small.shape[0]
    st0 = init_state(ev, "diag", S0=1.0); st0.m[:] = mu; st0.L[:] = np.sqrt(np.diag(Sigma))
    before = ctm_vlb(ev, st0, 50, per_doc=True)
    for cov, method in [("diag", "h-mc-ssvi"), ("full", "h-mc-ssvi"), ("diag", "s-dsvi")]:
        m, S = fit_documents(small, mu, Sigma, beta, n_iter=20, cov=cov, method=method, seed=0)
        assert m.shape == (D, 2) and S.shape == ((D, 2) if cov == "diag" else (D, 2, 2))
        st = init_state(ev, cov, S0=1.0); st.m[:] = m
        st.L[:] = np.sqrt(S) if cov == "diag" else np.linalg.cholesky(S)
        after = ctm_vlb(ev, st, 50, per_doc=True)
        assert np.mean(after > before) > 0.9 and after.sum() > before.sum(), (cov, method)
    theta = topic_proportions(m, S)
    np.testing.assert_allclose(theta.sum(1), 1.0); np.testing.assert_allclose(word_probs(theta, beta).sum(1), 1.0)
    with pytest.raises(ValueError, match="counts has .* columns but the topics have a vocabulary of 5 words"): fit_documents(small, mu, Sigma, beta[:, :5])
    m0, S0 = fit_documents(small[:0], mu, Sigma, beta)                       # no new document: empty results, as before
    assert m0.shape == (0, len(mu)) and len(S0) == 0


@pytest.mark.slow
def test_recovers_generating_topics():
    "K = 3, 200 documents of 100 words: each learned topic within total variation 0.1 of its generating topic."
    rng = np.random.default_rng(1)
    beta_true = rng.dirichlet(np.full(24, 0.1), size=3)
    gen = generate_ctm(200, 100, beta_true, np.array([0.5, -0.5]), np.array([[4.0, 2.0], [2.0, 4.0]]), 2)
    r = fit_ctm(CTM(gen, 3, seed=0), "h-mc-ssvi", "diag", max_iter=100, lr_beta=3.0, tol=0, eval_every=20, seed=0)
    perm = min(itertools.permutations(range(3)), key=lambda p: np.abs(r.beta[list(p)] - beta_true).sum())
    tv = 0.5 * np.abs(r.beta[list(perm)] - beta_true).sum(1)
    assert tv.max() < 0.1, tv


def _doc_step_reference(ids, cnts, m, L, P, prior, log_beta, method, cov, rho, eps, opt_m, opt_L=None):
    "One document's update written out document by document: the reference for the batched `docs_step`."
    eta = m + (eps * L if cov == "diag" else eps @ L.T); need = None if method == "s-dsvi" else cov
    if method == "simple": _, G, H, aux = simple_stats(eta, log_beta[:, ids] @ cnts, need)
    else: st = xi_stats(eta, ids, cnts, log_beta, need); G, H, aux = st.grad, st.hess, st.cr
    Pn = None
    if method == "s-dsvi":
        if cov == "diag": Ln = L + opt_L.step(1.0 / L - prior.precision_diag * L + np.mean(G * eps, 0))
        else: Ln = L + np.tril(opt_L.step(np.tril(np.diag(1.0 / np.diag(L)) - prior.solve(L) + G.T @ eps / eps.shape[0])))
        Ld, Lnd = (L, Ln) if cov == "diag" else (np.diag(L), np.diag(Ln).copy())   # a diagonal entry crossing 0 is halved
        Lnd = np.where(Lnd <= 0, 0.5 * Ld, Lnd); Ln = Lnd if cov == "diag" else np.tril(Ln, -1) + np.diag(Lnd)
    elif cov == "diag":
        Pn = (1 - rho) * P + rho * (prior.precision_diag + np.maximum(-H.mean(0), 0.0)); Ln = 1.0 / np.sqrt(Pn)
    else:
        Pn = (1 - rho) * P + rho * (prior.precision + psd_part(-H.mean(0))[0])
        Ln = np.linalg.cholesky(np.linalg.solve(Pn, np.eye(Pn.shape[0])))
    return m + opt_m.step(prior.solve(prior.mu - m) + G.mean(0)), Ln, Pn, aux


@pytest.mark.parametrize("method,cov", list(itertools.product(METHODS, COVS)))
@pytest.mark.parametrize("seed", [0, 1])
def test_batched_step_is_the_per_document_route(small, method, cov, seed):
    "docs_step on 30 documents (K = 4, a dense prior, four steps) = the documents' updates one by one, to rounding."
    rng = np.random.default_rng(seed); K = 4; k1 = K - 1
    lb = np.log(rng.dirichlet(np.ones(small.shape[1]), K)); A = rng.standard_normal((k1, k1))
    pr = GaussianPrior(rng.standard_normal(k1), A @ A.T + np.eye(k1))
    D = small.shape[0]; rows = DocRows.of(sparse.csr_matrix(small, dtype=float), 0, D)
    st = init_state(CTM(small, K, beta=np.exp(lb)), cov, method != "s-dsvi", 2.0)
    m, L, P = st.m, st.L, st.P; om, oL = Adagrad(), Adagrad(); oms, oLs = [Adagrad() for _ in range(D)], [Adagrad() for _ in range(D)]
    for t in range(1, 5):
        eps = rng.standard_normal((D, 6, k1))
        ref = [_doc_step_reference(*rows.one(d), m[d], L[d], None if P is None else P[d], pr, lb, method, cov, 1 / t, eps[d], oms[d], oLs[d])
               for d in range(D)]
        m, L, P, _, aux = docs_step(rows, m, L, P, pr, lb, method, cov, 1 / t, eps, om, oL)
        np.testing.assert_allclose(m, [r[0] for r in ref], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(L, [r[1] for r in ref], rtol=1e-9, atol=1e-12)
        if P is not None: np.testing.assert_allclose(P, [r[2] for r in ref], rtol=1e-10)
        if method != "simple":
            np.testing.assert_allclose(alpha_grad(aux, rows.ids, np.exp(lb)), sum(alpha_grad(r[3], rows.one(d)[0], np.exp(lb)) for d, r in enumerate(ref)), atol=1e-10)


@pytest.mark.parametrize("batch_size", [1, 7, None])
def test_schedules_learn_the_closed_form_prior(small, batch_size):
    "After a run with learning, μ, Σ are the blocks' closed form of the final q (every step ends with it); the bound rises."
    r = fit_ctm(CTM(small, 3, seed=0), "h-mc-ssvi", "full", batch_size=batch_size, max_iter=3, tol=0, seed=0)
    pr = closed_form_prior(r.m, r.S, "full")
    np.testing.assert_allclose(r.mu, pr.mu, atol=1e-12); np.testing.assert_allclose(r.Sigma, pr.prior.dense(), atol=1e-12)
    assert r.history.vlb[-1] > r.history.vlb[0] and r.info["batch_size"] == batch_size


class _Capture:
    "An optimiser that records the gradient it is handed and returns a zero step."
    def step(self, g): self.g = np.array(g, copy=True); return 0.0 * g


def doc_step(ids, cnts, m, L, P, pr, lb, method, cov, rho, e, om, oL=None):
    "`docs_step` on a batch of one document: (m, L, P, projected, aux) of that document."
    mn, Ln, Pn, n, aux = docs_step(DocRows(np.zeros(len(ids), dtype=int), ids, cnts, 1), m[None], L[None],
                                   None if P is None else P[None], pr, lb, method, cov, rho, e[None], om, oL)
    return mn[0], Ln[0], None if Pn is None else Pn[0], n, aux


@pytest.fixture(scope="module")
def doc3():
    "A document of 8 distinct words with random topics (K = 3), a non-diagonal prior, a Gauss-Hermite grid and the bound under it."
    rng = np.random.default_rng(11)
    lb = np.log(rng.dirichlet(np.ones(8), 3)); ids = np.arange(8); cnts = rng.integers(1, 6, 8).astype(float)
    Sig = np.array([[1.5, 0.4], [0.4, 0.8]]); pr = GaussianPrior(np.array([0.2, -0.3]), Sig)
    x, w = gh_nodes(30)
    Z2 = np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2); W2 = np.outer(w, w).ravel()
    def bound(m, L): return W2 @ xi_stats(m + Z2 @ L.T, ids, cnts, lb, None).value - kl_gauss(m, L @ L.T, pr.mu, Sig)
    def dB(m, L, i, j, h=1e-5):
        E = np.zeros((2, 2)); E[i, j] = h
        return (bound(m, L + E) - bound(m, L - E)) / (2 * h)
    return dict(lb=lb, ids=ids, cnts=cnts, pr=pr, Z2=Z2, W2=W2, dB=dB)


def test_sdsvi_gradient_is_the_bounds_gradient(doc3):
    "The gradients doc_step hands its optimisers (S-DSVI, full and diagonal) against finite differences of the quadrature bound."
    c = doc3; lb, ids, cnts, pr = c["lb"], c["ids"], c["cnts"], c["pr"]
    m, L, s = np.array([0.5, -0.1]), np.array([[0.7, 0.0], [0.25, 0.4]]), np.array([0.6, 0.45])
    fd_L = np.array([[c["dB"](m, L, i, j) if j <= i else 0.0 for j in range(2)] for i in range(2)])
    fd_s = np.array([c["dB"](m, np.diag(s), j, j) for j in range(2)])
    e = np.random.default_rng(3).standard_normal((200_000, 2)); e -= e.mean(0)      # sample mean 0, sample covariance I
    e = solve_triangular(np.linalg.cholesky(e.T @ e / e.shape[0]), e.T, lower=True).T
    cm, cL, cs = _Capture(), _Capture(), _Capture()
    doc_step(ids, cnts, m, L, None, pr, lb, "s-dsvi", "full", 1.0, e, cm, cL)
    doc_step(ids, cnts, m, s, None, pr, lb, "s-dsvi", "diag", 1.0, e, _Capture(), cs)
    g_quad = pr.solve(pr.mu - m) + c["W2"] @ xi_stats(m + c["Z2"] @ L.T, ids, cnts, lb, None).grad
    np.testing.assert_allclose(cL.g[0], fd_L, atol=0.01); assert np.all(np.triu(cL.g[0], 1) == 0)
    np.testing.assert_allclose(cs.g[0], fd_s, atol=0.01)
    np.testing.assert_allclose(cm.g[0], g_quad, atol=0.01)


def test_projections(doc3):
    "Π_S++ is the Frobenius-nearest PSD matrix; the natural steps with ρ = 1 use it (full) and max(0, ·) (diagonal)."
    rng = np.random.default_rng(12)
    for _ in range(20):
        A = rng.standard_normal((4, 4)); A = A + A.T
        P, n = psd_part(A); R = A - P
        assert np.linalg.eigvalsh(P).min() > -1e-12 and np.linalg.eigvalsh(R).max() < 1e-12
        assert np.abs(P @ R).max() < 1e-10 and n == np.sum(np.linalg.eigvalsh(A) < 0)
        B = A @ A.T; np.testing.assert_allclose(psd_part(B)[0], B, atol=1e-12)
    c = doc3; lb, ids, cnts, pr = c["lb"], c["ids"], c["cnts"], c["pr"]; m = np.array([0.5, -0.1])
    e = np.random.default_rng(16).standard_normal((50, 2)); s = np.full(2, np.sqrt(10.0))   # one curvature of each sign
    negH = -xi_stats(m + e * s, ids, cnts, lb, "diag").hess.mean(0)
    _, _, P1, n1, _ = doc_step(ids, cnts, m, s, 1 / s**2, pr, lb, "h-mc-ssvi", "diag", 1.0, e, _Capture())
    assert np.any(negH < 0) and np.any(negH > 0) and n1 == np.sum(negH < 0)
    np.testing.assert_allclose(P1, pr.precision_diag + np.maximum(negH, 0.0), rtol=1e-13)
    negHf = -xi_stats(m + e * s, ids, cnts, lb, "full").hess.mean(0)
    _, _, P2, n2, _ = doc_step(ids, cnts, m, np.diag(s), np.eye(2) / 10, pr, lb, "h-mc-ssvi", "full", 1.0, e, _Capture())
    assert n2 == 1; np.testing.assert_allclose(P2, pr.precision + psd_part(negHf)[0], rtol=1e-12)


def test_diagonal_natural_step_fixed_point(doc3):
    "Diagonal H-MC-SSVI at fixed m, non-diagonal Σ: the bound's derivative in s vanishes where the curvature is not clipped."
    c = doc3; lb, ids, cnts, pr = c["lb"], c["ids"], c["cnts"], c["pr"]; m = np.array([0.5, -0.1])
    rng = np.random.default_rng(13); s, P = np.ones(2), np.ones(2)
    for t in range(1, 401):
        _, s, P, _, _ = doc_step(ids, cnts, m, s, P, pr, lb, "h-mc-ssvi", "diag", 1.0 / t, rng.standard_normal((200, 2)), _Capture())
    grad_s = np.array([c["dB"](m, np.diag(s), j, j) for j in range(2)])
    curv = -(c["W2"] @ xi_stats(m + c["Z2"] * s, ids, cnts, lb, "diag").hess)
    assert np.any(curv > 0) and np.abs(grad_s[curv > 0]).max() < 0.01, (grad_s, curv)


def test_tiny_mixture_probabilities_use_the_log_path():
    "p_w ≈ 1e-174 > 0: the product path's Hessian term c/p² overflowed; the log path is used below 1e-150."
    lb = np.log(np.full((3, 3), 1e-300) + np.eye(3) * (1 - 2e-300))
    eta = np.array([[-400.0, 0.0]]); ids, cnts = np.array([0]), np.array([1.0])
    for hess in ("full", "diag"):
        a, b = xi_stats(eta, ids, cnts, lb, hess), xi_stats_log(eta, ids, cnts, lb, hess)
        for f in ("value", "grad", "hess", "cr"):
            assert np.all(np.isfinite(getattr(a, f))), (hess, f)
            np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=1e-10, atol=1e-300)


def test_numpy_scalars_and_chunked_proportions(small):
    model = CTM(small, 3, seed=0)
    r = fit_ctm(model, max_iter=1, tol=0, lr=np.float32(1.0), lr_beta=np.float64(0.5))
    assert r.n_iter == 1 and np.isfinite(r.vlb)
    for bad in (np.float32(np.nan), np.float64(-1.0), True, "1"):
        with pytest.raises(ValueError, match="lr"): fit_ctm(model, max_iter=1, lr=bad)
    with pytest.raises(ValueError, match="lr"): fit_documents(small, model.mu, model.Sigma, model.beta, lr=0.0)
    assert np.all(np.isfinite(fit_documents(small[:2], model.mu, model.Sigma, model.beta, n_iter=2, lr=np.float32(1.0))[0]))
    rng = np.random.default_rng(0); m = rng.standard_normal((23, 2)); Sv = rng.uniform(0.5, 2, (23, 2))
    Lf = np.tril(rng.standard_normal((23, 2, 2))) + 2 * np.eye(2); Sf = Lf @ np.swapaxes(Lf, 1, 2)
    for S in (Sv, Sf):
        np.testing.assert_array_equal(topic_proportions(m, S, 20, 1, chunk=5), topic_proportions(m, S, 20, 1, chunk=100))


@pytest.mark.parametrize("method", ["h-mc-ssvi", "simple"])
def test_budget_stop_inside_sweep_skips_the_closing_update(small, monkeypatch, method):
    "A time budget that runs out after 3 of 30 documents, one per step: μ, Σ, β are those after the 3rd step (the simple"
    " method's closed-form β, which needs every document, is not taken from a partial sweep); the documents not reached"
    " keep their start q."
    import vgi_lit.methods.ctm as C

    class After3(C.History):
        def out_of_time(self):                 # asked once after the start record (the driver), then after each step
            self._n = getattr(self, "_n", 0) + 1
            return self._n >= 4
    model = CTM(small, 3, seed=0)
    st0 = init_state(model, "diag", True, 10.0)
    monkeypatch.setattr(C, "History", After3)
    r = fit_ctm(model, method, batch_size=1, max_iter=5, tol=0, seed=0)
    assert r.stop is Stop.MAX_SECONDS and r.history[-1]["documents"] == 3 and r.n_iter == 1
    np.testing.assert_array_equal(r.m[3:], st0.m[3:])
    assert not np.allclose(r.m[:3], st0.m[:3])
    assert np.array_equal(r.beta, st0.beta) == (method == "simple")
    pr = closed_form_prior(r.m, r.S, "full")
    np.testing.assert_allclose(r.mu, pr.mu, atol=1e-12); np.testing.assert_allclose(r.Sigma, pr.prior.dense(), atol=1e-12)


def test_full_natural_step_factor(doc3):
    "The full-covariance natural step takes L of S = P⁻¹ from P's reversed Cholesky factor (stacked): L is lower with"
    " positive diagonal and LLᵀ = P⁻¹ (seeded P up to cond 1e8)."
    import vgi_lit.methods.ctm as C
    rng = np.random.default_rng(5)
    for c_ in (1.0, 1e4, 1e8):
        Q, _ = np.linalg.qr(rng.standard_normal((6, 6))); P = (Q * np.geomspace(1, c_, 6)) @ Q.T; P = 0.5 * (P + P.T)
        L = C._cov_factor_from_precision(P[None])[0]
        assert np.array_equal(L, np.tril(L)) and np.diag(L).min() > 0
        np.testing.assert_allclose(L.T @ P @ L, np.eye(6), atol=1e-7)
    c = doc3; lb, ids, cnts, pr = c["lb"], c["ids"], c["cnts"], c["pr"]; m = np.array([0.5, -0.1])
    e = np.random.default_rng(16).standard_normal((50, 2)); s = np.full(2, np.sqrt(10.0))
    _, L2, P2, _, _ = doc_step(ids, cnts, m, np.diag(s), np.eye(2) / 10, pr, lb, "h-mc-ssvi", "full", 1.0, e, _Capture())
    np.testing.assert_allclose(L2 @ L2.T @ P2, np.eye(2), atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_damped_newton_never_lowers_f_when_the_full_step_overshoots(seed):
    """f(x) = −(x − c)ᵀΣ⁻¹(x − c)/2 − 5 Σ_k exp(x_k) with the metric A = Σ⁻¹ only (the exp term's curvature left out): the
    full step from 0 overshoots, so only the halving keeps every accepted f rising; it still ends at the stationary point."""
    rng = np.random.default_rng(seed); n = 4
    c = rng.standard_normal(n); Sig = np.eye(n) + 0.3; L = np.linalg.cholesky(Sig)
    f = lambda x: -0.5 * (x - c) @ cho_solve((L, True), x - c) - 5.0 * np.exp(x).sum()
    grad = lambda x: -cho_solve((L, True), x - c) - 5.0 * np.exp(x)
    seen = []
    def direction(x):
        seen.append(f(x)); g = grad(x)
        return g, newton_direction(L, np.zeros(n), g)
    x0 = np.zeros(n)
    assert f(x0 + direction(x0)[1]) < f(x0)                                   # the full step from x0 lowers f
    seen.clear(); x = damped_newton(f, direction, x0, 1e-12, 200, 1e-12)
    assert np.isfinite(f(x)) and f(x) >= f(x0) and np.all(np.diff(seen) >= 0), np.diff(seen).min()
    assert np.max(np.abs(grad(x))) < 1e-5


def test_damped_newton_takes_no_step_that_lowers_f():
    """A direction along which f only falls (the sign of the gradient flipped, so the decrement still looks positive): no
    step length down to min_step raises f, and x comes back unchanged rather than moved a little downhill."""
    c = np.array([1.0, -2.0, 0.5]); f = lambda x: -0.5 * np.sum((x - c)**2)
    x0 = np.zeros(3); x = damped_newton(f, lambda x: (x - c, x - c), x0, 1e-12, 50, 1e-12)
    assert np.array_equal(x, x0), x - x0


@pytest.mark.parametrize("cov", ["diag", "full"])
def test_a_new_document_without_known_words_gets_the_prior(cov):
    """A held-out document with no word of the vocabulary has no likelihood term: `fit_documents` (and so
    `CTMPosterior.predict`) gives it the prior (μ, Σ) with a warning, and the other documents exactly what they get
    without it (it refused the whole batch); training documents must still have words."""
    import warnings
    import scipy.sparse as sps
    from vgi_lit.methods.ctm import fit_documents
    from vgi_lit.models.ctm import check_counts
    rng = np.random.default_rng(0); K, V = 4, 30
    beta = rng.dirichlet(np.ones(V), K); mu = np.array([0.1, -0.2, 0.0]); Sigma = np.eye(K - 1) + 0.3   # generated
    C = sps.csr_matrix(rng.poisson(1.0, (5, V)).astype(float))
    C2 = sps.vstack([C[:2], sps.csr_matrix((1, V)), C[2:]]).tocsr()
    m1, S1 = fit_documents(C, mu, Sigma, beta, n_iter=10, cov=cov)
    with pytest.warns(UserWarning, match="1 of the 6 documents have no word of the vocabulary \\(first: row 2\\)"):
        m2, S2 = fit_documents(C2, mu, Sigma, beta, n_iter=10, cov=cov)
    assert np.array_equal(np.delete(m2, 2, 0), m1) and np.array_equal(np.delete(S2, 2, 0), S1)
    assert np.array_equal(m2[2], mu) and np.array_equal(S2[2], np.diag(Sigma) if cov == "diag" else Sigma)
    with pytest.raises(ValueError, match="empty document"): check_counts(C2)


def test_the_empty_document_warning_names_the_callers_line():
    "Through `CTMPosterior.predict` as directly, the warning about documents without known words points at the user's line."
    import warnings
    import scipy.sparse as sps
    from vgi_lit.methods.ctm import fit_documents
    rng = np.random.default_rng(0); K, V = 3, 12
    beta = rng.dirichlet(np.ones(V), K)                                                   # generated
    C = sps.vstack([sps.csr_matrix(rng.poisson(1.0, (2, V)).astype(float)), sps.csr_matrix((1, V))]).tocsr()
    import vgi_lit
    post = vgi_lit.fit(CTM(sps.csr_matrix(rng.poisson(1.0, (6, V)).astype(float) + np.eye(6, V)), K, seed=0), max_iter=1)
    for call in (lambda: fit_documents(C, np.zeros(K - 1), np.eye(K - 1), beta, n_iter=3), lambda: post.predict(C, n_iter=3)):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always"); call()
        assert seen and seen[0].filename == __file__, [w.filename for w in seen]
