"""Learned inducing inputs (methods.inducing): the adjoint gradient against the route of `hyper.HyperParams` and against
finite differences, the mini-batch estimate, the greedy start, the batch and stochastic fits, and bad input."""
import numpy as np
import pytest

from vgi_lit.models import SparseGP
from vgi_lit.kernels import RBF, Matern12, Matern32, Matern52, Linear
from vgi_lit.likelihoods import Gaussian, Logistic, Probit, StudentT, Poisson
from vgi_lit.covariance import DenseCov
from vgi_lit.vlb import vlb
from vgi_lit.inference import Stop
from vgi_lit.methods.hyper import HyperParams, HyperFit
from vgi_lit.methods.inducing import (InducingParams, greedy_inducing, kmeans_inducing, collapsed_q, fit_inducing,
                                      svi_inducing, sparse_vlb, natural_step, Adam, radial_weight)


def _problem(kern, lik, seed=0, n=30, M=5, p=2, mean=0.2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p)); f = np.sin(2 * X[:, 0]) + 0.5 * X[:, -1]
    y = {Gaussian: f + 0.2 * rng.normal(size=n), Logistic: np.where(f > 0, 1.0, -1.0), Probit: np.where(f > 0, 1.0, -1.0),
         StudentT: f + 0.2 * rng.standard_t(3, size=n), Poisson: rng.poisson(np.exp(0.5 * f)).astype(float)}[type(lik)]
    mod = SparseGP(X, y, lik, kern, rng.normal(size=(M, p)), mean=mean)
    m = rng.normal(size=M); A = rng.normal(size=(M, M)); V = A @ A.T / M + 0.1 * np.eye(M)
    return mod, m, V


KERNELS = [lambda: RBF(1.3, np.array([0.8, 1.4])), lambda: Matern12(0.9, 1.2), lambda: Matern32(0.7, np.array([1.1, 0.6])),
           lambda: Matern52(1.1, 0.9)]
LIKS = [lambda: Gaussian(0.3), lambda: Probit(), lambda: StudentT(4.0, 0.5), lambda: Poisson()]


@pytest.mark.parametrize("kern", KERNELS)
@pytest.mark.parametrize("lik", LIKS)
@pytest.mark.parametrize("seed", [0, 1])
def test_adjoint_gradient_equals_the_hyper_route(kern, lik, seed):
    mod, m, V = _problem(kern(), lik(), seed)
    ip = InducingParams(mod, learn_mean=True)
    F, g = ip.grad(ip.theta0, m, V, chunk=7)
    cov = DenseCov(np.linalg.cholesky(V))
    assert abs(F - vlb(mod, m, cov)) <= 1e-10 * abs(F)
    ref = HyperParams(mod, True, learn_inducing=True).grad(mod, m, cov)
    assert np.max(np.abs(ref - g)) <= 1e-9 * np.max(np.abs(ref))


@pytest.mark.parametrize("fixed", [None, {"Z"}, {"kernel.lengthscale", "likelihood"}, {"Z[0,1]", "kernel.variance"}])
def test_adjoint_gradient_by_finite_differences_with_fixed_parameters(fixed):
    mod, m, V = _problem(RBF(1.0, np.array([0.9, 1.3])), StudentT(5.0, 0.4), seed=3)
    ip = InducingParams(mod, fixed=fixed)
    _, g = ip.grad(ip.theta0, m, V)
    cov = DenseCov(np.linalg.cholesky(V))
    fd = np.array([(vlb(ip.model_at(ip.theta0 + e), m, cov) - vlb(ip.model_at(ip.theta0 - e), m, cov)) / 2e-6
                   for e in 1e-6 * np.eye(len(g))])
    assert len(g) == len(ip.free_names) and np.max(np.abs(fd - g)) <= 1e-5 * max(1.0, np.max(np.abs(g)))


def test_minibatch_estimates_average_to_the_full_gradient():
    "Over a partition of the rows into equal batches, the mean of the (n/b)-scaled estimates is the full-data VLB and gradient."
    mod, m, V = _problem(Matern32(1.0, 0.8), Logistic(), seed=2, n=40)
    ip = InducingParams(mod)
    F, g = ip.grad(ip.theta0, m, V)
    parts = [ip.grad(ip.theta0, m, V, idx=np.arange(s, s + 10)) for s in range(0, 40, 10)]
    assert abs(np.mean([p[0] for p in parts]) - F) <= 1e-10 * abs(F)
    assert np.allclose(np.mean([p[1] for p in parts], 0), g, rtol=1e-9, atol=1e-9 * np.max(np.abs(g)))
    F1, g1 = ip.grad(ip.theta0, m, V, idx=np.arange(40))
    assert abs(F1 - F) <= 1e-10 * abs(F) and np.allclose(g1, g)


def test_envelope_gradient_of_the_collapsed_bound():
    "At q* (closed form, Gaussian) the fixed-q gradient is the derivative of the optimal VLB (finite differences)."
    mod, _, _ = _problem(Matern52(1.2, np.array([0.7, 1.2])), Gaussian(0.15), seed=4, n=40)
    ip = InducingParams(mod, learn_mean=True)
    m, cov = collapsed_q(mod)
    _, g = ip.grad(ip.theta0, m, cov.dense())
    def opt(t):
        mm = ip.model_at(t); a, c = collapsed_q(mm); return vlb(mm, a, c)
    fd = np.array([(opt(ip.theta0 + e) - opt(ip.theta0 - e)) / 2e-6 for e in 1e-6 * np.eye(len(g))])
    assert np.max(np.abs(fd - g)) <= 1e-5 * max(1.0, np.max(np.abs(g)))


def test_greedy_is_pivoted_cholesky_and_stops_at_rank():
    rng = np.random.default_rng(0)
    X = np.repeat(rng.normal(size=(4, 2)), 5, axis=0)                 # 4 distinct points: rank 4
    Z, idx, d = greedy_inducing(RBF(1.0, 1.0), X, 10, tol=1e-10)
    assert len(idx) == 4 and len(np.unique(X[idx], axis=0)) == 4 and np.all(d <= 1e-8)
    Z2, idx2, d2 = greedy_inducing(RBF(1.0, 1.0), X, 2)
    assert len(idx2) == 2 and idx2[0] == 0                            # equal variances: the first row
    assert np.all(d2 >= 0)


def test_kmeans_start_is_seeded():
    X = np.random.default_rng(1).normal(size=(200, 3))
    assert np.array_equal(kmeans_inducing(X, 7, seed=3), kmeans_inducing(X, 7, seed=3))
    assert kmeans_inducing(X, 7).shape == (7, 3)


def test_bad_input():
    X = np.random.default_rng(0).normal(size=(20, 2)); y = X[:, 0]
    for M in (0, 21, 2.5, True):
        with pytest.raises(ValueError, match="M must be"): greedy_inducing(RBF(), X, M)
        with pytest.raises(ValueError, match="M must be"): kmeans_inducing(X, M)
    with pytest.raises(TypeError, match="RBF or Matern"): radial_weight(Linear(), np.zeros(2))
    with pytest.raises(TypeError, match="RBF or Matern"): InducingParams(SparseGP(X, y, Gaussian(), Linear(), X[:3]))
    with pytest.raises(TypeError, match="SparseGP"): InducingParams(object())
    lg = SparseGP(X, np.sign(y), Probit(), RBF(), X[:3])
    with pytest.raises(ValueError, match="Gaussian"): collapsed_q(lg)
    with pytest.raises(ValueError, match="Gaussian"): fit_inducing(lg, method="collapsed")
    g = SparseGP(X, y, Gaussian(), RBF(), X[:3])
    with pytest.raises(ValueError, match="batch_size"): svi_inducing(g, batch_size=0)
    with pytest.raises(ValueError, match="rho"): svi_inducing(g, rho=1.5)
    with pytest.raises(ValueError, match="max_epochs"): svi_inducing(g, max_epochs=0)
    with pytest.raises(TypeError, match="joint"): svi_inducing(g, joint="yes")
    with pytest.raises(ValueError, match="unknown parameter"): fit_inducing(g, fixed={"Q"})
    with pytest.raises(ValueError, match="lr"): Adam(lr=-1.0)
    for mem in (0, 2.5, True):
        with pytest.raises(ValueError, match="maxcor"): fit_inducing(g, maxcor=mem)


def test_batch_fit_raises_the_optimal_vlb_above_fixed_inputs():
    rng = np.random.default_rng(5)
    X = rng.uniform(-3, 3, size=(120, 1)); y = np.where(np.sin(2 * X[:, 0]) + 0.3 * rng.normal(size=120) > 0, 1.0, -1.0)
    mod = SparseGP(X, y, Probit(), RBF(1.0, 1.0), greedy_inducing(RBF(1.0, 1.0), X, 5)[0])
    held = fit_inducing(mod, fixed={"Z"}, max_iter=60)
    free = fit_inducing(mod, max_iter=60)
    assert isinstance(free, HyperFit) and free.posterior.model is free.model
    assert free.vlb > held.vlb and np.isfinite(free.vlb)
    assert free.history[-1].vlb == pytest.approx(free.vlb) and free.stop in (Stop.GRAD_TOL, Stop.REL_TOL, Stop.MAX_ITER)
    assert set(free.theta) >= {"kernel.variance", "kernel.lengthscale", "Z[0,0]", "Z[4,0]"}
    assert np.allclose(free.model.Z.ravel(), [free.theta[f"Z[{i},0]"] for i in range(5)])


def test_collapsed_fit_without_building_the_model_equals_the_built_route():
    """fit_inducing with the rows in memory evaluates `collapsed_grad` (no SparseGP per evaluation); on a blocked model it
    builds the model and takes `collapsed_q` + `InducingParams.grad`: the same iterates, VLB and posterior to rounding."""
    from vgi_lit.methods.inducing import collapsed_grad
    rng = np.random.default_rng(7)
    X = rng.uniform(-3, 3, size=(100, 2)); y = np.sin(2 * X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.normal(size=100)
    Z0 = kmeans_inducing(X, 5)
    fast = fit_inducing(SparseGP(X, y, Gaussian(0.3), RBF(1.0, np.ones(2)), Z0), learn_mean=True, max_iter=8)
    built = fit_inducing(SparseGP(X, y, Gaussian(0.3), RBF(1.0, np.ones(2)), Z0, block_size=32), learn_mean=True, max_iter=8)
    assert len(fast.history) == len(built.history) and fast.vlb == pytest.approx(built.vlb, rel=1e-9)
    assert all(fast.theta[k] == pytest.approx(built.theta[k], rel=1e-6, abs=1e-9) for k in built.theta)
    assert fast.posterior.model.sites.dense_array and fast.vlb == pytest.approx(vlb(fast.model, fast.posterior.m, fast.posterior.cov), rel=1e-10)
    with pytest.raises(ValueError, match="in memory"):
        collapsed_grad(InducingParams(SparseGP(X, y, Gaussian(0.3), RBF(1.0, 1.0), Z0, block_size=32)), np.zeros(13))


@pytest.mark.parametrize("kern", [lambda: RBF(1.0, np.array([0.9, 1.5])), lambda: Matern52(0.8, 1.2)])
def test_collapsed_grad_squares_k_xz_only_when_k_tilde_is_well_conditioned(kern, monkeypatch):
    """`collapsed_grad` forms G = L⁻¹(K_zx K_xz)L⁻ᵀ while κ̂ = tr K̃ · tr K̃⁻¹ ≤ SQUARED_KAPPA, else G = AAᵀ with A = L⁻¹K_zx:
    both routes equal the built model's gradient on well-spread inputs; with two inducing inputs 1e-4 apart (κ̂ > 1e8) the
    automatic choice stays at 1e-8 while the squared route, forced, loses more than 1e-7."""
    import vgi_lit.methods.inducing as ind
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 2)); y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=400)
    def err(Z, kappa):
        mod = SparseGP(X, y, Gaussian(0.01), kern(), Z, mean=0.1); ip = InducingParams(mod, learn_mean=True)
        m, cov = collapsed_q(mod); F0, g0 = ip.grad(ip.theta0, m, cov.dense())
        if kappa is not None: monkeypatch.setattr(ind, "SQUARED_KAPPA", kappa)
        F, g, m1, V1 = ind.collapsed_grad(ip, ip.theta0); monkeypatch.undo()
        assert kappa == np.inf or np.allclose(m1, m, rtol=1e-8, atol=1e-10)
        return max(abs(F - F0) / abs(F0), np.max(np.abs(g - g0)) / np.max(np.abs(g0)))
    Z = kmeans_inducing(X, 8)
    def kappa_hat(Z):
        ip = InducingParams(SparseGP(X, y, Gaussian(0.01), kern(), Z)); L = ip.parts(ip.theta0)[4].L
        return float(np.sum(L * L) * np.sum(np.linalg.inv(L) ** 2))
    assert kappa_hat(Z) <= ind.SQUARED_KAPPA
    assert err(Z, None) < 1e-9 and err(Z, np.inf) < 1e-9 and err(Z, 0.0) < 1e-9
    Zc = Z.copy(); Zc[1] = Zc[0] + 1e-4
    assert kappa_hat(Zc) > 1e8
    assert err(Zc, None) < 1e-8 and err(Zc, 0.0) < 1e-8 and err(Zc, np.inf) > 1e-7


def test_stochastic_fit_on_a_blocked_model_keeps_o_m2_state():
    "A SparseGP whose rows are computed per block (no n × M array) fits; the VLB rises from the prior start."
    rng = np.random.default_rng(6)
    X = rng.uniform(-3, 3, size=(300, 2)); y = np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.normal(size=300)
    mod = SparseGP(X, y, Gaussian(0.1), RBF(1.0, 1.0), kmeans_inducing(X, 6), block_size=64)
    r = svi_inducing(mod, batch_size=50, rho=0.3, lr=0.03, max_epochs=4)
    vl = r.history.vlb[np.isfinite(r.history.vlb)]
    assert r.stop is Stop.BUDGET and vl[-1] > vl[0] and len(vl) >= 5
    assert r.model.sites.kind == "blocked" and r.posterior.m.shape == (6,)
    assert sparse_vlb(InducingParams(r.model), InducingParams(r.model).theta0, r.posterior.m, r.posterior.V) == pytest.approx(r.vlb, rel=1e-10)


def test_averaged_iterates_report_the_better_state_and_leave_the_steps_alone():
    """With average = β the steps are those of average = 0 (the same iterates, seeded), each evaluation reports the better
    of the iterate and the bias-corrected average, so every evaluated VLB is at least the plain run's, the result is the
    best record's state, and on this noisy run (probit, small batches) the average wins at least once."""
    rng = np.random.default_rng(8)
    X = rng.uniform(-3, 3, size=(400, 2)); y = np.where(np.sin(2 * X[:, 0]) + 0.5 * rng.normal(size=400) > 0, 1.0, -1.0)
    mod = SparseGP(X, y, Probit(), RBF(1.0, 1.0), kmeans_inducing(X, 6))
    plain, avg = (svi_inducing(mod, batch_size=20, rho=0.1, lr=0.1, max_epochs=4, tol=0.0, average=b) for b in (0.0, 0.9))
    vp, va = (np.array([r.vlb for r in f.history if r.step != "best" and np.isfinite(r.vlb)]) for f in (plain, avg))
    assert len(vp) == len(va) == 5 and np.all(va >= vp - 1e-9 * np.abs(vp)) and np.any(va > vp + 1e-6)
    assert not any(r.extra.get("averaged", False) for r in plain.history)
    assert any(r.extra.get("averaged", False) for r in avg.history)
    assert avg.vlb == pytest.approx(va.max(), rel=1e-10) and avg.vlb >= plain.vlb - 1e-9 * abs(plain.vlb)
    g = SparseGP(X, y, Gaussian(), RBF(), X[:3])
    for bad in (1.0, -0.1, True, "0.9"):
        with pytest.raises(ValueError, match="average"): svi_inducing(g, average=bad)


def test_natural_step_of_length_one_on_all_rows_is_the_collapsed_optimum():
    mod, _, _ = _problem(RBF(1.0, np.array([1.0, 0.7])), Gaussian(0.2), seed=7, n=50, M=6, mean=0.0)
    m_star, cov = collapsed_q(mod); P = mod.prior.solve(np.eye(6)); m0 = np.random.default_rng(0).normal(size=6)
    a, c, H = mod.rows(np.arange(50))
    _, gm, gv = mod.likelihood.expected_log_lik(mod.y, a + H @ m0, c + np.sum((H @ mod.prior.dense()) * H, 1))
    P1, e1, L1, ev = natural_step(P, P @ m0, m0, P, 0.0, H, gm, gv, 1.0, 1.0)
    assert not ev and np.allclose(np.linalg.solve(P1, e1), m_star, atol=1e-9) and np.allclose(P1, np.linalg.inv(cov.dense()), rtol=1e-8)


@pytest.mark.parametrize("sign", [-1.0, 1.0])
def test_natural_step_precision_is_eq_g_on_both_branches(sign):
    """(G)'s precision (1 − ρ)P + ρ(K̃⁻¹ − 2s Hᵀdiag(g_v)H): by a symmetric rank-b update when every g_v ≤ 0, by a product
    otherwise (some g_v > 0, small enough for P' to stay positive definite): both equal the formula, and P' is symmetric."""
    rng = np.random.default_rng(3); M, b = 6, 40
    H = rng.normal(size=(b, M)); A = rng.normal(size=(M, M)); Ki = A @ A.T + M * np.eye(M); P = Ki + 0.5 * np.eye(M)
    gv = -rng.uniform(0.1, 1.0, size=b)
    if sign > 0: gv[:3] = 1e-3                                          # a few positive: the product branch
    gm, m = rng.normal(size=b), rng.normal(size=M)
    P1, e1, L1, ev = natural_step(P, P @ m, m, Ki, 0.3, H, gm, gv, 0.4, 2.5)
    ref = 0.6 * P + 0.4 * (Ki - 5.0 * H.T @ np.diag(gv) @ H)
    assert not ev and np.array_equal(P1, P1.T) and np.allclose(P1, ref, rtol=1e-12, atol=1e-12) and np.allclose(L1 @ L1.T, P1)


@pytest.mark.slow
def test_batch_fit_on_california_housing_beats_fixed_inputs():
    from vgi_lit.experiments.scale import california
    X, y = california(n_max=3000); y = y / y.std()
    mod = SparseGP(X[:2500], y[:2500], Gaussian(0.5), RBF(1.0, np.ones(8)), kmeans_inducing(X[:2500], 20))
    held = fit_inducing(mod, fixed={"Z"}, max_iter=150)
    free = fit_inducing(mod, max_iter=150)
    lp = lambda r: float(np.mean(r.log_pred_density(X[2500:], y[2500:])))
    assert free.vlb > held.vlb and lp(free) > lp(held)


@pytest.mark.parametrize("kern", [KERNELS[0], KERNELS[2]])
@pytest.mark.parametrize("lik", [LIKS[0], LIKS[1]])
def test_gradient_from_the_step_s_own_rows_equals_the_plain_route(kern, lik):
    """What the stochastic step hands to ``InducingParams.grad`` (its rows with their K_xz, and with `at` the site
    expectations it already computed) changes no number: same rows as `sparse_gp_site_map`, same VLB and gradient."""
    from vgi_lit.models import sparse_gp_site_map
    from vgi_lit.methods.inducing import _rows_with_kernel
    mod, m, V = _problem(kern(), lik(), seed=4, n=40)
    ip = InducingParams(mod, learn_mean=True); idx = np.arange(3, 40, 2)
    kern_, lik_, Z, mean, P = ip.parts(ip.theta0)
    rows, Kxz = _rows_with_kernel(kern_, Z, P, mod.X[idx], mean)
    assert all(np.array_equal(u, v) for u, v in zip(rows, sparse_gp_site_map(kern_, Z, P, mod.X[idx], mean)))
    assert np.array_equal(Kxz, kern_.K(mod.X[idx], Z))
    a, c, H = rows; ms, vs = a + H @ m, c + np.sum((H @ V) * H, 1)
    F0, g0 = ip.grad(ip.theta0, m, V, idx=idx)
    for kw in (dict(Kxz=Kxz), dict(Kxz=Kxz, at=(ms, vs, *lik_.expected_log_lik(mod.y[idx], ms, vs)))):
        F, g = ip.grad(ip.theta0, m, V, idx=idx, sites=rows, **kw)
        assert abs(F - F0) <= 1e-12 * abs(F0) and np.max(np.abs(g - g0)) <= 1e-12 * np.max(np.abs(g0))
    with pytest.raises(ValueError, match="sites"): ip.grad(ip.theta0, m, V, idx=idx, Kxz=Kxz)


def test_joint_schedule_steps_both_blocks_from_the_same_point():
    """joint=True: the Adam gradient at the current q from the natural step's own site expectations. With one step
    (max_iter=1) θ moves by Adam's first step, lr·sign(g), along the gradient at the prior start q = N(mean·1, K̃)."""
    rng = np.random.default_rng(6)
    X = rng.uniform(-3, 3, size=(120, 2)); y = np.where(np.sin(X[:, 0]) + 0.2 * rng.normal(size=120) > 0, 1.0, -1.0)
    mod = SparseGP(X, y, Probit(), RBF(1.0, 1.0), kmeans_inducing(X, 5))
    ip = InducingParams(mod)
    idx = np.sort(np.random.default_rng(0).permutation(120)[:40])
    _, g = ip.grad(ip.theta0, np.zeros(5), mod.prior.dense(), idx=idx)
    one = svi_inducing(mod, batch_size=40, rho=0.2, lr=0.01, max_epochs=1, max_iter=1, eval_every=1, tol=0.0, joint=True)
    assert one.history[-1].step != "start"                            # the step itself is returned, not the start
    moved = InducingParams(one.model).theta0 - ip.theta0              # Adam's first step: lr·g/(|g| + eps) per coordinate
    assert np.allclose(moved, 0.01 * g / (np.abs(g) + 1e-8), rtol=1e-9, atol=1e-12)
    alt = svi_inducing(mod, batch_size=40, rho=0.2, lr=0.01, max_epochs=1, max_iter=1, eval_every=1, tol=0.0)
    assert not np.allclose(InducingParams(alt.model).theta0 - ip.theta0, moved, rtol=1e-6)   # the gradient at the new q has other signs
    full = svi_inducing(mod, batch_size=40, rho=0.2, lr=0.02, max_epochs=6, joint=True)
    vl = full.history.vlb[np.isfinite(full.history.vlb)]
    assert full.posterior.info["joint"] is True and vl[-1] > vl[0]


def test_clock_charges_the_average_s_evaluation_not_the_measurements(monkeypatch):
    """The evaluation at the iterate, the start's included, is a measurement not charged to the clock (as in `svi_run`);
    the evaluation at the averaged iterate chooses the reported state and is charged: with a slow `sparse_vlb` the
    records' times stay small at average = 0 and grow by the slow evaluations at average = 0.9."""
    import time as _time
    from vgi_lit.methods import inducing
    rng = np.random.default_rng(2)
    X = rng.uniform(-3, 3, size=(80, 2)); y = np.where(np.sin(2 * X[:, 0]) > 0, 1.0, -1.0)
    mod = SparseGP(X, y, Probit(), RBF(1.0, 1.0), kmeans_inducing(X, 4))
    slow = inducing.sparse_vlb
    def sleepy(*a, **k): _time.sleep(0.1); return slow(*a, **k)
    monkeypatch.setattr(inducing, "sparse_vlb", sleepy)
    plain, avg = (svi_inducing(mod, batch_size=40, max_epochs=2, tol=0.0, average=b).history.time for b in (0.0, 0.9))
    assert len(plain) == len(avg) == 5 and plain[0] < 0.05 and avg[0] < 0.05 and plain[-1] < 0.05, (plain, avg)
    assert avg[-1] > 0.18, avg                                      # the two evaluations at the average (epochs 1, 2) charged


@pytest.mark.parametrize("kern", [RBF(1.3, np.array([0.7, 1.1, 2.0])), Matern32(0.8, 1.4), Matern12(1.1, 0.9)])
def test_kernel_adjoint_in_place_forms_are_bit_identical(kern):
    """W = Ā ∘ s·w(r²) in the memory of s·w(r²) (formed inside) or of Ā (`overwrite_abar`) gives the same bits as the
    product in a new array; the caller's s·w(r²) and K are never written, Ā only with `overwrite_abar`."""
    from vgi_lit.methods.hyper import kernel_adjoint, radial_r2
    rng = np.random.default_rng(4); X, Z = rng.normal(size=(40, 3)), rng.normal(size=(6, 3)); A0 = rng.normal(size=(40, 6))
    K = kern.K(X, Z); sw = radial_weight(kern, radial_r2(kern, X, Z)); sw0 = sw.copy()
    ref = kernel_adjoint(kern, X, Z, A0.copy(), sw=sw.copy(), K=K.copy())      # W = Ā ∘ sw in a new array
    A = A0.copy(); got = kernel_adjoint(kern, X, Z, A, sw=sw, K=K, overwrite_abar=True)
    assert all(np.array_equal(a, b) for a, b in zip(ref, got)) and np.array_equal(sw, sw0) and not np.array_equal(A, A0)
    A = A0.copy(); got = kernel_adjoint(kern, X, Z, A)                          # s·w(r²) formed inside, W in its memory
    assert all(np.array_equal(a, b) for a, b in zip(ref, got)) and np.array_equal(A, A0)
    B0 = A0[:6] + A0[:6].T; Kz = kern.K(Z, Z)
    ref = kernel_adjoint(kern, Z, Z, B0.copy(), same=True, sw=radial_weight(kern, radial_r2(kern, Z, Z)), K=Kz)
    B = B0.copy(); got = kernel_adjoint(kern, Z, Z, B, same=True, K=Kz)
    assert all(np.array_equal(a, b) for a, b in zip(ref, got)) and np.array_equal(B, B0)
    B = B0.copy(); got = kernel_adjoint(kern, Z, Z, B, same=True, sw=radial_weight(kern, radial_r2(kern, Z, Z)), K=Kz, overwrite_abar=True)
    assert all(np.array_equal(a, b) for a, b in zip(ref, got))


def test_the_start_is_not_charged_to_the_clock_as_in_svi_run(monkeypatch):
    """Building the start state (here made slow: its parameter unpacking, the first, sleeps 0.2 s) is not charged to the
    run's clock in `svi_inducing`, as in `svi_run` (whose start, `init_state`, is made as slow): the start record's time is near 0."""
    import time
    from vgi_lit.methods import svi as svi_mod
    from vgi_lit.models import GLM
    parts, calls = InducingParams.parts, []
    def slow_parts(self, theta):
        if not calls: time.sleep(0.2)
        calls.append(1); return parts(self, theta)
    monkeypatch.setattr(InducingParams, "parts", slow_parts)
    mod, _, _ = _problem(RBF(1.0, 1.0), Gaussian(0.3), n=20, M=3)
    r = svi_inducing(mod, batch_size=10, max_epochs=1, max_iter=1, eval_every=1, tol=0.0)
    start = [rec for rec in r.history if rec.step == "start"]
    assert len(start) == 1 and start[0].time < 0.1, [(rec.step, rec.time) for rec in r.history]
    init = svi_mod.init_state
    def slow_init(*a, **k): time.sleep(0.2); return init(*a, **k)
    monkeypatch.setattr(svi_mod, "init_state", slow_init)
    rng = np.random.default_rng(0); X = rng.normal(size=(40, 2))
    s = svi_mod.svi_run(GLM(X, X[:, 0] + 0.1 * rng.normal(size=40), Gaussian(0.1)), "svi", batch_size=10, max_epochs=1)
    assert s.history[0].step == "start" and s.history[0].time < 0.1, [(rec.step, rec.time) for rec in s.history]


@pytest.mark.parametrize("kern", [lambda: RBF(1.3, np.array([0.9, 1.5])), lambda: RBF(0.7, 0.8), lambda: Matern32(0.8, 1.2)])
@pytest.mark.parametrize("kappa", [None, 0.0])
def test_collapsed_grad_in_blocks_of_rows_equals_the_built_route(kern, kappa, monkeypatch):
    """`collapsed_grad` sweeps K_xz in blocks of CACHE_ENTRIES // M rows: with blocks of 7 rows (n = 100 not a multiple),
    on both routes (squared, triangular), the VLB, its gradient (mean learned) and q equal the built model's
    `collapsed_q` + ``InducingParams.grad`` and the one-block evaluation."""
    import vgi_lit.methods.inducing as ind
    rng = np.random.default_rng(11)
    X = rng.normal(size=(100, 2)); y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=100)
    mod = SparseGP(X, y, Gaussian(0.05), kern(), kmeans_inducing(X, 6), mean=0.2); ip = InducingParams(mod, learn_mean=True)
    m, cov = collapsed_q(mod); F0, g0 = ip.grad(ip.theta0, m, cov.dense())
    if kappa is not None: monkeypatch.setattr(ind, "SQUARED_KAPPA", kappa)
    one = ind.collapsed_grad(ip, ip.theta0)
    monkeypatch.setattr(ind, "CACHE_ENTRIES", 7 * 6)
    F, g, m1, V1 = ind.collapsed_grad(ip, ip.theta0)
    assert abs(F - F0) < 1e-10 * abs(F0) and np.max(np.abs(g - g0)) < 1e-9 * np.max(np.abs(g0)), (F - F0, np.max(np.abs(g - g0)))
    assert np.allclose(m1, m, rtol=1e-9, atol=1e-11) and np.allclose(V1, cov.dense(), rtol=1e-9, atol=1e-11)
    assert abs(F - one[0]) < 1e-12 * abs(F) and np.max(np.abs(g - one[1])) < 1e-10 * np.max(np.abs(g))


def test_rbf_exponent_is_log_k_and_refuses_other_kernels():
    """exp(rbf_exponent) is RBF.K for a shared and an ARD lengthscale, far from the origin too, written into `out` when given;
    another kernel is a TypeError naming it."""
    from vgi_lit.methods.inducing import rbf_exponent
    rng = np.random.default_rng(12)
    X, Z = rng.normal(size=(40, 3)) + 3.0, rng.normal(size=(9, 3))
    for k in (RBF(0.6, 1.4), RBF(2.0, np.array([0.5, 1.0, 3.0]))):
        out = np.empty((40, 9)); res = rbf_exponent(k, X, Z, out=out)
        assert res is out and np.max(np.abs(np.exp(out) - k.K(X, Z))) < 1e-12 * k.variance
    Xf, Zf = X + 1e7, Z + 1e7                                            # far from the origin: the centred expansion keeps it
    k = RBF(1.0, 1.0)
    assert np.max(np.exp(rbf_exponent(k, Xf, Zf))) <= 1.0 + 1e-12 and np.max(np.abs(np.exp(rbf_exponent(k, Xf, Zf)) - k.K(X, Z))) < 1e-8
    with pytest.raises(TypeError, match="Matern32"):
        rbf_exponent(Matern32(1.0, 1.0), X, Z)
