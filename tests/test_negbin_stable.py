"""Negative binomial without cancellation at large and small dispersion: the constant C = log Γ(y + r) − log Γ(r) − log y!,
G⁺ = r(ψ(y + r) − ψ(r)), K = E[σ(x) − sp(x)], the far tail of the logistic parts, and E, ∂E/∂m, ∂E/∂v, ∂E/∂log r against
mpmath and an independent quadrature rule (notebook 01, negative binomial and likelihood-parameter sections)."""
import numpy as np
import pytest
import mpmath
from numpy.polynomial.legendre import leggauss
from scipy.special import gammaln
from vgi_lit.likelihoods import NegativeBinomial, log_nb_coef, digamma_count_sum, digamma_count_gap, log_poch, softplus_gap_expect

_XG, _WG = leggauss(48)


def gl_expect(g, m, v, pts=()):
    "∫ g(f) N(f | m, v) df by 48-point Gauss-Legendre on panels at m + s·k (|k| ≤ 40) and `pts` (g vectorised)."
    s = np.sqrt(v)
    cuts = np.array(sorted({m + s * k for k in (-40, -20, -10, -6, -3, -1, 0, 1, 3, 6, 10, 20, 40)} | {p for p in pts if abs(p - m) < 40 * s}))
    half, mid = 0.5 * np.diff(cuts), 0.5 * (cuts[1:] + cuts[:-1])
    f = (mid[:, None] + half[:, None] * _XG).ravel(); w = (half[:, None] * _WG).ravel()
    return np.sum(w * g(f) * np.exp(-(f - m) ** 2 / (2 * v) - 0.5 * np.log(2 * np.pi * v)))


def test_log_nb_coef_and_digamma_count_sum_against_mpmath():
    """C and G⁺ at seeded random (r, y), r log-uniform on [1e-2, 1e14] and near 1, counts to 1e5 (array in, array out),
    against 50-digit mpmath to 1e-13 relative; exact zeros; bad input named; the plain log (r)_y − log y! fails near r = 1."""
    rng = np.random.default_rng(5)
    r = np.concatenate([10 ** rng.uniform(-2, 14, 30), 1 + rng.choice([-1, 1], 10) * 10 ** rng.uniform(-12, -1, 10)])
    y = np.floor(10 ** rng.uniform(0, 5, 40)) - rng.integers(0, 2, 40)
    C, Gp = log_nb_coef(r, y), digamma_count_sum(r, y)
    assert C.shape == Gp.shape == (40,)
    with mpmath.workdps(50):
        for ri, yi, c, gp in zip(r, y, C, Gp):
            R, Y = mpmath.mpf(ri), mpmath.mpf(yi)
            ref_c = mpmath.loggamma(Y + R) - mpmath.loggamma(R) - mpmath.loggamma(Y + 1)
            ref_g = R * (mpmath.digamma(Y + R) - mpmath.digamma(R))
            assert abs(c - ref_c) <= 1e-13 * abs(ref_c), (ri, yi, c, ref_c)
            assert abs(gp - ref_g) <= 1e-13 * abs(ref_g), (ri, yi, gp, ref_g)
    assert np.all(np.abs(digamma_count_sum(r, y) - (digamma_count_gap(r, y) + y)) <= 1e-9 * (1.0 + y))   # G⁺ = G + y
    assert log_nb_coef(1.0, 1e5) == 0.0 and digamma_count_sum(0.3, 0.0) == 0.0
    for fn in (log_nb_coef, digamma_count_sum):
        for bad in (-1.0, 2.5, np.nan):
            with pytest.raises(ValueError, match="counts y must be non-negative integers"): fn(3.0, [1.0, bad])
        with pytest.raises(ValueError, match="r must be positive"): fn(0.0, 2.0)
    with mpmath.workdps(50):
        R, Y = mpmath.mpf(1 - 1e-7), mpmath.mpf(54321)
        ref = float(mpmath.loggamma(Y + R) - mpmath.loggamma(R) - mpmath.loggamma(Y + 1))
    assert abs(log_poch(1 - 1e-7, 54321.0) - gammaln(54322.0) - ref) > 1e-6 * abs(ref)        # the plain difference
    assert abs(NegativeBinomial(1 - 1e-7)._const(np.array([54321.0]))[0] - ref) <= 1e-13 * abs(ref)


@pytest.mark.parametrize("r,y,m,v", [(1e14, 3.0, -0.9, 4.0), (1e14, 0.0, 2.0, 25.0), (1e13, 40.0, 3.0, 1.5), (1e11, 1e3, 6.0, 9.0),
                                     (1e-2, 1e5, 11.0, 0.5), (1e-2, 1e5, 13.0, 3.0), (1e-6, 1e8, 20.0, 4.0), (0.3, 7.0, 1.0, 2.0)])
def test_expectations_against_an_independent_rule(r, y, m, v):
    """E, ∂E/∂m, ∂E/∂v and ∂E/∂log r against the pointwise forms integrated on Gauss-Legendre panels, to 1e-9 relative
    (plus 1e-12 of the integrand's scale), at far tails (m_x = m − log r down to −32, up to 34) and small r with large
    counts, where the logistic kink split's tail and the forms y m_x + (y + r)L₋, G + rL₋ + (y + r)S₊ lose digits."""
    lik = NegativeBinomial(r)
    ya, ma, va = np.array([y]), np.array([m]), np.array([v])
    got = [e[0] for e in lik.expected_log_lik(ya, ma, va)] + [lik.expected_dparams(ya, ma, va)[0, 0]]
    pts = (np.log(r), m + v, m + 2 * v, np.log(max(y, 1.0)))
    d = lambda f: lik.derivs(np.full(f.shape, y), f)
    fns = [lambda f: d(f)[0], lambda f: d(f)[1], lambda f: 0.5 * d(f)[2], lambda f: lik.dlogp_dparams(np.full(f.shape, y), f)[0]]
    for k, (g, fn) in enumerate(zip(got, fns)):
        ref = gl_expect(fn, m, v, pts); scale = gl_expect(lambda f: np.abs(fn(f)), m, v, pts)
        assert abs(g - ref) <= 1e-9 * abs(ref) + 1e-12 * scale, (k, g, ref, scale)


def test_old_forms_fail_where_the_new_hold():
    "The far tail at r = 1e14, v = 4: E by the logistic kink split and ∂E/∂log r by G + rL₋ + (y + r)S₊ err by > 1e-5 relative."
    from vgi_lit.likelihoods import Logistic, _logistic_ell
    r, y, m, v = 1e14, 3.0, -0.9, 4.0
    lik = NegativeBinomial(r); ya, ma, va = np.array([y]), np.array([m]), np.array([v])
    mx = ma - np.log(r)
    Lm_kink, dLm, _ = _logistic_ell(Logistic(), -np.ones(1), mx, va)             # E[log σ(−x)] and −E[σ(x)]
    E_old = (lik._const(ya) + y * mx + (y + r) * Lm_kink)[0]
    dp_old = (digamma_count_gap(r, ya) + r * Lm_kink - (y + r) * dLm)[0]
    d = lambda f: lik.derivs(np.full(f.shape, y), f)
    E_ref = gl_expect(lambda f: d(f)[0], m, v, (np.log(r), m + v))
    dp_ref = gl_expect(lambda f: lik.dlogp_dparams(np.full(f.shape, y), f)[0], m, v, (np.log(r), m + 2 * v))
    E_new, dp_new = lik.expected_log_lik(ya, ma, va)[0][0], lik.expected_dparams(ya, ma, va)[0, 0]
    assert abs(E_old - E_ref) > 1e-5 * abs(E_ref) and abs(dp_old - dp_ref) > 1e-5 * abs(dp_ref)
    assert abs(E_new - E_ref) <= 1e-12 * abs(E_ref) and abs(dp_new - dp_ref) <= 1e-9 * abs(dp_ref)


@pytest.mark.slow
def test_softplus_gap_expect_against_mpmath():
    "K = E[σ(x) − sp(x)] against 90-digit mpmath from m = −80 to 40, v from 1e-6 to 1e3 (relative; K < 0 everywhere)."
    h = lambda x: 1 / (1 + mpmath.exp(-x)) - mpmath.log1p(mpmath.exp(x))
    worst = 0.0
    with mpmath.workdps(90):
        for mk in (-80.0, -40.0, -32.0, -5.0, -1.0, 0.0, 0.7, 3.0, 12.0, 40.0):
            for vk in (1e-6, 0.01, 0.5, 1.0, 1.01, 2.0, 4.0, 10.0, 30.0, 100.0, 1000.0):
                M, V = mpmath.mpf(mk), mpmath.mpf(vk); S = mpmath.sqrt(V)
                cuts = sorted({M + k * S for k in (-30, -8, 0, 8, 30)} | {M + 2 * V + k * S for k in (-8, 0, 8)} | {mpmath.mpf(0)})
                cuts = [c for c in cuts if M - 40 * S <= c <= M + 40 * S]
                ref = mpmath.quad(lambda x: h(x) * mpmath.npdf(x, M, S), [-mpmath.inf] + cuts + [mpmath.inf])
                worst = max(worst, abs(float((softplus_gap_expect(np.array([mk]), np.array([vk]))[0] - ref) / ref)))
    assert worst < 1e-9, worst                                             # Gauss-Hermite-20 at v = 1: 3e-10


@pytest.mark.slow
def test_expectations_against_mpmath_over_dispersions_counts_and_variances():
    """E, ∂E/∂m, ∂E/∂v, ∂E/∂log r against 60-digit mpmath quadrature of the naive formulas, r from 1e-2 to 1e14 (and 1 + 1e-6), counts
    0, 3 and 1e5, site variances 1e-6 to 100: relative 1e-8 plus 1e-12 of the terms' scale (∂E/∂m vanishes at the mode)."""
    rows = []
    with mpmath.workdps(60):
        for r in (1e-2, 1.0 + 1e-6, 1e8, 1e14):
            lik = NegativeBinomial(r)
            for y in (0.0, 3.0, 1e5):
                for dm, v in ((-2.0, 1e-6), (1.0, 0.5), (0.0, 4.0), (-1.0, 100.0)):
                    m = float(np.log(max(y, 0.5)) + dm)
                    R, Y, M, V = mpmath.mpf(r), mpmath.mpf(y), mpmath.mpf(m), mpmath.mpf(v); S = mpmath.sqrt(V); lr = mpmath.log(R)
                    C = mpmath.loggamma(Y + R) - mpmath.loggamma(R) - mpmath.loggamma(Y + 1)
                    G = R * (mpmath.digamma(Y + R) - mpmath.digamma(R)) - Y
                    sg = lambda x: 1 / (1 + mpmath.exp(-x)); sp_ = lambda x: mpmath.log1p(mpmath.exp(x))
                    cuts = sorted({M + k * S for k in (-30, -8, -3, 0, 3, 8, 30)} | {lr - 1, lr, lr + 1, M + V, M + 2 * V})
                    cuts = [c for c in cuts if M - 40 * S <= c <= M + 40 * S]
                    q = lambda g: mpmath.quad(lambda f: g(f - lr) * mpmath.npdf(f, M, S), [-mpmath.inf] + cuts + [mpmath.inf])
                    ref = [C + q(lambda x: Y * x - (Y + R) * sp_(x)), q(lambda x: Y - (Y + R) * sg(x)),
                           q(lambda x: -(Y + R) * sg(x) * sg(-x) / 2), G + q(lambda x: Y * sg(x) + R * (sg(x) - sp_(x)))]
                    scale = [abs(C) + q(lambda x: Y * sp_(-x) + R * sp_(x)), q(lambda x: Y * sg(-x) + R * sg(x)), abs(ref[2]),
                             abs(G) + q(lambda x: Y * sg(x) + R * (sp_(x) - sg(x)))]
                    ya, ma, va = np.array([y]), np.array([m]), np.array([v])
                    got = [e[0] for e in lik.expected_log_lik(ya, ma, va)] + [lik.expected_dparams(ya, ma, va)[0, 0]]
                    for k in range(4):
                        err = abs(got[k] - float(ref[k])); tol = 1e-8 * abs(float(ref[k])) + 1e-12 * float(scale[k])
                        rows.append((err / tol, r, y, m, v, k))
    worst = max(rows)
    assert worst[0] <= 1, worst


def test_log_nb_coef_keeps_log_r_at_tiny_dispersion():
    """C(r, 1) = log Γ(1 + r) − log Γ(r) = log r and C(r, 2) = log(r(r + 1)/2) exactly; at r ≪ 1 the first term taken as
    log1p(r − 1) of the rounded r − 1 was off by ~1e-16/r relative (2e-5 at r = 1e-12)."""
    from vgi_lit.likelihoods import log_nb_coef
    r = np.array([1e-15, 1e-12, 1e-9, 1e-6, 0.3])
    assert np.allclose(log_nb_coef(r, np.ones_like(r)), np.log(r), rtol=1e-15, atol=0)
    assert np.allclose(log_nb_coef(r, np.full_like(r, 2.0)), np.log(r) + np.log1p(r) - np.log(2.0), rtol=1e-14, atol=0)
    assert np.allclose(log_nb_coef(1e-12, 1.0), np.log(1e-12), rtol=1e-15, atol=0)    # the one-r table as well
