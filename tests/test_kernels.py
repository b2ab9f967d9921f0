"""Sweeps over the kernels of vgi_lit.kernels: every kernel type x input dimension x ARD or not, and
sums and products; derivatives against central differences, symmetry, Kdiag, the log-parameter round
trip, and bad parameters and inputs refused with a ValueError naming the kernel and the parameter."""
import pickle

import numpy as np
import pytest

from vgi_lit.kernels import (RBF, Matern12, Matern32, Matern52, Linear, Periodic, Constant, White,
                             Kernel, Sum, Product)
from vgi_lit.models import GP

STATIONARY = [RBF, Matern12, Matern32, Matern52]
DIMS = [1, 2, 4]


def leaves(d, ard):
    "One kernel of each type for d input dimensions; ARD (one parameter per input) where the type has it."
    ls = np.linspace(0.5, 1.5, d) if ard else 0.8
    out = [cls(1.3, ls) for cls in STATIONARY] + [Linear(np.linspace(0.4, 1.6, d) if ard else 0.7)]
    if not ard: out += [Periodic(1.1, 0.9, 1.9), Constant(0.6), White(0.2)]
    return out


def combos(d, ard):
    ls = np.linspace(0.5, 1.5, d) if ard else 0.8
    return [RBF(1.0, ls) + White(0.1), Matern52(1.2, ls) * Periodic(0.8, 1.1, 2.3),
            Linear(0.5) * Matern12(0.9, ls) + Constant(0.3) * RBF(0.7, ls),
            (RBF(1.0, ls) + Linear(0.2)) * (Matern32(1.1, ls) + Constant(0.4))]


CASES = [(k, d) for d in DIMS for ard in (False, True) for k in leaves(d, ard) + combos(d, ard)]
IDS = [f"{k!r}-d{d}" for k, d in CASES]


def fd_dK(k, X, h=1e-5):
    th = k.params; E = np.eye(k.n_params) * h
    return np.array([(k.with_params(th + E[i]).K(X) - k.with_params(th - E[i]).K(X)) / (2 * h) for i in range(k.n_params)])


@pytest.mark.parametrize("k,d", CASES, ids=IDS)
def test_dK_matches_central_differences(k, d):
    X = np.random.default_rng(d).normal(size=(9, d))
    dK = k.dK(X)
    assert dK.shape == (k.n_params, 9, 9) and dK.dtype == np.float64
    fd = fd_dK(k, X)
    assert np.max(np.abs(dK - fd)) <= 1e-6 * np.max(np.abs(fd)), (k, np.max(np.abs(dK - fd)))


@pytest.mark.parametrize("k,d", CASES, ids=IDS)
def test_symmetry_kdiag_and_cross_blocks(k, d):
    rng = np.random.default_rng(10 + d)
    X, X2 = rng.normal(size=(8, d)), rng.normal(size=(5, d))
    K = k.K(X)
    assert K.shape == (8, 8) and np.array_equal(K, K.T)
    assert np.all(np.abs(k.dK(X) - k.dK(X).transpose(0, 2, 1)) <= 1e-14 * (1 + np.abs(k.dK(X))))
    np.testing.assert_allclose(k.Kdiag(X), np.diag(K), rtol=1e-13, atol=0)
    assert k.K(X, X2).shape == (8, 5)
    np.testing.assert_allclose(k.K(X2, X), k.K(X, X2).T, rtol=1e-13)
    if not any(isinstance(p, White) for p in getattr(k, "parts", (k,))):   # white noise: zero between input sets
        np.testing.assert_allclose(k.K(np.vstack([X, X2]))[:8, 8:], k.K(X, X2), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("k,d", CASES, ids=IDS)
def test_with_params_round_trip(k, d):
    th = k.params
    assert th.dtype == np.float64 and th.shape == (k.n_params,) == (len(k.param_names),)
    assert len(set(k.param_names)) == k.n_params
    same = k.with_params(th)
    assert same == k and np.array_equal(same.params, th) and type(same) is type(k)
    moved = k.with_params(th + 0.25)
    np.testing.assert_array_equal(moved.params, th + 0.25)
    assert moved != k and np.array_equal(k.params, th)                       # k itself is unchanged
    X = np.random.default_rng(3).normal(size=(6, d))
    np.testing.assert_allclose(moved.with_params(th).K(X), k.K(X), rtol=1e-14)
    assert pickle.loads(pickle.dumps(k)) == k


def test_param_names_and_values():
    k = RBF(2.0, [0.5, 3.0])
    assert k.param_names == ["variance", "lengthscale[0]", "lengthscale[1]"]
    np.testing.assert_allclose(k.params, np.log([2.0, 0.5, 3.0]), rtol=1e-15)
    assert k.variance == 2.0 and isinstance(RBF(1.0, 2.0).lengthscale, float)
    assert Periodic(1, 2, 3).param_names == ["variance", "lengthscale", "period"]
    s = RBF() + Linear([1.0, 2.0]) * Constant()
    assert s.param_names == ["terms[0].variance", "terms[0].lengthscale", "terms[1].factors[0].variance[0]",
                             "terms[1].factors[0].variance[1]", "terms[1].factors[1].variance"]
    assert len((RBF() + White() + Constant()).parts) == 3 and isinstance(RBF() * White(), Product)
    assert isinstance(RBF() + White(), Sum) and isinstance(RBF(), Kernel)


def test_product_derivative_with_a_zero_factor():
    "A factor whose matrix has zeros (Linear at x = 0): the product rule must not divide by it."
    X = np.array([[0.0], [1.0], [-0.5], [2.0]])
    k = Linear(0.7) * RBF(1.2, 0.9) * Periodic(0.8, 1.0, 1.5)
    fd = fd_dK(k, X)
    assert np.all(np.isfinite(k.dK(X))) and np.max(np.abs(k.dK(X) - fd)) <= 1e-7 * np.max(np.abs(fd))


def test_matern_exact_distance_near_points():
    "Matérn kernels are functions of r, not r**2: two points 1e-9 apart keep their distance."
    X = np.array([[3.0, -2.0], [3.0 + 1e-9, -2.0]])
    assert Matern12(1.0, 0.5).K(X)[0, 1] == pytest.approx(np.exp(-2e-9), rel=1e-15, abs=0)


def test_psd_on_random_inputs():
    rng = np.random.default_rng(5)
    for d in (1, 3):
        X = rng.normal(size=(40, d))
        for k in leaves(d, True) + leaves(d, False) + combos(d, True):
            ev = np.linalg.eigvalsh(k.K(X))
            assert ev.min() >= -1e-10 * ev.max(), (k, ev.min())


def test_kernels_are_immutable():
    k = RBF(1.0, [1.0, 2.0])
    with pytest.raises(AttributeError, match="immutable"):
        k.variance = 2.0
    th = k.params; th[0] = 5.0               # a copy: the kernel does not change
    assert k.params[0] == 0.0
    k.lengthscale[0] = 9.0                   # a copy: the kernel does not change
    assert k.lengthscale[0] == 1.0


def test_models_accept_any_kernel():
    rng = np.random.default_rng(2)
    X, y = rng.normal(size=(12, 2)), rng.normal(size=12)
    from vgi_lit.likelihoods import Gaussian
    smooth = Matern52(1.0, [0.7, 1.3]) + Linear(0.2)
    gp = GP(X, y, Gaussian(0.5), smooth + White(0.05))
    a, c, H = gp.project(rng.normal(size=(3, 2)))
    assert a.shape == (3,) and H.shape == (3, 12) and np.all(np.isfinite(H)) and np.all(c >= 0)
    # white noise enters K(X, X) but not K(X_new, X): H = K_smooth (K_smooth + 0.05 I)⁻¹ at the training inputs
    H_expected = np.linalg.solve(smooth.K(X) + 0.05 * np.eye(12), smooth.K(X)).T
    np.testing.assert_allclose(gp.project(X)[2], H_expected, atol=1e-6)


@pytest.mark.parametrize("make,words", [
    (lambda: RBF(variance=0.0), "RBF variance"),
    (lambda: RBF(variance=np.nan), "RBF variance"),
    (lambda: Matern32(lengthscale=-1.0), "Matern32 lengthscale"),
    (lambda: Matern12(lengthscale=[1.0, np.inf]), "Matern12 lengthscale"),
    (lambda: Matern52(variance=[1.0, 2.0]), "Matern52 variance must be a scalar"),
    (lambda: RBF(lengthscale=[[1.0]]), "RBF lengthscale"),
    (lambda: RBF(lengthscale=[]), "RBF lengthscale"),
    (lambda: RBF(lengthscale="x"), "RBF lengthscale"),
    (lambda: Linear([1.0, 0.0]), "Linear variance"),
    (lambda: Periodic(period=0.0), "Periodic period"),
    (lambda: Periodic(lengthscale=[1.0, 2.0]), "Periodic lengthscale"),
    (lambda: Constant(-2.0), "Constant variance"),
    (lambda: White(np.inf), "White variance"),
    (lambda: RBF(1.0, [1.0, 2.0]).K(np.ones((3, 3))), "RBF: ARD lengthscale has 2 entries but inputs have 3"),
    (lambda: Matern52(1.0, [1.0, 2.0]).dK(np.ones((3, 1))), "Matern52: ARD lengthscale"),
    (lambda: Linear([1.0, 2.0]).Kdiag(np.ones((3, 3))), "Linear: ARD variance"),
    (lambda: (White() + RBF(1.0, [1.0, 2.0])).K(np.ones((3, 3))), "RBF: ARD lengthscale"),
    (lambda: RBF().K(np.ones((3, 2)), np.ones((3, 3))), "columns"),
    (lambda: RBF().K(np.array([[np.nan]])), "NaN or inf"),
    (lambda: RBF().K(np.ones((2, 2, 2))), "2-d array"),
    (lambda: RBF(1.0, [1.0, 2.0]).with_params([0.0, np.nan, 0.0]), "RBF lengthscale\\[0\\]"),
    (lambda: RBF().with_params([0.0, np.inf]), "RBF lengthscale"),
    (lambda: Periodic().with_params([0.0, 0.0, 800.0]), "Periodic period"),
    (lambda: Linear().with_params([-800.0]), "Linear variance"),
    (lambda: RBF().with_params([0.0]), "expected 2 log-parameters"),
    (lambda: (RBF() + White()).with_params(np.zeros(4)), "expected 3 log-parameters"),
    (lambda: (RBF() * White()).with_params([0.0, 0.0, np.nan]), "White variance"),
])
def test_bad_inputs_are_named(make, words):
    with pytest.raises(ValueError, match=words):
        make()


def test_combination_of_non_kernels_refused():
    with pytest.raises(TypeError):
        RBF() + 1.0
    with pytest.raises(TypeError, match="kernels"):
        Sum(RBF(), "a")


def _dK_reference(k, X):
    """∂K/∂θ of a stationary kernel from the formulas, one array per parameter, with nothing shared between K and the
    lengthscale derivatives: [s g(r²), s w(r²) Δ_j²/ℓ_j² (or s w r²)] with w = −g'(r)/r and w r² → 0 at r = 0."""
    s, ls = k.variance, np.broadcast_to(np.asarray(k.lengthscale, dtype=float), (X.shape[1],))
    D = np.stack([((X[:, j, None] - X[None, :, j]) / ls[j]) ** 2 for j in range(X.shape[1])])
    r = np.sqrt(D.sum(0))
    g, w = {RBF: (np.exp(-r**2 / 2), np.exp(-r**2 / 2)),
            Matern12: (np.exp(-r), np.exp(-r) / np.where(r > 0, r, 1.0)),
            Matern32: ((1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r), 3 * np.exp(-np.sqrt(3) * r)),
            Matern52: ((1 + np.sqrt(5) * r + 5 * r**2 / 3) * np.exp(-np.sqrt(5) * r), 5 / 3 * (1 + np.sqrt(5) * r) * np.exp(-np.sqrt(5) * r))}[type(k)]
    W = np.where(r > 0, s * w, 0.0)
    return np.stack([s * g] + ([W * Dj for Dj in D] if k.ard else [W * D.sum(0)]))


@pytest.mark.parametrize("cls", STATIONARY)
@pytest.mark.parametrize("d, ard", [(1, False), (3, False), (3, True)])
def test_stationary_dK_one_pass_against_formulas_and_given_K(cls, d, ard):
    "dK (distances once, g and w from one exponential, written into one array) against the formulas; dK(X, K=K + jI) the same bits."
    rng = np.random.default_rng(7 + d)
    X = rng.normal(size=(40, d)) * 2.0; X[9] = X[4]                              # a repeated input: r = 0 off the diagonal
    k = cls(1.7, np.linspace(0.6, 1.4, d) if ard else 0.9)
    dK, ref = k.dK(X), _dK_reference(k, X)
    assert dK.shape == ref.shape and np.max(np.abs(dK - ref)) <= 1e-13 * np.max(np.abs(ref))
    assert np.array_equal(dK[0], k.K(X))                                        # ∂K/∂log σ² = K, bit for bit
    assert np.array_equal(k.dK(X, K=k.K(X) + 1e-4 * np.eye(40)), dK)             # the diagonal of the K given is not read
    with pytest.raises(ValueError, match="K has shape"):
        k.dK(X, K=np.eye(39))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("n, d", [(1, 1), (2, 3), (60, 1), (60, 4), (257, 2)])
def test_K_exactly_symmetric_for_every_kernel(seed, n, d):
    "K(X, X) symmetric bit for bit (what lets GP skip its symmetry pass): inputs far from the origin and repeated rows included."
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * 10.0 ** seed + 3.0 ** seed
    if n > 2: X[n - 1] = X[0]
    for k in leaves(d, False) + leaves(d, True) + combos(d, True):
        K = k.K(X)
        assert np.array_equal(K, K.T), (k, n, d)


def test_kernels_written_elsewhere_keep_the_documented_extension_points():
    """A `Stationary` subclass written outside the module gives `_g(r2)` and `_w(r2)` (no in-place `out`), and a kernel may
    override `_dK(A)` without the prior's K: both keep working in K, dK, a GP and its hyperparameter gradient."""
    from vgi_lit.kernels import Stationary, RBF
    from vgi_lit.models import GP
    from vgi_lit.likelihoods import Poisson
    from vgi_lit.methods.hyper import HyperParams
    from vgi_lit import fit
    class RQ(Stationary):                                   # rational quadratic, α = 1
        def _g(self, r2): return 1.0 / (1.0 + 0.5 * r2)
        def _w(self, r2): return 0.5 / (1.0 + 0.5 * r2) ** 2
    class MyRBF(RBF):
        def _dK(self, A): return super()._dK(A)
    X = np.linspace(0, 3, 6)[:, None]; y = np.array([0, 1, 2, 1, 0, 3.0])
    k = RQ(1.3, 0.7); r2 = ((X - X.T) / 0.7) ** 2
    assert np.allclose(k.K(X), 1.3 / (1.0 + 0.5 * r2), rtol=1e-14, atol=0)
    assert np.allclose(k.dK(X)[0], k.K(X), rtol=1e-14, atol=0)
    for kern in (RQ(1.3, 0.7), MyRBF(1.3, 0.7)):
        gp = GP(X, y, Poisson(), kern)
        hp, fitted = HyperParams(gp), fit(gp, "fpi")
        assert np.all(np.isfinite(hp.grad(gp, fitted.m, fitted.cov)))
