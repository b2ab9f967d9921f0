"GRAD's polish from an FP state: V from the stable site form, GRAD in the coordinates of the state, a bounded budget."
import numpy as np
import pytest
import vgi_lit.methods.fixed_point as fp
from vgi_lit.covariance import SiteCov
from vgi_lit.kernels import RBF
from vgi_lit.likelihoods import StudentT
from vgi_lit.models import GP
from vgi_lit.inference import Stop, EventKind, History, Record, fit
from vgi_lit.methods.fixed_point import _polish, site_dense_V, POLISH_ITER
from vgi_lit.methods.grad import fit_grad


def _noiseless_studentt_gp():
    "A Student-t GP at the values learning reached on noiseless linear targets (generated data: y = x₁ − x₂, 80 rows)."
    X = np.random.default_rng(0).standard_normal((80, 3)); y = X[:, 0] - X[:, 1]
    return GP(X, y - y.mean(), StudentT(df=3813.9, scale2=3.775e-11), RBF(20778.2, 2827.2))


def _fake_hist():
    hist = History(); hist.append(Record(0, 0.0, -1.0, 1.0, "fp", [], {}))
    return hist


def test_polish_starts_from_the_stable_form_where_the_cancelling_one_is_indefinite(monkeypatch):
    """At site precisions ~ 1/scale2 the cancelling form Σ − ΣSB⁻¹SΣ (`dense()`) is indefinite in floating point; the
    polish takes V from `site_dense_V` (positive definite) and runs GRAD (here from a state far from the optimum, with a
    budget of 20 iterations: the start is what is checked)."""
    monkeypatch.setattr(fp, "POLISH_ITER", 20)
    model = _noiseless_studentt_gp()
    cov = SiteCov(model, np.full(model.n, 1e12))
    assert np.linalg.eigvalsh(cov.dense()).min() < 0                # the premise: the cancelling form is indefinite
    assert np.linalg.eigvalsh(site_dense_V(model, cov)).min() > 0   # the stable form is not
    hist = _fake_hist()
    m2, cov2, stop, msg = _polish(model, np.zeros(model.n), cov, np.zeros(model.n), hist, Stop.STALLED, "stalled", stalled=True)
    assert not any("GRAD cannot start" in e.detail for e in hist[-1].events) and "not positive definite" not in msg
    assert any(e.kind is EventKind.HANDOVER and "GRAD" in e.detail for e in hist[-1].events)


def test_polish_keeps_the_fp_state_when_v_is_not_positive_definite_as_a_matrix(monkeypatch):
    "Where V as a matrix is not positive definite even so, the FP state is returned and a HANDOVER event says why."
    model = _noiseless_studentt_gp()
    cov = SiteCov(model, np.full(model.n, 1e12))
    monkeypatch.setattr(fp, "site_dense_V", lambda model, cov: cov.dense())   # the indefinite form
    hist, m = _fake_hist(), np.zeros(model.n)
    m2, cov2, stop, msg = _polish(model, m, cov, np.zeros(model.n), hist, Stop.STALLED, "stalled", stalled=True)
    assert m2 is m and cov2 is cov and stop is Stop.STALLED
    assert "not positive definite" in msg
    assert any(e.kind is EventKind.HANDOVER and "GRAD cannot start" in e.detail for e in hist[-1].events)


def test_a_bad_start_is_a_start_error_and_only_it_keeps_the_fp_state(monkeypatch):
    """`start_state` rejects a bad start with a `StartError` (a ValueError); the polish keeps the FP state on that error
    alone: any other ValueError of GRAD's run is raised, even one whose message names V0."""
    from vgi_lit.inference import StartError, start_state
    model = _noiseless_studentt_gp()
    for bad in (-1.0, np.full(model.n, -1.0), -np.eye(model.n), np.full((2, 2), 1.0)):
        with pytest.raises(StartError, match="V0"): start_state(model, V0=bad)
    assert issubclass(StartError, ValueError)
    cov = SiteCov(model, np.full(model.n, 1.0))
    def grad_fails(*a, **k): raise ValueError("GRAD's own error, naming V0")
    monkeypatch.setattr(fp, "fit_grad", grad_fails)
    with pytest.raises(ValueError, match="GRAD's own error"):
        _polish(model, np.zeros(model.n), cov, np.zeros(model.n), _fake_hist(), Stop.STALLED, "stalled", stalled=True)
    def start_fails(*a, **k): raise StartError("V0 is not positive definite")
    monkeypatch.setattr(fp, "fit_grad", start_fails)
    hist, m = _fake_hist(), np.zeros(model.n)
    m2, cov2, stop, msg = _polish(model, m, cov, np.zeros(model.n), hist, Stop.STALLED, "stalled", stalled=True)
    assert m2 is m and cov2 is cov and stop is Stop.STALLED and "not positive definite" in msg


def _studentt_stall_gp():
    "A Student-t GP on noiseless targets (generated: y = x₁ − x₂, 80 rows, standardised) at which FPi stalls near the optimum."
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 2)); y = X[:, 0] - X[:, 1]
    X = (X - X.mean(0)) / X.std(0); y = (y - y.mean()) / y.std()
    return GP(X, y, StudentT(187.0, 1e-9), RBF(variance=217.0, lengthscale=2.0))


def test_the_polish_of_a_stalled_run_takes_a_few_iterations_in_the_coordinates_of_the_state(monkeypatch):
    """FPi stalls on this GP (site precisions ~ 1e9) and hands over to GRAD. In the whitened coordinates GRAD took 20000
    iterations (40 s) without improving the VLB; in the coordinates of the FP state it takes a handful. With tol_rel=0 the
    run goes on to the stall on every BLAS kernel (with the default tol_rel it ends REL_TOL first on some, e.g. SkylakeX)."""
    runs = []
    real = fp.fit_grad
    def spy(model, **opts):
        g = real(model, **opts); runs.append((opts, g)); return g
    monkeypatch.setattr(fp, "fit_grad", spy)
    model = _studentt_stall_gp()
    post = fit(model, "fpi", tol_rel=0.0)
    assert len(runs) == 1 and runs[0][0]["recentre"] is True and runs[0][0]["max_iter"] == POLISH_ITER
    g = runs[0][1]
    assert g.n_iter <= 50 and g.info["recentre"], g.n_iter
    # the same state polished in the whitened coordinates, for comparison: no better within the same budget
    opts = runs[0][0]
    w = real(model, m0=opts["m0"], V0=opts["V0"], max_iter=200)
    assert post.vlb >= w.vlb - 1e-9 * abs(w.vlb)


def test_fit_grad_recentre_arguments():
    model = _studentt_stall_gp()
    with pytest.raises(ValueError, match="recentre=True and whiten=True"):
        fit_grad(model, recentre=True, whiten=True)
    with pytest.raises(ValueError, match="recentre must be True or False"):
        fit_grad(model, recentre="yes")
    with pytest.raises(ValueError, match="V0"):
        fit_grad(model, m0=0.0, V0=-np.eye(model.d), recentre=True)
    g = fit_grad(model, m0=0.0, V0=0.5, recentre=True, max_iter=5)
    assert g.info["recentre"] and not g.info["whiten"] and np.isfinite(g.vlb)
    assert fit_grad(model, max_iter=2).info["recentre"] is False


def test_the_polish_falls_back_to_grads_own_coordinates_where_the_state_gives_none(monkeypatch):
    "Where `recentred` finds no positive-definite prior in the state's coordinates, the polish runs GRAD as before, no error."
    import vgi_lit.methods.grad as grad_module
    def no_coordinates(model, m_c, L_c): raise ValueError("prior covariance in the coordinates of the current q is not positive definite")
    monkeypatch.setattr(grad_module, "recentred", no_coordinates)
    calls = []
    real = fp.fit_grad
    def spy(model, **opts):
        calls.append(dict(opts)); return real(model, **opts)
    monkeypatch.setattr(fp, "fit_grad", spy)
    post = fit(_studentt_stall_gp(), "fpi", tol_rel=0.0)
    assert [c.get("recentre") for c in calls] == [True, None] and np.isfinite(post.vlb)


def test_the_polish_factorises_v_of_the_state_once(monkeypatch):
    """V of the FP state (n × n) is factorised once on the way into GRAD: by the start's check in `fit_grad`, whose factor
    is the recentring's L0 (before, three times: the polish's own check, the start's check and the recentring)."""
    import vgi_lit.inference as inf
    monkeypatch.setattr(fp, "POLISH_ITER", 3)
    model = _noiseless_studentt_gp()
    cov = SiteCov(model, np.full(model.n, 1e12))
    V0 = site_dense_V(model, cov)
    seen = []
    for mod in (inf, fp):
        def counted(A, *args, _real=mod.cholesky, **kw):
            if np.shape(A) == V0.shape and np.array_equal(A, V0): seen.append(1)
            return _real(A, *args, **kw)
        monkeypatch.setattr(mod, "cholesky", counted)
    hist = _fake_hist()
    _polish(model, np.zeros(model.n), cov, np.zeros(model.n), hist, Stop.STALLED, "stalled", stalled=True)
    assert any(e.kind is EventKind.HANDOVER and "GRAD" in e.detail for e in hist[-1].events)
    assert len(seen) == 1, len(seen)


@pytest.mark.parametrize("opts", [dict(recentre=True), dict(whiten=False)])
def test_grad_from_a_given_v0_factorises_it_once(opts, monkeypatch):
    """`fit_grad` with a d × d V0 factorises it once, in the start's check (`start_state(factor=True)`), and hands that
    factor on: to the recentring's L0, or to GRAD's start in its own coordinates (before, a second `np.linalg.cholesky`
    of V0 there, and of the identity in the recentred coordinates)."""
    import vgi_lit.inference as inf
    model = _studentt_stall_gp()
    V0 = site_dense_V(model, SiteCov(model, np.full(model.n, 2.0)))
    seen = []
    def count(real):
        def counted(A, *args, **kw):
            A_ = np.asarray(A)
            if A_.shape == V0.shape and (np.array_equal(A_, V0) or np.array_equal(A_, np.eye(model.n))): seen.append(1)
            return real(A, *args, **kw)
        return counted
    monkeypatch.setattr(inf, "cholesky", count(inf.cholesky))
    monkeypatch.setattr(np.linalg, "cholesky", count(np.linalg.cholesky))
    g = fit_grad(model, m0=np.zeros(model.n), V0=V0, max_iter=3, **opts)
    assert np.isfinite(g.vlb) and len(seen) == 1, len(seen)
