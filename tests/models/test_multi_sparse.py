"""The sparse multiclass GP (`vgi_lit.models.multi_sparse`): bad input refused by name; with Z = X it is the dense
`MultiGP` (VLB, optimum, predictions); `fit` with FPi and GRAD reach the same optimum; no n × n array is formed."""
import tracemalloc
import numpy as np
import pytest
import vgi_lit
from vgi_lit.kernels import RBF
from vgi_lit.models import MultiSparseGP, MultiGP, MultiCov
from vgi_lit.softmax import Softmax
from vgi_lit.methods.multiclass import multi_vlb

rng = np.random.default_rng(5)
X = rng.normal(size=(14, 2)); y = np.arange(14) % 3; Z = X[::3] + 0.1


@pytest.mark.parametrize("make, err, msg", [
    (lambda: MultiSparseGP(X, y, Softmax(3), [RBF()] * 3, Z), ValueError, "per-class"),
    (lambda: MultiSparseGP(X, y, Softmax(3), RBF(), Z[:, :1]), ValueError, "columns"),
    (lambda: MultiSparseGP(X, y, Softmax(3), RBF(), Z[:0]), ValueError, "no rows"),
    (lambda: MultiSparseGP(X, y, Softmax(3), RBF(), np.r_[Z, [[np.inf, 0]]]), ValueError, "NaN or inf"),
    (lambda: MultiSparseGP(X[:5], y, Softmax(3), RBF(), Z), ValueError, "rows"),
    (lambda: MultiSparseGP(X, y + 1, Softmax(3), RBF(), Z), ValueError, "0..2"),
    (lambda: MultiSparseGP(X, y, Softmax(3), "rbf", Z), TypeError, r"K\(X"),
    (lambda: MultiSparseGP(X, y, Softmax(3), RBF(), Z, jitter=-1.0), ValueError, "jitter"),
    (lambda: MultiSparseGP(X, y, Softmax(3), RBF(), Z, mean=np.nan), ValueError, "mean"),
])
def test_bad_input(make, err, msg):
    with pytest.raises(err, match=msg): make()


def test_bad_prediction_input():
    mod = MultiSparseGP(X, y, Softmax(3), RBF(), Z)
    cov = MultiCov(mod, np.zeros((14, 3, 3)))
    with pytest.raises(ValueError, match="columns"): mod.predict_latent(mod.mu, cov, X[:, :1])
    with pytest.raises(ValueError, match="NaN"): mod.predict_latent(mod.mu, cov, np.r_[X[:2], [[np.nan, 0]]])
    with pytest.raises(ValueError, match="shape"): mod.predict_latent(mod.mu[:-1], cov, X)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_z_equal_x_is_the_dense_gp(seed):
    r = np.random.default_rng(seed); Xs = r.uniform(-2, 2, size=(10, 2)); ys = r.integers(0, 3, 10)
    lik, k = Softmax(3, n_gh=6), RBF(1.5, 0.6)
    s, d = MultiSparseGP(Xs, ys, lik, k, Xs, mean=0.3, jitter=0.0), MultiGP(Xs, ys, lik, k, mean=0.3, jitter=0.0)
    lam = r.normal(size=(10, 3, 3)); lam = lam @ np.swapaxes(lam, 1, 2); m = r.normal(size=30)
    vs, gs, Gs, _ = multi_vlb(s, m, MultiCov(s, lam)); vd, gd, Gd, _ = multi_vlb(d, m, MultiCov(d, lam))
    assert abs(vs - vd) < 1e-10 * abs(vd) and np.allclose(gs, gd, atol=1e-9) and np.allclose(Gs, Gd, atol=1e-10)


def test_fpi_and_grad_agree_through_fit():
    mod = MultiSparseGP(X, y, Softmax(3, n_gh=6), RBF(1.0, 1.0), Z)
    pf, pg = vgi_lit.fit(mod, "fpi", tol=1e-8), vgi_lit.fit(mod, "grad", tol=1e-7)
    assert pf.converged and abs(pf.vlb - pg.vlb) < 1e-6 * abs(pf.vlb), (pf.vlb, pg.vlb)
    assert pf.cov.space == 'w' and vgi_lit.fit(mod).method == "fpi"
    P = pf.predict_proba(X[:4]); assert P.shape == (4, 3) and np.allclose(P.sum(1), 1.0)


def test_no_n_by_n_array():
    n = 6000                                                           # an n × n float64 array would take 288 MB
    r = np.random.default_rng(0); Xb = r.normal(size=(n, 2)); yb = r.integers(0, 3, n)
    tracemalloc.start()
    mod = MultiSparseGP(Xb, yb, Softmax(3), RBF(), Xb[:8])
    cov = MultiCov(mod, np.broadcast_to(np.eye(3), (n, 3, 3)))
    V = cov.site_cov(); mean, pcov = mod.predict_latent(mod.mu, cov, Xb)
    peak = tracemalloc.get_traced_memory()[1]; tracemalloc.stop()
    assert V.shape == (n, 3, 3) and pcov.shape == (n, 3, 3) and peak < 50e6, peak
