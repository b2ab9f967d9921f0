"Tests of vgi_lit.sites: every site-matrix kind against the dense route, site_pass, as_sites and bad input."
import numpy as np
import pytest
import scipy.sparse as sp
from vgi_lit.sites import SiteMatrix, IdentitySites, DenseSites, CSRSites, BlockedSites, as_sites


def _kinds(H):
    csr = CSRSites(sp.csr_matrix(H)); csr.block_rows = 7
    return [DenseSites(H), csr, BlockedSites(len(H), H.shape[1], lambda sel: H[sel], block_size=5)]


def _close(a, b, rel=1e-12):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.max(np.abs(a - b)) <= rel * max(1.0, np.max(np.abs(b)))


@pytest.mark.parametrize("seed", [0, 1])
def test_operations_equal_dense(seed):
    rng = np.random.default_rng(seed)
    n, d = 31, 6
    H = rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.4)
    H[3] = 0.0                                                   # an empty row
    x, X, r, R, w, A = (rng.normal(size=d), rng.normal(size=(d, 2)), rng.normal(size=n), rng.normal(size=(n, 3)),
                        rng.normal(size=n), rng.normal(size=(3, d)))
    for S in _kinds(H):
        assert (S.n, S.d) == (n, d)
        assert _close(S.matvec(x), H @ x) and _close(S.matvec(X), H @ X)
        assert _close(S.rmatvec(r), H.T @ r) and _close(S.rmatvec(R), H.T @ R)
        G = S.gram(w)
        assert _close(G, H.T @ (w[:, None] * H)) and np.array_equal(G, G.T), S.kind
        G2 = S.gram(w**2)
        assert _close(G2, H.T @ (w[:, None]**2 * H)) and np.array_equal(G2, G2.T)
        assert _close(S.quad(A), np.sum((H @ A.T)**2, 1))
        assert _close(S.sq_rmatvec(r), (H * H).T @ r) and _close(S.sq_rmatvec(R), (H * H).T @ R)
        assert _close(S.row_norms2(), np.sum(H * H, 1))
        idx = np.array([30, 0, 3, 3])
        assert _close(S.rows(idx), H[idx]) and _close(S.dense(), H)
        spans = [(s, e) for s, e, _ in S.blocks()]
        assert spans[0][0] == 0 and spans[-1][1] == n and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


def test_identity():
    rng = np.random.default_rng(2)
    S, n = IdentitySites(8), 8
    r, w, A = rng.normal(size=n), rng.normal(size=n), rng.normal(size=(3, n))
    I = np.eye(n)
    assert _close(S.matvec(r), r) and _close(S.rmatvec(r), r) and _close(S.gram(w), np.diag(w))
    assert _close(S.quad(A), np.sum((I @ A.T)**2, 1)) and _close(S.sq_rmatvec(r), r) and _close(S.row_norms2(), np.ones(n))
    assert _close(S.rows(np.array([2, 5])), I[[2, 5]]) and _close(S.dense(), I)
    assert _close(SiteMatrix.quad(S, A), S.quad(A))              # the block route agrees with the shortcut


def test_site_pass_equals_operations():
    rng = np.random.default_rng(3)
    n, d = 40, 5
    H = rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.5)
    a, m, A = rng.normal(size=n), rng.normal(size=d), rng.normal(size=(d, d))
    def fn(s, e, mb, qb):
        f = a[s:e] + mb
        return dict(E=np.cos(f) - qb, dE=-np.sin(f), w=np.exp(-f**2), sq=np.c_[f, f**2], keep_q=qb)
    f = a + H @ m
    for S in _kinds(H):
        out = S.site_pass(m, A, fn)
        q = np.sum((H @ A.T)**2, 1)
        assert abs(out['E'] - np.sum(np.cos(f) - q)) <= 1e-12 * np.sum(np.abs(np.cos(f) - q))
        assert _close(out['g'], H.T @ -np.sin(f)) and _close(out['gram'], H.T @ (np.exp(-f**2)[:, None] * H))
        assert _close(out['sq'], (H * H).T @ np.c_[f, f**2]) and _close(out['keep_q'], q)
    with pytest.raises(ValueError, match="unknown entry"):
        DenseSites(H).site_pass(m, None, lambda s, e, mb, qb: dict(bogus=mb))


def test_as_sites_and_bad_input():
    H = np.arange(12.0).reshape(4, 3)
    assert isinstance(as_sites(H), DenseSites) and isinstance(as_sites(sp.csr_matrix(H)), CSRSites)
    assert isinstance(as_sites(None, 5), IdentitySites)
    S = as_sites(H); assert as_sites(S) is S
    with pytest.raises(TypeError, match="tocsr"): as_sites(sp.coo_matrix(H))
    with pytest.raises(TypeError, match="tocsr"): CSRSites(sp.csc_matrix(H))
    with pytest.raises(ValueError, match="needs n"): as_sites(None)
    with pytest.raises(ValueError, match="row_fn returned shape"): BlockedSites(4, 3, lambda sel: np.zeros((1, 3))).dense()
    with pytest.raises(ValueError, match="block_size"): BlockedSites(4, 3, lambda sel: H[sel], block_size=0)
    with pytest.raises(ValueError, match="site indices"): DenseSites(H).rows(np.array([4]))
    with pytest.raises(ValueError, match="shape"): DenseSites(H).matvec(np.ones(4))
    with pytest.raises(ValueError, match="shape"): DenseSites(H).quad(np.ones((2, 4)))


def test_posterior_predicts_at_sparse_inputs():
    "A GLM fitted on CSR inputs predicts at CSR test rows (chunked by rows, never densified) as at their dense copy."
    import vgi_lit
    import scipy.sparse as sp
    from vgi_lit.likelihoods import Logistic
    rng = np.random.default_rng(3)
    X = sp.random(300, 12, density=0.2, format="csr", random_state=4); w = rng.standard_normal(12)
    y = np.where(X @ w + 0.3 * rng.standard_normal(300) > 0, 1.0, -1.0)
    post = vgi_lit.fit(vgi_lit.GLM(X, y, Logistic(), prior_cov=2.0), "fpi")
    Xt = sp.random(45, 12, density=0.2, format="csr", random_state=5)
    mu_s, var_s = post.predict(Xt, chunk=20)
    mu_d, var_d = post.predict(Xt.toarray())
    assert np.allclose(mu_s, mu_d, rtol=1e-12, atol=1e-14) and np.allclose(var_s, var_d, rtol=1e-12, atol=1e-14)
    assert mu_s.shape == (45,)
