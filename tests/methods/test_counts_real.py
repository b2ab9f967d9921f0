"""Real over-dispersed counts: the RAND Health Insurance Experiment (`randhie.csv` in the shared data, target `mdvis`,
outpatient visits: mean 2.86, variance 20.3, 31% zeros). On a seeded subset (1,500 training and 1,500 held-out rows,
the nine covariates z-scored with the training rows' moments, plus an intercept), a GLM with the negative binomial
likelihood beats the same GLM with the Poisson likelihood in held-out log predictive density, both with their
hyperparameters (prior variance; and the dispersion) learned by the VLB, `fit(model, learn=True)`. Both held-out
densities are checked row by row against an independent adaptive quadrature of the predictive density."""
import math
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import quad

import vgi_lit
from vgi_lit import datasets
from vgi_lit.likelihoods import NegativeBinomial, Poisson

N_TRAIN, N_TEST, SEED = 1500, 1500, 0


@pytest.fixture(scope="module")
def counts():
    d = datasets.shared_data_dir(Path(__file__)) or (Path(os.environ[datasets.ENV_VAR]) if os.environ.get(datasets.ENV_VAR) else None)
    assert d is not None and (Path(d) / "randhie.csv").is_file(), \
        "randhie.csv not found: put shared/data beside the repository (../shared/data) or set VGI_LIT_DATA"
    path = Path(d) / "randhie.csv"
    header = path.open().readline().strip().split(",")
    assert header[0] == "mdvis" and len(header) == 10, header
    rows = np.loadtxt(path, delimiter=",", skiprows=1)
    y, X = rows[:, 0], rows[:, 1:]
    assert y.var() > 5 * y.mean()                                          # over-dispersed: variance 20.3, mean 2.86
    idx = np.random.default_rng(SEED).permutation(len(y))
    tr, te = idx[:N_TRAIN], idx[N_TRAIN:N_TRAIN + N_TEST]
    mu, sd = X[tr].mean(0), X[tr].std(0)
    design = lambda A: np.column_stack([np.ones(len(A)), (A - mu) / sd])
    return design(X[tr]), y[tr], design(X[te]), y[te]


@pytest.fixture(scope="module")
def fits(counts):
    Xtr, ytr, Xte, yte = counts
    out = {}
    for lik in (Poisson(), NegativeBinomial(1.0)):
        res = vgi_lit.fit(vgi_lit.GLM(Xtr, ytr, lik, prior_cov=1.0), learn=True)
        m, v = res.posterior.predict(Xte)
        out[type(lik).__name__] = (res, m, v, res.posterior.log_pred_density(Xte, yte))
    return out


def _log_pmf(name, lik, y, f):
    "The naive log pmf (log(r + e^f) by np.logaddexp), independent of the package's code; f a float or an array."
    if name == "Poisson":
        return y * f - np.exp(np.minimum(f, 700.0)) - math.lgamma(y + 1)
    r = lik.dispersion; lr = np.logaddexp(math.log(r), f)                                          # log(r + e^f)
    return math.lgamma(y + r) - math.lgamma(r) - math.lgamma(y + 1) + r * (math.log(r) - lr) + y * (f - lr)


def _lpd_quad(name, lik, y, m, v):
    """log ∫ p(y|f) N(f|m, v) df by quad in z = (f − m)/√v on [−60, 60], split at the integrand's peak (found on a grid)
    and around it; the integrand is scaled by its peak value so that quad works near 1."""
    s = math.sqrt(v)
    g = lambda z: _log_pmf(name, lik, y, m + s * z) - 0.5 * z * z
    zs = np.linspace(-60, 60, 4801); gz = g(zs)
    z0, top = zs[np.argmax(gz)], gz.max()
    pts = sorted({z0 + k for k in (-20, -8, -3, -1, 0, 1, 3, 8, 20) if abs(z0 + k) < 60} | {-60.0, 60.0})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tot = sum(quad(lambda z: math.exp(float(g(z)) - top), a, b, epsabs=0, epsrel=1e-12, limit=200)[0] for a, b in zip(pts[:-1], pts[1:]))
    return top + math.log(tot) - 0.5 * math.log(2 * math.pi)


def test_negative_binomial_beats_poisson_on_held_out_counts(fits):
    p_res, _, _, p_lpd = fits["Poisson"]
    nb_res, _, _, nb_lpd = fits["NegativeBinomial"]
    r = nb_res.theta["likelihood.dispersion"]
    print(f"\nrandhie mdvis, {N_TRAIN} train / {N_TEST} held-out rows (seed {SEED}): mean held-out log predictive density "
          f"Poisson {p_lpd.mean():.4f} (prior variance {p_res.theta['prior_var']:.4g}), negative binomial {nb_lpd.mean():.4f} "
          f"(prior variance {nb_res.theta['prior_var']:.4g}, dispersion r = {r:.4g}); VLB {p_res.vlb:.2f} vs {nb_res.vlb:.2f}")
    assert p_res.converged and nb_res.converged, (p_res.message, nb_res.message)
    assert nb_lpd.mean() > p_lpd.mean() + 0.5                             # measured: −2.105 against −2.860 nats per row
    assert nb_res.vlb > p_res.vlb + 0.5 * N_TRAIN                         # the training evidence bound agrees
    assert 0.3 < r < 3.0                                                   # a real over-dispersion, far from the Poisson limit r → ∞
    assert np.mean(nb_lpd > p_lpd) > 0.5                                   # better on most rows, not only on a few outliers


@pytest.mark.parametrize("name", ["Poisson", "NegativeBinomial"])
def test_held_out_densities_match_quadrature(fits, counts, name):
    "The 60 largest held-out counts and 200 seeded random held-out rows against `_lpd_quad`, and their mean."
    res, m, v, lpd = fits[name]
    yte = counts[3]
    lik = res.model.likelihood
    order = np.argsort(-yte, kind="stable")
    rows = np.unique(np.concatenate([order[:60], np.random.default_rng(1).choice(len(yte), 200, replace=False)]))
    ref = np.array([_lpd_quad(name, lik, float(yte[i]), float(m[i]), float(v[i])) for i in rows])
    np.testing.assert_allclose(lpd[rows], ref, rtol=1e-9, atol=1e-11)
    assert abs(lpd[rows].mean() - ref.mean()) < 1e-9 * abs(ref.mean())


def test_default_method_and_grad_agree_on_the_learned_model(fits, counts):
    "fit(model) (the default method) and method='grad' reach the same optimum for the negative binomial GLM at the learned values."
    model = fits["NegativeBinomial"][0].model
    a, b = vgi_lit.fit(model), vgi_lit.fit(model, method="grad", tol=1e-8)
    assert a.converged and b.converged
    assert abs(a.vlb - b.vlb) <= 1e-8 * abs(b.vlb), (a.vlb, b.vlb)
    np.testing.assert_allclose(a.m, b.m, rtol=1e-5, atol=1e-6)
