"""The expected log-sum-exp of one or two class differences (`vgi_lit.softmax_range`): bad input refused with clear errors, the
zero-covariance limit, the choice of the outer variable, the gradient and curvature against central differences and their
ranges, finite output from covariance scale 1e-16 to 1e12; and (slow) the accuracy against adaptive quadrature over scales
1e-4 to 1e4, correlations near ±1 and far means."""
import warnings
import mpmath
import numpy as np
import pytest
from scipy.integrate import IntegrationWarning, quad
from scipy.special import logsumexp
from vgi_lit.softmax_range import expected_lse, softplus_moments


def _cov(s1, s2, rho):
    return np.array([[s1 * s1, rho * s1 * s2], [rho * s1 * s2, s2 * s2]])


@pytest.mark.parametrize("mu, S, msg", [
    (np.zeros((2, 3)), np.zeros((2, 3, 3)), "q = 1 or 2"), (np.zeros(2), np.zeros((2, 1, 1)), "q = 1 or 2"),
    (np.zeros((2, 2)), np.zeros((2, 2)), "shape"), (np.zeros((2, 2)), np.zeros((3, 2, 2)), "shape"),
    (np.array([[np.nan, 0.0]]), np.zeros((1, 2, 2)), "NaN"), (np.zeros((1, 2)), np.full((1, 2, 2), np.inf), "NaN"),
    (np.zeros((1, 1)), -np.ones((1, 1, 1)), "negative variance"), (np.zeros((1, 2)), _cov(1, 1, 1.5)[None], "semi-definite"),
    (np.zeros((1, 2)), np.array([[[1.0, 0.5], [0.2, 1.0]]]), "symmetric")])
def test_bad_input(mu, S, msg):
    with pytest.raises(ValueError, match=msg): expected_lse(mu, S)


@pytest.mark.parametrize("mu, s, msg", [(np.zeros(2), np.ones(3), "one shape"), (np.array([np.nan]), np.ones(1), "NaN"),
                                         (np.zeros(1), -np.ones(1), ">= 0")])
def test_bad_moments_input(mu, s, msg):
    with pytest.raises(ValueError, match=msg): softplus_moments(mu, s)


@pytest.mark.parametrize("scale", [0.0, 1e-16])
def test_zero_covariance_limit(scale):
    mu = np.array([[0.3, -2.0], [800.0, -900.0], [-1e3, 5.0], [0.0, 0.0]])
    lse = logsumexp(np.concatenate([np.zeros((4, 1)), mu], 1), axis=1); p = np.exp(mu - lse[:, None])
    E, g, dS = expected_lse(mu, np.tile(scale * np.eye(2), (4, 1, 1)))
    np.testing.assert_allclose(E, lse, rtol=1e-15, atol=1e-13)
    np.testing.assert_allclose(g, p, rtol=0, atol=1e-13)
    np.testing.assert_allclose(2 * dS, p[:, :, None] * np.eye(2) - p[:, :, None] * p[:, None, :], rtol=0, atol=1e-13)


@pytest.mark.parametrize("s", [0.5, 3.0, 40.0, 2e3])
def test_either_difference_outside(s):
    "With equal variances, permuting the two differences makes the other one the outer variable: the same numbers, permuted."
    rng = np.random.default_rng(int(s))
    mu = rng.normal(0, 4, (6, 2)); rho = np.array([-0.9999, -0.5, 0.0, 0.3, 0.95, 1.0])
    S = np.stack([_cov(s, s, r) for r in rho])
    E, g, dS = expected_lse(mu, S)
    E2, g2, dS2 = expected_lse(mu[:, ::-1], S[:, ::-1, ::-1])
    np.testing.assert_allclose(E2, E, rtol=1e-11, atol=1e-11)   # relative: E grows like s
    np.testing.assert_allclose(g2[:, ::-1], g, rtol=0, atol=1e-11)
    np.testing.assert_allclose(dS2[:, ::-1, ::-1], dS, rtol=0, atol=1e-11)


def test_vectorised_equals_one_at_a_time():
    rng = np.random.default_rng(3)
    s = 10.0 ** rng.uniform(-3, 4, 8)
    S = np.stack([_cov(a, a * np.exp(rng.uniform(-2, 2)), r) for a, r in zip(s, rng.uniform(-1, 1, 8))])
    mu = rng.normal(0, 5, (8, 2))
    E, g, dS = expected_lse(mu, S)
    for i in range(8):
        Ei, gi, dSi = expected_lse(mu[i:i + 1], S[i:i + 1])
        assert np.allclose(Ei, E[i], rtol=1e-14, atol=0) and np.allclose(gi, g[i], atol=1e-15) and np.allclose(dSi, dS[i], atol=1e-15)


@pytest.mark.parametrize("s", [1e-8, 1e-3, 1.0, 1e2, 1e4, 1e6])
def test_finite_and_in_range_over_every_scale(s):
    rng = np.random.default_rng(7)
    mu = rng.choice([-1e3, -30.0, 0.0, 0.3, 30.0, 1e3], (12, 2))
    S = np.stack([_cov(s, s * np.exp(rng.uniform(-3, 3)), r) for r in rng.choice([-1.0, -0.999999, 0.0, 0.7, 1.0], 12)])
    E, g, dS = expected_lse(mu, S)
    assert np.all(np.isfinite(E)) and np.all(np.isfinite(g)) and np.all(np.isfinite(dS))
    lse = logsumexp(np.concatenate([np.zeros((12, 1)), mu], 1), axis=1)
    assert np.all(E >= lse - 1e-13 * np.maximum(1, np.abs(lse)))               # Jensen: E[lse(δ)] ≥ lse(μ)
    assert np.all(g >= -1e-13) and np.all(g.sum(1) <= 1 + 1e-12)
    assert np.all(np.linalg.eigvalsh(2 * dS) >= -1e-12)                       # E[diag p − ppᵀ] ⪰ 0
    E1, g1, dS1 = expected_lse(mu[:, :1], S[:, :1, :1])
    assert np.all(np.isfinite(E1)) and np.all((g1 >= 0) & (g1 <= 1)) and np.all(dS1 >= 0)


@pytest.mark.parametrize("s", [0.3, 5.0, 200.0])
def test_derivatives_are_those_of_E(s):
    rng = np.random.default_rng(11)
    for rho in (-0.99, 0.0, 0.8):
        S = _cov(s, s * 0.6, rho)[None]; mu = rng.normal(0, 3, (1, 2))
        E, g, dS = expected_lse(mu, S)
        for k in range(2):
            e = np.zeros((1, 2)); e[0, k] = h = 1e-5 * max(1.0, s)
            assert abs((expected_lse(mu + e, S)[0] - expected_lse(mu - e, S)[0])[0] / (2 * h) - g[0, k]) < 1e-8
        for i, j in ((0, 0), (0, 1), (1, 1)):
            e = np.zeros((1, 2, 2)); e[0, i, j] = e[0, j, i] = h = 1e-4 * S[0, 1, 1] * (1 - abs(rho))
            fd = (expected_lse(mu, S + e)[0] - expected_lse(mu, S - e)[0])[0] / (2 * h)
            assert abs(fd - dS[0, i, j] * (1 if i == j else 2)) < 1e-6 / max(1.0, s)


def _ref_1d(mu, s):
    "E[softplus], E[σ], E[σσ'] for w ~ N(mu, s²) by mpmath.quad (25 digits), split at the kink and the mean."
    mpmath.mp.dps = 25
    fs = [lambda w: mpmath.log1p(mpmath.exp(w)) if w < 0 else w + mpmath.log1p(mpmath.exp(-w)),
          lambda w: 1 / (1 + mpmath.exp(-w)), lambda w: 1 / ((1 + mpmath.exp(-w)) * (1 + mpmath.exp(w)))]
    pts = sorted({mu - 14 * s, mu, mu + 14 * s} | {x for x in (-40, -8, 0, 8, 40) if abs(x - mu) < 14 * s})
    return [float(mpmath.quad(lambda w: f(w) * mpmath.npdf(w, mu, s), pts)) for f in fs]


@pytest.mark.slow
@pytest.mark.parametrize("s", [1e-8, 1e-4, 0.1, 1.0, 1.5, 1.51, 2.0, 5.0, 20.0, 50.0, 1e3, 1e4, 1e6])
def test_one_difference_against_mpmath(s):
    mus = np.array([-1e3, -80.0, -20.0, -3.0, 0.0, 0.3, 4.0, 30.0, 70.0, 1e3])
    got = np.array(softplus_moments(mus, np.full(len(mus), s))).T
    ref = np.array([_ref_1d(m, s) for m in mus])
    assert np.max(np.abs(got - ref) / np.maximum(1, np.abs(ref))) < 1e-11


def _ref_nested(mu, S, k):
    """E[lse] (k = 0), E[p1], E[p2] (k = 1, 2), E[p1 − p1²], −E[p1 p2], E[p2 − p2²] (k = 3, 4, 5) under N(mu, S) by nested
    scipy quad, the larger-variance difference outside."""
    mu = np.asarray(mu, float); S = np.asarray(S, float)
    if S[1, 1] > S[0, 0]: mu, S, k = mu[::-1], S[::-1, ::-1], (0, 2, 1, 5, 4, 3)[k]
    s1 = np.sqrt(S[0, 0]); b = S[0, 1] / S[0, 0]; sc = np.sqrt(max(S[1, 1] - b * S[0, 1], 0.0))
    def fn(x, y):
        l = logsumexp([0.0, x, y]); p1, p2 = np.exp(x - l), np.exp(y - l)
        return (l, p1, p2, p1 - p1 * p1, -p1 * p2, p2 - p2 * p2)[k]
    def inner(x):
        m = mu[1] + b * (x - mu[0])
        if sc == 0: return fn(x, m)
        c = np.logaddexp(0, x); pts = sorted({(t - m) / sc for t in (c - 30, c - 5, c, c + 5, c + 30, -30, -5, 0, 5, 30) if abs(t - m) < 12 * sc})
        return quad(lambda z: fn(x, m + sc * z) * np.exp(-z * z / 2) / np.sqrt(2 * np.pi), -12, 12, points=pts or None,
                    epsabs=1e-12, epsrel=1e-13, limit=500)[0]
    pts = [(t - mu[0]) / s1 for t in (0.0, -30.0, 30.0, -5.0, 5.0) if abs(t - mu[0]) < 11 * s1]
    return quad(lambda z: inner(mu[0] + s1 * z) * np.exp(-z * z / 2) / np.sqrt(2 * np.pi), -11, 11, points=pts or None,
                epsabs=1e-11, epsrel=1e-14, limit=1000)[0]


@pytest.mark.slow
@pytest.mark.parametrize("s", [1e-4, 2.0, 50.0, 1e4])
@pytest.mark.parametrize("rho, ratio, mu", [(0.6, 1.0, (0.3, 0.0)), (-0.99999, 0.4, (0.3, -0.3)), (0.99999, 2.0, (-40.0, 25.0)),
                                            (-1.0, 1.0, (5.0, -5.0)), (0.0, 0.05, (300.0, -200.0))])
def test_two_differences_against_nested_quadrature(s, rho, ratio, mu):
    """E against nested quad; E[p] against nested quad up to s = 50, and at s = 1e4 (where quad of the step-like p can miss
    by up to a factor 2 when the covariance is nearly singular, with or without an IntegrationWarning) against central
    differences of the quad value of E, with a step h of 1/1000 of the smaller principal standard deviation (at least 1e-3)."""
    S = _cov(s, s * ratio, rho); mu = np.array(mu)
    E, g, _ = expected_lse(mu[None], S[None])
    r = _ref_nested(mu, S, 0)
    assert abs(E[0] - r) / max(1, abs(r)) < 1e-10, (E[0], r)
    h = max(1e-3 * np.sqrt(max(np.linalg.eigvalsh(S)[0], 0.0)), 1e-3)
    for k in (1, 2):
        if s < 1e3: r, tol = _ref_nested(mu, S, k), 1e-10
        else:
            e = h * np.eye(2)[k - 1]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", IntegrationWarning)
                r, tol = (_ref_nested(mu + e, S, 0) - _ref_nested(mu - e, S, 0)) / (2 * h), 1e-6
        assert abs(g[0, k - 1] - r) < tol, (k, g[0, k - 1], r)


@pytest.mark.slow
@pytest.mark.parametrize("s, rho, mu", [(3.0, 0.5, (0.3, 0.0)), (30.0, -0.9999, (2.0, -1.0)), (500.0, 0.99, (-40.0, 25.0))])
def test_curvature_against_nested_quadrature(s, rho, mu):
    S = _cov(s, 0.7 * s, rho); mu = np.array(mu)
    _, _, dS = expected_lse(mu[None], S[None])
    for k, v in zip((3, 4, 5), (2 * dS[0, 0, 0], 2 * dS[0, 0, 1], 2 * dS[0, 1, 1])):
        r = _ref_nested(mu, S, k)
        assert abs(v - r) < 1e-10, (k, v, r)


@pytest.mark.parametrize("s", [1.2, 1.5, 2.5])
def test_anticorrelated_differences_at_moderate_scale(s):
    """δ₂ = −δ₁ (b = −1): the outer integrand is analytic only for |Im δ₁| < π/2, so the outer Gauss-Hermite rule must be
    that of the standard deviation 2s (a 64-node rule at s = 1.5 errs by 1.6e-10); against mpmath, lse = log(1 + 2 cosh δ₁)."""
    mpmath.mp.dps = 25
    for mu in (0.0, 1.0):
        E, g, _ = expected_lse(np.array([[mu, -mu]]), s * s * np.array([[[1.0, -1.0], [-1.0, 1.0]]]))
        pts = sorted({mu - 14 * s, mu, mu + 14 * s, 0.0})
        ref = float(mpmath.quad(lambda w: mpmath.log(1 + 2 * mpmath.cosh(w)) * mpmath.npdf(w, mu, s), pts))
        assert abs(E[0] - ref) < 1e-12, (mu, E[0] - ref)


def test_hermite_rules_are_built_on_first_use_and_equal_the_eager_ones():
    "Importing the module builds no Gauss-Hermite rule (up to 232 nodes); each is built once, cached, and equals the eager rule."
    import subprocess, sys, textwrap
    code = textwrap.dedent("""
        import numpy.polynomial.hermite_e as he
        calls = []; real = he.hermegauss
        he.hermegauss = lambda n: calls.append(n) or real(n)
        import vgi_lit.softmax_range as sr
        assert calls == [] and sr._gh_rule.cache_info().currsize == 0, calls
        print("ok")""")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr
    from numpy.polynomial.hermite_e import hermegauss
    from vgi_lit import softmax_range as sr
    for L, (_, n) in enumerate(sr._GH_LEVELS):
        z, w = hermegauss(n); keep = w / w.sum() > 1e-18
        zl, wl = sr._gh_rule(L)
        assert np.array_equal(zl, z[keep]) and np.array_equal(wl, (w / w.sum())[keep]) and sr._gh_rule(L) is sr._gh_rule(L)
