"Tests of vgi_lit.methods.pmf: the conjugate limit, the three algorithms on generated data and on a MovieLens subset, predictions, bad input."
from pathlib import Path
import numpy as np
import pytest
from vgi_lit import datasets as ds
from vgi_lit.likelihoods import Gaussian, Logistic, Ordinal, Poisson
from vgi_lit.inference import History, Stop, Record
from vgi_lit.methods.pmf import (PMF, METHODS, fit_pmf, init_pmf_state, column_terms, column_gradients, column_step,
                                 lim_teh_step, latent_moments, pmf_vlb, prior_var_update, expected_class,
                                 lik_update, lik_grad)

DATA = ds.shared_data_dir(Path(__file__).resolve().parents[2])


def _problem(lik, NU=20, NV=15, K=2, frac=0.5, seed=0):
    rng = np.random.default_rng(seed)
    U, V = rng.standard_normal((NU, K)), rng.standard_normal((NV, K))
    r, c = np.nonzero(rng.uniform(size=(NU, NV)) < frac)
    return PMF(r, c, lik.sample(np.sum(U[r] * V[c], 1), rng), lik, K, NU, NV)


def test_conjugate_limit_is_lim_teh():
    "With a Gaussian likelihood, the exact rows and ρ = 1, every MC-SSVI column step is Lim & Teh's closed form (μ ≠ 0 too)."
    base = _problem(Gaussian(0.3), seed=1)
    model = PMF(base.rows, base.cols, base.y, base.likelihood, 2, mu=[0.2, -0.4], prior_var_u=0.7, prior_var_v=1.6)
    st = init_pmf_state(model, m0_scale=0.5, seed=3); rng = np.random.default_rng(0)
    for side in (0, 1):
        for j in range(model.n(side)):
            m_lt, S_lt = lim_teh_step(model, st, side, j)
            column_step(model, st, side, j, "mc-ssvi", column_terms(model, st, side, j, rng, expect="exact"), 1.0)
            np.testing.assert_allclose(st.m[side][j], m_lt, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(st.S(side, j), S_lt, rtol=1e-9, atol=1e-12)


def test_mc_estimate_is_unbiased_for_gaussian():
    model = _problem(Gaussian(0.5), seed=2)
    st = init_pmf_state(model, m0_scale=0.8, S0=0.3, seed=4)
    d_ex, D_ex = column_gradients(column_terms(model, st, 1, 3, None, expect="exact"))
    reps = [column_gradients(column_terms(model, st, 1, 3, np.random.default_rng(s), n_u=5, n_f=5)) for s in range(150)]
    d, D = np.array([r[0] for r in reps]), np.array([r[1] for r in reps])
    assert np.all(np.abs(d.mean(0) - d_ex) < 5 * d.std(0) / np.sqrt(150))
    assert np.all(np.abs(D.mean(0) - D_ex) < 5 * D.std(0) / np.sqrt(150) + 1e-12)


def test_subsample_scale():
    model = _problem(Logistic(), frac=0.8, seed=3)
    st = init_pmf_state(model, seed=0)
    n_obs = model.observations(0, 4)[0].size
    t = column_terms(model, st, 0, 4, np.random.default_rng(0), batch_size=3, n_u=4, n_f=2)
    assert t.n_obs == 3 and t.H.shape == (12, 2) and np.isclose(t.scale, n_obs / 12)


@pytest.mark.parametrize("method", METHODS)
def test_methods_raise_the_bound(method):
    model = _problem(Logistic(), seed=5)
    res = fit_pmf(model, method, max_iter=4, seed=1)
    v = res.history.vlb
    assert isinstance(res.history, History) and isinstance(res.history[0], Record) and res.stop in (Stop.MAX_ITER, Stop.REL_TOL)
    assert np.all(np.isfinite(v)) and v[-1] > v[0] + 20
    assert res.S_u.shape == (20, 2, 2) and np.all(np.linalg.eigvalsh(res.S_v) > 0)
    s2 = prior_var_update(model, res.state, 1)                         # (68) after the last column of V
    assert np.isclose(res.prior_var[1], s2, rtol=1e-10)


def test_latent_variance_by_monte_carlo():
    model = _problem(Poisson(), seed=6)
    st = init_pmf_state(model, m0_scale=0.6, S0=0.2, seed=2)
    st.F[0][1] = np.array([[0.5, 0.0], [0.2, 0.3]]); st.P = None
    mean, var = latent_moments(model, st, [1], [2])
    rng = np.random.default_rng(0)
    u = st.m[0][1] + rng.standard_normal((300_000, 2)) @ st.F[0][1].T
    v = st.m[1][2] + rng.standard_normal((300_000, 2)) @ st.F[1][2].T
    f = np.sum(u * v, 1)
    assert abs(f.mean() - mean[0]) < 5 * f.std() / np.sqrt(3e5) and abs(f.var() / var[0] - 1) < 0.02


def test_callback_and_time_budget():
    model = _problem(Gaussian(0.5), seed=7)
    assert fit_pmf(model, "h-mc-ssvi", max_iter=5, callback=lambda rec: rec["sweep"] >= 2).stop is Stop.CALLBACK
    res = fit_pmf(model, "mc-ssvi", expect="exact", schedule=1.0, max_iter=200, tol=1e-3)
    assert res.stop is Stop.REL_TOL and res.converged


def test_bad_input():
    "The algorithms' settings; the model's own bad input is tested in tests/models."
    model = _problem(Gaussian(0.5), seed=8)
    with pytest.raises(ValueError, match="method"): fit_pmf(model, "svi")
    with pytest.raises(ValueError, match="Gaussian"): fit_pmf(_problem(Logistic()), "mc-ssvi", expect="exact")
    with pytest.raises(ValueError, match="batch_size"): fit_pmf(model, batch_size=0)
    with pytest.raises(ValueError, match="lik_batch"): fit_pmf(model, learn_lik=True, lik_batch=0)


@pytest.fixture(scope="module")
def ml_subset():
    assert DATA is not None, "shared data not found beside the repository"
    r = ds.load_movielens_100k(data_dir=DATA)
    keep = (r.users < 80) & (r.items < 120)
    u, i, y = r.users[keep], r.items[keep], r.ratings[keep]
    tr, te = ds.fold_split(ds.rating_folds(len(y), 5, seed=0), 0)
    return u, i, y, tr, te


def test_movielens_subset_ordinal_and_gaussian(ml_subset):
    u, i, y, tr, te = ml_subset
    cum = np.cumsum(np.bincount(y[tr].astype(int) - 1, minlength=5))[:4] / len(tr)
    lik = Ordinal(np.log(cum / (1 - cum)))                               # cut points: the training marginal at f = 0
    model = PMF(u[tr], i[tr], y[tr] - 1, lik, 3, 80, 120)
    res = fit_pmf(model, "h-mc-ssvi", max_iter=4, seed=0)
    assert res.history.vlb[-1] > res.history.vlb[0]
    P = res.predict_y(u[te], i[te])
    assert P.shape == (len(te), 5) and np.allclose(P.sum(1), 1)
    rmse = np.sqrt(np.mean((expected_class(P) + 1 - y[te])**2))
    nll = -np.mean(res.log_pred_density(u[te], i[te], y[te] - 1))
    assert rmse < np.sqrt(np.mean((y[tr].mean() - y[te])**2)) + 0.05 and nll < np.log(5)
    g = fit_pmf(PMF(u[tr], i[tr], y[tr] - y[tr].mean(), Gaussian(1.0), 3, 80, 120), "mc-ssvi", max_iter=3)
    assert np.isfinite(g.vlb) and np.all(np.isfinite(g.latent(u[te], i[te])[1]))


def test_noise_variance_closed_form():
    "σ² = mean of (y − m_ij)² + S_ij, where ∂/∂log σ² of the exact data term vanishes; a likelihood without parameters is returned as is."
    model = _problem(Gaussian(0.5), seed=9)
    st = init_pmf_state(model, m0_scale=0.6, S0=0.2, seed=1)
    m, v = latent_moments(model, st)
    new = lik_update(model, st)
    assert new.variance == pytest.approx(np.mean((model.y - m)**2 + v), rel=1e-12)
    assert abs(lik_grad(model.with_likelihood(new), st)[0]) < 1e-9 * model.nnz
    logistic = _problem(Logistic(), seed=9)
    assert lik_update(logistic, init_pmf_state(logistic)) is logistic.likelihood


def test_learned_cutpoints_on_movielens(ml_subset):
    "Cut points learned after every sweep from a poor start: still increasing, moved towards the data, the bound higher than with them fixed."
    u, i, y, tr, te = ml_subset
    model = PMF(u[tr], i[tr], y[tr] - 1, Ordinal([-1.0, 0.0, 1.0, 2.0]), 3, 80, 120)
    fixed = fit_pmf(model, "s-dsvi", max_iter=2, seed=0, tol=0.0)
    learned = fit_pmf(model, "s-dsvi", max_iter=2, seed=0, tol=0.0, learn_lik=True, lik_batch=500)
    c = learned.model.likelihood.cutpoints
    assert np.all(np.diff(c) > 0) and not np.allclose(c, model.likelihood.cutpoints)
    assert learned.vlb > fixed.vlb and learned.model.likelihood is not model.likelihood and model.likelihood.cutpoints[0] == -1.0
    assert len(learned.history[-1]["lik_params"]) == 4
