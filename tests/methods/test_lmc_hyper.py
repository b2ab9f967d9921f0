"""The LMC's hyperparameters (`vgi_lit.methods.multi_hyper` on an `LMCGP`): the envelope gradient against central
differences of the optimal VLB with every parameter free (kernels, loadings, κ, the noise factor), its parameter names and
defaults, a κ of 0 refused unless held, and `fit(lmc, learn=True)`."""
import numpy as np
import pytest
from vgi_lit.inference import fit
from vgi_lit.kernels import RBF, Matern32
from vgi_lit.models.multi import LMCGP
from vgi_lit.softmax import Softmax
from vgi_lit.methods.multi_output import MultiGaussian
from vgi_lit.methods.multi_hyper import MultiHyperParams, learn_multi

rng = np.random.default_rng(7)
X = rng.normal(size=(10, 2)); c = rng.integers(0, 3, 10)
Y = np.sin(X @ rng.normal(size=(2, 3))) + 0.3 * rng.normal(size=(10, 3)); Y[2, 1] = Y[6, [0, 2]] = np.nan
SE = np.array([[0.2, 0.05, 0.0], [0.05, 0.3, 0.02], [0.0, 0.02, 0.25]])
W = [[[1.0], [0.5], [0.2]], [[0.2, 0.1], [-0.5, 0.3], [1.0, -0.2]]]


def fd_error(model, fixed, h=1e-5, seed=0):
    hp = MultiHyperParams(model, fixed); rg = np.random.default_rng(seed)
    th = hp.theta0 + 0.1 * rg.standard_normal(len(hp.theta0)); u = rg.standard_normal(len(th)); u /= np.linalg.norm(u)
    F = lambda t: fit(hp.build(t), 'fpi', tol=1e-11, max_iter=5000)
    p = F(th); gu = hp.grad(p.model, p.m, p.cov) @ u
    return abs(gu - (F(th + h * u).vlb - F(th - h * u).vlb) / (2 * h)) / abs(gu)


def test_envelope_gradient_with_every_parameter_free():
    mod = LMCGP(X, Y, MultiGaussian(SE), [RBF(1.0, 1.0), Matern32(0.5, [1.0, 2.0])], W, [[0.1, 0.2, 0.3], 0.2], mean=0.2)
    assert fd_error(mod, fixed=[]) < 1e-6
    hp = MultiHyperParams(mod, fixed=[], learn_mean=True)
    assert hp.free_names[:7] == ['kernel[0].variance', 'kernel[0].lengthscale', 'W[0][0,0]', 'W[0][1,0]', 'W[0][2,0]', 'kappa[0][0]', 'kappa[0][1]']
    assert hp.free_names[-1] == 'mean' and sum(n.startswith('noise') for n in hp.free_names) == 6


def test_defaults_and_zero_kappa():
    mod = LMCGP(X, c, Softmax(3), [RBF(1.0, 1.0), RBF(1.0, 0.3)], W, [0.1, 0.0])
    with pytest.raises(ValueError, match=r"kappa\[1\]\[0\], kappa\[1\]\[1\], kappa\[1\]\[2\] = 0 has no logarithm"): MultiHyperParams(mod)
    hp = MultiHyperParams(mod, fixed=["kappa[1]", "kernel[0].variance", "kernel[1].variance"])
    assert {'kappa[1][0]', 'kappa[1][1]', 'kappa[1][2]'} <= set(hp.fixed) and 'kappa[0][0]' in hp.free_names
    assert set(MultiHyperParams(LMCGP(X, c, Softmax(3), [RBF(), RBF()], W, [0.1, 0.1])).fixed) == {'kernel[0].variance', 'kernel[1].variance'}
    assert np.allclose(hp.build(hp.theta0).prior_dense(), mod.prior_dense(), rtol=1e-13, atol=0)   # build at the start is the model


def test_fit_learns_an_lmc():
    mod = LMCGP(X, Y, MultiGaussian(SE), [RBF(1.0, 1.0), RBF(1.0, 0.3)], W, [0.1, 0.1])
    start = fit(mod, tol=1e-8)
    lf = fit(mod, learn=True, fixed=["W", "noise"], tol=1e-5, max_iter=8)
    assert lf.info['learned'] and lf.vlb > start.vlb and isinstance(lf.model, LMCGP) and lf.model is not mod
    assert set(lf.info['theta']) == set(MultiHyperParams(mod).names) and lf.info['theta']['W[1][2,1]'] == -0.2
    with pytest.raises(ValueError, match="independent class blocks"): learn_multi(mod, "grad")
