"""The RBF's distances where the product ‖a‖² + ‖b‖² − 2aᵀb would round visibly ('02_kernels', 'Rounding of the distances'):
inputs centred first, then the pairs the product puts near summed again from the differences; the whole array by
differences only past a quarter of the pairs. Every route agrees with the differences."""
import numpy as np
import pytest
from vgi_lit.kernels import RBF, Stationary


def _by_differences(k, A, B):
    ls = np.broadcast_to(k._values["lengthscale"], A.shape[1])
    return k.variance * np.exp(-0.5 * (((A[:, None, :] - B[None, :, :]) / ls) ** 2).sum(-1))


@pytest.fixture
def full_calls(monkeypatch):
    "Counts the all-pairs difference sums."
    calls, f = [0], Stationary._diff_r2
    def counted(self, A, B):
        calls[0] += 1; return f(self, A, B)
    monkeypatch.setattr(Stationary, "_diff_r2", counted)
    return calls


@pytest.mark.parametrize("ard", [False, True])
def test_cross_K_offset_inputs_by_the_centred_product(ard, full_calls):
    "K(X, Z) of inputs offset by 1e5 (ARD or not): the centred product, no all-pairs differences, within 1e-14 of them."
    rng = np.random.default_rng(0)
    X, Z = rng.normal(size=(80, 3)) + 1e5, rng.normal(size=(25, 3)) + 1e5
    Z[3] = X[7]
    k = RBF(1.5, [0.7, 1.0, 2.0] if ard else 1.0)
    K = k.K(X, Z)
    assert full_calls[0] == 0
    np.testing.assert_allclose(K, _by_differences(k, X, Z), rtol=0, atol=1e-14 * 1.5)
    assert K[7, 3] == 1.5


def test_near_pairs_of_a_spread_cross_K_are_exact(full_calls):
    "K(X, Z) with a lengthscale far below the spread: only near pairs summed again; identical rows give the variance exactly."
    rng = np.random.default_rng(1)
    X = rng.uniform(size=(70, 20)); Z = np.vstack([X[:5], rng.uniform(size=(10, 20))])
    k = RBF(2.0, 1e-7)
    K = k.K(X, Z)
    assert full_calls[0] == 0
    assert np.all(K[np.arange(5), np.arange(5)] == 2.0) and np.count_nonzero(K) == 5
    np.testing.assert_allclose(K, _by_differences(k, X, Z), rtol=0, atol=1e-300)


def test_mostly_near_pairs_take_the_differences(full_calls):
    "Past a quarter of the pairs near (many copies of few rows), the whole array is summed from the differences."
    X = np.repeat(np.random.default_rng(2).uniform(size=(3, 10)), 20, 0)
    k = RBF(1.0, 1e-7)
    K = k.K(X)
    assert full_calls[0] == 1
    assert np.array_equal(K, np.equal.outer(np.arange(60) // 20, np.arange(60) // 20).astype(float))


def test_empty_inputs():
    "No rows on either side: an empty array, no warning of an empty mean."
    k = RBF(1.0, 1e-7)
    with np.errstate(all="raise"):
        assert k.K(np.zeros((0, 3)), np.ones((4, 3)) * 1e3).shape == (0, 4)
        assert k.K(np.ones((4, 3)) * 1e3, np.zeros((0, 3))).shape == (4, 0)


def test_a_column_does_not_depend_on_the_other_rows_of_x2():
    "The centre is the first argument's: K(X, X2[:10]) is K(X, X2)[:, :10] bit for bit (predictions in batches agree)."
    rng = np.random.default_rng(3)
    X, X2 = rng.normal(size=(60, 4)) + 1e5, rng.normal(size=(30, 4)) + 1e5
    k = RBF(1.0, 0.5)
    assert np.array_equal(k.K(X, X2[:10]), k.K(X, X2)[:, :10])


@pytest.mark.parametrize("p", [1, 3])
def test_inputs_near_the_float_limit_give_finite_k(p):
    "Inputs of ±1e308 (finite, accepted): the centre would overflow, so the differences are summed: no NaN, k exact."
    X = np.array([[1e308] * p, [-1e308] * p, [1e308] * p, [0.0] * p])
    with np.errstate(over="ignore"):
        K = RBF(1.0, 1.0).K(X)
    assert np.all(np.isfinite(K)) and np.array_equal(K, K.T)
    assert K[0, 2] == 1.0 and K[0, 1] == 0.0 and K[0, 3] == 0.0


def test_one_or_two_inputs_take_the_differences_directly(full_calls):
    "With one or two inputs the exact route is the differences at once (no product first)."
    X = np.random.default_rng(4).normal(size=(50, 2)) * 1e6
    RBF(1.0, 1.0).K(X)
    assert full_calls[0] == 1
