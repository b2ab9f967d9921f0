"Tests of vgi_lit.methods.pmf: the conjugate limit, the batched sweep against a per-block loop, the offsets, the three algorithms on generated data and on a MovieLens subset, predictions, the collapse event, bad input."
from pathlib import Path
import numpy as np
import pytest
import vgi_lit
from vgi_lit import datasets as ds
from vgi_lit.likelihoods import Gaussian, Logistic, Ordinal, Poisson, Probit
from vgi_lit.inference import History, Stop, Record, EventKind, DegenerateFitWarning
from vgi_lit.vlb import kl_gauss
from vgi_lit.methods.pmf import (PMF, METHODS, fit_pmf, init_pmf_state, side_sums, side_step, side_observations, full_vectors,
                                 lim_teh_step, latent_moments, prior_update, expected_class, kl_sides,
                                 lik_update, lik_grad, collapse, column_terms, column_step, rotate_factors,
                                 rotation_objective, best_rotation, gaussian_sums, pmf_vlb)

DATA = ds.shared_data_dir(Path(__file__).resolve().parents[2])


def _problem(lik, NU=20, NV=15, K=2, frac=0.5, seed=0, offsets=False):
    rng = np.random.default_rng(seed)
    U, V = rng.standard_normal((NU, K)), rng.standard_normal((NV, K))
    r, c = np.nonzero(rng.uniform(size=(NU, NV)) < frac)
    return PMF(r, c, lik.sample(np.sum(U[r] * V[c], 1), rng), lik, K, NU, NV, offsets=offsets)


def test_conjugate_limit_is_lim_teh():
    "With a Gaussian likelihood, exact expectations and ρ = 1, MC-SSVI's batched step of a side is Lim & Teh's closed form for every column (μ ≠ 0 too)."
    base = _problem(Gaussian(0.3), seed=1)
    model = PMF(base.rows, base.cols, base.y, base.likelihood, 2, mu=[0.2, -0.4], prior_var_u=0.7, prior_var_v=1.6, offsets=False)
    st = init_pmf_state(model, m0_scale=0.5, seed=3)
    for side in (0, 1):
        ref = [lim_teh_step(model, st, side, j) for j in range(model.n(side))]
        side_step(model, st, side, "mc-ssvi", side_sums(model, st, side, expect="exact"), 1.0)
        for j, (m_lt, S_lt) in enumerate(ref):
            np.testing.assert_allclose(st.m[side][j], m_lt, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(st.S(side, j), S_lt, rtol=1e-9, atol=1e-12)


def _reference_sums(model, st, side, seed, n_u):
    "Per-block sums of the quadrature route, one block at a time in a Python loop, from the draws side_sums takes with `seed`."
    rng = np.random.default_rng(seed)
    k, blk, partner, w = side_observations(model, side)
    M, Fp = full_vectors(model, st, 1 - side, partner)
    U = M[:, None, :] + np.einsum('nkl,nal->nak', Fp, rng.standard_normal((k.size, n_u, model.d)))
    free, fixed = model.free(side), model.fixed(side)
    g, G = np.zeros((model.n(side), model.d)), np.zeros((model.n(side), model.d, model.d))
    for j in range(model.n(side)):
        sel = blk == j
        H = U[sel][:, :, free].reshape(-1, model.d)
        o = U[sel][:, :, fixed].ravel() if fixed is not None else 0.0
        _, dm, dv = model.likelihood.expected_log_lik(np.repeat(model.y[k[sel]], n_u), o + H @ st.m[side][j], np.sum((H @ st.F[side][j])**2, 1))
        g[j] = H.T @ dm / n_u; G[j] = (H.T * (-2 * dv)) @ H / n_u
    return g, G


@pytest.mark.parametrize("lik", [Gaussian(0.4), Logistic(), Probit(), Poisson(), Ordinal([-1.0, 0.0, 1.0])])
@pytest.mark.parametrize("offsets", [False, True])
def test_batched_sums_match_per_block_loop(lik, offsets):
    "The sums of side_sums (one array for the side, block_sum and block_gram) equal those of a loop over blocks, every likelihood, with and without offsets."
    src = _problem(Gaussian(0.4), seed=2)
    y = {"Gaussian": src.y, "Logistic": np.where(src.y > 0, 1.0, -1.0), "Probit": np.where(src.y > 0, 1.0, -1.0),
         "Poisson": np.round(np.abs(src.y)), "Ordinal": np.digitize(src.y, [-1.0, 0.0, 1.0]).astype(float)}[type(lik).__name__]
    model = PMF(src.rows, src.cols, y, lik, 2, 20, 15, offsets=offsets)
    st = init_pmf_state(model, m0_scale=0.6, S0=0.3, seed=5)
    for side in (0, 1):
        sums = side_sums(model, st, side, np.random.default_rng(7), n_u=3, expect="quad", chunk=37)   # chunks: one stream of draws
        g, G = _reference_sums(model, st, side, 7, 3)
        np.testing.assert_allclose(sums.g, g, rtol=1e-10, atol=1e-12); np.testing.assert_allclose(sums.G, G, rtol=1e-10, atol=1e-12)


def test_exact_sums_are_the_mean_of_mc_sums():
    model = _problem(Gaussian(0.5), seed=2, offsets=True)
    st = init_pmf_state(model, m0_scale=0.8, S0=0.3, seed=4)
    ex = side_sums(model, st, 1, expect="exact")
    reps = [side_sums(model, st, 1, np.random.default_rng(s), n_u=5, n_f=5) for s in range(150)]
    d, D = np.array([r.g for r in reps]), np.array([r.G for r in reps])
    assert np.all(np.abs(d.mean(0) - ex.g) < 5 * d.std(0) / np.sqrt(150) + 1e-12)
    assert np.all(np.abs(D.mean(0) - ex.G) < 5 * D.std(0) / np.sqrt(150) + 1e-12)


def test_a_subset_of_blocks_is_the_same_update():
    "side_sums / side_step on some blocks (column_terms / column_step) give those blocks' rows of the whole side's update."
    model = _problem(Gaussian(0.5), seed=2, offsets=True)
    st = init_pmf_state(model, m0_scale=0.8, S0=0.3, seed=4)
    full, part = side_sums(model, st, 1, expect="exact"), column_terms(model, st, 1, [1, 4, 9], expect="exact")
    np.testing.assert_allclose(part.g, full.g[[1, 4, 9]], rtol=1e-12); np.testing.assert_allclose(part.G, full.G[[1, 4, 9]], rtol=1e-12)
    a, b = st.copy(), st.copy()
    side_step(model, a, 1, "mc-ssvi", full, 0.7)
    column_step(model, b, 1, [1, 4, 9], "mc-ssvi", part, 0.7)
    np.testing.assert_allclose(b.m[1][[1, 4, 9]], a.m[1][[1, 4, 9]], rtol=1e-12)
    assert np.array_equal(b.m[1][0], st.m[1][0])
    with pytest.raises(ValueError, match="increasing"): column_terms(model, st, 1, [4, 1], expect="exact")
    with pytest.raises(ValueError, match="rng"): side_sums(model, st, 1, expect="mc")
    with pytest.raises(ValueError, match="rng"): side_sums(model, st, 1, batch_size=1, expect="exact")


def test_subsample_scale():
    model = _problem(Logistic(), frac=0.8, seed=3)
    k, blk, partner, w = side_observations(model, 0, np.random.default_rng(0), batch_size=3)
    counts = np.bincount(model.rows, minlength=model.n_rows)
    assert np.array_equal(np.bincount(blk, minlength=model.n_rows), np.minimum(counts, 3))
    np.testing.assert_allclose(w, counts[blk] / np.minimum(counts, 3)[blk])
    assert np.all(model.rows[k] == blk) and len(np.unique(k)) == k.size


def test_bias_model_is_exact_in_the_mean():
    "K = 0 with offsets: the Bayesian bias model; coordinate ascent reaches the exact posterior means and the variances 1/Λ_kk."
    base = _problem(Gaussian(0.3), seed=4, frac=0.6)
    model = PMF(base.rows, base.cols, base.y + 3.0, Gaussian(0.3), 0, 20, 15, prior_var_a=0.5, prior_var_c=2.0, b0=2.5)
    res = fit_pmf(model, "mc-ssvi", max_iter=400, tol=0.0, learn_prior=False)
    X = np.hstack([np.eye(20)[model.rows], np.eye(15)[model.cols]])
    Lam = np.diag(np.r_[np.full(20, 1 / 0.5), np.full(15, 1 / 2.0)]) + X.T @ X / 0.3
    mean = np.linalg.solve(Lam, np.r_[np.full(20, 2.5 / 0.5), np.zeros(15)] + X.T @ model.y / 0.3)
    np.testing.assert_allclose(np.r_[res.m_u[:, 0], res.m_v[:, 0]], mean, atol=1e-6)
    np.testing.assert_allclose(np.r_[res.S_u[:, 0, 0], res.S_v[:, 0, 0]], 1 / np.diag(Lam), rtol=1e-9)


def test_offsets_moments_and_kl():
    "f = ũᵀṽ = uᵀv + a + c: the moments by Monte Carlo, and the KL of a block is the KL of its free coordinates."
    model = _problem(Poisson(), seed=6, offsets=True)
    st = init_pmf_state(model, m0_scale=0.6, S0=0.2, seed=2)
    st.m[0][:, 2] = 0.7; st.m[1][:, 2] = -0.4
    mean, var = latent_moments(model, st, [1], [2])
    rng = np.random.default_rng(0)
    w_u = st.m[0][1] + rng.standard_normal((300_000, 3)) @ st.F[0][1].T
    w_v = st.m[1][2] + rng.standard_normal((300_000, 3)) @ st.F[1][2].T
    f = np.sum(w_u[:, :2] * w_v[:, :2], 1) + w_u[:, 2] + w_v[:, 2]
    assert abs(f.mean() - mean[0]) < 5 * f.std() / np.sqrt(3e5) and abs(f.var() / var[0] - 1) < 0.02
    kl0 = sum(kl_gauss(st.m[0][j], st.S(0, j), st.priors[0].mu, st.priors[0].prior.dense()) for j in range(model.n_rows))
    assert np.isclose(kl_sides(st)[0], kl0, rtol=1e-10)


def test_prior_update_learns_b0_and_effect_variances():
    model = _problem(Gaussian(0.5), seed=3, offsets=True)
    st = init_pmf_state(model, m0_scale=0.7, S0=0.3, seed=1)
    st.m[0][:, 2] = np.random.default_rng(0).normal(1.5, 0.5, model.n_rows)
    pr = prior_update(model, st, 0)
    assert np.isclose(pr.mu[2], st.m[0][:, 2].mean())
    v = pr.prior.diag(); S = st.S(0)
    assert np.isclose(v[2], np.mean(S[:, 2, 2] + (st.m[0][:, 2] - pr.mu[2])**2))
    assert np.allclose(v[:2], np.mean(S[:, [0, 1], [0, 1]] + st.m[0][:, :2]**2))
    assert prior_update(model, st, 1).mu[2] == 0.0                                # the column effects' mean is held at 0


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("offsets", [False, True])
def test_methods_raise_the_bound(method, offsets):
    model = _problem(Logistic(), seed=5, offsets=offsets)
    res = fit_pmf(model, method, max_iter=5, seed=1, warmup=1)
    v = res.history.vlb
    assert isinstance(res.history, History) and isinstance(res.history[0], Record) and res.stop in (Stop.MAX_ITER, Stop.REL_TOL)
    assert np.all(np.isfinite(v)) and v[-1] > v[0] + 20
    assert res.S_u.shape == (20, model.d, model.d) and np.all(np.linalg.eigvalsh(res.S_v) > 0)
    np.testing.assert_allclose(prior_update(model, res.state, 1).prior.diag(), res.state.priors[1].prior.diag(), rtol=1e-10)
    assert (len(res.effect_var) == 2) == offsets


@pytest.mark.parametrize("offsets, learn_lik", [(False, False), (True, True)])
def test_ard_with_rotation_is_coordinate_ascent(offsets, learn_lik):
    "Gaussian likelihood, exact expectations, ρ = 1: every step (sides, priors, rotation, σ²) maximises the bound in its block."
    model = _problem(Gaussian(0.5), K=3, seed=9, offsets=offsets)
    res = fit_pmf(model, "mc-ssvi", prior="ard", max_iter=15, tol=0.0, warmup=1, learn_lik=learn_lik)
    v = np.asarray(res.history.vlb)
    assert res.info["rotate"] and np.all(np.diff(v[1:]) > -1e-8 * np.abs(v[1:-1]))
    assert any(r.extra.get("rotation_gain", 0.0) > 0 for r in res.history)
    assert len(set(np.round(res.state.factor_var[0], 12))) == 3                 # one prior variance per coordinate
    shared = fit_pmf(model, "mc-ssvi", max_iter=15, tol=0.0, warmup=1, learn_lik=learn_lik)
    assert not shared.info["rotate"] and res.vlb > shared.vlb


@pytest.mark.parametrize("lik", [Gaussian(0.5), Logistic(), Ordinal([-1.0, 0.0, 1.0])])
@pytest.mark.parametrize("natural", [True, False])
def test_rotation_keeps_every_latent_value(lik, natural):
    """The map u ↦ Rᵀu, v ↦ R⁻¹v leaves the moments of every f_ij, and the data term's estimate with the same draws, unchanged:
    the bound rises by the predicted gain."""
    model = _problem(lik, K=3, seed=10, offsets=True)
    st = init_pmf_state(model, natural=natural, m0_scale=0.8, S0=0.3, seed=3)
    st.priors = [prior_update(model, st, s, "ard") for s in (0, 1)]
    new = st.copy(); gain = rotate_factors(model, new)
    new.priors = [prior_update(model, new, s, "ard") for s in (0, 1)]
    for a, b in zip(latent_moments(model, st), latent_moments(model, new)): np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-12)
    if natural:
        for s in (0, 1): np.testing.assert_allclose(np.linalg.inv(new.P[s]), new.S(s), rtol=1e-8, atol=1e-12)
    else:
        for s in (0, 1): assert np.allclose(new.F[s], np.tril(new.F[s]))
    assert gain > 0
    if natural or isinstance(lik, Gaussian):    # S-DSVI's state takes a new Cholesky factor: other draws of u, the same law
        assert np.isclose(pmf_vlb(model, new, 3, 1) - pmf_vlb(model, st, 3, 1), gain, rtol=1e-6)


def test_rotation_objective_and_bad_settings():
    rng = np.random.default_rng(1)
    X, Y = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    A_u, A_v = X @ X.T + 0.1 * np.eye(4), Y @ Y.T + 0.1 * np.eye(4)
    R, gain = best_rotation(A_u, A_v, 30, 20, max_iter=500)
    J0, _ = rotation_objective(np.eye(4), A_u, A_v, 30, 20); J1, g1 = rotation_objective(R, A_u, A_v, 30, 20)
    assert np.isclose(J0 - J1, gain) and gain > 0 and np.max(np.abs(g1)) < 1e-2 * np.max(np.abs(rotation_objective(np.eye(4), A_u, A_v, 30, 20)[1]))
    assert rotation_objective(np.zeros((4, 4)), A_u, A_v, 30, 20)[0] == np.inf
    model = _problem(Gaussian(0.5), K=3, seed=11)
    with pytest.raises(ValueError, match="prior"): fit_pmf(model, prior="full")
    with pytest.raises(ValueError, match="rotate=True"): fit_pmf(model, "h-mc-ssvi", prior="ard", rotate=True)
    with pytest.raises(ValueError, match="rotate=True"): fit_pmf(model, prior="shared", rotate=True)
    mu = PMF(model.rows, model.cols, model.y, Gaussian(0.5), 3, mu=0.2)
    assert not fit_pmf(mu, prior="ard", max_iter=6, warmup=1).info["rotate"]       # a non-zero factor mean: not rotated
    with pytest.raises(ValueError, match="mu = 0"): rotate_factors(mu, init_pmf_state(mu))
    rss, sv = gaussian_sums(model, init_pmf_state(model, seed=2))
    mean, var = latent_moments(model, init_pmf_state(model, seed=2))
    assert np.isclose(rss, np.sum((model.y - mean)**2)) and np.isclose(sv, np.sum(var))


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
    res = fit_pmf(model, "mc-ssvi", max_iter=200, tol=1e-3)                     # defaults: exact expectations, ρ = 1
    assert res.stop is Stop.REL_TOL and res.converged and res.info["expect"] == "exact" and res.info["schedule"] == 1.0


def test_bad_input():
    "The algorithms' settings; the model's own bad input is tested in tests/models."
    model = _problem(Gaussian(0.5), seed=8)
    with pytest.raises(ValueError, match="method"): fit_pmf(model, "svi")
    with pytest.raises(ValueError, match="Gaussian"): fit_pmf(_problem(Logistic()), "mc-ssvi", expect="exact")
    with pytest.raises(ValueError, match="batch_size"): fit_pmf(model, batch_size=0)
    with pytest.raises(ValueError, match="lik_batch"): fit_pmf(model, learn_lik=True, lik_batch=0)
    with pytest.raises(ValueError, match="warmup"): fit_pmf(model, warmup=-1)
    with pytest.raises(ValueError, match="expect"): fit_pmf(model, expect="gh")
    off = model.with_offsets(True)
    with pytest.raises(ValueError, match="Lim & Teh"): lim_teh_step(off, init_pmf_state(off), 0, 0)


def test_collapse_is_an_event_with_advice():
    "Offsets plus noise, no factor structure, σ² learned: the factors collapse, and the fit says so (event, warning, message)."
    rng = np.random.default_rng(3)
    r, c = np.nonzero(rng.uniform(size=(30, 20)) < 0.6)
    y = 1.0 + 0.8 * rng.standard_normal(30)[r] + 0.5 * rng.standard_normal(20)[c] + 0.3 * rng.standard_normal(r.size)
    with pytest.warns(DegenerateFitWarning, match="What to do"):
        res = fit_pmf(PMF(r, c, y, Gaussian(1.0), 2), "mc-ssvi", max_iter=200, learn_lik=True)
    assert any(e.kind is EventKind.DEGENERATE for e in res.history[-1].events) and "degenerate" in res.message
    good = fit_pmf(_problem(Gaussian(0.2), seed=2, offsets=True), "mc-ssvi", max_iter=60)
    assert collapse(good.model, good.state) is None and good.converged and good.message.startswith("converged")


def test_save_and_load_keep_the_offsets(tmp_path):
    for offsets in (False, True):
        res = fit_pmf(_problem(Gaussian(0.3), seed=1, offsets=offsets), "mc-ssvi", max_iter=3)
        vgi_lit.io.save(res, tmp_path / f"p{offsets}.npz")
        back = vgi_lit.io.load(tmp_path / f"p{offsets}.npz")
        assert back.model.offsets == offsets and back.b0 == res.b0
        np.testing.assert_allclose(back.predict([0, 3], [1, 2])[0], res.predict([0, 3], [1, 2])[0], rtol=1e-12)


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
    learned = fit_pmf(model, "s-dsvi", max_iter=2, seed=0, tol=0.0, learn_lik=True, lik_batch=500, warmup=0)
    c = learned.model.likelihood.cutpoints
    assert np.all(np.diff(c) > 0) and not np.allclose(c, model.likelihood.cutpoints)
    assert learned.vlb > fixed.vlb and learned.model.likelihood is not model.likelihood and model.likelihood.cutpoints[0] == -1.0
    assert len(learned.history[-1]["lik_params"]) == 4
