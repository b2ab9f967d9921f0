"Tests for the interleaved hyperparameter updates of vgi_lit.methods.gme (Sheth & Khardon 2016b, eqs. 60-61 and 68)."
import numpy as np
import pytest
from scipy.optimize import minimize

from vgi_lit.likelihoods import Poisson
from vgi_lit.methods import gme


def _data(seed=0, n=300, d=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) / 2
    y = rng.poisson(np.exp(X @ rng.normal(0.5, 0.7, size=d) + 0.3 * rng.normal(size=n))).astype(float)
    return X, y


@pytest.mark.slow   # 3.3 s
def test_closed_form_maximises_the_bound_with_q_fixed():
    "The closed forms agree with a numerical maximiser of the bound over (μ₀, log δ, log τ), q fixed (optimal bound (8))."
    X, y = _data(1)
    model = gme.GME(X, y, Poisson(), prior_mean=0.2, prior_var=2.0, tau=3.0)
    r = gme.gme_fit(model, "mc-ssvi", "optimal", batch_size=100, max_epochs=1, seed=1, n_outer=4)
    f = lambda p: gme.gme_bound(gme.GME(X, y, Poisson(), p[0], np.exp(p[1]), np.exp(p[2])), r.m, r.cov, r.sigma, "optimal",
                                n_u=8, n_w=8, n_f=16)
    closed = gme.prior_closed_form(r.m, r.cov, r.sigma)
    num = minimize(lambda p: -f(p), [0.2, np.log(2.0), np.log(3.0)], method="BFGS", options=dict(gtol=1e-9))   # ~110 bounds
    np.testing.assert_allclose([num.x[0], np.exp(num.x[1]), np.exp(num.x[2])], closed, rtol=1e-4, atol=1e-5)
    assert f([closed[0], np.log(closed[1]), np.log(closed[2])]) >= -num.fun - 1e-9


@pytest.mark.parametrize("method", ["mc-ssvi", "h-mc-ssvi", "s-dsvi"])
def test_interleaved_updates_never_lower_the_bound(method):
    """Each hyperparameter update, q fixed, raises the bound: the recorded gain (the change of −KL) is never negative, and it
    is the change of the whole bound: the state is the same q under the new prior (checked on the deterministic bound).
    The q updates themselves are stochastic (Monte Carlo and mini-batches), so the test is on the hyperparameter steps."""
    X, y = _data(2)
    model = gme.GME(X, y, Poisson(), prior_mean=0.0, prior_var=1.0, tau=5.0)
    r = gme.gme_fit(model, method, "suboptimal", batch_size=60, max_epochs=2, seed=0, learn_prior=True, lr=0.3)
    gains = np.array([h['prior_gain'] for h in r.history[1:]])
    assert len(gains) == 10 and gains.min() >= -1e-10 and gains[0] > 0
    assert r.model.prior_var == r.prior_var and r.model.tau == r.tau == r.sigma
    st = r.state
    b0 = gme.gme_bound(r.model, st.m, st.cov, r.sigma, "suboptimal")
    new, st2 = gme._with_prior(r.model, st, 0.3, 2.0, 1.5)
    np.testing.assert_allclose(st2.cov.dense(), st.cov.dense(), rtol=1e-10, atol=1e-12)   # the same q
    b1 = gme.gme_bound(new, st2.m, st2.cov, r.sigma, "suboptimal")
    assert b0 >= b1 - 1e-9                                               # the learned prior is the better one for this q
    with pytest.raises(ValueError, match="learn_prior"): gme.gme_fit(model, method, learn_prior={"lengthscale"})


def test_learned_prior_approaches_the_generating_one():
    "Generated data (d = 40 coordinates of w₁ from N(0.5, 0.8), 3000 counts): the learned mean and variance of the prior of w₁ come close to the sample mean and variance of the generating w₁."
    rng = np.random.default_rng(11)
    d, n = 40, 3000
    X = 0.75 * rng.normal(size=(n, d)) / np.sqrt(d); w1 = 0.5 + np.sqrt(0.8) * rng.normal(size=d)
    y = rng.poisson(np.exp(X @ w1 + np.sqrt(0.2) * rng.normal(size=n))).astype(float)
    r = gme.gme_fit(gme.GME(X, y, Poisson(), tau=1.0), "mc-ssvi", "suboptimal", batch_size=300, max_epochs=6, seed=0,
                    learn_prior={"mean", "var"}, eval_every=10**9)
    assert abs(r.prior_mean - w1.mean()) < 0.15 and abs(np.log(r.prior_var / w1.var())) < np.log(1.5)
    assert r.tau == 1.0                                                # not learned: kept


@pytest.mark.parametrize("method", ["mc-ssvi", pytest.param("h-mc-ssvi", marks=pytest.mark.slow), "s-dsvi", "mean-field"])   # h-mc-ssvi: mc-ssvi's precision step
def test_sparse_inputs_fit_as_the_dense_ones_and_save_sparse(method, tmp_path):
    """A GME on a scipy.sparse X (generated counts) fits by every method to the fit on the same X as a dense array (the
    same draws: predictions and bound equal to rounding), predicts at sparse or dense rows, and is saved and loaded with
    X in its CSR parts (the format's X_data, X_indices, X_indptr, X_shape)."""
    import scipy.sparse as sp
    import vgi_lit
    from vgi_lit.likelihoods import Poisson
    g = np.random.default_rng(0); X = sp.random(80, 5, density=0.3, random_state=1, format="csr"); y = g.poisson(1.0, size=80).astype(float)
    from vgi_lit.models import GME
    ps = vgi_lit.fit(GME(X, y, Poisson(), tau=1.0), method, max_iter=3)
    pd = vgi_lit.fit(GME(X.toarray(), y, Poisson(), tau=1.0), method, max_iter=3)
    assert abs(ps.vlb - pd.vlb) <= 1e-10 * abs(pd.vlb)
    for a, b in zip(ps.predict(X[:6]), pd.predict(X[:6].toarray())): assert np.max(np.abs(a - b)) <= 1e-12
    assert np.max(np.abs(ps.log_pred_density(X[:6], y[:6]) - pd.log_pred_density(X[:6].toarray(), y[:6]))) <= 1e-12
    back = vgi_lit.io.load(vgi_lit.io.save(ps, tmp_path / "gme.npz"))
    assert sp.issparse(back.model.X) and (back.model.X != X).nnz == 0
    for a, b in zip(back.predict(X[:6]), ps.predict(X[:6])): assert np.max(np.abs(a - b)) <= 1e-12


def test_an_overflowing_run_ends_not_finite_with_advice():
    """MC-SSVI at the paper's start V0 = 10 I on randhie's counts (400 seeded rows, nine standardised covariates and an
    intercept: start site variances near 100, so e^(m + v/2) overflows) raised from inside a step (a NaN Rayleigh scale, or a
    precision that could not be factorised); it ends NOT_FINITE at the state before that step, with a finite bound and the
    advice; a narrower start runs on."""
    from pathlib import Path
    import vgi_lit
    from vgi_lit.datasets import shared_data_dir
    from vgi_lit.inference import Stop
    path = Path(shared_data_dir(Path(__file__).resolve().parents[2])) / "randhie.csv"
    if not path.exists(): pytest.skip("randhie.csv not in the shared data")
    A = np.loadtxt(path, delimiter=",", skiprows=1)[np.random.default_rng(1).permutation(20190)[:400]]
    X = (A[:, 1:] - A[:, 1:].mean(0)) / A[:, 1:].std(0); X = np.c_[X, np.ones(len(X))]
    r = vgi_lit.fit(gme.GME(X, A[:, 0], Poisson()), "mc-ssvi", V0=10.0)                            # the paper's start
    assert r.stop is Stop.NOT_FINITE and np.isfinite(r.vlb) and np.isfinite(r.sigma) and "V0" in r.message, (r.stop, r.vlb, r.message)
    for V0 in (0.01, None):                                                                         # narrower, and the default cΣ: finite
        ok = vgi_lit.fit(gme.GME(X, A[:, 0], Poisson()), "mc-ssvi", V0=V0, max_iter=3)
        assert ok.stop is Stop.MAX_ITER and np.isfinite(ok.vlb) and ok.vlb > -1e4 and ok.objective == "vlb", (V0, ok.vlb)
    assert vgi_lit.fit(gme.GME(X, A[:, 0], Poisson()), "mean-field", max_iter=2).objective == "meanfield_bound"   # its own bound


def test_the_step_check_is_for_s_dsvi_and_its_defaults_are_recorded():
    """`backtrack` (the divergence check of S-DSVI's ADAGRAD steps) is refused for the natural methods; the defaults
    (rate 0.3 and the check for S-DSVI, rate 1.0 for H-MC-SSVI) are what the result records, through `fit` too."""
    import vgi_lit
    rng = np.random.default_rng(0); X = rng.normal(size=(40, 3)); y = rng.poisson(1.0, size=40).astype(float)   # generated
    model = gme.GME(X, y, Poisson())
    with pytest.raises(ValueError, match="backtrack"): gme.gme_fit(model, "mc-ssvi", batch_size=20, backtrack=True)
    with pytest.raises(ValueError, match="backtrack"): gme.gme_fit(model, "s-dsvi", batch_size=20, backtrack="yes")
    a = vgi_lit.fit(model, "s-dsvi", max_iter=2)
    b = vgi_lit.fit(model, "s-dsvi", max_iter=2, options=vgi_lit.GMEOptions(backtrack=False))
    c = vgi_lit.fit(model, "h-mc-ssvi", max_iter=2)
    assert (a.info["lr"], a.info["backtrack"], b.info["backtrack"], c.info["lr"], c.info["backtrack"]) == (0.3, True, False, 1.0, False)
