"""Hard cases: every likelihood's expectations at extreme (m, v) are never NaN, and infinite only where the exact
value overflows float64; labels that are not plain numbers or lie outside a likelihood's support get one ValueError
from `check_y` naming the likelihood and the offending values."""
import warnings
import numpy as np
import pytest

from vgi_lit.quadrature import adaptive_expect
from vgi_lit.likelihoods import (Gaussian, Logistic, Probit, Poisson, Laplace, StudentT, Exponential,
                                 StochasticVolatility, Ordinal)

LOG_MAX = np.log(np.finfo(float).max)                     # 709.78: e^x overflows above this
CASES = {
    "gaussian": (Gaussian(0.5), [0.0, 1.5, -3.0]),
    "logistic": (Logistic(), [-1.0, 1.0]),
    "probit": (Probit(), [-1.0, 1.0]),
    "poisson": (Poisson(), [0.0, 1.0, 7.0]),
    "poisson-exposure": (Poisson(exposure=2.5), [0.0, 3.0]),
    "laplace": (Laplace(0.7), [0.0, 2.0]),
    "student-t": (StudentT(), [0.0, 2.0]),
    "exponential": (Exponential(), [1e-300, 0.1, 2.0]),
    "stochastic-volatility": (StochasticVolatility(), [0.0, 1e-200, 0.5]),
    "ordinal": (Ordinal([-1.0, 0.5, 2.0]), [0.0, 1.0, 3.0]),
}
M, V = (a.ravel() for a in np.meshgrid([-1e3, -700.0, -30.0, -1.0, 0.0, 1.0, 30.0, 700.0, 1e3],
                                        [0.0, 1e-12, 1e-6, 1.0, 10.0, 1e3, 3.2e3, 1e4, 1e5, 1e8]))


def _log_exp_term(name, lik, y):
    "log of the term a·e^x whose overflow makes the exact E infinite (None where E is bounded by the arguments)."
    with np.errstate(divide="ignore"):
        if name.startswith("poisson"): return np.log(lik.exposure if lik.exposure is not None else 1.0) + M + V / 2
        if name == "exponential": return np.log(y) + M + V / 2
        if name == "stochastic-volatility": return 2 * np.log(abs(y)) - np.log(2) - M + V / 2
    return None


@pytest.mark.parametrize("name", CASES)
def test_expectations_never_nan_and_infinite_only_on_overflow(name):
    lik, ys = CASES[name]
    for y in ys:
        yy = np.full(M.shape, y)
        for method in ("auto", "gh"):
            with warnings.catch_warnings():
                warnings.simplefilter("error")                  # no floating-point warnings leak to the user either
                E, dm, dv = lik.expected_log_lik(yy, M, V, method=method)
            for what, o in (("E", E), ("dE/dm", dm), ("dE/dv", dv)):
                assert not np.any(np.isnan(o)), (name, y, method, what, list(zip(M[np.isnan(o)], V[np.isnan(o)]))[:3])
            if method == "gh": continue                        # GH nodes may overflow where the exact term does not
            t = _log_exp_term(name, lik, y)
            inf = ~np.isfinite(E) | ~np.isfinite(dm) | ~np.isfinite(dv)
            if name == "laplace":                               # dE/dv = −φ(d/s)/(sb) → −∞ only at v = 0, y = m
                assert np.array_equal(inf, (V == 0) & (M == y)) and np.all(dv[inf] == -np.inf), (name, y)
            elif t is None:
                assert not inf.any(), (name, y, list(zip(M[inf], V[inf]))[:3])
            else:
                assert not np.any(inf & (t < LOG_MAX - 1)), (name, y, "inf where the exact value is finite")
                assert np.all(inf[t > LOG_MAX + 1]), (name, y, "finite where the exact value overflows")
                assert np.all(E[inf] == -np.inf) and np.all(dv[inf] == -np.inf), (name, y, "wrong sign")


def test_stochastic_volatility_at_zero_observation():
    "y = 0: E = −½log 2π − m/2, dE/dm = −½, dE/dv = 0 exactly, for any v (0·e^{v/2} was NaN from v ≈ 3.2e3 on)."
    m = np.array([-1e3, -5.0, 0.0, 2.0, 1e3, 0.3]); v = np.array([1e8, 3.2e3, 1e4, 1e5, 1e3, 1.0])
    for method in ("auto", "gh"):
        E, dm, dv = StochasticVolatility().expected_log_lik(np.zeros(6), m, v, method=method)
        np.testing.assert_allclose(E, -0.5 * np.log(2 * np.pi) - 0.5 * m, rtol=1e-14)
        np.testing.assert_allclose(dm, -0.5, rtol=1e-15); np.testing.assert_array_equal(dv, 0.0)
    # a tiny non-zero y whose y² underflows: the exact ½y²e^{−m+v/2} is representable
    E, dm, dv = StochasticVolatility().expected_log_lik(1e-200, 0.0, 1840.0)
    assert dv == pytest.approx(-0.25 * np.exp(2 * np.log(1e-200) + 920.0), rel=1e-12)


def test_poisson_zero_count_large_rate_is_honest():
    "y = 0, m + v/2 above log(max float): E = −e^{m+v/2} is −∞ (not NaN); below it, a large finite value."
    E, dm, dv = Poisson().expected_log_lik(np.zeros(3), np.array([700.0, 1e3, -1e3]), np.array([10.0, 1.0, 1e8]))
    assert E[0] == pytest.approx(-np.exp(705.0), rel=1e-13) and np.isfinite(dm[0])
    assert np.all(E[1:] == -np.inf) and np.all(dm[1:] == -np.inf) and np.all(dv[1:] == -np.inf)


# --- labels -------------------------------------------------------------------------------------------------------
BAD_LABELS = [
    (Logistic(), ["g", "b"], "Bernoulli-logistic", "'g'"),
    (Probit(), np.array(["g", "b", "g"]), "Bernoulli-probit", "'b'"),
    (Logistic(), [True, False, True], "Bernoulli-logistic", "boolean"),
    (Poisson(), np.array([1, "x"], dtype=object), "Poisson", "'x'"),
    (Ordinal([-1.0, 0.0, 1.0, 2.0]), [0, 7, 2], "Ordinal", "7"),
    (Poisson(), [1, -2, 3], "Poisson", "-2"),
    (Poisson(), [1.5, 2], "Poisson", "1.5"),
    (Exponential(), [1.0, 0.0, -3.0], "Exponential", "-3.0"),
    (Gaussian(), [0.5, np.nan], "Gaussian", "nan"),
    (StudentT(), [0.5, np.inf], "Student-t", "inf"),
    (StochasticVolatility(), [1 + 2j], "Stochastic volatility", "2j"),
]


@pytest.mark.parametrize("lik,y,who,shown", BAD_LABELS)
def test_bad_labels_one_clear_error(lik, y, who, shown):
    with pytest.raises(ValueError) as err:
        lik.check_y(y)
    msg = str(err.value)
    assert who in msg and shown in msg, msg
    assert "ndarray" not in msg and "list" not in msg, msg


class _FakeCategorical:
    "The two attributes of a pandas categorical that `check_y` reads (pandas is not a dependency)."
    dtype = "category"
    categories = ["bad", "good"]
    def __array__(self, dtype=None, copy=None): return np.array(["good", "bad"], dtype=object)


def test_categorical_labels_refused():
    for y in [_FakeCategorical()] + ([__import__("pandas").Categorical(["good", "bad"])] if _has_pandas() else []):
        with pytest.raises(ValueError, match=r"Bernoulli-logistic: y is a pandas categorical with categories \['bad', 'good'\]"):
            Logistic().check_y(y)


def _has_pandas():
    try: import pandas  # noqa: F401
    except ImportError: return False
    return True


def test_numeric_codings_still_work():
    for lik in (Logistic(), Probit()):
        np.testing.assert_array_equal(lik.check_y([0, 1, 1]), [-1, 1, 1])
        np.testing.assert_array_equal(lik.check_y(np.array([-1, 1], dtype=np.int8)), [-1, 1])
        np.testing.assert_array_equal(lik.check_y(np.array([0.0, 1.0], dtype=object)), [-1, 1])
    np.testing.assert_array_equal(Ordinal([0.0, 1.0]).check_y([0, 2, 1]), [0, 2, 1])
    np.testing.assert_array_equal(Poisson().check_y(np.array([0, 3], dtype=np.uint16)), [0, 3])


# --- quadrature at site variances up to 1e6 (hyperparameters at the edge make them that large) ------------------------

def _quad_z(g, m, v, pts=(), w=1.0):
    """Oracle: ∫ g(f) N(f|m, v) df by adaptive Gauss-Kronrod in z = (f − m)/√v (`adaptive_expect`), cut also at distances
    w·{1, 4, 16, 64, 256} (in f) around each of `pts`; g maps f (k,) to (p, k), called once per round on all new nodes.
    To 1e-10 relative or 1e-14 absolute, a hundredth of the tolerance in `_wide_errors`, or 1e-13 of E|g|, a tenth of its
    floor: no rule integrates values below their own rounding, and at v = 1e6 the nodes reach |f| ~ 4e4, where the probit's
    ℓ'' = −λ(x + λ) is rounded to about x²ε (1e-11 of the integral), while at v = 1e-6 the nodes f = m + √v z are rounded
    to ε|m|, ~1e-12 of f − m in the Laplace's ((f − m)²/v − 1)/(2v) ℓ."""
    return adaptive_expect(g, m, v, pts, around=tuple(w * k for k in (1, 4, 16, 64, 256)), rtol=1e-10, atol=1e-14, stol=1e-13)

WIDE = [("logistic", Logistic(), 1.0, (0.0,)), ("probit", Probit(), -1.0, (0.0,)), ("student-t", StudentT(4.0, 0.3), 2.5, (2.5,)),
        ("laplace", Laplace(0.7), 2.5, (2.5,)), ("ordinal", Ordinal([-1.0, 0.5, 2.0]), 1.0, (-1.0, 0.5, 2.0)), ("gaussian", Gaussian(0.5), 0.3, ())]


def _wide_errors(lik, y, m, v, pts):
    "Error / tolerance (1e-8 relative, 1e-12 absolute floor on E|g|) of E, ∂E/∂m, ∂E/∂v and ∂E/∂θ against `_quad_z`."
    yy, mm, vv = np.array([y]), np.array([m]), np.array([v])
    est = [e.item() for e in lik.expected_log_lik(yy, mm, vv)] + list(lik.expected_dparams(yy, mm, vv)[:, 0])
    def g(f):                                        # lp, lp', the v-derivative's integrand, ∂lp/∂θ, and their sizes
        lp, dlp, d2lp = lik.derivs(y, f)
        third = lik.logp(y, f) * ((f - m) ** 2 / v - 1) / (2 * v) if isinstance(lik, Laplace) else 0.5 * d2lp
        gs = np.concatenate([np.stack([lp, dlp, third]), lik.dlogp_dparams(y, f)])
        return np.concatenate([gs, np.abs(gs)])
    out, n = _quad_z(g, m, v, pts, lik.width), len(est)
    ref, scale = out[:n], out[n:]
    return np.abs(np.array(est) - ref) / (1e-8 * np.abs(ref) + 1e-12 * np.maximum(1.0, scale))


@pytest.mark.parametrize("name,lik,y,pts", WIDE, ids=[w[0] for w in WIDE])
def test_expectations_accurate_at_huge_site_variance(name, lik, y, pts):
    "E, its derivatives in (m, v) and in the likelihood's parameters, at v = 1e6, within 1e-8 relative of adaptive quadrature."
    assert np.max(_wide_errors(lik, y, 0.3, 1e6, pts)) <= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("name,lik,y,pts", WIDE, ids=[w[0] for w in WIDE])
def test_expectations_accurate_over_site_variances_1e_minus6_to_1e6(name, lik, y, pts):
    worst = max(np.max(_wide_errors(lik, y0, m, v, pts if name not in ("student-t", "laplace") else (y0,)))
                for y0 in ((y, -y) if name in ("logistic", "probit") else (y, 0.0) if name != "ordinal" else (0.0, 1.0, 3.0))
                for m in (-7.0, 0.3, 4.0) for v in (1e-6, 1e-3, 1.0, 1e2, 1e4, 1e6))
    assert worst <= 1.0
