"""The expected log-sum-exp of three or more class differences (`vgi_lit.softmax_wide`): bad input refused with clear errors, the
zero-covariance limit, reductions of the three-difference rule to the two-difference `expected_lse` (a negligible third difference,
a duplicated one, a nearly duplicated one) over scales, the envelope of lines against brute force, the pre-integrated estimate at a
singular covariance and at small scale; and (slow) the nested rule against adaptive quadrature and both derivatives against central
differences."""
import warnings
import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import logsumexp
from vgi_lit.softmax import Softmax
from vgi_lit.softmax_range import expected_lse, softplus_moments
from vgi_lit.softmax_wide import expected_lse_wide, expected_lse_preint, _envelope, WIDE_RANGE


@pytest.mark.parametrize("fn", [expected_lse_wide, expected_lse_preint])
@pytest.mark.parametrize("mu, S, msg", [
    (np.zeros((2, 2)), np.zeros((2, 2, 2)), "q in 3"), (np.zeros((2, 10)), np.zeros((2, 10, 10)), "q in 3"),
    (np.zeros(3), np.zeros((1, 3, 3)), "q in 3"), (np.zeros((2, 3)), np.zeros((3, 3, 3)), "shape"),
    (np.array([[np.nan, 0.0, 0.0]]), np.eye(3)[None], "NaN"), (np.zeros((1, 3)), np.full((1, 3, 3), np.inf), "NaN"),
    (np.zeros((1, 3)), -np.eye(3)[None], "semi-definite"), (np.zeros((1, 3)), np.array([[[1.0, 0.5, 0], [0.2, 1.0, 0], [0, 0, 1]]]), "symmetric")])
def test_bad_input(fn, mu, S, msg):
    with pytest.raises(ValueError, match=msg): fn(mu, S)


def test_wide_takes_three_differences_only():
    with pytest.raises(ValueError, match="q in 3..3"): expected_lse_wide(np.zeros((1, 4)), np.eye(4)[None])


@pytest.mark.parametrize("n_qmc", [100, 8, 2.5, True])
def test_preint_bad_rule_size(n_qmc):
    with pytest.raises(ValueError, match="power of two"): expected_lse_preint(np.zeros((1, 3)), np.eye(3)[None], n_qmc=n_qmc)


@pytest.mark.parametrize("fn", [expected_lse_wide, lambda m, S: expected_lse_preint(m, S, n_qmc=16)])
def test_zero_covariance_limit(fn):
    mu = np.array([[0.3, -2.0, 1.0], [800.0, -900.0, 799.0], [-1e3, 5.0, 4.0]])
    lse = logsumexp(np.concatenate([np.zeros((3, 1)), mu], 1), axis=1); p = np.exp(mu - lse[:, None])
    E, g, dS = fn(mu, np.zeros((3, 3, 3)))
    np.testing.assert_allclose(E, lse, rtol=1e-14, atol=1e-12)
    np.testing.assert_allclose(g, p, atol=1e-12)
    np.testing.assert_allclose(dS, 0.5 * (np.einsum('nk,kl->nkl', p, np.eye(3)) - p[:, :, None] * p[:, None, :]), atol=1e-10)


@pytest.mark.parametrize("seed, s", [(0, 3.0), (1, 300.0)])
def test_wide_reductions_to_two_differences(seed, s):
    rng = np.random.default_rng(seed)
    B = rng.normal(size=(2, 2)); S2 = s * B @ B.T / 2; m2 = rng.normal(size=2) * np.sqrt(s)
    E2, g2, G2 = expected_lse(m2[None], S2[None])
    S3 = np.zeros((3, 3)); S3[:2, :2] = S2; S3[2, 2] = s                            # a third difference that never contributes
    E3, g3, G3 = expected_lse_wide(np.r_[m2, -400.0 - 8 * np.sqrt(s)][None], S3[None])
    assert abs(E3[0] - E2[0]) < 1e-8 * max(1, E2[0]) and np.allclose(g3[0, :2], g2[0], atol=1e-8) and np.allclose(G3[0, :2, :2], G2[0], atol=1e-8)
    assert abs(g3[0, 2]) < 1e-12 and np.abs(G3[0, 2]).max() < 1e-12
    for eps in (0.0, 1e-10):                                                         # δ₃ = δ₂ (+ an independent N(0, eps²·s))
        T = np.array([[1.0, 0], [0, 1], [0, 1]]); S4 = T @ S2 @ T.T; S4[2, 2] += eps ** 2 * s
        E4 = expected_lse_wide((T @ m2)[None], S4[None])[0]
        E5 = expected_lse((m2 + [0, np.log(2)])[None], S2[None])[0]
        assert abs(E4[0] - E5[0]) < 1e-8 * max(1, E5[0])


@pytest.mark.parametrize("s", [4.0, 1e4])
def test_wide_sites_together_equal_one_at_a_time(s):
    # all sites are integrated together in blocks of node pairs; a site's result must not depend on its neighbours or the block size
    rng = np.random.default_rng(21); D4 = np.hstack([-np.ones((3, 1)), np.eye(3)])
    B = rng.normal(size=(4, 4, 4)); V = s * B @ np.swapaxes(B, 1, 2) / 4
    mu = rng.normal(size=(4, 4)) @ D4.T * 3; S = D4 @ V @ D4.T
    S[1] = np.outer([1.0, 2.0, -1.0], [1.0, 2.0, -1.0]) * s                             # a rank-one covariance among them
    E, g, G = expected_lse_wide(mu, S)
    for blk in (137, 5000):                                                              # one δ₁ node per block; a site split over blocks
        Eb, gb, Gb = expected_lse_wide(mu, S, block=blk)
        np.testing.assert_allclose(Eb, E, rtol=1e-13); np.testing.assert_allclose(gb, g, atol=1e-13); np.testing.assert_allclose(Gb, G, atol=1e-13)
    for i in (0, 1, 3):
        Ei, gi, Gi = expected_lse_wide(mu[i:i + 1], S[i:i + 1])
        np.testing.assert_allclose(Ei, E[i:i + 1], rtol=1e-13); np.testing.assert_allclose(gi, g[i:i + 1], atol=1e-13); np.testing.assert_allclose(Gi, G[i:i + 1], atol=1e-13)
    assert np.all(np.isfinite(G)) and np.allclose(G, np.swapaxes(G, 1, 2), atol=1e-15)


def test_wide_constant():
    assert 1.0 <= WIDE_RANGE <= 2.0


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


def test_preint_singular_covariance_finite_and_symmetric():
    S = np.zeros((1, 4, 4)); S[0, :2, :2] = [[4.0, 1.0], [1.0, 2.0]]
    E, g, dS = expected_lse_preint(np.array([[0.5, -0.3, 0.2, 0.0]]), S, n_qmc=16)
    assert np.all(np.isfinite(E)) and np.all(np.isfinite(g)) and np.all(np.isfinite(dS))
    np.testing.assert_allclose(dS, np.swapaxes(dS, 1, 2), atol=1e-14)
    assert dS[0, 3, 3] > 0 and dS[0, 2, 2] > 0                                         # ½E[p_k(1 − p_k)] in the null directions


def test_preint_small_scale_agrees_with_rule():
    rng = np.random.default_rng(4); C = 5
    m = rng.normal(size=(2, C)); B = rng.normal(size=(2, C, C)); V = 1e-2 * B @ np.swapaxes(B, 1, 2) / C
    D = np.hstack([-np.ones((C - 1, 1)), np.eye(C - 1)])
    E_rule = -Softmax(C).expected_log_lik(np.zeros(2, int), m, V)[0]
    E = expected_lse_preint(m @ D.T, D @ V @ D.T, n_qmc=64)[0]
    np.testing.assert_allclose(E, E_rule, atol=1e-6)


def _ref_nested3(mu, S, tol=1e-10):
    "E[lse], three differences: nested adaptive quad over δ₁ then δ₂ | δ₁ (the given order), δ₃ | δ₁, δ₂ by softplus_moments."
    s1 = np.sqrt(S[0, 0]); b = S[0, 1] / S[0, 0]; s2 = np.sqrt(max(S[1, 1] - b * S[0, 1], 0.0))
    c = np.linalg.solve(S[:2, :2], S[:2, 2]); s3 = np.sqrt(max(S[2, 2] - c @ S[:2, 2], 0.0))
    def inner(d1):
        m2 = mu[1] + b * (d1 - mu[0]); l1 = np.logaddexp(0.0, d1)
        def f(z):
            d2 = m2 + s2 * z; l2 = np.logaddexp(l1, d2)
            return (l2 + softplus_moments(np.array([mu[2] + c @ (np.array([d1, d2]) - mu[:2]) - l2]), np.array([s3]))[0][0]) * np.exp(-z * z / 2) / np.sqrt(2 * np.pi)
        pts = sorted({(t - m2) / s2 for t in (l1, 0.0) if abs(t - m2) < 9 * s2} | {-3.0, 0.0, 3.0})
        return quad(f, -9, 9, points=pts, epsabs=tol, epsrel=tol, limit=400)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quad(lambda z: inner(mu[0] + s1 * z) * np.exp(-z * z / 2) / np.sqrt(2 * np.pi), -9, 9, points=[-3.0, 0.0, 3.0], epsabs=tol, epsrel=tol, limit=400)[0]


@pytest.mark.slow
@pytest.mark.parametrize("seed, s", [(0, 0.5), (1, 30.0), (2, 3000.0)])
def test_wide_against_adaptive_quadrature(seed, s):
    rng = np.random.default_rng(seed); D4 = np.hstack([-np.ones((3, 1)), np.eye(3)])
    m = rng.normal(size=4) * 3; B = rng.normal(size=(4, 4)); mu = D4 @ m; S = s * D4 @ B @ B.T @ D4.T / 4
    E = expected_lse_wide(mu[None], S[None])[0][0]; R = _ref_nested3(mu, S)
    assert abs(E - R) < 1e-7 * max(1.0, abs(R))


@pytest.mark.slow
@pytest.mark.parametrize("s", [1.0, 100.0])
def test_wide_derivatives_central_differences(s):
    rng = np.random.default_rng(8); mu = rng.normal(size=(1, 3)) * np.sqrt(s); B = rng.normal(size=(1, 3, 3)); S = s * B @ np.swapaxes(B, 1, 2) / 3
    E, g, G = expected_lse_wide(mu, S); f = lambda m, S2: expected_lse_wide(m, S2)[0][0]
    for j in range(3):
        h = 1e-5 * np.sqrt(s); d = np.zeros((1, 3)); d[0, j] = h
        assert abs((f(mu + d, S) - f(mu - d, S)) / (2 * h) - g[0, j]) < 1e-6
        for k in range(j, 3):
            h = 1e-5 * s; D = np.zeros((1, 3, 3)); D[0, j, k] = D[0, k, j] = h
            assert abs((f(mu, S + D) - f(mu, S - D)) / (2 * h) - (1 + (j != k)) * G[0, j, k]) * np.sqrt(s) < 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_preint_derivatives_central_differences_q9(scale):
    # h = 1e-6 relative: the estimate is C¹ with a piecewise-smooth second derivative (nodes crossing triple-point hyperplanes), so a
    # central difference errs by O(h), not O(h²)
    rng = np.random.default_rng(7); q = 9
    mu = rng.normal(size=(1, q)) * np.sqrt(scale); B = rng.normal(size=(1, q, q)); S = scale * B @ np.swapaxes(B, 1, 2) / q
    E, g, G = expected_lse_preint(mu, S, n_qmc=16)
    f = lambda m, S2: expected_lse_preint(m, S2, n_qmc=16)[0][0]
    for j in range(0, q, 3):
        h = 1e-6 * np.sqrt(scale); d = np.zeros((1, q)); d[0, j] = h
        assert abs((f(mu + d, S) - f(mu - d, S)) / (2 * h) - g[0, j]) < 1e-6
        for k in range(j, q, 4):
            h = 1e-6 * scale; D = np.zeros((1, q, q)); D[0, j, k] = D[0, k, j] = h
            assert abs((f(mu, S + D) - f(mu, S - D)) / (2 * h) - (1 + (j != k)) * G[0, j, k]) * np.sqrt(scale) < 1e-5
