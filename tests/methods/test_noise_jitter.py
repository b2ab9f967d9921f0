"""GP regression with nearly noiseless targets (generated data: x = linspace(0, 1, 100), y = sin(6x) + sd·N(0, 1), seed 0):
the inner solve of a Gaussian likelihood is its closed form, the noise variance goes down to where the VLB really peaks
(or to the jitter's level, reported), fast and from any start."""
import time, warnings
import numpy as np
import pytest
import vgi_lit
from vgi_lit.models import GP
from vgi_lit.likelihoods import Gaussian, Logistic
from vgi_lit.kernels import RBF
from vgi_lit.methods.hyper import learn, gaussian_optimum


def _data(sd):
    x = np.linspace(0, 1, 100)
    return x[:, None], np.sin(6 * x) + sd * np.random.default_rng(0).normal(size=100)


def _learn(model):
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore"); hf = learn(model)
    return hf, time.perf_counter() - t


def _log_ml(model):
    "log N(y | μ, Σ + σ²I) by a dense Cholesky factor: the optimal VLB of a GP with Gaussian noise."
    A = model.K_site() + model.likelihood.variance * np.eye(model.n); L = np.linalg.cholesky(A)
    r = model.y - model.site_mean(model.mu); a = np.linalg.solve(A, r)
    return -0.5 * r @ a - np.sum(np.log(np.diag(L))) - 0.5 * model.n * np.log(2 * np.pi)


def test_gaussian_optimum_is_the_marginal_likelihood_and_fpi_fixed_point():
    X, y = _data(0.1)
    gp = GP(X, y, Gaussian(0.01), RBF(1.0, 0.3), mean=0.3)
    go = gaussian_optimum(gp)
    fp = vgi_lit.fit(gp, "fpi", tol=1e-10, tol_rel=0.0)
    assert abs(go.vlb - _log_ml(gp)) < 1e-10 * abs(go.vlb) and abs(go.vlb - fp.vlb) < 1e-9 * abs(go.vlb)
    assert np.max(np.abs(go.m - fp.m)) < 1e-7 and np.allclose(go.cov.lam, 100.0) and go.converged and go.n_iter == 1
    with pytest.raises(ValueError, match="Gaussian likelihood"):
        gaussian_optimum(GP(X, np.sign(y), Logistic(), RBF(1.0, 0.3)))


def test_inner_solves_are_one_exact_step_at_noise_far_below_the_kernel_scale(monkeypatch):
    """sd = 3e-4: the learned noise variance is far below the jitter (the jitter carries the noise); every inner solve is the
    closed form, one step per evaluation (FPi took 2120-4691 iterations in 1.7-96 s), and FPi is never called."""
    import vgi_lit.methods.hyper as H
    calls, real = [], H.gaussian_optimum
    def count(model, method="fpi"):
        calls.append(method); return real(model, method)
    def refuse(model, method, **kw): raise AssertionError(f"an iterative inner solve ({method}) for a Gaussian likelihood")
    monkeypatch.setattr(H, "gaussian_optimum", count); monkeypatch.setattr(H, "_fit", refuse)
    hf, sec = _learn(GP(*_data(3e-4), Gaussian(1.0), RBF(1.0, 0.3)))
    assert hf.n_inner == len(calls) and hf.posterior.info.get("closed_form"), (hf.n_inner, len(calls))
    assert hf.vlb > 611.69 and sec < 3.0, (hf.vlb, sec)
    assert abs(hf.vlb - _log_ml(hf.model)) < 1e-7 * abs(hf.vlb)


def test_noise_below_the_jitter_is_learned_down_to_the_jitter_level_not_kept_at_the_first_box():
    """sd = 1e-4 (noise variance 1e-8, below the jitter 1e-8·s): the VLB rises by 250 nats from the first box's edge e^−12
    down to the jitter's level. learn widens the box and ends within 0.01 nats of the joint supremum (711.125, a direct
    L-BFGS-B on log N(y | 0, K + (jitter + σ²)I) with σ² down to e^−80), the noise variance reported at the jitter's level."""
    hf, sec = _learn(GP(*_data(1e-4), Gaussian(1.0), RBF(1.0, 0.3)))
    details = [e.detail for r in hf.history for e in r.events]
    assert hf.vlb > 711.115 and hf.theta["likelihood.variance"] < 1e-10 and sec < 3.0, (hf.vlb, hf.theta, sec)
    assert "likelihood.variance" in hf.edges and sum("jitter's level" in d for d in details) == 1, details
    assert any("widened" in d for d in details)


def test_small_real_noise_above_the_jitter_is_not_reported_as_an_edge():
    "sd = 1e-3 (noise variance 1e-6, 30 times the jitter): a finite maximum at σ² ≈ 8.9e-7 outside the first box, no edge, no warning."
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always"); hf = learn(GP(*_data(1e-3), Gaussian(1.0), RBF(1.0, 0.3)))
    assert 8e-7 < hf.theta["likelihood.variance"] < 1e-6 and hf.vlb > 502.26 and hf.edges == {}, (hf.theta, hf.edges)
    assert not any("likelihood.variance" in str(c.message) for c in caught)


@pytest.mark.slow
@pytest.mark.parametrize("sd", [1e-4, 1.6e-4, 3e-4])
def test_the_same_answer_from_different_starts(sd):
    "Two starts of the noise variance (0.1 and 1): the same VLB to 1e-3 nats, each run in seconds."
    runs = [_learn(GP(*_data(sd), Gaussian(s2), RBF(1.0, 0.3))) for s2 in (0.1, 1.0)]
    assert abs(runs[0][0].vlb - runs[1][0].vlb) < 1e-3 and max(s for _, s in runs) < 5.0, [(h.vlb, s) for h, s in runs]


def test_a_stall_with_exact_inner_solves_does_not_advise_tighter_inner_solves():
    "With the closed form the VLB and its gradient agree up to rounding: the stall advice says so instead of inner={'tol': 1e-9}."
    from vgi_lit.methods.hyper import stall_advice
    exact, iterative = stall_advice("fpi", exact=True), stall_advice("fpi")
    assert "rounding" in exact and "inner={'tol'" not in exact and "inner={'tol': 1e-9}" in iterative


def _direct_best(y, x):
    """The joint supremum of log N(y | 0, sK̃_ℓ + (10⁻⁸s + σ²)I) (the GP's relative jitter included) by L-BFGS-B on exact
    gradients from five starts, σ² down to e^−48: an oracle independent of learn's inner solves, boxes and profiles."""
    from scipy.optimize import minimize
    from scipy.linalg import cho_factor, cho_solve
    D2, n = (x[:, None] - x[None, :]) ** 2, len(x)
    def negL(th):
        s, l, s2 = np.exp(th); E = np.exp(-0.5 * D2 / l ** 2); K = s * E; K[np.diag_indices(n)] += 1e-8 * s + s2
        c = cho_factor(K, lower=True); a = cho_solve(c, y); W = np.outer(a, a) - cho_solve(c, np.eye(n))
        dK = (s * E + 1e-8 * s * np.eye(n), s * E * D2 / l ** 2, s2 * np.eye(n))
        L = -0.5 * y @ a - np.sum(np.log(np.diag(c[0]))) - 0.5 * n * np.log(2 * np.pi)
        return -L, -0.5 * np.array([np.sum(W * d) for d in dK])
    starts = ([0, np.log(.3), np.log(.1)], [0, np.log(.3), 0], [2, np.log(.4), -15], [-2, np.log(.3), -20], [np.log(2), np.log(.4), -18])
    return max(-minimize(negL, s, jac=True, method="L-BFGS-B", bounds=[(-12, 12), (-12, 12), (-48, 12)],
                         options=dict(maxiter=2000, ftol=0, gtol=1e-8)).fun for s in starts)


@pytest.mark.slow
@pytest.mark.parametrize("sd,gap", [(1e-5, 0.01), (1e-4, 0.01), (1.6e-4, 0.2), (3e-4, 0.01), (1e-3, 0.01), (1e-2, 0.01), (1e-1, 0.01)])
def test_learn_reaches_the_direct_joint_supremum(sd, gap):
    """learn's VLB against the oracle, from two starts: within 0.01 nats (the gain the noise variance may leave to σ² → 0),
    but at sd = 1.6e-4, where the σ² → 0 branch (668.355, the kernel variance raising the jitter to the data's noise) is a
    local maximum 0.13 nats below an interior one (σ² = 8.7e-9, 668.484) that learn does not reach from these starts."""
    X, y = _data(sd)
    best = _direct_best(y, X[:, 0])
    for s2 in (0.1, 1.0):
        hf, sec = _learn(GP(X, y, Gaussian(s2), RBF(1.0, 0.3)))
        assert best - gap <= hf.vlb <= best + 1e-4 and sec < 5.0, (sd, s2, hf.vlb, best, sec)
