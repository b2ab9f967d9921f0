"Tests of vgi_lit.methods.fixed_point: FP vs GRAD, T(V) against dense brute force, stationarity, bad input."
from pathlib import Path
import numpy as np
import pytest
from vgi_lit import likelihoods, models, kernels, datasets, linalg
from vgi_lit.inference import fit, EventKind, Stop
from vgi_lit.covariance import DenseCov, SiteCov
from vgi_lit.vlb import vlb as core_vlb
from vgi_lit.methods import fixed_point as fp

DATA = datasets.shared_data_dir(Path(__file__))


def _ion(n=60, D=6):
    ds = datasets.load_ionosphere(data_dir=DATA)
    X = datasets.zscore(ds.X).X[:n]
    X = X[:, np.argsort(-X.std(0))[:D]]
    return X, ds.y[:n]


def _housing(n=60):
    ds = datasets.load_housing(data_dir=DATA)
    z = datasets.zscore(ds.X[:n]).X
    y = (ds.y[:n] - ds.y[:n].mean()) / ds.y[:n].std()
    return z, y


def _models():
    "Small models of every kind on real inputs (Poisson counts simulated, seeded)."
    Xi, yi = _ion()
    Xh, yh = _housing()
    cnt = datasets.simulated_counts_on(Xh, seed=0).y
    k = lambda X, v=1.0: kernels.RBF(variance=v, lengthscale=np.sqrt(X.shape[1]))
    return {
        "glm-logistic": models.GLM(Xi, yi, likelihoods.Logistic(), prior_cov=1.0),
        "glm-poisson": models.GLM(Xh, cnt, likelihoods.Poisson(), prior_cov=0.1),
        "glm-laplace": models.GLM(Xh, yh, likelihoods.Laplace(0.5), prior_cov=0.1),
        "gp-logistic": models.GP(Xi, yi, likelihoods.Logistic(), k(Xi, 2.0)),
        "gp-probit": models.GP(Xi, yi, likelihoods.Probit(), k(Xi)),
        "gp-poisson": models.GP(Xh, cnt, likelihoods.Poisson(), k(Xh)),
        "gp-laplace": models.GP(Xh, yh, likelihoods.Laplace(0.5), k(Xh)),
        "sgp-laplace": models.SparseGP(Xh, yh, likelihoods.Laplace(0.5), k(Xh), Xh[::4]),
        "gp-studentt": models.GP(Xh, yh, likelihoods.StudentT(3.0, 1.0 / 3.0), k(Xh)),
    }


MODELS = _models()


@pytest.mark.parametrize("name", list(MODELS))
def test_fp_and_grad_reach_the_same_optimum(name):
    model = MODELS[name]
    g = fit(model, method="grad", max_iter=5000)
    runs = {m: fit(model, method=m, tol=1e-8, tol_rel=0.0, max_iter=3000) for m in ("fpi", "fpb")}
    for meth, r in runs.items():
        assert np.isfinite(r.vlb) and r.converged, (name, meth, r.message)
        # FP is never worse than GRAD; equal to 1e-6 relative where GRAD reached its own tolerance
        # (Student-t: thanks to the GRAD polish after the clipped iteration, see the next test).
        rtol = 1e-6
        assert r.vlb >= g.vlb - rtol * abs(g.vlb), (name, meth, r.vlb, g.vlb)
        if g.converged:
            assert abs(r.vlb - g.vlb) <= rtol * abs(g.vlb), (name, meth, r.vlb, g.vlb)
            np.testing.assert_allclose(r.m, g.m, atol=2e-3 * max(1.0, np.abs(g.m).max()))
        # the reported VLB is the core's VLB at the returned (m, V)
        assert abs(core_vlb(model, r.m, r.cov) - r.vlb) <= 1e-12 * abs(r.vlb)


@pytest.mark.parametrize("name", ["glm-logistic", "gp-poisson", "sgp-laplace", "gp-studentt"])
@pytest.mark.parametrize("seed", [0, 1])
def test_T_structured_equals_dense_brute_force(name, seed):
    model = MODELS[name]
    rng = np.random.default_rng(seed)
    d = model.d
    B = rng.standard_normal((d, d)) / np.sqrt(d)
    V = 0.3 * B @ B.T + 0.2 * np.eye(d)
    m = 0.3 * rng.standard_normal(d)
    new, info = fp.fp_operator(model, m, DenseCov(np.linalg.cholesky(V)))
    # brute force with explicit dense matrices
    Sigma = model.prior.dense()
    Hd = np.eye(model.n) if model.H is None else np.asarray(model.H)
    v_site = model.c + np.einsum("ij,jk,ik->i", Hd, V, Hd)
    _, _, dE_dv = model.likelihood.expected_log_lik(model.y, model.a + Hd @ m, v_site)
    gam = np.maximum(-2 * dE_dv, 0.0)
    T_dense = np.linalg.inv(np.linalg.inv(Sigma) + Hd.T @ (gam[:, None] * Hd))
    np.testing.assert_allclose(new.dense(), T_dense, rtol=1e-6, atol=1e-8 * np.abs(T_dense).max())
    np.testing.assert_allclose(new.site_var(model), model.c + np.einsum("ij,jk,ik->i", Hd, T_dense, Hd), rtol=1e-6)
    assert info["n_clipped"] == int(np.sum(-2 * dE_dv < 0))


@pytest.mark.parametrize("name", ["glm-logistic", "gp-logistic", "sgp-laplace"])
def test_fixed_point_has_zero_gradient(name):
    model = MODELS[name]
    r = fit(model, method="fpi", tol=1e-9, tol_rel=0.0, max_iter=3000)
    assert r.converged
    Vh = r.cov.dense(); L = np.linalg.cholesky(Vh)
    rng = np.random.default_rng(0)
    f = lambda m, V: core_vlb(model, m, DenseCov(np.linalg.cholesky(V)))
    h = 1e-5
    for _ in range(3):
        dm = rng.standard_normal(model.d)
        B = rng.standard_normal((model.d, model.d)); D = L @ ((B + B.T) / 2) @ L.T
        assert abs(f(r.m + h * dm, Vh) - f(r.m - h * dm, Vh)) / (2 * h) < 1e-6
        assert abs(f(r.m, Vh + h * D) - f(r.m, Vh - h * D)) / (2 * h) < 1e-6
    # and T(V) = V there
    T, _ = fp.fp_operator(model, r.m, r.cov)
    np.testing.assert_allclose(T.lam, r.cov.lam, rtol=1e-6, atol=1e-9)


def test_grad_V_matches_finite_differences():
    model = MODELS["glm-logistic"]
    rng = np.random.default_rng(1)
    d = model.d
    B = rng.standard_normal((d, d)) / np.sqrt(d); V = 0.2 * B @ B.T + 0.1 * np.eye(d)
    m = 0.2 * rng.standard_normal(d)
    cov = DenseCov(np.linalg.cholesky(V))
    _, _, gam = fp.vlb_grad(model, m, fp.AtCov(model, cov))
    G = fp.grad_V(model, cov, gam)
    f = lambda V: core_vlb(model, m, DenseCov(np.linalg.cholesky(V)))
    for i, j in [(0, 0), (1, 2), (3, 5)]:
        D = np.zeros((d, d)); D[i, j] = D[j, i] = 1.0 if i == j else 0.5
        fd = (f(V + 1e-5 * D) - f(V - 1e-5 * D)) / 2e-5
        assert abs(fd - G[i, j]) < 1e-6 * max(1, abs(G[i, j]))
    # structured form for a SiteCov
    sc = SiteCov(model, np.full(model.n, 0.3))
    _, _, gam = fp.vlb_grad(model, m, fp.AtCov(model, sc))
    Hd = np.asarray(model.H)
    np.testing.assert_allclose(fp.grad_V(model, sc, gam), 0.5 * Hd.T @ ((0.3 - gam)[:, None] * Hd), rtol=1e-10, atol=1e-12)


def test_history_records_every_step_and_events():
    r = fit(MODELS["gp-studentt"], method="fpi", clip=True)      # the clipping heuristic of Sheth & Khardon (2016)
    h = r.history
    assert [rec["iter"] for rec in h] == list(range(len(h)))
    assert np.all(np.diff(h.time) >= 0)
    assert all(all(k in rec for k in ("iter", "time", "vlb", "grad_norm", "events", "step")) for rec in h)
    fp_recs = [rec for rec in h if rec.step != "grad_polish"]
    assert any(rec.has(EventKind.CLIPPED_GAMMA) for rec in fp_recs)          # Student-t has γ < 0 sites
    assert all(e.count > 0 for rec in fp_recs for e in rec.events if e.kind is EventKind.CLIPPED_GAMMA)
    assert any(rec.has(EventKind.HANDOVER) for rec in fp_recs)              # clipping active at the limit: GRAD polish
    rb = fit(MODELS["gp-logistic"], method="fpb")
    steps = {rec["step"] for rec in rb.history}
    assert {"newton_m", "fp_V"} <= steps


def test_fpi_counts_one_factorisation_per_iteration(monkeypatch):
    "Counted from outside: `linalg.cholesky` looks LAPACK potrf up in its module at call time."
    model = MODELS["gp-logistic"]
    n = [0]
    potrf = linalg.dpotrf
    def counted(*a, **k):
        n[0] += 1; return potrf(*a, **k)
    monkeypatch.setattr(linalg, "dpotrf", counted)
    r = fit(model, method="fpi", tol=1e-12, tol_rel=0.0, max_iter=10, polish=False, newton=False)   # the plain steps
    assert r.stop is Stop.MAX_ITER and len(r.history) == 11
    assert n[0] == 10, n[0]
    n[0] = 0                                    # the default rule: one more per Newton step that was tried and refused
    r = fit(model, method="fpi", tol=1e-12, tol_rel=0.0, max_iter=10, polish=False)
    refused = sum(1 for rec in r.history if rec.get("newton") is False)
    assert n[0] == r.n_iter + refused, (n[0], r.n_iter, refused)


def test_two_cycle_detection():
    a, b = np.array([1.0, 2.0]), np.array([3.0, 0.5])
    assert fp.detect_two_cycle(a, b, a.copy())
    assert not fp.detect_two_cycle(a, a * 0.9, a * 0.81)
    assert not fp.detect_two_cycle(a, a, a)


def test_bad_input():
    model = MODELS["glm-logistic"]
    with pytest.raises(ValueError, match="V0"): fit(model, method="fpi", V0=-1.0)
    with pytest.raises(ValueError, match="V0"): fit(model, method="fpb", V0=np.ones((2, 2)))
    with pytest.raises(ValueError, match="m0"): fit(model, method="fpi", m0=np.zeros(model.d + 1))
    with pytest.raises(ValueError, match="m0"): fit(model, method="fpb", m0=np.full(model.d, np.nan))
    with pytest.raises(ValueError, match="tol"): fit(model, method="fpi", tol=-1.0)
    with pytest.raises(ValueError, match="tol_rel"): fit(model, method="fpb", tol_rel=float("nan"))
    with pytest.raises(ValueError, match="max_seconds"): fit(model, method="fpi", max_seconds=-1.0)
    with pytest.raises(ValueError, match="max_iter"): fit(model, method="fpb", max_iter=2.5)
    with pytest.raises(ValueError, match="clip"): fit(model, method="fpi", clip="yes")
    with pytest.raises(ValueError, match="clip"): fit(model, method="fpb", clip=1)
    t = MODELS["gp-studentt"]
    lam = -np.ones(t.n); lam[::2] = 1.0                                   # signed precisions far outside the PD set
    with pytest.raises(ValueError, match="positive definite"): fp.site_cov(t, 50 * lam)


def test_bench_command_and_demo(tmp_path, capsys):
    from vgi_lit.bench import fixed_point as bench_fixed_point
    from vgi_lit.experiments import fp_experiments
    assert bench_fixed_point.run(["--problems", "glm-laplace-housing", "--data-dir", str(DATA)]) == 0
    out = capsys.readouterr().out
    assert "glm-laplace-housing" in out and "FPI" in out and "GRAD" in out and "Cholesky" in out
    runs = fp_experiments.demo_compare("glm-laplace-housing", data_dir=DATA, out=str(tmp_path / "f.png"))
    assert (tmp_path / "f.png").stat().st_size > 1000
    assert abs(runs["fpi"].vlb - runs["grad"].vlb) <= 1e-6 * abs(runs["grad"].vlb)
    with pytest.raises(ValueError, match="unknown problem"):
        fp_experiments.make_problem("gp-nonsense-housing", data_dir=DATA)


def test_clipping_alone_stops_short_and_polish_closes_the_gap():
    "000 §4's clipped iteration is not stationary when γ < 0 at its limit; polish=True finishes with GRAD."
    model = MODELS["gp-studentt"]
    g = fit(model, method="grad")
    plain = fit(model, method="fpi", polish=False, clip=True)
    pol = fit(model, method="fpi", clip=True)
    assert plain.history[-1]["grad_V"] > 1e-3                          # λ_i = 0 ≠ γ_i < 0 at some site
    assert (g.vlb - plain.vlb) > 1e-6 * abs(g.vlb)                      # measurably below the optimum
    assert pol.vlb >= g.vlb - 1e-9 * abs(g.vlb)
    assert any(rec["step"] == "grad_polish" for rec in pol.history)
    assert not any(rec["step"] == "grad_polish" for rec in fit(MODELS["gp-logistic"], method="fpi").history)



def test_degenerate_sizes():
    "A GLM without rows (nothing to fit: its posterior is the prior) or without columns is refused by name at construction."
    from vgi_lit import models, likelihoods
    with pytest.raises(ValueError, match="X has no rows"):
        models.GLM(np.zeros((0, 3)), np.zeros(0), likelihoods.Logistic(), prior_cov=1.0)
    with pytest.raises(ValueError, match="no columns"):
        models.GLM(np.zeros((5, 0)), np.ones(5), likelihoods.Logistic())
    r = fit(models.GLM(np.ones((1, 1)), np.ones(1), likelihoods.Logistic(), prior_cov=1.0), method="fpi")   # the smallest legal GLM
    assert r.converged and np.isfinite(r.vlb) and r.vlb < 0


@pytest.mark.parametrize("meth", ["fpi", "fpb"])
def test_every_stop_and_the_callback(meth):
    "Budgets and the callback give their own Stop; a run never claims convergence it did not reach."
    model = MODELS["gp-logistic"]
    seen = []
    r = fit(model, method=meth, callback=lambda rec: seen.append(rec.iter) or rec.iter >= 3)
    assert r.stop is Stop.CALLBACK and not r.converged and seen == [0, 1, 2, 3] and len(r.history) == 4
    assert fit(model, method=meth, max_iter=1).stop is Stop.MAX_ITER
    assert fit(model, method=meth, max_seconds=1e-9).stop is Stop.MAX_SECONDS
    ok = fit(model, method=meth)
    assert ok.stop in (Stop.GRAD_TOL, Stop.REL_TOL) and ok.converged
    assert fit(model, method=meth, tol=0.0).stop is Stop.REL_TOL


def test_start_options():
    "V0 as a scalar, a diagonal or a matrix describing the same v0·I gives the same run; m0 is used."
    model = MODELS["glm-poisson"]
    base = fit(model, method="fpi", polish=False)
    assert abs(base.history[0].vlb - fit(model, method="fpi", V0=0.1, max_iter=0).history[0].vlb) == 0.0   # 000's v0 = 0.1 for counts
    for V0 in (0.1, np.full(model.d, 0.1), 0.1 * np.eye(model.d)):
        r = fit(model, method="fpi", V0=V0, polish=False)
        assert r.n_iter == base.n_iter and abs(r.vlb - base.vlb) <= 1e-12 * abs(base.vlb)
    r = fit(model, method="fpi", m0=base.m, V0=base.V)
    assert r.converged and r.n_iter <= 2


@pytest.mark.parametrize("meth", ["fpi", "fpb"])
def test_lam0_warm_start_stops_at_once(meth):
    """Warm start from the site precisions of the previous optimum (m0 = post.m, lam0 = post.cov.lam): on the same
    model FPi stops after one iteration and FPb after two outer iterations, at the same VLB; with the lengthscale
    x 1.05 the warm start takes fewer iterations than the cold one and reaches the same VLB."""
    Xh, yh = _housing(60)
    mk = lambda s: models.SparseGP(Xh, yh, likelihoods.Laplace(0.5), kernels.RBF(1.0, np.sqrt(13) * s), Xh[::4])
    run = getattr(fp, meth)
    p = run(mk(1.0), tol=1e-9)
    assert isinstance(p.cov, SiteCov) and p.converged
    q = run(mk(1.0), m0=p.m, lam0=p.cov.lam, tol=1e-9)
    assert q.converged and isinstance(q.cov, SiteCov)
    outer = max(r.get("outer", 0) for r in q.history) if meth == "fpb" else q.n_iter
    assert outer <= 2 and abs(q.vlb - p.vlb) <= 1e-8 * abs(p.vlb)
    assert q.history[0].vlb == pytest.approx(p.vlb, rel=1e-9)                 # the start is the previous optimum
    cold, warm = run(mk(1.05), tol=1e-9), run(mk(1.05), m0=p.m, lam0=p.cov.lam, tol=1e-9)
    assert warm.n_iter < cold.n_iter and abs(warm.vlb - cold.vlb) <= 1e-8 * abs(cold.vlb)


def test_lam0_bad_input():
    mod = _models()["glm-logistic"]
    with pytest.raises(ValueError, match="lam0 must be a vector"): fp.fpi(mod, lam0=np.ones(mod.n - 1))
    with pytest.raises(ValueError, match="lam0 contains NaN"): fp.fpi(mod, lam0=np.full(mod.n, np.nan))
    with pytest.raises(ValueError, match="V0 or lam0"): fp.fpb(mod, V0=1.0, lam0=np.ones(mod.n))
    with pytest.raises(ValueError, match="positive-definite"): fp.fpi(mod, lam0=np.full(mod.n, -1e3))


def _sparse_cases():
    "(dense model, same model with CSR or blocked sites) pairs on real data: a1a rows (logistic, Poisson), housing sparse GPs."
    import scipy.sparse as sps
    X, y, _ = datasets.read_file("a1a", DATA)                         # the training file only (no 31k-row test file)
    X, y = X[:150], y[:150]
    Xh, yh = _housing(120)
    k = kernels.RBF(1.0, np.sqrt(13))
    return {
        "glm-logistic-csr": (models.GLM(X, y, likelihoods.Logistic()), models.GLM(sps.csr_matrix(X), y, likelihoods.Logistic())),
        "glm-poisson-csc": (models.GLM(X, 1.0 + (y > 0), likelihoods.Poisson(), prior_cov=0.5),
                            models.GLM(sps.csc_matrix(X), 1.0 + (y > 0), likelihoods.Poisson(), prior_cov=0.5)),
        "sgp-laplace-blocked": (models.SparseGP(Xh, yh, likelihoods.Laplace(0.5), k, Xh[::8]),
                                models.SparseGP(Xh, yh, likelihoods.Laplace(0.5), k, Xh[::8], block_size=37)),
        "sgp-studentt-blocked": (models.SparseGP(Xh, yh, likelihoods.StudentT(3.0, 1 / 3), k, Xh[::8]),
                                 models.SparseGP(Xh, yh, likelihoods.StudentT(3.0, 1 / 3), k, Xh[::8], block_size=50)),
    }


@pytest.mark.parametrize("meth", ["fpi", "fpb"])
def test_csr_and_blocked_sites_equal_dense(meth):
    "FPi and FPb on CSR (a1a rows) and blocked (sparse GP) sites reach the dense path's VLB and mean to 1e-10 relative."
    for name, (dense, other) in _sparse_cases().items():
        assert other.sites.kind in ("csr", "blocked")
        pd, po = getattr(fp, meth)(dense), getattr(fp, meth)(other)
        assert pd.converged and po.converged, name
        assert abs(pd.vlb - po.vlb) <= 1e-10 * abs(pd.vlb), (name, pd.vlb, po.vlb)
        assert np.max(np.abs(pd.m - po.m)) <= 1e-10 * np.max(np.abs(pd.m)), name
        assert core_vlb(other, po.m, po.cov) == pytest.approx(po.vlb, rel=1e-10)
        if other.sites.kind == "csr":                                   # predictions from sparse and dense new rows
            Xt = datasets.read_file("a1a", DATA)[0][150:200]
            import scipy.sparse as sps
            md, vd = pd.predict(Xt)
            mo, vo = other.predict_latent(po.m, po.cov, sps.csr_matrix(Xt))
            assert np.allclose(mo, md, rtol=1e-9, atol=1e-12) and np.allclose(vo, vd, rtol=1e-9, atol=1e-12)


def test_fpi_blocked_one_pass_per_iteration():
    "FPi on blocked sites makes one fused pass over the sites per iteration (at most 2 on average with the start and the end)."
    Xh, yh = _housing(200)
    mod = models.SparseGP(Xh, yh, likelihoods.Laplace(0.5), kernels.RBF(1.0, np.sqrt(13)), Xh[::10], block_size=50)
    S, fn, calls = mod.sites, mod.sites.row_fn, [0]
    def counting(sel): calls[0] += 1; return fn(sel)
    S.row_fn = counting
    p = fp.fpi(mod)
    passes = calls[0] / 4                                               # 4 blocks of 50 rows
    assert p.converged and passes <= 2 * p.n_iter, (passes, p.n_iter)
    assert passes <= p.n_iter + 6                                       # start scale, start, line search, exact end


def test_fused_pass_with_per_site_likelihood_arrays():
    "A Poisson likelihood with one exposure per site (not evaluable block by block) on blocked sites: the two-pass route equals dense."
    from vgi_lit.sites import BlockedSites
    Xh, _ = _housing(90)
    rng = np.random.default_rng(4)
    expo = rng.uniform(0.5, 2.0, size=90); y = rng.poisson(expo * np.exp(0.3 * Xh[:, 0]))
    dense = models.GLM(Xh, y, likelihoods.Poisson(exposure=expo), prior_cov=0.1)
    blocked = models.LGM(y, likelihoods.Poisson(exposure=expo), 0.0, dense.prior, 0.0, 0.0,
                         BlockedSites(90, Xh.shape[1], lambda sel: Xh[sel], block_size=25))
    pd, pb = fp.fpi(dense), fp.fpi(blocked)
    assert pd.converged and pb.converged
    assert abs(pd.vlb - pb.vlb) <= 1e-10 * abs(pd.vlb) and np.max(np.abs(pd.m - pb.m)) <= 1e-10 * np.max(np.abs(pd.m))


@pytest.mark.parametrize("meth", ["fpi", "fpb"])
def test_tol_rel_zero_turns_the_relative_test_off(meth):
    "tol_rel=0 turns the relative-change stop off: with tol=0 the run ends by its budget, not by REL_TOL when the VLB repeats exactly."
    mod = _models()["glm-logistic"]
    p = getattr(fp, meth)(mod, tol=0.0, tol_rel=0.0, max_iter=40, **({} if meth == "fpi" else dict(max_fp=5, max_newton=5)))
    assert p.stop is Stop.MAX_ITER, (p.stop, p.message)


def test_glm_dask_X_is_never_computed_and_fpi_equals_numpy():
    "GLM(dask X): DaskSites (X not computed at construction); FPi equals the NumPy fit to 1e-10 in one fused pass per iteration."
    da = pytest.importorskip("dask.array")
    rng = np.random.default_rng(5)
    X = rng.normal(size=(600, 5)); y = np.where(X @ rng.normal(size=5) + rng.logistic(size=600) > 0, 1.0, -1.0)
    Xd = da.from_array(X, chunks=(200, 5))
    gd = models.GLM(Xd, y, likelihoods.Logistic())
    assert gd.sites.kind == "dask" and gd.X is Xd
    calls = {"site_pass": 0, "other": 0}
    for name in ("site_pass", "matvec", "rmatvec", "gram", "quad", "sq_rmatvec"):
        f = getattr(gd.sites, name)
        def wrap(*a, _f=f, _n=name, **k):
            calls["site_pass" if _n == "site_pass" else "other"] += 1; return _f(*a, **k)
        setattr(gd.sites, name, wrap)
    pn, pd = fp.fpi(models.GLM(X, y, likelihoods.Logistic())), fp.fpi(gd)
    assert pn.converged and pd.converged
    assert abs(pn.vlb - pd.vlb) <= 1e-10 * abs(pn.vlb) and np.max(np.abs(pn.m - pd.m)) <= 1e-10 * np.max(np.abs(pn.m))
    assert calls["site_pass"] + calls["other"] <= 2 * pd.n_iter, calls
    with pytest.raises(ValueError, match="2-d"): models.GLM(da.ones(10), np.ones(10), likelihoods.Logistic())


@pytest.mark.parametrize("method", ["laplace", "prox", "dual", "grad", "svi"])
def test_other_methods_on_csr_and_blocked_sites(method):
    "The other methods give the dense path's VLB on CSR (GLM) and blocked (sparse GP) sites (the table of the sites page)."
    import scipy.sparse as sps
    from vgi_lit.inference import fit as fit_
    rng = np.random.default_rng(6)
    X = rng.normal(size=(80, 6)) * (rng.random((80, 6)) < 0.5); y = np.where(X @ rng.normal(size=6) + rng.logistic(size=80) > 0, 1.0, -1.0)
    Xh, yh = _housing(60)
    k = kernels.RBF(1.0, np.sqrt(13))
    lik = likelihoods.Logistic()
    pairs = [(models.GLM(X, y, lik), models.GLM(sps.csr_matrix(X), y, lik))]
    if method != "laplace":                                             # Laplace needs c = 0 (no sparse-GP site noise)
        ys = np.where(yh > 0, 1.0, -1.0)
        pairs.append((models.SparseGP(Xh, ys, lik, k, Xh[::6]), models.SparseGP(Xh, ys, lik, k, Xh[::6], block_size=16)))
    opts = dict(max_iter=300, seed=0) if method == "svi" else {}
    for dense, other in pairs:
        pd, po = fit_(dense, method=method, **opts), fit_(other, method=method, **opts)
        assert np.isfinite(po.vlb) and abs(pd.vlb - po.vlb) <= 1e-8 * abs(pd.vlb), (method, other.sites.kind, pd.vlb, po.vlb)


def test_sparse_gp_dask_X_rows_per_chunk_equal_numpy():
    "SparseGP(dask X): H rows K_xu K_uu⁻¹ computed lazily per chunk (DaskSites); site map, rows and the FPi fit equal the NumPy model."
    da = pytest.importorskip("dask.array")
    Xh, yh = _housing(150)
    k = kernels.RBF(1.0, np.sqrt(13))
    m0 = models.SparseGP(Xh, yh, likelihoods.Laplace(0.5), k, Xh[::10])
    m1 = models.SparseGP(da.from_array(Xh, chunks=(50, 5)), yh, likelihoods.Laplace(0.5), k, Xh[::10])
    assert m1.sites.kind == "dask"
    idx = np.array([149, 0, 7])
    for u, v in ((m1.a, m0.a), (m1.c, m0.c), (m1.rows(idx)[2], m0.H[idx])): np.testing.assert_allclose(u, v, rtol=1e-13, atol=1e-14)
    p0, p1 = fp.fpi(m0), fp.fpi(m1)
    assert abs(p0.vlb - p1.vlb) <= 1e-10 * abs(p0.vlb) and np.max(np.abs(p0.m - p1.m)) <= 1e-10 * np.max(np.abs(p0.m))
    with pytest.raises(ValueError, match="block_size is for an in-memory X"):
        models.SparseGP(da.from_array(Xh, chunks=(50, 13)), yh, likelihoods.Laplace(0.5), k, Xh[::10], block_size=10)


def _ion_gp(n=50, variance=155.0, lengthscale=8.5):
    "GP-logistic on the first n ionosphere rows (training and test rows stacked, z-scored) at a large kernel variance."
    ds = datasets.load_ionosphere(data_dir=DATA)
    X = datasets.zscore(np.vstack([ds.X, ds.X_test])[:n]).X
    y = np.concatenate([ds.y, ds.y_test])[:n]
    return models.GP(X, y, likelihoods.Logistic(), kernels.RBF(variance, lengthscale))


def test_no_drift_near_the_optimum_at_large_kernel_variance():
    """Warm start at a neighbouring kernel: the plain FPi step is locally unstable there and lowers the VLB by less than
    10⁻¹² relative per step; such steps must not be accepted while the optimality measure grows (the old rule let the
    gradient drift from 1e-8 back to 7e-7 and the run ended at max_iter)."""
    a, b = _ion_gp(), _ion_gp(variance=155.0 * (1 + 2e-5), lengthscale=8.5 * (1 - 1e-5))
    p = fit(a, "fpi", tol=1e-9, tol_rel=0.0)
    w = fit(b, "fpi", tol=1e-9, tol_rel=0.0, m0=p.m, lam0=p.cov.lam, max_iter=60)
    assert w.stop is Stop.GRAD_TOL, (w.stop, w.n_iter)
    gm = np.array([r["grad_m"] for r in w.history])
    assert gm[int(np.argmin(gm)):].max() <= 10 * gm.min() + 1e-9


def test_anderson_is_exact_on_an_affine_map_of_low_rank():
    "x ↦ Ax + b with rank A = 3: four plain iterates give the fixed point exactly (the residuals span the error space)."
    rng = np.random.default_rng(0)
    U = np.linalg.qr(rng.normal(size=(30, 3)))[0]
    A = U @ np.diag([0.9, -0.8, 0.5]) @ U.T                             # eigenvalues 0.9, −0.8, 0.5 and 0
    b = rng.normal(size=30); xs = np.linalg.solve(np.eye(30) - A, b)
    x, pairs = rng.normal(size=30), []
    for _ in range(5):
        pairs.append((x, A @ x + b)); x = A @ x + b
    for w in (None, rng.uniform(0.5, 2.0, 30)):
        assert np.max(np.abs(fp.anderson(pairs, w) - xs)) <= 1e-10 * np.max(np.abs(xs))
    assert np.max(np.abs(pairs[-1][1] - xs)) > 1e-3                     # the plain iterate is far from it
    assert fp.anderson(pairs[:1]) is None


def test_fpi_anderson_same_optimum_fewer_iterations():
    "Cold FPi on the large-variance GP: Anderson (memory 5) reaches the plain FPi's optimum in fewer iterations."
    gp = _ion_gp(n=80)
    plain = fit(gp, "fpi", tol=1e-7, tol_rel=0.0, newton=False)
    acc = fit(gp, "fpi", tol=1e-7, tol_rel=0.0, anderson=5, newton=False)
    assert plain.stop is Stop.GRAD_TOL and acc.stop is Stop.GRAD_TOL
    assert abs(acc.vlb - plain.vlb) <= 1e-10 * abs(plain.vlb)
    assert acc.n_iter < plain.n_iter
    assert any(r.get("anderson") for r in acc.history)
    with pytest.raises(ValueError, match="anderson"): fit(gp, "fpi", anderson=-1)


def test_newton_direction_is_the_newton_step_of_the_stationarity_equations():
    "The exact Newton step (W = T(V)) solves J δ = −F with J the central-difference Jacobian of F(m, λ) = (g, γ − λ)."
    from vgi_lit.methods.site_update import site_cov
    X, y = _ion(8, 5); rng = np.random.default_rng(3)
    gp = models.GP(X, y, likelihoods.Logistic(), kernels.RBF(3.0, 2.0))
    m0, lam0 = 0.3 * rng.normal(size=8), rng.uniform(0.05, 0.3, 8)
    def F(x):
        at = fp.AtCov(gp, site_cov(gp, x[8:])); _, g, gam = fp.vlb_grad(gp, x[:8], at)
        return np.concatenate([g, gam - x[8:]])
    x0, E = np.concatenate([m0, lam0]), 1e-6 * np.eye(16)
    J = np.stack([(F(x0 + E[j]) - F(x0 - E[j])) / 2e-6 for j in range(16)], 1)
    ref = np.linalg.solve(J, -F(x0))
    cov = site_cov(gp, lam0); at = fp.AtCov(gp, cov); _, g, gam = fp.vlb_grad(gp, m0, at)
    got = np.concatenate(fp._newton_dir(gp, m0, cov, g, gam, at, W=site_cov(gp, gam)))
    assert np.max(np.abs(got - ref)) <= 1e-7 * np.max(np.abs(ref))
    e_mv, e_vv = fp.site_curvature(gp.likelihood, gp.y, m0, np.full(8, 0.7))
    dv = lambda m, v: gp.likelihood.expected_log_lik(gp.y, m, v)[2]
    assert np.allclose(e_mv, (dv(m0 + 1e-4, 0.7) - dv(m0 - 1e-4, 0.7)) / 2e-4, atol=1e-7)
    assert np.allclose(e_vv, (dv(m0, 0.7 + 1e-4) - dv(m0, 0.7 - 1e-4)) / 2e-4, atol=1e-7)
    with pytest.raises(ValueError, match="v > 0"): fp.site_curvature(gp.likelihood, gp.y, m0, np.zeros(8))


def test_fpi_newton_warm_start_converges_in_a_few_iterations():
    """A warm start at a neighbouring kernel (variance +5%, lengthscale −2%): Newton in ≤ 4 iterations, plain FPi (no mean
    steps) in > 15; the default step rule (Newton where it pays, after the three plain steps that measure the plain rate)
    in ≤ 6."""
    p = fit(_ion_gp(80), "fpi", tol=1e-9, tol_rel=0.0)
    b = _ion_gp(80, variance=155.0 * 1.05, lengthscale=8.5 * 0.98)
    nw = fit(b, "fpi", tol=1e-7, tol_rel=0.0, m0=p.m, lam0=p.cov.lam, newton=True)
    pl = fit(b, "fpi", tol=1e-7, tol_rel=0.0, m0=p.m, lam0=p.cov.lam, newton=False, mean_steps=0)
    de = fit(b, "fpi", tol=1e-7, tol_rel=0.0, m0=p.m, lam0=p.cov.lam)
    assert nw.stop is Stop.GRAD_TOL and nw.n_iter <= 4 and pl.n_iter > 15, (nw.n_iter, pl.n_iter)
    assert de.stop is Stop.GRAD_TOL and de.n_iter <= 6 and abs(de.vlb - pl.vlb) <= 1e-10 * abs(pl.vlb), de.n_iter
    assert abs(nw.vlb - pl.vlb) <= 1e-10 * abs(pl.vlb) and any(r.get("newton") for r in nw.history)
    with pytest.raises(ValueError, match="newton"): fit(b, "fpi", newton=1)


def _smooth_gp(kind):
    "GP on 60 seeded 2-d inputs: Poisson counts at RBF(4, 1), or logistic labels at the large variance RBF(400, 1)."
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 2)); f = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1]
    if kind == "poisson":
        return models.GP(X, rng.poisson(np.exp(1.5 * f)).astype(float), likelihoods.Poisson(), kernels.RBF(4.0, 1.0))
    return models.GP(X, np.where(f > 0, 1.0, -1.0), likelihoods.Logistic(), kernels.RBF(400.0, 1.0))


@pytest.mark.parametrize("kind", ["poisson", "logistic"])
@pytest.mark.parametrize("opts", [dict(anderson=5, newton=False), dict(newton=True)])
def test_accelerated_fpi_never_lowers_the_vlb(kind, opts):
    """Every accepted Anderson or Newton step is an ascent up to rounding (10⁻¹² relative), and on these problems some
    proposed steps are refused (so the safeguard decides something; the plain iteration, without mean steps)."""
    p = fit(_smooth_gp(kind), "fpi", tol=1e-8, tol_rel=0.0, polish=False, max_iter=300, mean_steps=0, **opts)
    v = np.array([r.vlb for r in p.history])
    assert p.stop is Stop.GRAD_TOL and np.all(np.diff(v) >= -1e-12 * np.abs(v[1:])), (p.stop, np.diff(v).min())
    key = list(opts)[0]
    assert any(r.get(key) is False for r in p.history) and any(r.get(key) for r in p.history)


def test_damped_step_at_the_rounding_floor_returns_the_old_iterate(monkeypatch):
    """When every trial step lowers the VLB by less than rounding and the optimality measure and gradient sizes grow each time, the damped
    step returns the smallest trial (ρ below 2·10⁻¹⁰, a DAMPED event), whose (m, λ) is the old one up to rounding."""
    gp = _smooth_gp("logistic")
    p = fit(gp, "fpi", tol=1e-6, tol_rel=0.0, polish=False)
    m, cov = p.m, p.cov
    at, state = fp._state(gp, m, cov, gp.prior.solve(m - gp.mu))
    real = fp._state
    lower = lambda *a, **k: (lambda at_new, new: (at_new, (state[0] - 1e-13 * abs(state[0]),) + tuple(new[1:])))(*real(*a, **k))
    monkeypatch.setattr(fp, "_state", lower)                           # every trial falls by 10⁻¹³ relative
    monkeypatch.setattr(fp, "_optimality", lambda model, c, *a, **k: (0.0,) * 3 if c is cov else (1.0,) * 3)   # and the measure and gradients grow
    res = fp._damped_step(gp, m, gp.prior.solve(m - gp.mu), cov, state, 1.0, at=at)
    assert res is not None
    st, _, new, rho, ev = res
    assert rho < 2e-10 and any(e.kind is EventKind.DAMPED and "rounding floor" in e.detail for e in ev)
    assert np.max(np.abs(st.m - m)) <= 1e-8 * np.max(np.abs(m))
    assert np.max(np.abs(st.cov.lam - cov.lam)) <= 1e-8 * np.max(np.abs(cov.lam))


def test_fpi_stops_stalled_at_the_rounding_floor():
    """With `tol` below the attainable gradient (the plain steps' floor is near 1e-10 on this GP), FPi used to accept steps
    of ρ ≈ 10⁻⁹ up to max_iter (300 iterations, 482 passes): steps of ρ < 10⁻⁶ without a new best VLB count for the stall
    rule, and the run stops STALLED at the best state within about `stall` iterations of reaching the floor (the plain
    steps, `newton=False`, without mean steps). The mean steps get below that floor (1e-11 here), and the default rule
    (Newton and mean steps) to 1e-15: those runs converge."""
    gp = _smooth_gp("logistic")
    p = fit(gp, "fpi", tol=1e-12, tol_rel=0.0, polish=False, max_iter=300, newton=False, mean_steps=0)
    assert p.stop in (Stop.STALLED, Stop.GRAD_TOL) and p.n_iter < 120, (p.stop, p.n_iter)
    if p.stop is Stop.STALLED:    # (where the BLAS's rounding lets the plain steps reach 1e-12, 96 iterations seen: converged)
        assert p.history[-1].step == "best" and p.vlb == max(r.vlb for r in p.history)
    assert fit(gp, "fpi", tol=1e-7, tol_rel=0.0, polish=False, newton=False, mean_steps=0).stop is Stop.GRAD_TOL   # above the floor
    assert fit(gp, "fpi", tol=1e-10, tol_rel=0.0, polish=False, max_iter=300, newton=False).stop is Stop.GRAD_TOL  # mean steps: below it
    assert fit(gp, "fpi", tol=1e-12, tol_rel=0.0, polish=False, max_iter=300).stop is Stop.GRAD_TOL                # the default rule


def test_a_step_inside_the_rounding_band_is_judged_by_the_measure_or_by_both_gradient_sizes():
    """Inside the band a step is kept when the state gets no worse by the scale-free measure, or by both gradient sizes
    the stopping rule reads (a stiff direction: ‖g‖∞ halves while the site term of the measure grows, the case of a
    Poisson GP on repeated inputs whose last inner solve otherwise stalls at ‖g‖∞ = 5·10⁻⁴); refused when the measure and
    a gradient size grow (the drift of an unstable full step), and outside the band always."""
    v = -2398.0598193186738
    old = lambda: (1.0e-8, 5.5e-4, 1.9e-6)
    assert fp._rises(v, v - 4.5e-13, old, lambda: (6.6e-8, 2.8e-4, 9.7e-7))         # gradients shrink, measure grows
    assert fp._rises(v, v - 4.5e-13, old, lambda: (0.9e-8, 6.0e-4, 1.9e-6))         # measure shrinks
    assert not fp._rises(v, v - 4.5e-13, old, lambda: (6.6e-8, 2.8e-4, 2.0e-6))     # measure and a gradient size grow
    assert not fp._rises(v, v - 4.5e-13, old, lambda: (6.6e-8, 6.0e-4, 1.0e-6))
    assert not fp._rises(v, v - 1e-8, old, lambda: (0.0, 0.0, 0.0))                # outside the band
    assert fp._rises(v, v, lambda: 1 / 0, lambda: 1 / 0)                           # no fall: nothing else is computed


@pytest.mark.slow
def test_step_costs_match_the_measured_step_times():
    """The step rule's cost model (`_step_costs`, constants `_OVERHEAD` measured once): the wall time of a Newton step over
    a plain step's, each the shortest of nine, is within a factor 2.5 of the modelled c_N/c_p at 60, 120 and 280 sites
    (GP-logistic on ionosphere inputs, kernel variance 10⁴: the dense solve, then GMRES)."""
    import time
    def t_min(f, rep=9):
        ts = []
        for _ in range(rep): t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
        return min(ts)
    for n in (60, 120, 280):
        gp = _ion_gp(n, variance=1e4, lengthscale=np.sqrt(34.0))
        p = fit(gp, "fpi", max_iter=4, tol=0.0, tol_rel=0.0, newton=False)
        r = gp.prior.solve(p.m - gp.mu); at, st = fp._state(gp, p.m, p.cov, r); w = {}
        t_p = t_min(lambda: fp._damped_step(gp, p.m, r, p.cov, st, 1.0, at=at))
        t_N = t_min(lambda: fp._newton_step(gp, p.m, r, p.cov, st, False, at, w))
        c_p, c_N = fp._step_costs(n, w['k_dir'], w['nodes_dir'])
        assert 0.4 <= (t_N / t_p) / (c_N / c_p) <= 2.5, (n, t_N / t_p, c_N / c_p)


def test_scale_start_at_a_large_kernel_reaches_the_same_optimum_in_fewer_iterations():
    """GP-logistic at kernel variance 1e6: the default start is the continuation in the prior scale (event START, its
    iterations in info['start_iterations']); it ends at the optimum of the plain start (VLB to 1e-9 relative) in fewer
    iterations in all (both run to the gradient test: at tol_rel = 1e-9 either can stop 1e-9 short). Below 1e4·v₀ the fit is the plain one, step for step."""
    big = _ion_gp(n=40, variance=1e6)
    assert np.allclose(np.log10(fp._scale_stages(big, 1.0)), [-6.0, -4.0, -2.0])   # at most two decades apart, equal steps
    assert np.allclose(np.log10(fp._scale_stages(_ion_gp(n=40, variance=1e5), 1.0)), [-5.0, -10 / 3, -5 / 3])
    c, p = fit(big, "fpi", tol=1e-7, tol_rel=0.0), fit(big, "fpi", tol=1e-7, tol_rel=0.0, scale_start=False)
    assert c.history[0].has(EventKind.START) and not p.history[0].has(EventKind.START)
    assert c.converged and p.converged, (c.stop, p.stop)
    assert c.stop is Stop.GRAD_TOL and p.stop is Stop.GRAD_TOL and abs(c.vlb - p.vlb) <= 1e-10 * abs(p.vlb)
    assert c.n_iter + c.info['start_iterations'] < p.n_iter
    small = _ion_gp(n=40, variance=1e3)
    assert fp._scale_stages(small, 1.0) == []
    a, b = fit(small, "fpi"), fit(small, "fpi", scale_start=False)
    assert 'start_iterations' not in a.info and a.n_iter == b.n_iter and a.vlb == b.vlb
    # a start given by the user is kept
    assert 'start_iterations' not in fit(big, "fpi", m0=0.0, max_iter=2).info
    with pytest.raises(ValueError, match="scale_start must be True or False"):
        fit(big, "fpi", scale_start="yes")


def test_scale_start_optimum_matches_the_default_start_and_grad_at_extreme_variances():
    """GP-logistic on 40 ionosphere rows at kernel variance 1, 1e6 and 1e8: the default FPi (the continuation start from
    1e6 on), FPi from the default start and GRAD end at the same VLB to 1e-10 relative; the stages are the two-decade ones."""
    for v in (1.0, 1e6, 1e8):
        gp = _ion_gp(n=40, variance=v)
        c = fit(gp, "fpi", tol=1e-8, tol_rel=0.0)
        p = fit(gp, "fpi", tol=1e-8, tol_rel=0.0, scale_start=False)
        g = fit(gp, "grad", tol=1e-9, max_iter=20000)
        assert c.stop is Stop.GRAD_TOL and p.stop is Stop.GRAD_TOL and g.converged, (v, c.stop, p.stop, g.stop)
        assert ('start_iterations' in c.info) == (v >= 1e4)
        assert abs(c.vlb - p.vlb) <= 1e-10 * abs(p.vlb) and abs(c.vlb - g.vlb) <= 1e-10 * abs(g.vlb), (v, c.vlb, p.vlb, g.vlb)
        if v >= 1e4:
            J = int(np.floor(np.log10(v)))
            assert np.allclose(np.log10(fp._scale_stages(gp, 1.0)), np.linspace(-J, 0, int(np.ceil(J / 2)) + 1)[:-1])


def test_mean_steps_reach_the_same_optimum_in_fewer_factorisations():
    """The mean steps at a fixed factor (`mean_steps`, default for a GP with a log-concave likelihood): the default run
    and the run without them end at the same optimum (VLB to 1e-10 relative), the default within 1e-6 of it in fewer
    iterations (3 against 5 here), with mean steps recorded; Poisson (log-concave) takes them too, a GLM and the Student-t
    GP (not log-concave) do not."""
    gp = _ion_gp(80, variance=10.0, lengthscale=8.5)
    ref = fit(gp, "fpi", tol=1e-9, tol_rel=0.0)
    on, off = fit(gp, "fpi"), fit(gp, "fpi", mean_steps=0)
    for r in (on, off): assert abs(r.vlb - ref.vlb) <= 1e-10 * abs(ref.vlb), (r.vlb, ref.vlb)
    to_6 = [next(i for i, v in enumerate(r.history.vlb) if ref.vlb - v <= 1e-6 * abs(ref.vlb)) for r in (on, off)]
    assert to_6[0] < to_6[1] and sum(r.get("mean_steps", 0) for r in on.history) > 0, to_6
    assert not any(r.get("mean_steps") for r in off.history)
    assert any(r.get("mean_steps") for r in fit(_smooth_gp("poisson"), "fpi", max_iter=3).history)
    Xh, yh = _housing(40); Xi, yi = _ion()
    t_gp = models.GP(Xh, yh, likelihoods.StudentT(3.0, 1.0 / 3.0), kernels.RBF(1.0, 2.0))
    for mod in (models.GLM(Xi, yi, likelihoods.Logistic(), prior_cov=1.0), t_gp):
        assert not any(r.get("mean_steps") for r in fit(mod, "fpi", max_iter=3).history)
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="mean_steps"): fit(gp, "fpi", mean_steps=bad)


def test_conjugate_mean_steps_are_exact_line_steps_along_conjugate_directions():
    """On a GP regression at fixed V (Gaussian likelihood: the VLB is quadratic in m, Hessian −A with A = Σ⁻¹ + I/σ², the
    maximiser m* = A⁻¹(y/σ² + Σ⁻¹μ) by a dense solve) the mean steps are conjugate gradients: each step maximises the VLB along
    its direction (the new gradient orthogonal to the step), the steps are A-conjugate, r = Σ⁻¹(m − μ) is carried to
    rounding, and they reach m* in far fewer steps than sites; natural-gradient steps (t = 1 along Vg) from the same start
    are still 1e-3 away after as many steps. λ is a tenth to a fifth of γ = 1/σ², far from the fixed point."""
    Xi, _ = _ion(40)
    rng = np.random.default_rng(4)
    s2 = 0.25
    gp = models.GP(Xi, rng.standard_normal(40), likelihoods.Gaussian(s2), kernels.RBF(variance=2.0, lengthscale=0.5 * np.sqrt(Xi.shape[1])))
    cov = SiteCov(gp, 0.1 / s2 * (1.0 + rng.random(gp.n))); at = fp.AtCov(gp, cov)
    m0 = rng.standard_normal(gp.n); r0 = gp.prior.solve(m0 - gp.mu)
    K = gp.prior.dense(); A = np.linalg.inv(K) + np.eye(gp.n) / s2
    m_star = np.linalg.solve(A, gp.y / s2 + np.linalg.solve(K, gp.mu))
    seen, orig = [], fp.vlb_grad
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fp, "vlb_grad", lambda model, m, *a, **k: seen.append(m.copy()) or orig(model, m, *a, **k))
        m, r, (vlb, g, gamma), k = fp._mean_steps(gp, m0, r0, cov, at, fp.vlb_grad(gp, m0, at, r0), 40, 1e-12, site=0.0)
    np.testing.assert_allclose(gamma, 1.0 / s2, rtol=1e-12)
    steps = np.diff(np.array(seen), axis=0)                                # every trial was taken: no halving on a quadratic
    assert len(steps) == k and 3 <= k <= 20, k
    assert np.max(np.abs(m - m_star)) <= 1e-6 * np.max(np.abs(m_star))
    assert np.max(np.abs(r - gp.prior.solve(m - gp.mu))) <= 1e-8 * np.max(np.abs(r))
    ms = [m0] + [m0 + np.sum(steps[:i + 1], axis=0) for i in range(k)]
    grads = [gp.y / s2 - x / s2 - np.linalg.solve(K, x - gp.mu) for x in ms]
    for i in range(min(k, 6)):                                            # exact line steps: ∇VLB(m_{i+1}) ⟂ the step
        assert abs(grads[i + 1] @ steps[i]) <= 1e-8 * abs(grads[i] @ steps[i])
        for j in range(i):                                                # A-conjugate steps
            assert abs(steps[i] @ A @ steps[j]) <= 1e-6 * np.sqrt((steps[i] @ A @ steps[i]) * (steps[j] @ A @ steps[j]))
    m_ng = m0.copy()
    for _ in range(k): m_ng = m_ng + fp._mean_dir(gp, cov, gp.y / s2 - m_ng / s2 - np.linalg.solve(K, m_ng - gp.mu))[0]
    assert np.max(np.abs(m_ng - m_star)) > 1e-3 * np.max(np.abs(m_star))


def test_mean_steps_on_a_glm_use_the_curvature_at_the_sites():
    """With sites f = Hm (a GLM, n ≠ d) the mean steps' length reads the curvature Σγ_i(h_iᵀd)²: on a Bayesian linear
    regression at fixed V (Gaussian likelihood: the VLB quadratic in m, Hessian −(Σ⁻¹ + HᵀH/σ²)) each step is the exact
    maximum along its line (the new gradient orthogonal to the step) and they reach the dense-solve maximiser; a logistic
    GLM fitted with `mean_steps` given (not the default for a GLM) takes them and ends at the default fit's optimum."""
    rng = np.random.default_rng(6)
    X = rng.standard_normal((30, 4)); s2 = 0.5
    glm = models.GLM(X, X @ rng.standard_normal(4) + rng.standard_normal(30), likelihoods.Gaussian(s2), prior_cov=2.0)
    cov = SiteCov(glm, np.full(30, 0.2)); at = fp.AtCov(glm, cov)
    m0 = rng.standard_normal(4); r0 = glm.prior.solve(m0 - glm.mu)
    A = np.eye(4) / 2.0 + X.T @ X / s2; m_star = np.linalg.solve(A, X.T @ glm.y / s2)
    seen, orig = [], fp.vlb_grad
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fp, "vlb_grad", lambda model, m, *a, **k: seen.append(m.copy()) or orig(model, m, *a, **k))
        m, r, state, k = fp._mean_steps(glm, m0, r0, cov, at, fp.vlb_grad(glm, m0, at, r0), 10, 1e-14, site=0.0)
    steps = np.diff(np.array(seen), axis=0)
    assert len(steps) == k and 2 <= k <= 6, k                             # no halving on a quadratic; CG in d = 4 directions
    grad = lambda x: X.T @ (glm.y - X @ x) / s2 - x / 2.0
    x = m0
    for st in steps[:3]:                                                  # exact line steps: ∇VLB after the step ⟂ the step
        assert abs(grad(x + st) @ st) <= 1e-8 * abs(grad(x) @ st); x = x + st
    assert np.max(np.abs(m - m_star)) <= 1e-8 * np.max(np.abs(m_star))
    Xl = rng.standard_normal((50, 3)); yl = np.sign(Xl[:, 0] + rng.standard_normal(50))
    p = fit(models.GLM(Xl, yl, likelihoods.Logistic()), "fpi", mean_steps=3, tol=1e-9, tol_rel=0.0)
    q = fit(models.GLM(Xl, yl, likelihoods.Logistic()), "fpi", tol=1e-9, tol_rel=0.0)
    assert any(rec.get("mean_steps") for rec in p.history) and abs(p.vlb - q.vlb) <= 1e-10 * abs(q.vlb), (p.vlb, q.vlb)


def test_mean_direction_is_V_times_g():
    """`_mean_dir` (two triangular solves with the factor of B, Σ⁻¹Vg = g − λ∘Vg) equals `matvec_split` to 1e-12 relative,
    and sites with λ_iK_ii below SMALL_LAM_K take `matvec_split` itself."""
    gp = _ion_gp(60, variance=10.0)
    rng = np.random.default_rng(3)
    g = rng.standard_normal(gp.n)
    for lam in (rng.uniform(0.01, 0.3, gp.n), np.r_[1e-9, rng.uniform(0.01, 0.3, gp.n - 1)]):
        cov = SiteCov(gp, lam)
        for a, b in zip(fp._mean_dir(gp, cov, g), cov.matvec_split(g)):
            assert np.max(np.abs(a - b)) <= 1e-12 * np.max(np.abs(b))


def test_a_damped_stall_of_a_log_concave_fit_is_the_rounding_floor_and_skips_the_grad_polish(monkeypatch):
    """When no damped natural-gradient step down to ρ = 1e-10 raises the VLB, a log-concave likelihood (an ascent direction
    at every non-stationary state) means the rounding floor: FPi stops STALLED at its best state, says so, and runs no GRAD
    polish (which cost 1 s of a 2.5 s learn on the nearly separable set and never raised the VLB). With a likelihood that is
    not log-concave the stall still hands over to GRAD. The damped step is made to fail from the third iteration on."""
    real = fp._damped_step
    def failing(*a, **k):
        failing.calls += 1
        return None if failing.calls > 2 else real(*a, **k)
    for kind, polished in (("gp-logistic", False), ("gp-studentt", True)):
        failing.calls = 0
        monkeypatch.setattr(fp, "_damped_step", failing)
        r = fit(MODELS[kind], "fpi", newton=False, mean_steps=0, tol=1e-12, tol_rel=0.0, max_iter=50)
        monkeypatch.setattr(fp, "_damped_step", real)
        assert failing.calls >= 3 and any(rec.step == "grad_polish" for rec in r.history) == polished, (kind, r.message)
        assert ("rounding floor" in r.message) != polished and r.stop is (Stop.STALLED if not polished else r.stop)


def test_finite_is_the_entrywise_test():
    "`_finite` of (VLB, g, γ): every entry finite, also where the sum of finite entries would overflow."
    rng = np.random.default_rng(0)
    cases = [rng.standard_normal(50), np.array([1e308, 1e308]), np.array([-1e308, -1e308, 1.0]), np.array([np.nan, 1.0]),
             np.array([np.inf, -np.inf]), np.array([-np.inf]), np.zeros(0)]
    for g in cases:
        for gamma in cases:
            for vlb in (0.5, np.nan, -np.inf):
                expect = bool(np.isfinite(vlb) and np.isfinite(g).all() and np.isfinite(gamma).all())
                assert fp._finite((vlb, g, gamma)) is expect


def _gp_state(lam_scale, variance=2.0, n=40, seed=0):
    "A GP-logistic on ionosphere rows with V in site form (λ = lam_scale·u, u uniform in [1, 2]) at a seeded mean: (model, cov, at, state, m, r)."
    Xi, yi = _ion(n)
    gp = models.GP(Xi, yi, likelihoods.Logistic(), kernels.RBF(variance=variance, lengthscale=np.sqrt(Xi.shape[1])))
    rng = np.random.default_rng(seed)
    cov = SiteCov(gp, lam_scale * (1.0 + rng.random(gp.n)))
    m = 0.3 * rng.standard_normal(gp.n); r = gp.prior.solve(m - gp.mu)
    at = fp.AtCov(gp, cov)
    return gp, cov, at, fp.vlb_grad(gp, m, at, r), m, r


def test_site_error_passed_once_gives_the_same_gradient_in_V_and_site_measure():
    "`_grad_V_inf` and `_decrement` given |λ − γ| (`ad`, as `fpi` reads it once per state) return what they compute without it."
    gp, cov, at, (vlb, g, gamma), m, r = _gp_state(0.5)
    ad = np.abs(cov.lam - gamma)
    assert fp._grad_V_inf(gp, cov, gamma, ad=ad) == fp._grad_V_inf(gp, cov, gamma)
    assert fp._decrement(gp, cov, at, g, gamma, mean=False, ad=ad) == fp._decrement(gp, cov, at, g, gamma, mean=False)
    assert fp._decrement(gp, cov, at, g, gamma, ad=ad) == fp._decrement(gp, cov, at, g, gamma)


def test_mean_dir_route_decided_once_equals_deciding_per_call():
    "`_mean_dir` with the route given (`_mean_dir_fast`, once per factor) returns bit for bit what it returns deciding itself."
    for lam_scale, fast in ((0.5, True), (1e-9, False)):                  # λK_ii ≥ SMALL_LAM_K everywhere, or not
        gp, cov, at, (vlb, g, gamma), m, r = _gp_state(lam_scale)
        assert fp._mean_dir_fast(gp, cov) is fast
        for a, b in zip(fp._mean_dir(gp, cov, g, fast), fp._mean_dir(gp, cov, g)): assert np.array_equal(a, b)


def _mean_steps_by_halving(model, m, r, cov, at, state, k_max, tol_rel, site, max_halvings=5):
    "The mean steps with every trial through `halving` (s·t for s = 1, ½, …): the reference for the inline first trial."
    from vgi_lit.driver import halving
    vlb, g, gamma = state
    k, d = 0, None
    while k < k_max:
        z, rz = fp._mean_dir(model, cov, g)
        dec = float(g @ z)
        if not dec > max(0.1 * tol_rel, 1e-15) * abs(vlb): break
        e = (cov.lam - gamma) * (at.v_site - model.c)
        if dec <= 0.5 * site * float(e @ e): break
        if d is not None:
            beta = max(0.0, (dec - float(z_prev @ g)) / dec_prev)
            d, rd = z + beta * d, rz + beta * rd
            if not float(g @ d) > 0.0: d = None
        if d is None: d, rd = z, rz
        t = float(g @ d) / (float(d @ rd) + float(np.maximum(gamma, 0.0) @ (d * d)))
        dec_prev, z_prev = dec, z
        def trial(s, m=m, r=r, d=t * d, rd=t * rd):
            return m + s * d, r + s * rd, fp.vlb_grad(model, m + s * d, at, r + s * rd)
        out = halving(trial, lambda c: fp._finite(c[2]) and c[2][0] > vlb, max_halvings=max_halvings)
        if out is None: break
        (m, r, (vlb, g, gamma)), _, h = out
        if h: d = None
        k += 1
    return m, r, (vlb, g, gamma), k


@pytest.mark.parametrize("variance, lam_scale, wrong", [(2.0, 0.5, False), (1e3, 1e-3, True)])
def test_mean_steps_with_the_first_trial_inline_equal_the_halving_loop(variance, lam_scale, wrong, monkeypatch):
    """`_mean_steps` takes the line step t inline and calls `halving` from t/2 only when it fails: the same iterates bit
    for bit as every trial through `halving`, on a state whose steps are all taken and on one (m = −10y: every site on the
    wrong side of its label, where the curvature along the step grows) whose line step overshoots."""
    gp, cov, at, state, m, r = _gp_state(lam_scale, variance)
    if wrong:
        m = -10.0 * gp.y; r = gp.prior.solve(m - gp.mu); state = fp.vlb_grad(gp, m, at, r)
    ref = _mean_steps_by_halving(gp, m, r, cov, at, state, 20, 1e-9, 0.0)
    calls = []
    orig = fp.halving
    monkeypatch.setattr(fp, "halving", lambda *a, **k: calls.append(k) or orig(*a, **k))
    new = fp._mean_steps(gp, m, r, cov, at, state, 20, 1e-9, site=0.0)
    assert ref[3] == new[3] and ref[3] >= 1
    for a, b in [(ref[0], new[0]), (ref[1], new[1])] + list(zip(ref[2], new[2])): assert np.array_equal(a, b)
    assert bool(calls) is wrong                                          # the overshooting state halves, the other does not
    assert all(k["rho"] == 0.5 for k in calls)


def test_fpi_flat_at_the_rounding_floor_stops_stalled():
    """Undamped plain steps with `tol` below the attainable gradient keep the VLB within its rounding (a band of a few 1e-14
    here) while the gradient wanders about its floor: no fall and no small ρ, so the run used to go on to max_iter (300
    iterations at tol 1e-15 on this GP on one BLAS). The flat-floor rule stops it STALLED at its best state, with no GRAD
    polish; a run whose gradient still falls is not stopped by it: at tol 5e-10 the VLB is flat to its rounding band over
    the last 20 iterations and more before the gradient test ends the run (the gradient's floor depends on the BLAS
    kernel: about 5e-13 on Haswell, 4e-11 on SkylakeX, so the tol sits above both)."""
    gp = _smooth_gp("logistic")
    p = fit(gp, "fpi", tol=1e-15, tol_rel=0.0, max_iter=300, newton=False, mean_steps=0)
    assert p.stop is Stop.STALLED and p.n_iter < 250, (p.stop, p.n_iter)
    assert p.vlb == max(r.vlb for r in p.history) and "rounding floor" in p.message
    if p.message.startswith("stalled at the rounding floor"):             # this rule (on a BLAS whose floor is lower than the damped steps')
        assert not any(r.step == "grad_polish" for r in p.history)
        spread = float(p.message.split("within ")[1].split(" ")[0])
        assert spread <= fp.FLAT_REL * abs(p.vlb)
    q = fit(gp, "fpi", tol=5e-10, tol_rel=0.0, polish=False, max_iter=300, newton=False, mean_steps=0)
    assert q.stop is Stop.GRAD_TOL, q.message
    h = np.asarray(q.history.vlb)
    assert np.ptp(h[-21:]) <= fp.FLAT_REL * abs(h[-1])                   # the VLB alone would have stopped it: the gradient fell


def test_a_trial_state_that_overflows_is_not_finite_and_quiet():
    """A state far out for a Poisson likelihood (e^m beyond float64's range at some sites) comes back from the one-pass
    state evaluation with a VLB that is not finite, which every caller refuses, and without a NumPy RuntimeWarning (such
    trials are proposed and refused during ordinary fits: a warning reached users of `vgi-lit fit` on bike-share counts)."""
    import warnings
    rng = np.random.default_rng(0); X = rng.normal(size=(30, 2)); y = rng.poisson(3.0, size=30).astype(float)
    for model in (models.GP(X, y, likelihoods.Poisson(), kernels.RBF(1.0, 1.0)),
                  models.SparseGP(X, y, likelihoods.Poisson(), kernels.RBF(1.0, 1.0), X[:8])):
        m = np.full(model.d, 800.0)
        cov = SiteCov(model, np.ones(model.n), space="n") if model.H is not None else SiteCov(model, np.ones(model.n))
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            at, (vlb, g, gamma) = fp._state(model, m, cov)
        assert not fp._finite((vlb, g, gamma)), (vlb, np.isfinite(g).all(), np.isfinite(gamma).all())
