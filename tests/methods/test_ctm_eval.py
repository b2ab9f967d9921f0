"CTM held-out evaluation: (105) against quadrature over seeds and proposals, the Laplace fit's mode, (106) and the bound (56), bad input."
import functools
import numpy as np, pytest, scipy.sparse as sp
from vgi_lit.methods.ctm_eval import (log_h, xi, doc_loglik, doc_grad_hess, is_loglik, quad_loglik, laplace_documents,
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
    est, se = (is_loglik(ids, cnts, mu, Sig, beta, n_samples=20_000, seed=seed) if c is None
               else is_loglik(ids, cnts, mu, Sig, beta, m[0], S[0], c, n_samples=5_000, seed=seed))
    assert se < 0.05 and abs(est - exact) < 4 * se + 1e-9, (est, exact, se)


def test_batching_does_not_change_the_estimate():
    beta, ids, cnts = _doc(5, K=3)
    mu, Sig = np.zeros(2), np.eye(2)
    a = is_loglik(ids, cnts, mu, Sig, beta, np.zeros(2), np.ones(2), 0.1, n_samples=3000, batch=3000, seed=1)
    b = is_loglik(ids, cnts, mu, Sig, beta, np.zeros(2), np.ones(2), 0.1, n_samples=3000, batch=700, seed=1)
    assert abs(a[0] - b[0]) < 1e-10 and abs(a[1] - b[1]) < 1e-10         # the same draws, in batches
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
    nll, mm = completion_nll(half, counts, mu, Sig, beta, fit=lambda C, *a: (np.zeros((C.shape[0], K - 1)), None))
    h = np.exp(log_h(np.zeros(K - 1)))                                             # at η = 0: θ uniform
    assert np.isclose(nll, -(counts.toarray() @ np.log(h @ beta)).sum() / counts.sum())


def test_bad_input():
    beta, ids, cnts = _doc(0)
    mu, Sig = np.zeros(1), np.eye(1)
    with pytest.raises(ValueError, match="beta's rows"): is_loglik(ids, cnts, mu, Sig, beta * 2)
    with pytest.raises(ValueError, match="strictly positive"): is_loglik(ids, cnts, mu, Sig, np.vstack([beta[0], np.eye(8)[0]]))
    with pytest.raises(ValueError, match="mu must"): is_loglik(ids, cnts, np.zeros(3), Sig, beta)
    with pytest.raises(ValueError, match="c must"): is_loglik(ids, cnts, mu, Sig, beta, np.zeros(1), np.ones(1), c=-1)
    with pytest.raises(ValueError, match="word ids"): is_loglik(ids + 5, cnts, mu, Sig, beta)
    with pytest.raises(ValueError, match="integer"): is_loglik(ids, cnts.astype(float), mu, Sig, beta)
    with pytest.raises(ValueError, match="positive definite"): is_loglik(ids, cnts, mu, -Sig, beta)
    with pytest.raises(ValueError, match="S must"): is_loglik(ids, cnts, mu, Sig, beta, np.zeros(1), np.ones((2, 2)))
    with pytest.raises(ValueError, match="K = 2"): quad_loglik(ids, cnts, np.zeros(2), np.eye(2), np.full((3, 8), 1 / 8))
    with pytest.raises(ValueError, match="cov must"): laplace_documents(sp.csr_matrix(cnts[None]), mu, Sig, beta, cov="x")
    with pytest.raises(ValueError, match="at least one word"): heldout_nll(sp.csr_matrix((1, 8), dtype=np.int64), mu, Sig, beta)
