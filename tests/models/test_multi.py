"""The multi-latent models (`vgi_lit.models.multi`): bad input refused with errors naming it; the two spaces of `MultiCov`
agree."""
import numpy as np
import pytest
from vgi_lit.softmax import Softmax
from vgi_lit.models.multi import MultiGLM, MultiGP, MultiCov
from vgi_lit.kernels import RBF

X = np.random.default_rng(0).normal(size=(9, 2)); y = np.array([0, 1, 2] * 3)


@pytest.mark.parametrize("make, err, msg", [
    (lambda: MultiGLM(X, y + 1, Softmax(3)), ValueError, "0..2"),
    (lambda: MultiGLM(X, y.astype(float) + 0.5, Softmax(3)), ValueError, "fractions"),
    (lambda: MultiGLM(X, np.r_[np.nan, y[1:]], Softmax(3)), ValueError, "NaN"),
    (lambda: MultiGLM(X[:4], y, Softmax(3)), ValueError, "rows"),
    (lambda: MultiGLM(np.r_[X[:8], [[np.nan, 0]]], y, Softmax(3)), ValueError, "NaN"),
    (lambda: MultiGLM(X, y[:, None], Softmax(3)), ValueError, "1-d"),
    (lambda: MultiGP(X, y, Softmax(3), [RBF(), RBF()]), ValueError, "list of 3"),
    (lambda: MultiGP(X, y, Softmax(3), "rbf"), TypeError, "K\\(X"),
    (lambda: MultiGP(X, y, Softmax(3), RBF(), jitter=-1), ValueError, "jitter"),
    (lambda: MultiGLM(X, y, Softmax(3), prior_cov=-1.0), ValueError, "positive"),
])
def test_bad_input(make, err, msg):
    with pytest.raises(err, match=msg): make()


def test_spaces_agree_for_a_gp():
    mod = MultiGP(X, y, Softmax(3), [RBF(), RBF(lengthscale=2.0), RBF(variance=3.0)])
    rng = np.random.default_rng(1); lam = rng.normal(size=(9, 3, 3)); lam = lam @ np.swapaxes(lam, 1, 2)
    cn, cw = MultiCov(mod, lam, 'n'), MultiCov(mod, lam, 'w')
    g = rng.normal(size=mod.d)
    assert np.allclose(cn.site_cov(), cw.site_cov(), atol=1e-8) and np.allclose(cn.matvec(g), cw.matvec(g), atol=1e-8)
    assert np.isclose(cn.kl_cov_part(), cw.kl_cov_part(), rtol=1e-6)
    with pytest.raises(ValueError, match="site space"): MultiCov(MultiGLM(X, y, Softmax(3)), lam, 'n')
