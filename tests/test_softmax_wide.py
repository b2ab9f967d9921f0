"""Pre-integration of the expected log-sum-exp in 3 to 9 class differences (`vgi_lit.softmax_wide`): bad input refused with clear
errors, the zero-covariance limit, the envelope of lines against brute force, a singular covariance (finite, symmetric output),
agreement with the softmax page's rule at small scale; and (slow) the derivatives against central differences at q = 9."""
import numpy as np
import pytest
from scipy.special import logsumexp
from vgi_lit.softmax import Softmax
from vgi_lit.softmax_wide import expected_lse_wide, _envelope


@pytest.mark.parametrize("mu, S, kw, msg", [
    (np.zeros((2, 2)), np.zeros((2, 2, 2)), {}, "3 <= q <= 9"), (np.zeros((2, 10)), np.zeros((2, 10, 10)), {}, "3 <= q <= 9"),
    (np.zeros(3), np.zeros((1, 3, 3)), {}, "3 <= q <= 9"), (np.zeros((2, 3)), np.zeros((3, 3, 3)), {}, "shape"),
    (np.array([[np.nan, 0.0, 0.0]]), np.eye(3)[None], {}, "NaN"), (np.zeros((1, 3)), np.full((1, 3, 3), np.inf), {}, "NaN"),
    (np.zeros((1, 3)), -np.eye(3)[None], {}, "semi-definite"), (np.zeros((1, 3)), np.array([[[1.0, 0.5, 0], [0.2, 1.0, 0], [0, 0, 1]]]), {}, "symmetric"),
    (np.zeros((1, 3)), np.eye(3)[None], {"n_qmc": 100}, "power of two"), (np.zeros((1, 3)), np.eye(3)[None], {"n_qmc": 8}, "power of two")])
def test_bad_input(mu, S, kw, msg):
    with pytest.raises(ValueError, match=msg): expected_lse_wide(mu, S, **kw)


def test_zero_covariance_limit():
    mu = np.array([[0.3, -2.0, 1.0], [800.0, -900.0, 799.0], [-1e3, 5.0, 4.0]])
    lse = logsumexp(np.concatenate([np.zeros((3, 1)), mu], 1), axis=1); p = np.exp(mu - lse[:, None])
    E, g, dS = expected_lse_wide(mu, np.zeros((3, 3, 3)), n_qmc=16)
    np.testing.assert_allclose(E, lse, rtol=1e-14, atol=1e-12)
    np.testing.assert_allclose(g, p, atol=1e-12)
    H = 0.5 * (np.einsum('nk,kl->nkl', p, np.eye(3)) - p[:, :, None] * p[:, None, :])   # Price at S = 0: ½(diag p − ppᵀ)
    np.testing.assert_allclose(dS, H, atol=1e-10)


@pytest.mark.parametrize("seed", range(2))
def test_envelope_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(20, 7)) * 3; b = rng.normal(size=(20, 7)); b[:, 2] = b[:, 3]     # one pair of equal slopes
    lo, hi, on = _envelope(A, b)
    t = np.linspace(-30, 30, 6001)
    top = np.argmax(A[:, None, :] + t[None, :, None] * b[:, None, :], 2)               # (20, T) the largest line on a fine grid
    for i in range(20):
        for k in range(7):
            inside = (t > lo[i, k] + 1e-9) & (t < hi[i, k] - 1e-9)
            assert np.all(top[i, inside] == k)
            if not on[i, k]: assert not np.any(top[i] == k)


def test_singular_covariance_finite_and_symmetric():
    S = np.zeros((1, 4, 4)); S[0, :2, :2] = [[4.0, 1.0], [1.0, 2.0]]
    E, g, dS = expected_lse_wide(np.array([[0.5, -0.3, 0.2, 0.0]]), S, n_qmc=16)
    assert np.all(np.isfinite(E)) and np.all(np.isfinite(g)) and np.all(np.isfinite(dS))
    np.testing.assert_allclose(dS, np.swapaxes(dS, 1, 2), atol=1e-14)
    assert dS[0, 3, 3] > 0 and dS[0, 2, 2] > 0                                         # ½E[p_k(1 − p_k)] in the null directions


def test_small_scale_agrees_with_rule():
    rng = np.random.default_rng(4); C = 5
    m = rng.normal(size=(2, C)); B = rng.normal(size=(2, C, C)); V = 1e-2 * B @ np.swapaxes(B, 1, 2) / C
    D = np.hstack([-np.ones((C - 1, 1)), np.eye(C - 1)])
    E_rule = -Softmax(C).expected_log_lik(np.zeros(2, int), m, V)[0]
    E = expected_lse_wide(m @ D.T, D @ V @ D.T, n_qmc=64)[0]
    np.testing.assert_allclose(E, E_rule, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_derivatives_central_differences_q9(scale):
    rng = np.random.default_rng(7); q = 9
    mu = rng.normal(size=(1, q)) * np.sqrt(scale); B = rng.normal(size=(1, q, q)); S = scale * B @ np.swapaxes(B, 1, 2) / q
    E, g, G = expected_lse_wide(mu, S, n_qmc=16)
    f = lambda m, S2: expected_lse_wide(m, S2, n_qmc=16)[0][0]
    for j in range(0, q, 3):
        h = 1e-5 * np.sqrt(scale); d = np.zeros((1, q)); d[0, j] = h
        assert abs((f(mu + d, S) - f(mu - d, S)) / (2 * h) - g[0, j]) < 1e-6
        for k in range(j, q, 4):
            h = 1e-5 * scale; D = np.zeros((1, q, q)); D[0, j, k] = D[0, k, j] = h
            assert abs((f(mu, S + D) - f(mu, S - D)) / (2 * h) - (1 + (j != k)) * G[0, j, k]) * np.sqrt(scale) < 1e-6
