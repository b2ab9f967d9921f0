"""A Matérn kernel forms its pairwise distances once for K(X) and the dK(X) after it ('02_kernels', 'Stationary kernels and the
lengthscale derivative', **One pass**): K keeps r², dK takes it; the values are the same bits as before, when dK formed them again."""
import copy
import pickle
import numpy as np
import pytest
from vgi_lit import kernels
from vgi_lit.kernels import Stationary, Matern12, Matern32, Matern52, RBF, Linear

MATERN = (Matern12, Matern32, Matern52)


def _old_r2(self, A, B, same):
    "The per-dimension distances as the kernels formed them before r² was kept (a temporary per term)."
    if not self._exact_dist: return self._sqdist(A, B, same)
    ls = np.broadcast_to(self._values["lengthscale"], A.shape[1]); D = np.zeros((A.shape[0], B.shape[0]))
    for j in range(A.shape[1]): D += ((A[:, j, None] - B[None, :, j]) / ls[j]) ** 2
    return D


@pytest.fixture
def r2_calls(monkeypatch):
    "Counts the calls of the distance routine `Stationary._r2`."
    calls, r2 = [0], Stationary._r2
    def counted(self, A, B, same):
        calls[0] += 1; return r2(self, A, B, same)
    monkeypatch.setattr(Stationary, "_r2", counted)
    return calls


def _kept(k):
    "Whether the process's store holds an r² for a kernel of `k`'s class and parameters."
    return (type(k), k._theta.tobytes()) in kernels._KEPT_R2


def _inputs(seed, n, d):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * 10.0 ** (seed % 3 - 1) + seed
    if n > 2: X[n - 1] = X[0]                                               # a repeated row: r = 0 off the diagonal
    return X, rng.uniform(0.3, 2.0, d)


@pytest.mark.parametrize("cls", MATERN)
def test_K_then_dK_forms_the_distances_once(cls, r2_calls):
    "K(X) and dK(X, K) (a hyperparameter step: the prior, then its gradient): one call of the distance routine; before, two."
    X, _ = _inputs(0, 40, 3)
    k = cls(1.3, 0.8)
    K = k.K(X); D = k.dK(X, K=K + 1e-6 * np.eye(40))
    assert r2_calls[0] == 1
    assert np.array_equal(D, cls(1.3, 0.8).dK(X)) and r2_calls[0] == 2      # a fresh kernel forms them again: the same bits
    k.dK(X)                                                                # the kept r² is used once
    assert r2_calls[0] == 3


def test_a_product_of_matern_kernels_forms_each_factors_distances_once(r2_calls):
    "Product.dK evaluates each factor's K and dK: one distance pass per Matérn factor (before, two)."
    X, _ = _inputs(1, 30, 2)
    k = Matern32(1.2, 0.7) * Linear(0.9) * Matern12(0.8, 1.1)
    D = k.dK(X)
    assert r2_calls[0] == 2
    ref = np.concatenate([Matern32(1.2, 0.7).dK(X) * (Linear(0.9).K(X) * Matern12(0.8, 1.1).K(X)),
                          Linear(0.9).dK(X) * (Matern32(1.2, 0.7).K(X) * Matern12(0.8, 1.1).K(X)),
                          Matern12(0.8, 1.1).dK(X) * (Matern32(1.2, 0.7).K(X) * Linear(0.9).K(X))])
    np.testing.assert_allclose(D, ref, rtol=1e-14, atol=0)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("n, d", [(1, 1), (2, 3), (30, 1), (60, 4), (101, 2)])
def test_values_are_the_old_codes_bit_for_bit(seed, n, d, monkeypatch):
    "K, dK(X), dK(X, K) and K(X, X2) of every Matérn kernel, isotropic and ARD, equal the old code's (nothing kept) to 0 ulp."
    X, ls = _inputs(seed, n, d); X2 = np.random.default_rng(seed).normal(size=(7, d))
    def evaluate(cls, ell):
        k = cls(1.7, ell); K = k.K(X)
        return [K, k.dK(X, K=K + 1e-3 * np.eye(n)), k.dK(X), k.K(X, X2), (k * Linear(0.5)).dK(X), (k + RBF(0.5, ls)).dK(X)]
    new = {(c, a): evaluate(c, ls if a else float(ls[0])) for c in MATERN for a in (False, True)}
    monkeypatch.setattr(Stationary, "_r2", _old_r2); monkeypatch.setattr(Stationary, "_KEEP_R2", -1)   # the old code
    for (c, a), vals in new.items():
        for v_new, v_old in zip(vals, evaluate(c, ls if a else float(ls[0]))):
            assert v_new.shape == v_old.shape and np.array_equal(v_new, v_old), (c, a, n, d)


def test_the_kept_distances_follow_the_inputs():
    "dK uses the kept r² only for the inputs K saw (compared by value, not identity); else it forms them again."
    X, _ = _inputs(2, 25, 2)
    k = Matern52(1.1, 0.9)
    k.K(X); X[3] += 0.5                                                     # the inputs changed in place after K
    assert np.array_equal(k.dK(X), Matern52(1.1, 0.9).dK(X))
    Y = X[::-1].copy()
    k.K(X); assert np.array_equal(k.dK(Y), Matern52(1.1, 0.9).dK(Y)) and not _kept(k)
    k.K(X); k2 = copy.deepcopy(k); k3 = pickle.loads(pickle.dumps(k))
    assert "_kept_r2" not in k2.__dict__ and "_kept_r2" not in k3.__dict__ and k2 == k and k3 == k   # parameters only
    assert np.array_equal(k3.dK(X), k.dK(X))


def test_large_inputs_keep_nothing(monkeypatch, r2_calls):
    "Above `_KEEP_R2` entries K keeps no r² (the memory of one more n × n array), and dK forms the distances again."
    monkeypatch.setattr(Stationary, "_KEEP_R2", 99)
    X, _ = _inputs(0, 10, 2)
    k = Matern32(1.0, 1.0); K = k.K(X)
    assert not _kept(k) and np.array_equal(k.dK(X, K=K), Matern32(1.0, 1.0).dK(X)) and r2_calls[0] == 3


def test_matern_subclasses_written_elsewhere_keep_working(r2_calls):
    "A `_g(r²)` written elsewhere keeps nothing (its K is formed as before); a `_dK(A)` written elsewhere takes the kept r²."
    class MyMatern(Matern32):
        def _g(self, r2): s = np.sqrt(3.0 * r2); return (1.0 + s) * np.exp(-s)
    class MyDK(Matern32):
        def _dK(self, A): return super()._dK(A)
    X, _ = _inputs(1, 20, 3)
    k = MyMatern(1.4, 0.6)
    np.testing.assert_allclose(k.K(X), Matern32(1.4, 0.6).K(X), rtol=1e-14, atol=0)
    assert not _kept(k)
    m = MyDK(1.4, 0.6); r2_calls[0] = 0
    K = m.K(X); D = m.dK(X, K=K)
    assert r2_calls[0] == 1 and np.array_equal(D, Matern32(1.4, 0.6).dK(X))
