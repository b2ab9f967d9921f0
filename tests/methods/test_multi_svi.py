"""Natural-gradient SVI for multi-latent models (`vgi_lit.methods.multi_svi`): bad input refused by name; at ρ = 1 on the
full batch the run is FPi's sequence of undamped steps; minibatch SVI reaches FPi's optimum (GLM and sparse GP,
seeded); a minibatch step equals (N) with its sums written as einsums; indefinite site curvatures are clipped with an event;
a saved SVI posterior predicts as before."""
import numpy as np
import pytest
import vgi_lit
from vgi_lit import io as vio
from vgi_lit.inference import EventKind, Stop
from vgi_lit.kernels import RBF
from vgi_lit.models import MultiGLM, MultiGP, MultiSparseGP
from vgi_lit.softmax import Softmax
from vgi_lit.methods.multiclass import fpi_multi
from vgi_lit.methods.multi_svi import svi_multi, multi_svi_step, multi_vlb_stream, PrecisionMultiCov

rng = np.random.default_rng(3)
X = rng.normal(size=(60, 2)); W = np.array([[2.0, -1.0, 0.0], [0.5, 1.5, -2.0]])
y = np.argmax(X @ W + rng.gumbel(size=(60, 3)), 1)
GLM3 = MultiGLM(X, y, Softmax(3, n_gh=6), prior_cov=2.0)


@pytest.mark.parametrize("kw, err, msg", [
    (dict(batch_size=0), ValueError, "batch_size"),
    (dict(batch_size=2.5), ValueError, "batch_size"),
    (dict(schedule="fast"), ValueError, "schedule"),
    (dict(schedule=1.5), ValueError, "schedule"),
    (dict(max_epochs=-1), ValueError, "max_epochs"),
    (dict(eval_every=0), ValueError, "eval_every"),
    (dict(chunk=0), ValueError, "chunk"),
    (dict(m0=np.zeros(5)), ValueError, "m0"),
    (dict(V0=-np.eye(6)), ValueError, "V0"),
    (dict(V0=np.eye(5)), ValueError, "V0"),
    (dict(max_iter=-1), ValueError, "max_iter"),
])
def test_bad_options(kw, err, msg):
    with pytest.raises(err, match=msg): svi_multi(GLM3, **kw)


def test_bad_models():
    with pytest.raises(ValueError, match="rows x_i"): vgi_lit.fit(MultiGP(X[:9], y[:9], Softmax(3), RBF()), "svi")
    with pytest.raises(TypeError, match="MultiLGM"): svi_multi("model")
    with pytest.raises(ValueError, match="learns no hyperparameters"): vgi_lit.fit(GLM3, "svi", learn=True)


def test_full_batch_at_rho_one_is_fpi():
    f = fpi_multi(GLM3, max_iter=4, anderson=0, tol=0.0, tol_rel=0.0)
    assert len(f.history) == 5 and all(f.history[k]['rho_taken'] == 1.0 for k in range(1, 5))
    s = svi_multi(GLM3, batch_size=60, schedule=1.0, max_iter=4, tol=0.0)
    assert s.n_iter == 4 and np.allclose(s.history.vlb[:5], f.history.vlb[:5], rtol=1e-12, atol=0)
    assert np.allclose(s.m, f.m, rtol=0, atol=1e-11) and np.allclose(s.V, f.V, rtol=0, atol=1e-11)


def test_minibatches_reach_the_fpi_optimum_glm():
    opt = fpi_multi(GLM3, tol=1e-9)
    p = svi_multi(GLM3, batch_size=15, seed=1)
    assert p.history.stop is p.stop and p.stop in (Stop.REL_TOL, Stop.BUDGET)
    assert -1e-9 <= (opt.vlb - p.vlb) / abs(opt.vlb) < 1e-3, (opt.vlb, p.vlb)
    assert np.isclose(multi_vlb_stream(GLM3, p.m, p.cov)[0], p.vlb, rtol=1e-12)


def test_minibatches_reach_the_fpi_optimum_sparse_gp():
    mod = MultiSparseGP(X, y, Softmax(3, n_gh=6), RBF(2.0, 1.0), X[::6])
    opt = fpi_multi(mod, tol=1e-9)
    p = vgi_lit.fit(mod, "svi", batch_size=20, seed=2)
    assert -1e-9 <= (opt.vlb - p.vlb) / abs(opt.vlb) < 1e-3, (opt.vlb, p.vlb)
    mo, Vo = opt.predict(X[:5]); ms, Vs = p.predict(X[:5])
    assert np.abs(mo - ms).max() < 0.05 and np.abs(Vo - Vs).max() < 0.05


def test_same_seed_same_run():
    a, b = svi_multi(GLM3, batch_size=20, seed=4, max_epochs=3), svi_multi(GLM3, batch_size=20, seed=4, max_epochs=3)
    assert a.vlb == b.vlb and np.array_equal(a.m, b.m)


def test_indefinite_curvature_is_clipped():
    lik = Softmax(3, n_gh=6)
    class Flipped:
        "Softmax with the sign of ∂E/∂V flipped: Γ_i negative definite, so Σ⁻¹ + Λ_w' is indefinite at ρ = 1."
        C = 3
        def check_y(self, y): return lik.check_y(y)
        def expected_log_lik(self, y, m, V):
            E, dm, dV = lik.expected_log_lik(y, m, V); return E, dm, -dV + np.eye(3)
    bad = MultiGLM(X, y, Flipped(), prior_cov=2.0)
    cov = PrecisionMultiCov(bad, np.zeros((6, 6)))
    m1, c1, events, _ = multi_svi_step(bad, bad.mu, cov, np.arange(10), 1.0)
    assert [e.kind for e in events] == [EventKind.CLIPPED_GAMMA] and events[0].count == 10
    assert np.all(np.isfinite(m1)) and np.all(np.linalg.eigvalsh(c1.dense()) > 0)


def test_minibatch_step_equals_the_einsum_forms():
    "One step on a minibatch of a sparse GP against (N) with the site blocks and the curvature sum written as einsums over the batch."
    mod = MultiSparseGP(X, y, Softmax(3, n_gh=6), RBF(2.0, 1.0), X[::5]); C, p, d = mod.C, mod.p, mod.d
    r = np.random.default_rng(8); A = r.normal(size=(d, d)); Lam_w = A @ A.T / d
    m, idx, rho = 0.3 * r.normal(size=d), np.sort(r.choice(mod.n, 17, replace=False)), 0.4
    cov = PrecisionMultiCov(mod, Lam_w)
    Xb, s = mod.X[idx], mod.n / len(idx)
    VB = np.einsum('ip,cpdq,iq->icd', Xb, cov.dense().reshape(C, p, C, p), Xb) + np.stack([np.diag(c) for c in mod.c[idx]])
    _, dm, dV = mod.likelihood.expected_log_lik(mod.y[idx], mod.a[idx] + Xb @ m.reshape(C, p).T, VB)
    g = s * np.einsum('ip,ic->cp', Xb, dm).ravel() - mod.prior_solve(m - mod.mu)
    P = mod.prior_solve(np.eye(d)) + (1 - rho) * Lam_w + rho * s * np.einsum('ip,icd,iq->cpdq', Xb, -2 * dV, Xb).reshape(d, d)
    m1, c1, events, gn = multi_svi_step(mod, m, cov, idx, rho)
    assert events == [] and np.isclose(gn, np.abs(g).max(), rtol=1e-12)
    assert np.allclose(c1.dense(), np.linalg.inv(P), rtol=1e-10, atol=1e-12) and np.allclose(m1, m + rho * np.linalg.solve(P, g), rtol=1e-10, atol=1e-12)


def test_saved_svi_posterior_predicts_the_same(tmp_path):
    p = svi_multi(GLM3, batch_size=30, max_epochs=2)
    q = vio.load(vio.save(p, tmp_path / "svi.npz"))
    a, b = p.predict(X[:4]), q.predict(X[:4])
    assert np.allclose(a[0], b[0], atol=1e-12) and np.allclose(a[1], b[1], atol=1e-12)


def test_a_run_that_spends_its_epochs_names_the_option():
    p = svi_multi(GLM3, batch_size=15, max_epochs=1, seed=0)
    assert p.stop is Stop.BUDGET and "raise max_epochs" in p.message and "max_epochs=1" in p.message, p.message
