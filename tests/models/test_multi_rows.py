"""The site blocks and the curvature sum of the multi-latent models on all sites and on a subset (`rows`): the one-product
forms of `MultiLGM.curvature_sum` and `MultiCov.site_cov` equal the same sums written as one `np.einsum` over the sites, in every
space of `MultiCov` and for every model with or without rows (seeded sweeps); `psd_part` against its definition; bad rows,
bad site blocks and indefinite blocks in site space refused by name."""
import numpy as np
import pytest
from vgi_lit.softmax import Softmax
from vgi_lit.kernels import RBF
from vgi_lit.models.multi import MultiGLM, MultiGP, MultiCov, CoregionalGP, LMCGP, psd_part
from vgi_lit.models.multi_sparse import MultiSparseGP


def models(seed):
    "(model, spaces) of every kind, seeded: rows x_i (GLM, sparse GP) and x_i = e_i (independent, Kronecker and LMC priors)."
    rng = np.random.default_rng(seed)
    n, C = 23, 4
    X, y = rng.normal(size=(n, 3)), rng.integers(0, C, n)
    lik = Softmax(C)
    return [(MultiGLM(X, y, lik, prior_cov=1.5), ('w', 'u')),
            (MultiSparseGP(X, y, lik, RBF(2.0, 1.3), X[::3]), ('w', 'u')),
            (MultiGP(X, y, lik, [RBF(lengthscale=1.0 + c) for c in range(C)]), ('w', 'n', 'u')),
            (CoregionalGP(X, y, lik, RBF(lengthscale=1.5), W=rng.normal(size=(C, 2)), kappa=0.3), ('w', 'n', 'u')),
            (LMCGP(X, y, lik, [RBF(lengthscale=0.8), RBF(lengthscale=2.0)], W=[rng.normal(size=(C, 1))] * 2, kappa=[0.2, 0.4]), ('w', 'n', 'u'))]


def einsum_site_cov(md, cov):
    "diag c_i + x_iᵀV_cc'x_i (n, C, C) as one einsum over the sites (the form the one-product site_cov replaces)."
    Xr = np.eye(md.n) if md.X is None else md.X
    out = np.einsum('ip,cpdq,iq->icd', Xr, cov.dense().reshape(md.C, md.p, md.C, md.p), Xr)
    return out + np.stack([np.diag(c) for c in md.c])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_site_cov_and_curvature_sum_equal_the_einsum_forms(seed):
    rng = np.random.default_rng(10 + seed)
    for md, spaces in models(seed):
        C, n = md.C, md.n
        lam = rng.normal(size=(n, C, C)); lam = lam @ np.swapaxes(lam, 1, 2) / C
        rows = rng.choice(n, 9)                                              # with repeats, unsorted
        Xr = np.eye(n) if md.X is None else md.X
        full = np.einsum('ip,icd,iq->cpdq', Xr, lam, Xr).reshape(md.d, md.d)
        sub = np.einsum('ip,icd,iq->cpdq', Xr[rows], lam[rows], Xr[rows]).reshape(md.d, md.d)
        scale = np.abs(full).max()
        assert np.abs(md.curvature_sum(lam) - full).max() < 1e-13 * scale
        assert np.abs(md.curvature_sum(lam[rows], rows) - sub).max() < 1e-13 * scale
        m = rng.normal(size=md.d); G = rng.normal(size=(n, C))
        assert np.allclose(md.site_mean(m, rows), md.site_mean(m)[rows], rtol=1e-14, atol=1e-14)
        assert np.allclose(md.HTmul(G[rows], rows), np.einsum('ip,ic->cp', Xr[rows], G[rows]).ravel(), rtol=1e-13, atol=1e-13)
        for space in spaces:
            cov = MultiCov(md, lam, space)
            ref = einsum_site_cov(md, cov); s = np.abs(ref).max()
            got_rows = MultiCov(md, lam, space).site_cov(rows)               # the rows alone (nothing kept)
            got_all = cov.site_cov()
            assert np.abs(got_all - ref).max() < 1e-11 * s, (type(md).__name__, space)
            assert np.abs(got_rows - ref[rows]).max() < 1e-11 * s, (type(md).__name__, space)
            assert np.abs(cov.site_cov(rows) - got_all[rows]).max() == 0.0  # from the kept blocks
            assert np.allclose(MultiCov(md, lam, space).site_cov(np.arange(n)), got_all, rtol=1e-13, atol=1e-13 * s)


def test_large_rows_span_several_chunks():
    "More rows than one chunk of the matrix products (256): the same sums."
    rng = np.random.default_rng(3); n, C, p = 600, 3, 5
    X = rng.normal(size=(n, p)); md = MultiGLM(X, rng.integers(0, C, n), Softmax(C))
    lam = rng.normal(size=(n, C, C)); lam = lam + np.swapaxes(lam, 1, 2)
    full = np.einsum('ip,icd,iq->cpdq', X, lam, X).reshape(md.d, md.d)
    assert np.allclose(md.curvature_sum(lam), full, rtol=1e-12, atol=1e-10)
    cov = MultiCov(md, np.abs(lam) * 0 + 0.1 * np.eye(C))
    assert np.allclose(cov.site_cov(), einsum_site_cov(md, cov), rtol=1e-12, atol=1e-14)


def test_psd_part_against_its_definition():
    rng = np.random.default_rng(4)
    G = rng.normal(size=(30, 5, 5)); G = G + np.swapaxes(G, 1, 2) + 3 * np.eye(5)
    P, k = psd_part(G); S, k2 = psd_part(G, sqrt=True)
    e, Q = np.linalg.eigh(G)
    assert k == k2 == int(np.sum(e[:, 0] < 0)) and 0 < k < 30
    assert np.allclose(P, np.einsum('icj,ij,idj->icd', Q, np.maximum(e, 0), Q), atol=1e-13)
    assert np.allclose(S @ S, P, atol=1e-12) and np.array_equal(P, np.swapaxes(P, 1, 2))
    Gn = G + 0.3 * rng.normal(size=G.shape)                                 # non-symmetric: its symmetric part is taken
    assert np.allclose(psd_part(Gn)[0], psd_part(0.5 * (Gn + np.swapaxes(Gn, 1, 2)))[0], atol=1e-13)
    assert psd_part(np.zeros((0, 3, 3)))[1] == 0 and psd_part(np.zeros((2, 3, 3)))[1] == 0


@pytest.mark.parametrize("G, msg", [(np.zeros((3, 2)), "square blocks"), (np.zeros((2, 3, 2)), "square blocks"),
                                    (np.full((2, 2, 2), np.nan), "NaN")])
def test_psd_part_bad_input(G, msg):
    with pytest.raises(ValueError, match=msg): psd_part(G)


def test_bad_rows_and_blocks_are_refused():
    md, _ = models(0)[0]; C = md.C; lam = np.zeros((md.n, C, C)); cov = MultiCov(md, lam)
    with pytest.raises(IndexError): md.site_mean(np.zeros(md.d), [0, md.n])
    with pytest.raises(IndexError): cov.site_cov([md.n + 3])
    with pytest.raises(ValueError, match="1-d index"): md.site_mean(np.zeros(md.d), [[0, 1]])
    with pytest.raises(ValueError, match=r"Lam must have shape \(2, 4, 4\)"): md.curvature_sum(lam, [0, 1])
    with pytest.raises(ValueError, match=r"G must have shape \(3, 4\)"): md.HTmul(np.zeros((md.n, C)), [0, 1, 2])


def test_site_space_names_an_indefinite_site():
    md = models(0)[2][0]; C = md.C
    lam = np.tile(np.eye(C), (md.n, 1, 1)); lam[7] -= 2 * np.eye(C); lam[11, 0, 0] = -0.5
    with pytest.raises(ValueError, match=r"2 sites are not, site 7 has eigenvalue -1\.000e\+00"): MultiCov(md, lam, 'n')
    ok = np.tile(np.eye(C), (md.n, 1, 1)); ok[7, 0, 0] = -1e-15             # a negative eigenvalue of rounding size
    assert MultiCov(md, ok, 'n').space == 'n'
