"CTM held-out evaluation: (105) against quadrature over seeds and proposals, the Laplace fit's mode, (106) and the bound (56), bad input."
import functools
import numpy as np, pytest, scipy.sparse as sp
import vgi_lit.methods.ctm as ctm
import vgi_lit.methods.ctm_eval as ctm_eval
from vgi_lit.methods.ctm import log_logistic_map, CTM, psd_part
from vgi_lit.methods.ctm_eval import (doc_grad_hess, is_loglik, quad_loglik, laplace_documents,
                                      heldout_nll, completion_nll, mc_bound)


def _doc(seed, K=2, V=8, scale=4):
    rng = np.random.default_rng(seed)
    beta = rng.dirichlet(np.full(V, 0.5), size=K); cnts = rng.integers(0, scale, V); cnts[0] += 1
    return beta, np.arange(V), cnts


@functools.lru_cache(maxsize=None)
def _exact_and_laplace(seed):
    beta, ids, cnts = _doc(seed)
    mu, Sig = np.array([0.5 * seed - 0.5]), np.array([[0.5 + seed]])
    m, S = laplace_documents(sp.csr_matrix((cnts, (np.zeros_like(ids), ids)), shape=(1, len(ids))), mu, Sig, beta)
    return quad_loglik(ids, cnts, mu, Sig, beta), m, S


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("c", [0.0, 0.1, 1.0, None])
def test_is_matches_quadrature(seed, c):
    beta, ids, cnts = _doc(seed)
    mu, Sig = np.array([0.5 * seed - 0.5]), np.array([[0.5 + seed]])
    exact, m, S = _exact_and_laplace(seed)
    est, se, ess = (is_loglik(ids, cnts, mu, Sig, beta, n_samples=20_000, seed=seed) if c is None
               else is_loglik(ids, cnts, mu, Sig, beta, m[0], S[0], c, n_samples=5_000, seed=seed))
    assert se < 0.05 and abs(est - exact) < 4 * se + 1e-9, (est, exact, se)
    assert 1 <= ess <= (20_000 if c is None else 5_000)


def test_batching_does_not_change_the_estimate():
    beta, ids, cnts = _doc(5, K=3)
    mu, Sig = np.zeros(2), np.eye(2)
    a = is_loglik(ids, cnts, mu, Sig, beta, np.zeros(2), np.ones(2), 0.1, n_samples=3000, batch=3000, seed=1)
    b = is_loglik(ids, cnts, mu, Sig, beta, np.zeros(2), np.ones(2), 0.1, n_samples=3000, batch=700, seed=1)
    assert abs(a[0] - b[0]) < 1e-10 and abs(a[1] - b[1]) < 1e-10 and abs(a[2] - b[2]) < 1e-7        # the same draws, in batches
    assert is_loglik(ids, cnts, mu, Sig, beta, n_samples=100, seed=7) == is_loglik(ids, cnts, mu, Sig, beta, n_samples=100, seed=7)


def test_laplace_mode_is_stationary_and_full_matches_diag():
    rng = np.random.default_rng(0); K, V = 5, 30
    beta = rng.dirichlet(np.ones(V), size=K); counts = sp.csr_matrix(rng.poisson(0.7, size=(3, V)))
    A = rng.normal(size=(K - 1, K - 1)); Sig = A @ A.T / K + np.eye(K - 1); mu = rng.normal(size=K - 1)
    m, Sd = laplace_documents(counts, mu, Sig, beta); m2, Sf = laplace_documents(counts, mu, Sig, beta, cov="full")
    np.testing.assert_allclose(m, m2); np.testing.assert_allclose(Sd, np.diagonal(Sf, axis1=1, axis2=2))
    for d in range(3):
        ids, c = counts[d].indices, counts[d].data
        g, _ = doc_grad_hess(ids, c, m[d], beta)
        assert np.abs(g - np.linalg.solve(Sig, m[d] - mu)).max() < 1e-5     # ∇ log p(w|η) = Σ⁻¹(η − μ) at the mode
        assert np.all(np.linalg.eigvalsh(Sf[d]) > 0)
        _, H = doc_grad_hess(ids, c, m[d], beta)                             # S_d = (Σ⁻¹ + Π(−H))⁻¹ at the mode: S_d(Σ⁻¹ + Π(−H)) = I
        np.testing.assert_allclose(Sf[d] @ (np.linalg.solve(Sig, np.eye(K - 1)) + psd_part(-H)[0]), np.eye(K - 1), atol=1e-9)


def test_heldout_and_completion_and_bound():
    rng = np.random.default_rng(1); K, V = 3, 12
    beta = rng.dirichlet(np.ones(V), size=K); counts = sp.csr_matrix(rng.poisson(1.0, size=(4, V)) + np.eye(4, V, dtype=int))
    mu, Sig = np.zeros(K - 1), np.eye(K - 1)
    m, S = laplace_documents(counts, mu, Sig, beta)
    r = heldout_nll(counts, mu, Sig, beta, m, S, c=0.1, n_samples=4000, seed=0)
    lens = np.asarray(counts.sum(axis=1)).ravel()
    assert np.isclose(r["nll_per_word"], np.mean(-r["logp"] / lens)) and r["logp"].shape == (4,)
    bound = [mc_bound(counts[d], mu, Sig, beta, m[d:d + 1], S[d:d + 1], n_samples=2000, seed=d) for d in range(4)]
    assert np.all(np.array(bound) < r["logp"] + 0.05)                              # (56) is a lower bound on log p
    off = [mc_bound(counts[d], mu, Sig, beta, m[d:d + 1] + 1.0, S[d:d + 1], n_samples=2000, seed=d) for d in range(4)]
    assert np.all(np.array(off) < np.array(bound) - 0.3)                          # a worse q, a lower bound
    half = sp.csr_matrix(counts.toarray() // 2)
    comp = completion_nll(half, counts, mu, Sig, beta, fit=lambda C, *a: (np.zeros((C.shape[0], K - 1)), None))
    h = np.exp(log_logistic_map(np.zeros(K - 1)))                                  # at η = 0: θ uniform
    ll = counts.toarray() @ np.log(h @ beta)
    assert np.isclose(comp["nll_per_word_pooled"], -ll.sum() / counts.sum())
    assert np.isclose(comp["nll_per_word_doc_mean"], np.mean(-ll / lens)) and not np.isclose(comp["nll_per_word_doc_mean"], comp["nll_per_word_pooled"])


def test_bad_input():
    beta, ids, cnts = _doc(0)
    mu, Sig = np.zeros(1), np.eye(1)
    with pytest.raises(ValueError, match="rows of beta"): is_loglik(ids, cnts, mu, Sig, beta * 2)
    with pytest.raises(ValueError, match="beta must be positive"): is_loglik(ids, cnts, mu, Sig, np.vstack([beta[0], np.eye(8)[0]]))
    with pytest.raises(ValueError, match="mu must"): is_loglik(ids, cnts, np.zeros(3), Sig, beta)
    with pytest.raises(ValueError, match="c must"): is_loglik(ids, cnts, mu, Sig, beta, np.zeros(1), np.ones(1), c=-1)
    with pytest.raises(ValueError, match="word ids"): is_loglik(ids + 5, cnts, mu, Sig, beta)
    with pytest.raises(ValueError, match="cnts must hold integer"): is_loglik(ids, cnts + 0.5, mu, Sig, beta)
    with pytest.raises(ValueError, match="n_samples"): is_loglik(ids, cnts, mu, Sig, beta, n_samples=1e4)
    with pytest.raises(ValueError, match="batch"): is_loglik(ids, cnts, mu, Sig, beta, batch=100.0)
    with pytest.raises(ValueError, match="positive definite"): is_loglik(ids, cnts, mu, -Sig, beta)
    with pytest.raises(ValueError, match="S must"): is_loglik(ids, cnts, mu, Sig, beta, np.zeros(1), np.ones((2, 2)))
    with pytest.raises(ValueError, match="K = 2"): quad_loglik(ids, cnts, np.zeros(2), np.eye(2), np.full((3, 8), 1 / 8))
    with pytest.raises(ValueError, match="cov must"): laplace_documents(sp.csr_matrix(cnts[None]), mu, Sig, beta, cov="x")
    with pytest.raises(ValueError, match="at least one word"): heldout_nll(sp.csr_matrix((1, 8), dtype=np.int64), mu, Sig, beta)


def test_ess_and_heldout_input():
    "The effective sample size exp(2a₁ − a₂) of the weights: n for equal weights (a one-word vocabulary), the value from"
    " the weights otherwise; heldout_nll takes float counts with integer values (CTM.counts) and names m, S on bad input."
    rng = np.random.default_rng(2); K, V = 3, 10
    beta = rng.dirichlet(np.ones(V), size=K); counts = sp.csr_matrix(rng.poisson(1.5, size=(3, V)) + np.eye(3, V, dtype=int))
    mu, Sig = np.zeros(K - 1), np.eye(K - 1)
    flat = np.full((K, 1), 1.0)                                                  # every η gives the word probability 1
    assert np.isclose(is_loglik(np.array([0]), np.array([3]), mu, Sig, flat, n_samples=500, seed=0)[2], 500)
    ids, c = counts[0].indices, counts[0].data
    est, se, ess = is_loglik(ids, c, mu, Sig, beta, n_samples=300, batch=300, seed=4)
    eta = np.random.default_rng(4).standard_normal((300, K - 1))
    w = np.exp(ctm.doc_loglik(ids, c, eta, beta)); np.testing.assert_allclose(ess, w.sum() ** 2 / (w ** 2).sum(), rtol=1e-10)
    m, S = laplace_documents(counts, mu, Sig, beta)
    r_int = heldout_nll(counts, mu, Sig, beta, m, S, n_samples=200, seed=0)
    r_flt = heldout_nll(CTM(counts, K).counts, mu, Sig, beta, m, S, n_samples=200, seed=0)
    np.testing.assert_allclose(r_flt["logp"], r_int["logp"], rtol=1e-12); assert r_int["ess"].shape == (3,)
    with pytest.raises(ValueError, match="m and S"): heldout_nll(counts, mu, Sig, beta, m=m)
    with pytest.raises(ValueError, match="m must have one row"): heldout_nll(counts, mu, Sig, beta, m[:2], S[:2])
    with pytest.raises(ValueError, match="S must have one row"): heldout_nll(counts, mu, Sig, beta, m, S[:2])
    with pytest.raises(ValueError, match="n_samples"): heldout_nll(counts, mu, Sig, beta, n_samples=200.0)


def test_eval_uses_the_model_pages_functions():
    "One implementation of the log-likelihood, log h, the PSD projection and the topic check: ctm_eval takes ctm's."
    assert ctm_eval.doc_loglik is ctm.doc_loglik and ctm_eval.log_logistic_map is ctm.log_logistic_map
    assert ctm_eval.psd_part is ctm.psd_part and ctm_eval.check_beta is ctm.check_beta
    assert not any(hasattr(ctm_eval, n) for n in ("log_h", "xi", "_check_beta"))


def test_heldout_warns_of_documents_with_few_effective_draws():
    "Long documents under the prior's proposal and few draws: the weights collapse, and a RuntimeWarning names how many."
    rng = np.random.default_rng(2); K, V = 4, 40
    beta = rng.dirichlet(np.full(V, 0.1), size=K); counts = sp.csr_matrix(rng.poisson(6.0, size=(3, V)))
    mu, Sig = np.zeros(K - 1), 4.0 * np.eye(K - 1)
    with pytest.warns(RuntimeWarning, match=r"of 3 documents have an effective sample size below 5 of 200 draws"):
        r = heldout_nll(counts, mu, Sig, beta, n_samples=200, seed=0)
    assert np.any(r["ess"] < ctm_eval.LOW_ESS)
    m, S = laplace_documents(counts, mu, Sig, beta)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                      # a fitted proposal: well-spread weights, no warning
        r = heldout_nll(counts, mu, Sig, beta, m, S, c=0.1, n_samples=2000, seed=0)
    assert np.all(r["ess"] >= ctm_eval.LOW_ESS)
