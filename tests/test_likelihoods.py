"""Tests of vgi_lit.likelihoods: quadrature oracle over a (m, v) grid, shapes, limits, predictions, samplers, bad input.

Tolerance of the oracle comparison: |est - ref| <= 1e-8 |ref| + 1e-12 * max(1, S), where S = E|g| is the scale
of the integrand g (lp, lp' or lp''/2; for Laplace's dE/dv the Stein integrand) under N(m, v). The floor only
matters where a quantity is essentially zero: below 1e-12 in absolute value (e.g. E = -3e-180 for a probit site
with m = 30, whose mass sits in a tilted Gaussian tail 9+ standard deviations out), or tiny relative to its
integrand (e.g. dE/dm of a Student-t site at m = y, which is 0 by symmetry).

The oracle is `adaptive_expect` (vgi_lit.quadrature): adaptive Gauss-Kronrod in z = (f - m)/s with the likelihood's
kinks as panel ends, each integrand to 1e-13 relative (the integrals compared under the tolerance above also to 1e-15
absolute, a thousandth of its floor); the integrand is called once per round on all its new nodes (`derivs` on an
array), and it raises rather than return an unconverged value. `test_oracle_against_scipy_quad` checks it against
scipy.integrate.quad with a scalar integrand.
"""
import math
import warnings
import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import digamma, gammaln, ndtr

from vgi_lit.quadrature import adaptive_expect
from vgi_lit.likelihoods import (Gaussian, Logistic, Probit, Poisson, NegativeBinomial, ZeroInflatedPoisson, Laplace, StudentT, Exponential,
                                 StochasticVolatility, Ordinal, gauss_rule)

MS = (-30.0, -10.0, -3.0, -1.0, 0.0, 0.5, 2.0, 7.0, 30.0)
VS = (1e-6, 1e-3, 0.1, 1.0, 4.0, 25.0, 100.0)


def scipy_expect(g, m, v, pts=()):
    "The independent route: ∫ g(f) N(f|m, v) df by scipy quad of a scalar g on [m-40s, m+40s], split at m + s*k and at `pts`."
    s = math.sqrt(v); c0 = 0.5 * math.log(2 * math.pi * v)
    cuts = sorted({m + s * k for k in (-40, -20, -10, -6, -3, -1, 0, 1, 3, 6, 10, 20, 40)}
                  | {p for p in pts if abs(p - m) < 40 * s})
    dens = lambda f: g(f) * math.exp(-(f - m) ** 2 / (2 * v) - c0)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return sum(quad(dens, a, b, epsabs=0, epsrel=1e-13, limit=200, points=None)[0]
                   for a, b in zip(cuts[:-1], cuts[1:]))


def _ordinal_scalar(cuts, k):
    "Independent scalar implementation of the cumulative-logit lp, lp', lp'' (math module), for scipy quad."
    a = cuts[k - 1] if k > 0 else None; b = cuts[k] if k < len(cuts) else None
    def ls(x): return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))
    def sg(x): return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))
    def d(k_, f):
        lp = (ls(b - f) if b is not None else 0.0) + (ls(f - a) if a is not None else 0.0) \
            + (math.log(-math.expm1(a - b)) if a is not None and b is not None else 0.0)
        sa = sg(a - f) if a is not None else 0.0; sb = sg(f - b) if b is not None else 0.0
        return (lp, sa - sb, -sa * (1 - sa) - sb * (1 - sb))[k_]
    return d


def _ordinal_vec(cuts, k):
    "The formulas of `_ordinal_scalar` in numpy: f (n,) -> (lp, lp', lp'') as (3, n), independent of the package's derivs."
    a = cuts[k - 1] if k > 0 else None; b = cuts[k] if k < len(cuts) else None
    def ls(x): return np.minimum(x, 0.0) - np.log1p(np.exp(-np.abs(x)))             # log σ(x), both branches of ls
    def sg(x): e = np.exp(-np.abs(x)); return np.where(x >= 0, 1 / (1 + e), e / (1 + e))
    def d(f):
        f = np.asarray(f, dtype=float); zero = np.zeros_like(f)
        lp = (ls(b - f) if b is not None else zero) + (ls(f - a) if a is not None else zero) \
            + (math.log(-math.expm1(a - b)) if a is not None and b is not None else 0.0)
        sa = sg(a - f) if a is not None else zero; sb = sg(f - b) if b is not None else zero
        return np.stack([lp, sa - sb, -sa * (1 - sa) - sb * (1 - sb)])
    return d


def oracle_ell(lik, y, m, v, pts):
    "(E, dE_dm, dE_dv) by the oracle of (lp, lp', lp''/2): one derivs call (`_ordinal_vec` for the ordinal) per round."
    d = _ordinal_vec(list(lik.cutpoints), int(y)) if isinstance(lik, Ordinal) else (lambda f: np.array(lik.derivs(np.float64(y), f)))
    return adaptive_expect(lambda f: d(f) * [[1.0], [1.0], [0.5]], m, v, pts, atol=1e-15)


def scales(lik, y, m, v):
    f = m + np.sqrt(v) * np.linspace(-12, 12, 4001)
    w = np.exp(-0.5 * ((f - m) / np.sqrt(v)) ** 2); w /= w.sum()
    d = lik.derivs(np.float64(y), f)
    return np.array([w @ np.abs(d[0]), w @ np.abs(d[1]), 0.5 * (w @ np.abs(d[2]))])


def check_site(lik, y, m, v, pts, ref=None, scale=None):
    est = np.array([e.item() for e in lik.expected_log_lik(np.array([y]), np.array([m]), np.array([v]))])
    ref = oracle_ell(lik, y, m, v, pts) if ref is None else ref
    scale = scales(lik, y, m, v) if scale is None else scale
    err = np.abs(est - ref) / (1e-8 * np.abs(ref) + 1e-12 * np.maximum(1.0, scale))
    assert np.all(err <= 1), (lik, y, m, v, est, ref, err)


# --- the oracle itself: checked against closed forms where they exist, and against scipy quad --------------
def test_oracle_against_closed_forms():
    for m, v in [(-3.0, 0.1), (0.5, 10.0), (7.0, 100.0)]:
        s = np.sqrt(v)
        assert abs(adaptive_expect(np.abs, m, v, (0.0,)) - (m * (2 * ndtr(m / s) - 1) + 2 * s * np.exp(-m * m / (2 * v)) / np.sqrt(2 * np.pi))) < 1e-12 * (1 + abs(m) + s)
        assert abs(adaptive_expect(np.exp, m, v) / np.exp(m + v / 2) - 1) < 1e-11


def test_oracle_against_scipy_quad():
    """The vectorised oracle against scipy.integrate.quad with a scalar integrand (the independent route), at sites of several
    likelihoods: a Laplace site at its kink m = y, the ordinal by `_ordinal_vec` against `_ordinal_scalar`, and a negative
    binomial at v = 1e6 (with the cuts of `_quad_wide`); (lp, lp', lp''/2) to 1e-12 of max(|I|, E|g|)."""
    nb = NegativeBinomial(1.3)
    cases = [(Logistic(), 1.0, -2.0, 1e-6, (0.0,)), (Probit(), -1.0, 3.0, 25.0, (0.0,)), (Laplace(0.7), 2.0, 2.0, 1.0, (2.0,)),
             (Laplace(0.7), 2.0, 2.5, 1e-3, (2.0,)), (StudentT(3.0, 1 / 3), 4.0, 4.0, 25.0, (4.0,)), (Ordinal([-1.0, 0.5, 2.0]), 1.0, 0.5, 100.0, (-1.0, 0.5, 2.0)),
             (Poisson(), 13.0, 0.5, 4.0, (np.log(13.0),)), (nb, 7.0, -20.0, 1e6, (np.log(1.3), np.log(7.0)))]
    for lik, y, m, v, pts in cases:
        if isinstance(lik, Ordinal):
            vec, sca = _ordinal_vec(list(lik.cutpoints), int(y)), _ordinal_scalar(list(lik.cutpoints), int(y))
        else:
            vec, sca = (lambda f: np.array(lik.derivs(np.float64(y), f))), (lambda k, f: lik.derivs(np.float64(y), f)[k])
        wide = v > 1e4
        g = lambda f: np.concatenate([vec(f) * [[1.0], [1.0], [0.5]], np.abs(vec(f)) * [[1.0], [1.0], [0.5]]])
        got = _quad_wide(g, m, v, pts) if wide else adaptive_expect(g, m, v, pts)
        for k, c in ((0, 1.0), (1, 1.0), (2, 0.5)):
            ref = (_scipy_wide if wide else scipy_expect)(lambda f: c * sca(k, f), m, v, pts)
            assert abs(got[k] - ref) <= 1e-12 * max(abs(ref), got[3 + k]), (lik, y, m, v, k, got[k], ref)


# --- quad-oracle grid, one test per likelihood ------------------------------------------------------------
# The larger grids run in two parts: `part` 0 (the default suite) takes every third case of the grid in its order, the
# first and the last always, so that every site variance of the grid (the fastest-varying index) is still checked, and
# part 1 (`-m slow`) the others; the two together are the whole grid.
PARTS = [pytest.param(0, id="part"), pytest.param(1, id="rest", marks=pytest.mark.slow)]


def _part(cases, part):
    "The cases of `part` (see PARTS): every third one and the last for part 0, the others for part 1."
    cases = list(cases); keep = set(range(0, len(cases), 3)) | {len(cases) - 1}
    return [c for i, c in enumerate(cases) if (i in keep) == (part == 0)]


def test_parts_cover_the_grid_once():
    cases = [(m, v) for m in MS for v in VS]
    a, b = _part(cases, 0), _part(cases, 1)
    assert sorted(a + b) == sorted(cases) and not set(a) & set(b) and {v for _, v in a} == set(VS)


@pytest.mark.parametrize("y", [1.0, -1.0])
def test_grid_logistic(y):
    for m in MS:
        for v in VS: check_site(Logistic(), y, m, v, (0.0,))


@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("y", [1.0, -1.0])
def test_grid_probit(y, part):
    for m, v in _part([(m, v) for m in MS for v in VS], part): check_site(Probit(), y, m, v, (0.0,))


@pytest.mark.parametrize("y", [0.0, 4.0, -25.0])
def test_grid_student_t(y):
    lik = StudentT(3.0, 1 / 3)
    for m in MS:
        for v in VS: check_site(lik, y, m, v, (y,))
    lik = StudentT(1.5, 2.0)
    for m in (-3.0, 4.0):
        for v in (0.01, 5.0, 100.0): check_site(lik, y, m, v, (y,))


@pytest.mark.parametrize("part", PARTS)
def test_grid_ordinal(part):
    lik = Ordinal([-1.0, 0.5, 2.0])
    for k, m, v in _part([(k, m, v) for k in range(4) for m in MS for v in VS], part): check_site(lik, float(k), m, v, (-1.0, 0.5, 2.0))
    if part: return
    lik = Ordinal([0.0, 0.05])          # nearly coincident cut points
    for k in range(3):
        for m, v in [(0.02, 1e-4), (0.0, 1.0), (3.0, 100.0)]: check_site(lik, float(k), m, v, (0.0, 0.05))


def test_grid_gaussian():
    lik = Gaussian(0.3)
    for y in (-2.0, 0.3):
        for m in MS:
            for v in VS: check_site(lik, y, m, v, (y,))


def test_grid_poisson():
    lik = Poisson()
    for y in (0.0, 1.0, 2.0, 5.0, 13.0, 50.0):
        for m in (-30.0, 0.5, 30.0):
            for v in (1e-6, 1.0, 100.0): check_site(lik, y, m, v, (np.log(max(y, 1)),))
    # every count 0..50 at one site
    E, dm, dv = lik.expected_log_lik(np.arange(51.0), np.full(51, 1.0), np.full(51, 2.0))
    for y in range(51):
        ref = oracle_ell(lik, float(y), 1.0, 2.0, (np.log(max(y, 1)),))
        np.testing.assert_allclose([E[y], dm[y], dv[y]], ref, rtol=1e-8, atol=1e-12)


def test_poisson_exposure():
    u = np.array([0.5, 2.0, 10.0])
    lik = Poisson(exposure=u)
    y, m, v = np.array([0.0, 3.0, 40.0]), np.array([0.2, -1.0, 1.5]), np.array([0.5, 2.0, 3.0])
    E, dm, dv = lik.expected_log_lik(y, m, v)
    for i in range(3):
        ref = [adaptive_expect(lambda f: y[i] * (f + np.log(u[i])) - u[i] * np.exp(f) - gammaln(y[i] + 1), m[i], v[i]),
               adaptive_expect(lambda f: y[i] - u[i] * np.exp(f), m[i], v[i]), -0.5 * adaptive_expect(lambda f: u[i] * np.exp(f), m[i], v[i])]
        np.testing.assert_allclose([E[i], dm[i], dv[i]], ref, rtol=1e-10)


@pytest.mark.parametrize("part", PARTS)
def test_grid_laplace(part):
    lik = Laplace(0.7)
    for y, m, v in _part([(y, m, v) for y in (-1.0, 2.0) for m in MS for v in VS], part):
        def g(f):
            stein = 0.5 * ((f - m) ** 2 / v - 1) / v * (lik.logp(y, f) - lik.logp(y, m))   # Stein (000 eq. 7)
            return np.stack([lik.logp(y, f), lik.derivs(y, f)[1], stein, np.abs(stein)])
        # ℓ(f) − ℓ(m) is a difference of nearly equal logs (at v = 1e-6 its rounding is ~1e-11 of it): the Stein rows to
        # 3e-13 of their scale E|g|, a third of the tolerance's floor 1e-12 E|g|
        E_ref, dm_ref, dv_ref, dv_scale = adaptive_expect(g, m, v, (y,), atol=1e-15, stol=[1e-14, 1e-14, 3e-13, 3e-13])
        check_site(lik, y, m, v, (y,), ref=np.array([E_ref, dm_ref, dv_ref]),
                   scale=np.array([abs(E_ref), 1 / 0.7, dv_scale]))


@pytest.mark.parametrize("part", PARTS)
def test_grid_exponential(part):
    for y, m, v in _part([(y, m, v) for y in (0.01, 1.0, 20.0) for m in MS for v in VS], part):
        check_site(Exponential(), y, m, v, (-np.log(y),))


@pytest.mark.parametrize("part", PARTS)
def test_grid_stochastic_volatility(part):
    for y, m, v in _part([(y, m, v) for y in (0.0, 0.3, 5.0) for m in MS for v in VS], part):
        check_site(StochasticVolatility(), y, m, v, (np.log(max(y * y, 1e-300)),))


# --- GH option and shapes ---------------------------------------------------------------------------------
def test_gh_option_differs_and_converges_for_small_v():
    lik = Logistic()
    a = lik.expected_log_lik(1.0, 0.3, 100.0)
    b = lik.expected_log_lik(1.0, 0.3, 100.0, method='gh', n_gh=20)
    assert abs(a[0] - b[0]) > 1e-6 * abs(a[0])          # plain GH is visibly off at v = 100
    c = lik.expected_log_lik(1.0, 0.3, 0.5, method='gh', n_gh=32)
    np.testing.assert_allclose(c, lik.expected_log_lik(1.0, 0.3, 0.5), rtol=1e-12)


ALL = [Gaussian(), Logistic(), Probit(), Poisson(), NegativeBinomial(1.7), ZeroInflatedPoisson(0.3), Laplace(), StudentT(), Exponential(), StochasticVolatility(),
       Ordinal([-1., 1.])]
YS = {Gaussian: 0.3, Logistic: 1.0, Probit: -1.0, Poisson: 3.0, NegativeBinomial: 3.0, ZeroInflatedPoisson: 0.0, Laplace: 0.3, StudentT: 0.3, Exponential: 2.0,
      StochasticVolatility: 0.5, Ordinal: 1.0}


@pytest.mark.parametrize("lik", ALL, ids=lambda l: type(l).__name__)
def test_shapes_and_broadcasting(lik):
    y0 = YS[type(lik)]
    rng = np.random.default_rng(0)
    m, v = rng.normal(size=7), rng.uniform(0, 20, size=7)
    out = lik.expected_log_lik(np.full(7, y0), m, v)
    assert all(o.shape == (7,) for o in out)
    out_b = lik.expected_log_lik(y0, m, v)                      # scalar y broadcasts
    for a, b in zip(out, out_b): np.testing.assert_allclose(a, b, rtol=1e-14)
    single = [lik.expected_log_lik(np.array([y0]), m[i:i + 1], v[i:i + 1]) for i in range(7)]
    for k in range(3): np.testing.assert_allclose(out[k], [s[k][0] for s in single], rtol=1e-12, atol=1e-15)
    assert np.shape(lik.expected_log_lik(y0, 0.1, 2.0)[0]) == ()
    assert lik.expected_log_lik(np.full((2, 3), y0), np.zeros((2, 3)), np.ones(3))[0].shape == (2, 3)
    al, ga = lik.alpha_gamma(np.full(7, y0), m, v)
    np.testing.assert_allclose(al, -out[1]); np.testing.assert_allclose(ga, -2 * out[2])
    assert lik.expected_log_lik(np.zeros(0) + y0, np.zeros(0), np.zeros(0))[0].shape == (0,)
    with pytest.raises(ValueError, match="incompatible shapes"):
        lik.expected_log_lik(np.full(3, y0), np.zeros(4), np.ones(4))
    with pytest.raises(ValueError, match="non-negative"):
        lik.expected_log_lik(y0, 0.0, -1.0)
    with pytest.raises(ValueError, match="non-negative"):                # a negative variance beside a NaN one
        lik.expected_log_lik(np.full(2, y0), np.zeros(2), np.array([np.nan, -1.0]))


@pytest.mark.parametrize("lik", ALL, ids=lambda l: type(l).__name__)
def test_zero_variance_limit(lik):
    y0 = YS[type(lik)]
    f = np.array([-2.0, 0.1, 1.7])
    lp, dlp, d2lp = lik.derivs(np.full(3, y0), f)
    E, dm, dv = lik.expected_log_lik(np.full(3, y0), f, np.zeros(3))
    np.testing.assert_allclose(E, lp, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(dm, dlp, rtol=1e-14, atol=1e-15)
    E2 = lik.expected_log_lik(np.full(3, y0), f, np.full(3, 1e-9))[0]
    np.testing.assert_allclose(E2, lp + 0.5e-9 * d2lp, rtol=1e-13, atol=1e-15)


# --- predictions --------------------------------------------------------------------------------------------
PRED = [(Logistic(), [1.0, -1.0], lambda f: 1 / (1 + np.exp(-f)), (0.0,)),
        (Probit(), [1.0, -1.0], ndtr, (0.0,)),
        (Poisson(), [0.0, 4.0, 30.0], np.exp, ()),
        (NegativeBinomial(0.8), [0.0, 4.0, 30.0], np.exp, (np.log(0.8),)),
        (ZeroInflatedPoisson(0.4), [0.0, 4.0, 30.0], lambda f: 0.6 * np.exp(f), (0.0, np.log(5.0), np.log(21.0))),
        (Exponential(), [0.05, 2.0], lambda f: np.exp(-f), ()),
        (Gaussian(0.4), [0.3], lambda f: f, ()), (Laplace(0.5), [0.3], lambda f: f, (0.3,)),
        (StudentT(4.0, 0.5), [-1.0, 2.0], lambda f: f, ()), (StochasticVolatility(), [0.0, 0.7], lambda f: 0 * f, ())]


@pytest.mark.parametrize("case", PRED, ids=lambda c: type(c[0]).__name__)
def test_predict_y_and_log_pred_density(case):
    lik, ys, mean_f, pts = case
    for m, v in [(-3.0, 0.01), (0.5, 1.0), (2.0, 25.0), (-1.0, 100.0)]:
        pm = lik.predict_y(np.array([m]), np.array([v]))[0]
        ref = adaptive_expect(mean_f, m, v, pts)
        assert abs(pm - ref) <= 1e-8 * abs(ref) + 1e-13, (lik, m, v, pm, ref)
        for y in ys:
            lpd = lik.log_pred_density(np.array([y]), np.array([m]), np.array([v]))[0]
            extra = tuple(pts) + (y, np.log(max(y, 1)), -np.log(abs(y) + 1e-300), np.log(y * y + 1e-300))
            ref = np.log(adaptive_expect(lambda f: np.exp(lik.logp(y, f)), m, v, extra))
            assert abs(lpd - ref) <= 1e-8 * max(1.0, abs(ref)), (lik, y, m, v, lpd, ref)


def test_ordinal_predictions():
    lik = Ordinal([-1.0, 0.5, 2.0])
    m, v = np.array([-3.0, 0.5, 2.0, 0.0]), np.array([0.01, 1.0, 25.0, 100.0])
    P = lik.predict_y(m, v)
    assert P.shape == (4, 4)
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=1e-14)
    for i in range(4):
        for k in range(4):
            ref = adaptive_expect(lambda f: np.exp(lik.logp(float(k), f)), m[i], v[i], (-1.0, 0.5, 2.0))
            assert abs(P[i, k] - ref) <= 1e-8 * ref + 1e-14
            assert abs(lik.log_pred_density(np.array([float(k)]), m[i:i + 1], v[i:i + 1])[0] - np.log(ref)) < 1e-8


# --- samplers -----------------------------------------------------------------------------------------------
def test_sample_moments():
    rng = np.random.default_rng(42)
    N = 200_000
    f = np.full(N, 0.4)
    def close(x, mean, var):
        assert abs(x.mean() - mean) < 5 * np.sqrt(var / N), (x.mean(), mean)
    close(Gaussian(0.5).sample(f, rng), 0.4, 0.5)
    p = 1 / (1 + np.exp(-0.4)); close((Logistic().sample(f, rng) + 1) / 2, p, p * (1 - p))
    p = ndtr(0.4); close((Probit().sample(f, rng) + 1) / 2, p, p * (1 - p))
    close(Poisson().sample(f, rng), np.exp(0.4), np.exp(0.4))
    close(Poisson(exposure=3.0).sample(f, rng), 3 * np.exp(0.4), 3 * np.exp(0.4))
    x = Laplace(0.5).sample(f, rng); close(x, 0.4, 0.5); assert abs(x.var() / 0.5 - 1) < 0.02
    x = StudentT(5.0, 0.5).sample(f, rng); close(x, 0.4, 0.5 * 5 / 3)
    close(Exponential().sample(f, rng), np.exp(-0.4), np.exp(-0.8))
    x = StochasticVolatility().sample(f, rng); close(x, 0.0, np.exp(0.4)); assert abs(x.var() / np.exp(0.4) - 1) < 0.02
    lik = Ordinal([-1.0, 0.5, 2.0]); x = lik.sample(f, rng)
    probs = np.exp(lik.logp(np.arange(4.0), np.full(4, 0.4)))
    np.testing.assert_allclose(np.bincount(x.astype(int), minlength=4) / N, probs, atol=5 * np.sqrt(0.25 / N))
    assert set(np.unique(Logistic().sample(f, 0))) <= {-1.0, 1.0}
    np.testing.assert_array_equal(Poisson().sample(f, 7), Poisson().sample(f, 7))   # seeded


# --- bad input ----------------------------------------------------------------------------------------------
def test_bernoulli_codings():
    for lik in (Logistic(), Probit()):
        np.testing.assert_array_equal(lik.check_y([0, 1, 1]), [-1, 1, 1])
        np.testing.assert_array_equal(lik.check_y([-1, 1]), [-1, 1])
        np.testing.assert_array_equal(lik.check_y([1, 1]), [1, 1])
        for bad in ([0, 2], [-1, 0, 1], [0.5, 1]):
            with pytest.raises(ValueError, match=r"\{-1, \+1\} or as \{0, 1\}"):
                lik.check_y(bad)
        for bad in ([0, np.nan], [1, np.inf]):
            with pytest.raises(ValueError, match="NaN or inf"):
                lik.check_y(bad)
        with pytest.raises(ValueError, match="numeric"):
            lik.check_y(["a", "b"])


def test_count_and_positive_data():
    with pytest.raises(ValueError, match="non-negative integers"): Poisson().check_y([1, -2])
    with pytest.raises(ValueError, match="non-negative integers"): Poisson().check_y([1.5, 2])
    with pytest.raises(ValueError, match="NaN or inf"): Poisson().check_y([1, np.nan])
    with pytest.raises(ValueError, match="positive"): Exponential().check_y([1.0, 0.0])
    with pytest.raises(ValueError, match="positive"): Exponential().check_y([-1.0])
    for lik in (Gaussian(), Laplace(), StudentT(), StochasticVolatility(), Exponential()):
        with pytest.raises(ValueError, match="NaN or inf"): lik.check_y([0.5, np.inf])
    with pytest.raises(ValueError, match="shape"): Poisson(exposure=np.ones(3)).check_y([1, 2])
    assert Poisson().check_y([0, 3]).dtype == float


def test_ordinal_bad_input():
    lik = Ordinal([-1.0, 1.0])
    for bad in ([0, 3], [-1], [0.5]):
        with pytest.raises(ValueError, match=r"integers 0\.\.2"): lik.check_y(bad)
    with pytest.raises(ValueError, match="strictly increasing"): Ordinal([1.0, 1.0])
    with pytest.raises(ValueError, match="strictly increasing"): Ordinal([2.0, 1.0])
    with pytest.raises(ValueError, match="at least one"): Ordinal([])
    with pytest.raises(ValueError, match="NaN or inf"): Ordinal([0.0, np.inf])


def test_bad_parameters():
    for make in (lambda: Gaussian(0.0), lambda: Gaussian(-1.0), lambda: Laplace(0.0), lambda: StudentT(df=0.0),
                 lambda: StudentT(df=-2.0), lambda: StudentT(scale2=0.0), lambda: Gaussian(np.nan),
                 lambda: Poisson(exposure=[1.0, 0.0]), lambda: Poisson(exposure=[1.0, np.nan]), lambda: Gaussian("x")):
        with pytest.raises(ValueError): make()
    with pytest.raises(ValueError, match="method"): Logistic(method="mc")
    with pytest.raises(ValueError): Logistic(n_gh=0)
    with pytest.raises(ValueError, match="method"): gauss_rule(np.zeros(2), np.ones(2), np.zeros((2, 1)), 1.0, method="bad")


def test_poisson_exposure_for_new_sites():
    "Per-site training exposures are never reused for new sites; a scalar exposure is."
    from scipy.integrate import quad
    from scipy.stats import norm, poisson
    per_site = Poisson(exposure=np.array([2.0, 0.5, 1.5]))
    m, v, y = np.array([0.2, -0.4]), np.array([0.3, 0.8]), np.array([3.0, 0.0])
    with pytest.raises(ValueError, match="exposure="):
        per_site.predict_y(m, v)
    with pytest.raises(ValueError, match="exposure="):
        per_site.log_pred_density(y, m, v)
    u = np.array([4.0, 0.25])
    np.testing.assert_allclose(per_site.predict_y(m, v, exposure=u), u * np.exp(m + v / 2))
    ref = [np.log(quad(lambda f: poisson.pmf(yi, ui * np.exp(f)) * norm.pdf(f, mi, np.sqrt(vi)), mi - 12 * np.sqrt(vi), mi + 12 * np.sqrt(vi), epsabs=0, epsrel=1e-12)[0])
           for yi, mi, vi, ui in zip(y, m, v, u)]
    np.testing.assert_allclose(per_site.log_pred_density(y, m, v, exposure=u), ref, rtol=1e-8)
    scalar = Poisson(exposure=3.0)
    np.testing.assert_allclose(scalar.predict_y(m, v), 3.0 * np.exp(m + v / 2))


# --- parameters: params / with_params / expected_dparams --------------------------------------------------------------

PARAM_CASES = [(Gaussian(0.6), ["variance"], np.array([0.3, -2.0, 4.0])), (Laplace(0.7), ["scale"], np.array([0.3, -2.0, 4.0])),
               (NegativeBinomial(1.7), ["dispersion"], np.array([0.0, 3.0, 25.0])),
               (ZeroInflatedPoisson(0.3), ["logit_zero_prob"], np.array([0.0, 0.0, 3.0])),
               (NegativeBinomial(0.4, exposure=np.array([0.5, 2.0, 1.0, 3.0, 1.0, 0.2])), ["dispersion"], np.array([0.0, 3.0, 25.0])),
               (StudentT(4.0, 0.5), ["scale2", "df"], np.array([0.3, -2.0, 4.0])),
               (Ordinal([-1.0, 0.5, 2.0]), ["cutpoints[0]", "log_gap[1]", "log_gap[2]"], np.array([0.0, 2.0, 3.0]))]


@pytest.mark.parametrize("lik,names,y", PARAM_CASES, ids=lambda c: type(c).__name__ if hasattr(c, "derivs") else "")
def test_parameters_round_trip_and_derivative(lik, names, y):
    "with_params(params) is the same likelihood, a new value; ∂E/∂θ equals differences of E in θ (wide sites included)."
    assert lik.param_names == names and lik.params.shape == (len(names),)
    t = lik.params; new = lik.with_params(t + 0.1)
    assert type(new) is type(lik) and np.allclose(new.params, t + 0.1) and np.allclose(lik.params, t)   # lik unchanged
    m = np.array([1.1, 0.2, -0.5, 3.0, -2.0, 0.0]); v = np.array([0.4, 3.0, 1e-3, 80.0, 1e4, 1e-9]); yy = np.concatenate([y, y])
    g = lik.expected_dparams(yy, m, v)
    h = 1e-5
    fd = np.stack([(lik.with_params(t + h * e).expected_log_lik(yy, m, v)[0] - lik.with_params(t - h * e).expected_log_lik(yy, m, v)[0]) / (2 * h)
                   for e in np.eye(len(t))])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7 * (1 + np.abs(fd).max()))
    f, W = lik.rule(yy, m, v)                                                   # the quadrature route, also where a closed form exists
    gq = np.einsum('pij,ij->pi', lik.dlogp_dparams(yy[:, None], f), W)
    wide = np.sqrt(v) > lik.width                                               # the composite rule's sites (GH is not for a kink)
    np.testing.assert_allclose(gq[:, wide], g[:, wide], rtol=1e-8, atol=1e-10)


def test_parameters_refuse_bad_values_and_keep_cut_points_ordered():
    with pytest.raises(ValueError, match="expected 2 parameters"): StudentT().with_params([0.0])
    with pytest.raises(ValueError, match="scale: parameter nan"): Laplace().with_params([np.nan])
    with pytest.raises(ValueError, match="variance: parameter 800"): Gaussian().with_params([800.0])
    c = Ordinal([0.0, 1.0, 1.5]).with_params([-3.0, -5.0, 2.0]).cutpoints
    assert np.all(np.diff(c) > 0) and np.isclose(c[0], -3.0)
    assert Logistic().params.shape == (0,) and Logistic().expected_dparams(np.ones(3), np.zeros(3), np.ones(3)).shape == (0, 3)
    assert Poisson().with_params([]) is not None


# --- negative binomial ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("part", PARTS)
def test_grid_negative_binomial(part):
    "E, dE/dm, dE/dv against quad over counts, dispersions, means and site variances 1e-6 .. 1e3."
    cases = [(r, y, m, v) for r in (0.3, 40.0) for y in (0.0, 3.0, 60.0) for m in (-10.0, 0.5, 7.0) for v in (1e-6, 1.0, 25.0, 100.0, 1e3)]
    for r, y, m, v in _part(cases, part): check_site(NegativeBinomial(r), y, m, v, (np.log(r), np.log(max(y, 1))))
    if part: return
    lik = NegativeBinomial(2.5)                                       # every count 0..50 at one site
    E, dm, dv = lik.expected_log_lik(np.arange(51.0), np.full(51, 1.0), np.full(51, 30.0))
    for y in range(0, 51, 7):
        ref = oracle_ell(lik, float(y), 1.0, 30.0, (np.log(2.5), np.log(max(y, 1))))
        np.testing.assert_allclose([E[y], dm[y], dv[y]], ref, rtol=1e-8, atol=1e-12)


def _quad_wide(g, m, v, pts, **kw):
    "∫ g(f) N(f|m, v) df for a huge v: the oracle, cut also at distances 1, 4, ..., 1024 (in f) around each of `pts`."
    return adaptive_expect(g, m, v, pts, around=(1, 4, 16, 64, 256, 1024), **kw)


def _scipy_wide(g, m, v, pts):
    "The independent route of `_quad_wide`: scipy quad of a scalar g in z on a grid, with cuts at distances 1..1024 (in f) around `pts`."
    s = math.sqrt(v)
    cuts = {float(k) for k in (-45, -30, -20, -12, -8, -5, -3, -2, -1, 0, 1, 2, 3, 5, 8, 12, 20, 30, 45)}
    for p in pts:
        cuts |= {z for k in (0, 1, 4, 16, 64, 256, 1024) for z in ((p - m - k) / s, (p - m + k) / s) if abs(z) < 45}
    cuts = sorted(cuts)
    dens = lambda z: g(m + s * z) * math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sum(quad(dens, a, b, epsabs=0, epsrel=1e-13, limit=400)[0] for a, b in zip(cuts[:-1], cuts[1:]))


@pytest.mark.parametrize("v", [pytest.param(1e4, marks=pytest.mark.slow), 1e6])
def test_negative_binomial_huge_site_variance(v):
    "At v = 1e4 and 1e6: E, dE/dm, dE/dv and dE/dlog r within 1e-8 relative (1e-12 on the integrand's scale) of quad."
    lik = NegativeBinomial(1.3)
    for y, m in ((0.0, 0.3), (7.0, -20.0), (40.0, 5.0)):
        est = [e.item() for e in lik.expected_log_lik(np.array([y]), np.array([m]), np.array([v]))] + [lik.expected_dparams(y, m, v)[0].item()]
        def g(f):                                             # the four integrands and their sizes, one derivs call per round
            lp, dlp, d2lp = lik.derivs(y, f)
            gs = np.stack([lp, dlp, 0.5 * d2lp, lik.dlogp_dparams(y, f)[0]])
            return np.concatenate([gs, np.abs(gs)])
        pts = (np.log(1.3), np.log(max(y, 1.0)))
        out = _quad_wide(g, m, v, pts, atol=1e-15)
        for e, ref, scale in zip(est, out[:4], out[4:]):
            assert abs(e - ref) <= 1e-8 * abs(ref) + 1e-12 * max(1.0, scale), (y, m, v, e, ref)


def test_negative_binomial_never_nan_or_infinite():
    "The expectations are finite for m in [-1e3, 1e3] and v in [0, 1e8] (sp(x) is linear, nothing overflows), both rules."
    M, V = (a.ravel() for a in np.meshgrid([-1e3, -700.0, -30.0, 0.0, 30.0, 700.0, 1e3], [0.0, 1e-12, 1.0, 1e3, 1e5, 1e8]))
    for r in (1e-3, 1.0, 1e5):
        for y in (0.0, 1.0, 1e4):
            for method in ("auto", "gh"):
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    out = NegativeBinomial(r).expected_log_lik(np.full(M.shape, y), M, V, method=method)
                    out += (NegativeBinomial(r).expected_dparams(np.full(M.shape, y), M, V, method=method)[0],)
                assert all(np.all(np.isfinite(o)) for o in out), (r, y, method)


def test_negative_binomial_matches_scipy_and_poisson_limit():
    from scipy.stats import nbinom, poisson
    y, f = np.arange(60.0), np.linspace(-5, 6, 60)
    for r in (0.05, 1.0, 30.0):
        np.testing.assert_allclose(NegativeBinomial(r).logp(y, f), nbinom.logpmf(y, r, r / (r + np.exp(f))), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(NegativeBinomial(1e9).logp(y, f), poisson.logpmf(y, np.exp(f)), rtol=1e-6, atol=1e-6)
    E_nb = NegativeBinomial(1e9).expected_log_lik(y, f, np.full(60, 0.7))
    E_p = Poisson().expected_log_lik(y, f, np.full(60, 0.7))
    for a, b in zip(E_nb, E_p): np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)



def test_negative_binomial_large_dispersion_against_mpmath():
    """log (r)_y = log Γ(y + r) − log Γ(r) and G = r(ψ(y + r) − ψ(r)) − y (log_poch, digamma_count_gap) at seeded random
    (r, y), r log-uniform on [1e-2, 1e14], counts up to 1e4, against 60-digit mpmath to 1e-12 relative (array in, array
    out); then log p and ∂ log p/∂ log r of the negative binomial at r up to 1e14 against mpmath of the naive formulas,
    where the plain differences lose every digit of the derivative."""
    import mpmath
    from vgi_lit.likelihoods import log_poch, digamma_count_gap
    rng = np.random.default_rng(11)
    r = 10 ** rng.uniform(-2, 14, 40)
    y = np.floor(10 ** rng.uniform(0, 4, 40)) - rng.integers(0, 2, 40)         # 0 .. 1e4, small counts well represented
    C, G = log_poch(r, y), digamma_count_gap(r, y)
    assert C.shape == G.shape == (40,)
    for fn in (log_poch, digamma_count_gap):
        for bad in (-1.0, 2.5, np.nan):
            with pytest.raises(ValueError, match="counts y must be non-negative integers"): fn(3.0, [1.0, bad])
        with pytest.raises(ValueError, match="r must be positive"): fn(0.0, 2.0)
    with mpmath.workdps(60):
        for ri, yi, c, g in zip(r, y, C, G):
            R, Y = mpmath.mpf(ri), mpmath.mpf(yi)
            ref_c = mpmath.loggamma(Y + R) - mpmath.loggamma(R)
            ref_g = -mpmath.fsum(j / (R + j) for j in range(1, int(yi)))           # −Σ_{j<y} j/(r + j), exact for integer y
            assert abs(c - ref_c) <= 1e-12 * abs(ref_c), (ri, yi, c, ref_c)
            assert abs(g - ref_g) <= 1e-12 * abs(ref_g), (ri, yi, g, ref_g)
    yy = np.array([0.0, 1, 2, 7, 30, 250, 1e4, 3]); ff = np.array([0.3, -1.0, 2.0, 1.5, 3.0, 5.0, 9.0, -30.0])
    worst_plain = 0.0
    with mpmath.workdps(60):
        for rr in (0.01, 0.5, 30.0, 1e4, 1e8, 1e11, 1e14):
            lik = NegativeBinomial(rr)
            lp, d = lik.logp(yy, ff), lik.dlogp_dparams(yy, ff)[0]
            for yi, fi, a, b in zip(yy, ff, lp, d):
                R, Y, F = mpmath.mpf(rr), mpmath.mpf(yi), mpmath.mpf(fi); mu = mpmath.exp(F)
                ref = mpmath.loggamma(Y + R) - mpmath.loggamma(R) - mpmath.loggamma(Y + 1) + R * mpmath.log(R) + Y * F - (Y + R) * mpmath.log(R + mu)
                ref_d = R * (mpmath.digamma(Y + R) - mpmath.digamma(R) + mpmath.log(R) + 1 - mpmath.log(R + mu) - (Y + R) / (R + mu))
                assert abs(a - ref) <= 1e-12 * (abs(ref) + gammaln(yi + 1)), (rr, yi, fi, a, ref)   # log y! cancels in C at small r
                assert abs(b - ref_d) <= 1e-11 * abs(ref_d), (rr, yi, fi, b, ref_d)
                if rr == 1e8 and yi >= 2:                                       # the plain G = r(ψ(y + r) − ψ(r)) − y in float64
                    ref_g = R * (mpmath.digamma(Y + R) - mpmath.digamma(R)) - Y
                    worst_plain = max(worst_plain, abs(float((rr * (digamma(yi + rr) - digamma(rr)) - yi - ref_g) / ref_g)))
    assert worst_plain > 1e-4                                                 # the plain difference fails where the stable form holds

def test_negative_binomial_exposure():
    u = np.array([0.5, 2.0, 10.0]); r = 1.4
    lik = NegativeBinomial(r, exposure=u)
    y, m, v = np.array([0.0, 3.0, 40.0]), np.array([0.2, -1.0, 1.5]), np.array([0.5, 2.0, 30.0])
    E, dm, dv = lik.expected_log_lik(y, m, v)
    for i in range(3):
        ref = NegativeBinomial(r).expected_log_lik(y[i], m[i] + np.log(u[i]), v[i])    # u e^f = e^{f + log u}
        np.testing.assert_allclose([E[i], dm[i], dv[i]], ref, rtol=1e-12)
    with pytest.raises(ValueError, match="exposure="): lik.predict_y(m, v)
    with pytest.raises(ValueError, match="exposure="): lik.log_pred_density(y, m, v)
    u_new = np.array([4.0, 0.25, 1.0])
    np.testing.assert_allclose(lik.predict_y(m, v, exposure=u_new), u_new * np.exp(m + v / 2))
    np.testing.assert_allclose(lik.log_pred_density(y, m, v, exposure=u_new), NegativeBinomial(r).log_pred_density(y, m + np.log(u_new), v), rtol=1e-10)
    np.testing.assert_array_equal(lik.with_params([0.0]).exposure, u); assert lik.with_params([0.0]).dispersion == 1.0
    with pytest.raises(ValueError, match="shape"): lik.check_y([1.0, 2.0])


HARD_LPD = [(0.0, 0.5, 1.0), (4.0, 2.0, 25.0), (30.0, -3.0, 0.01), (200.0, -3.0, 0.1), (200.0, -1.0, 100.0), (0.0, -1.0, 100.0),
            (1.0, 4.0, 400.0), (500.0, -8.0, 3.0), (0.0, 12.0, 2.0), (3.0, 0.0, 1e4)]


@pytest.mark.parametrize("lik", [Poisson(), NegativeBinomial(0.3), NegativeBinomial(5.0), NegativeBinomial(1e4)], ids=repr)
def test_count_log_pred_density_far_tilted_sites(lik):
    "The tilted rule against quad, including counts tens of standard deviations from the predicted mean; v = 0 gives log p(y|m)."
    r = getattr(lik, "dispersion", None)
    def pmf(y, f):                                   # the naive pmf, in logs (log(r + e^f) by logaddexp)
        with np.errstate(over="ignore"):
            if r is None: return np.exp(y * f - np.exp(f) - gammaln(y + 1))
            lr = np.logaddexp(np.log(r), f)
            return np.exp(gammaln(y + r) - gammaln(r) - gammaln(y + 1) + r * (np.log(r) - lr) + y * (f - lr))
    for y, m, v in HARD_LPD:
        s = np.sqrt(v); fh = m + v * y / (1 + v * max(y, 1))               # near the mode, for the oracle's cuts only
        pts = (np.log(max(y, 1)), fh) + ((np.log(r),) if r else ())
        # at r = 1e4 the naive pmf's r(log r − log(r + e^f)) rounds to ~1e-12 of it: the oracle to 1e-11, a hundredth of the tolerance
        ref = np.log(adaptive_expect(lambda f: pmf(y, f), m, v, pts, rtol=1e-11 if r and r > 100 else 1e-13))
        got = lik.log_pred_density(np.array([y]), np.array([m]), np.array([v]))[0]
        assert abs(got - ref) <= 1e-9 * max(1.0, abs(ref)), (lik, y, m, v, got, ref)
    y = np.array([0.0, 5.0, 80.0]); m = np.array([-2.0, 0.3, 6.0])
    np.testing.assert_allclose(lik.log_pred_density(y, m, np.zeros(3)), lik.logp(y, m), rtol=1e-14)


def test_negative_binomial_sample_moments_and_bad_input():
    rng = np.random.default_rng(3); N = 200_000
    for r, f in ((0.5, 1.0), (4.0, -0.3)):
        x = NegativeBinomial(r).sample(np.full(N, f), rng); mu = np.exp(f); var = mu + mu * mu / r
        assert abs(x.mean() - mu) < 5 * np.sqrt(var / N) and abs(x.var() / var - 1) < 0.05
        assert np.all(x == np.round(x)) and x.min() >= 0
    x = NegativeBinomial(2.0, exposure=3.0).sample(np.full(N, 0.2), rng)
    assert abs(x.mean() / (3 * np.exp(0.2)) - 1) < 0.01
    np.testing.assert_array_equal(NegativeBinomial(2.0).sample(np.zeros(5), 9), NegativeBinomial(2.0).sample(np.zeros(5), 9))
    for bad in ([1, -2], [1.5, 2]):
        with pytest.raises(ValueError, match="negative binomial counts must be non-negative integers"): NegativeBinomial().check_y(bad)
    with pytest.raises(ValueError, match="NaN or inf"): NegativeBinomial().check_y([1, np.nan])
    with pytest.raises(ValueError, match="numeric"): NegativeBinomial().check_y(["a", "b"])
    for d in (0.0, -1.0, np.nan, np.inf, "x"):
        with pytest.raises(ValueError, match="dispersion"): NegativeBinomial(d)
    with pytest.raises(ValueError, match="exposure must be positive"): NegativeBinomial(exposure=[1.0, 0.0])
    with pytest.raises(ValueError, match="dispersion: parameter"): NegativeBinomial().with_params([800.0])


def test_link_and_curvature_attributes():
    "log_link and curvature_bounded: γ grows without bound in (m, v) exactly for the classes that say so."
    for lik, y in ((Poisson(), 3.0), (NegativeBinomial(2.0), 3.0), (ZeroInflatedPoisson(0.2), 3.0), (Exponential(), 2.0), (StochasticVolatility(), 0.5),
                   (Logistic(), 1.0), (Probit(), 1.0), (Gaussian(), 0.3), (Laplace(), 0.3), (StudentT(), 0.3), (Ordinal([-1.0, 1.0]), 1.0)):
        g = lik.alpha_gamma(np.full(4, y), np.array([0.0, 5.0, -5.0, 0.0]), np.array([1.0, 1.0, 1.0, 30.0]))[1]
        assert (np.max(np.abs(g)) < 50) == lik.curvature_bounded, (lik, g)
    assert [c.log_link for c in (Poisson, NegativeBinomial, ZeroInflatedPoisson, Exponential, StochasticVolatility)] == [True] * 5
    assert not any(c.log_link for c in (Gaussian, Logistic, Probit, Laplace, StudentT, Ordinal))
    assert NegativeBinomial.log_concave and NegativeBinomial.curvature_bounded and not Poisson.curvature_bounded


# --- zero-inflated Poisson ------------------------------------------------------------------------------------

@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("p", [1e-6, 0.05, 0.7])
def test_grid_zero_inflated_poisson(p, part):
    "y = 0 (quadrature) over m and v up to 1e3, and y > 0 (closed form) against quad."
    lik = ZeroInflatedPoisson(p)
    pts = tuple(lik._transitions(np.zeros(1))[0])
    for m, v in _part([(m, v) for m in (-10.0, 0.5, 2.5, 8.0) for v in (1e-6, 0.3, 4.0, 100.0, 1e3)], part): check_site(lik, 0.0, m, v, pts)
    if part: return
    for y in (1.0, 13.0):
        for m, v in ((-3.0, 0.1), (0.5, 1.0), (2.0, 100.0)): check_site(lik, y, m, v, (np.log(y),))


def test_zero_inflated_poisson_exposure_predictions_and_samples():
    u = np.array([0.5, 2.0, 10.0, 1.0]); lik = ZeroInflatedPoisson(0.25, exposure=u)
    y, m, v = np.array([0.0, 3.0, 0.0, 2.0]), np.array([0.2, -1.0, 1.5, 0.3]), np.array([0.5, 2.0, 30.0, 1e-3])
    E = np.stack(lik.expected_log_lik(y, m, v)); g = lik.expected_dparams(y, m, v)[0]
    for i in range(4):
        one = ZeroInflatedPoisson(0.25)
        np.testing.assert_allclose(E[:, i], np.ravel(one.expected_log_lik(y[i], m[i] + np.log(u[i]), v[i])), rtol=1e-12)
        np.testing.assert_allclose(g[i], one.expected_dparams(y[i], m[i] + np.log(u[i]), v[i])[0], rtol=1e-12)
    with pytest.raises(ValueError, match="exposure="): lik.log_pred_density(y, m, v)
    lpd = ZeroInflatedPoisson(0.25).log_pred_density(y, m, v)
    for i in range(4):
        ref = np.log(adaptive_expect(lambda f: np.exp(ZeroInflatedPoisson(0.25).logp(y[i], f)), m[i], v[i], (0.0, np.log(max(y[i], 1.0)))))
        assert abs(lpd[i] - ref) < 1e-9 * max(1.0, abs(ref))
    np.testing.assert_allclose(ZeroInflatedPoisson(0.25).predict_y(m, v), 0.75 * np.exp(m + v / 2))
    x = ZeroInflatedPoisson(0.3).sample(np.full(200_000, 1.0), np.random.default_rng(5))
    p0 = 0.3 + 0.7 * np.exp(-np.e)
    assert abs(np.mean(x == 0) - p0) < 5 * np.sqrt(p0 * (1 - p0) / x.size) and abs(x.mean() / (0.7 * np.e) - 1) < 0.01
    for bad in (0.0, 1.0, -0.1, np.nan, "x"):
        with pytest.raises(ValueError, match="zero_prob"): ZeroInflatedPoisson(bad)
    with pytest.raises(ValueError, match="zero-inflated Poisson counts must be non-negative integers"): ZeroInflatedPoisson().check_y([0, 1.5])
    assert ZeroInflatedPoisson(0.3).with_params([0.0]).zero_prob == 0.5


def test_zero_inflated_poisson_never_nan():
    M, V = (a.ravel() for a in np.meshgrid([-1e3, -30.0, 0.0, 30.0, 700.0, 1e3], [0.0, 1e-12, 1.0, 1e3, 1e5]))
    for p in (1e-8, 0.5):
        for method in ("auto", "gh"):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                E, dm, dv = ZeroInflatedPoisson(p).expected_log_lik(np.zeros(M.shape), M, V, method=method)
                g = ZeroInflatedPoisson(p).expected_dparams(np.zeros(M.shape), M, V, method=method)
            for o in (E, dm, dv, g): assert np.all(np.isfinite(o)), (p, method)     # y = 0: ℓ is bounded, so is everything


# --- the probit's one-pass evaluation: one special function per point, Gauss-Hermite in one pass -------------------
def _probit_two_calls(x):
    "Reference: log Φ by log_ndtr and λ = √(2/π)/erfcx(−x/√2) at every point."
    from scipy.special import log_ndtr, erfcx
    return log_ndtr(x), np.sqrt(2 / np.pi) / erfcx(-x / np.sqrt(2))


def test_probit_one_call_against_mpmath_and_two_calls():
    "log Φ, λ and λ(x + λ) against 40 digits on x ∈ [−1e4, 35], at least as close as the two-call form; shapes kept, ±inf limits."
    import mpmath
    from vgi_lit.likelihoods import _probit_lp_lam
    x = np.concatenate([-np.logspace(4, -4, 97), [0.0, -2.0, -2.0 - 1e-15], np.logspace(-4, np.log10(35.0), 97)])
    with mpmath.workdps(40):
        def ref(t):
            t = mpmath.mpf(t); P = mpmath.ncdf(t); lam = mpmath.npdf(t) / P
            lp = mpmath.log(P) if t < 0 else mpmath.log1p(-mpmath.ncdf(-t))
            return float(lp), float(lam), float(lam * (t + lam))
        R = np.array([ref(t) for t in x])
    errs = []
    for lp, lam in (_probit_lp_lam(x), _probit_two_calls(x)):
        errs.append([np.max(np.abs(lp - R[:, 0]) / np.abs(R[:, 0])), np.max(np.abs(lam - R[:, 1]) / R[:, 1]),
                     np.max(np.abs(lam * (x + lam) - R[:, 2]) / R[:, 2] / np.maximum(20.0, x * x))])
    assert errs[0][0] < 4e-13 and errs[0][1] < 4e-14 and errs[0][2] < 1e-15, errs
    assert np.all(np.array(errs[0]) <= 2.0 * np.array(errs[1])), errs
    lp, lam = _probit_lp_lam(x[:196].reshape(4, 7, 7))
    assert lp.shape == lam.shape == (4, 7, 7) and np.array_equal(lp.ravel(), _probit_lp_lam(x[:196])[0])
    s_lp, s_lam = _probit_lp_lam(-5.0)
    assert np.ndim(s_lp) == np.ndim(s_lam) == 0 and s_lp == pytest.approx(_probit_two_calls(-5.0)[0], rel=1e-15)
    lp, lam = _probit_lp_lam(np.array([-np.inf, np.inf, np.nan]))
    assert lp[0] == -np.inf and lam[0] == np.inf and lp[1] == 0.0 and lam[1] == 0.0 and np.isnan(lp[2]) and np.isnan(lam[2])


@pytest.mark.parametrize("kw", [dict(method="gh", n_gh=20), dict(method="gh", n_gh=32), {}])
def test_probit_one_pass_expectation_equals_the_grouped_rule(kw):
    """(E, ∂E/∂m, ∂E/∂v) of the one-pass GH path equal the base class's grouped rule over the two-call derivs, for v from
    0 to 1e4 and |m| to 1e3 (GH for every site, or the 'auto' mix of GH and composite sites), to 1e-13 relative."""
    from vgi_lit.likelihoods import Likelihood
    class TwoCalls(Probit):
        def derivs(self, y, f):
            x = y * f; lp, lam = _probit_two_calls(x)
            return lp, y * lam, -lam * (x + lam)
        _quad_ell = Likelihood._quad_ell
    rng = np.random.default_rng(12); n = 2000
    y = rng.choice([-1.0, 1.0], n); m = rng.normal(0.0, 4.0, n) * np.where(rng.uniform(size=n) < 0.05, 200.0, 1.0)
    for v in (np.exp(rng.uniform(np.log(1e-12), 0.0, n)), np.exp(rng.uniform(np.log(1e-12), np.log(1e4), n)), np.zeros(n)):
        got, ref = Probit(**kw).expected_log_lik(y, m, v), TwoCalls(**kw).expected_log_lik(y, m, v)
        for g, r in zip(got, ref): np.testing.assert_allclose(g, r, rtol=1e-13, atol=1e-200)   # below: tails of x ≳ 30, 1e-13 either way
    with pytest.raises(ValueError, match="method"): Probit().expected_log_lik(y, m, np.full(n, 0.5), method="gauss")


@pytest.mark.parametrize("n_gh", [1, 5, 20, 32])
def test_logistic_gh_method_is_the_fused_pass_of_the_generic_rule(n_gh):
    lik = Logistic(method='gh', n_gh=n_gh)
    rng = np.random.default_rng(n_gh)
    y = np.where(rng.uniform(size=300) < 0.5, -1.0, 1.0)
    m, v = rng.normal(0, 8, size=300), np.exp(rng.uniform(np.log(1e-8), np.log(50.0), size=300))
    fused, generic = lik.expected_log_lik(y, m, v), lik._quad_ell(y, m, v, 'gh', n_gh)   # the generic GH: derivs, then the rule
    for a, b in zip(fused, generic):
        assert a.shape == (300,) and np.abs(a - b).max() <= 1e-14 * (1 + np.abs(b).max())
    assert all(o.shape == (2, 3) for o in lik.expected_log_lik(np.ones((2, 3)), np.zeros((2, 3)), np.ones(3)))
    assert all(np.shape(o) == () for o in lik.expected_log_lik(1.0, 0.3, 0.5))
    assert all(o.shape == (0,) for o in lik.expected_log_lik(np.zeros(0), np.zeros(0), np.zeros(0)))
    np.testing.assert_allclose(lik.expected_log_lik(1.0, 0.3, 0.5, n_gh=64), Logistic().expected_log_lik(1.0, 0.3, 0.5), rtol=1e-12)
    with pytest.raises(ValueError, match="non-negative"): lik.expected_log_lik(y, m, -v)


def test_logistic_logp_is_the_first_output_of_derivs():
    "Logistic.logp computes log σ(yf) alone, bit-identical to derivs' first output (the predictive density's quadrature uses it)."
    rng = np.random.default_rng(5)
    y, f = rng.choice([-1.0, 1.0], (40, 7)), rng.normal(0.0, 30.0, (40, 7))
    assert np.array_equal(Logistic().logp(y, f), Logistic().derivs(y, f)[0])
