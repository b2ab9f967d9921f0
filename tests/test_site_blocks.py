"""Site expectations, log predictive densities and predictive means over more than `SITE_BLOCK` sites are evaluated a block
at a time ('01_likelihoods', **Memory**), per-site exposures sliced with their sites: the expectations equal those of all
sites at once to rounding (the same arithmetic per site, grouped differently; the zero-inflated Poisson with a per-site
exposure, whose rule takes one node count for a whole group, within that rule's accuracy). The zero-inflated Poisson's log
predictive density with a per-site exposure (it raised: its Poisson part was asked without the new sites' exposure)."""
import numpy as np
import pytest
from vgi_lit import likelihoods as L
from vgi_lit.likelihoods import SITE_BLOCK

N = 2 * SITE_BLOCK + 123
U = np.random.default_rng(9).uniform(0.5, 2.0, N)                      # a per-site exposure


def _sites(lik, rng):
    m, v = rng.normal(size=N) * 2, rng.uniform(1e-3, 30, N)
    if isinstance(lik, (L.Logistic, L.Probit)): y = np.where(rng.random(N) < 0.5, 1.0, -1.0)
    elif isinstance(lik, L._Exposure): y = rng.poisson(2.0, N).astype(float); v = v / 10
    elif isinstance(lik, L.Ordinal): y = rng.integers(0, 3, N).astype(float)
    else: y = rng.normal(size=N)
    return y, m, v


LIKS = [L.Logistic(), L.Probit(), L.StudentT(4.0, 0.5), L.Laplace(0.7), L.Ordinal([-1.0, 0.5]), L.Poisson(), L.Poisson(exposure=U),
        L.NegativeBinomial(2.0, exposure=U), L.ZeroInflatedPoisson(0.2, exposure=U)]


@pytest.mark.parametrize("lik", LIKS, ids=lambda k: type(k).__name__ + ("-exposure" if getattr(k, "exposure", None) is not None else ""))
def test_blocks_equal_all_sites_at_once(lik, monkeypatch):
    y, m, v = _sites(lik, np.random.default_rng(0))
    kw = {} if getattr(lik, "exposure", None) is None else dict(exposure=U)
    dpar = lambda: lik.expected_dparams(y, m, v) if lik.param_names else np.zeros((0, N))
    pred = lambda: (lik.expected_log_lik(y, m, v), lik.log_pred_density(y, m, v, **kw), lik.predict_y(m, v, **kw), dpar())
    (E, lpd, mu, dp) = pred()
    monkeypatch.setattr(L, "SITE_BLOCK", 10**9)                              # every site in one block
    (E1, lpd1, mu1, dp1) = pred()
    np.testing.assert_allclose(dp, dp1, rtol=1e-12, atol=1e-13)
    tol = 1e-12 if isinstance(lik, L.ZeroInflatedPoisson) else 1e-14   # its per-site-exposure rule pads a group to one node count
    for a, b in zip(E, E1): np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    np.testing.assert_allclose(lpd, lpd1, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(mu, mu1, rtol=1e-13, atol=0)
    assert E[0].shape == lpd.shape == (N,) and mu.shape[0] == N          # the ordinal's mean: one probability per class


def test_blocks_keep_the_shape_of_2d_sites():
    "Sites given as an (a, b) array come back in that shape, each row as when evaluated alone."
    rng = np.random.default_rng(1); y, m, v = (a[:2 * SITE_BLOCK].reshape(2, -1) for a in _sites(L.Logistic(), rng))
    E = L.Logistic().expected_log_lik(y, m, v)
    assert all(e.shape == (2, SITE_BLOCK) for e in E)
    assert np.array_equal(E[1][1], L.Logistic().expected_log_lik(y[1], m[1], v[1])[1])


@pytest.mark.parametrize("shape", ["n1", "one"])
def test_exposure_shapes_at_any_count(shape):
    "A per-site exposure shaped as the sites (n, 1), or a single exposure of shape (1,), works below and above SITE_BLOCK."
    for n in (50, SITE_BLOCK + 7):
        rng = np.random.default_rng(n); y = rng.poisson(2.0, n).astype(float); m, v = rng.normal(size=n), rng.uniform(0.1, 2, n)
        if shape == "n1":
            u = rng.uniform(0.5, 2.0, n)
            E = L.Poisson(exposure=u[:, None]).expected_log_lik(y[:, None], m[:, None], v[:, None])
            np.testing.assert_allclose(E[0][:, 0], L.Poisson(exposure=u).expected_log_lik(y, m, v)[0], rtol=1e-14)
        else:
            E = L.Poisson(exposure=[1.5]).expected_log_lik(y, m, v)
            np.testing.assert_allclose(E[0], L.Poisson(exposure=1.5).expected_log_lik(y, m, v)[0], rtol=1e-14)


def test_blocked_ordinal_and_negbin_parameter_derivatives_take_little_memory():
    "∂E/∂θ over 10⁵ sites (the learner's call): the ordinal's and negative binomial's peak memory under 600 bytes a site."
    import tracemalloc
    n = 100_000; rng = np.random.default_rng(5); m, v = rng.normal(size=n), rng.uniform(0.01, 5, n)
    for lik, y in ((L.Ordinal([-1.0, 0.5]), rng.integers(0, 3, n).astype(float)), (L.NegativeBinomial(2.0), rng.poisson(2.0, n).astype(float))):
        lik.expected_log_lik(y, m, v)
        tracemalloc.start(); lik.expected_dparams(y, m, v); peak = tracemalloc.get_traced_memory()[1]; tracemalloc.stop()
        assert peak < 600 * n, (type(lik).__name__, peak / n)
