"Hyperparameters of the multi-latent models: envelope gradients against finite differences, learning against independent routes, bad input."
import numpy as np
import pytest
from scipy.linalg import solve_triangular
from scipy.optimize import minimize
from sklearn.datasets import load_iris
from vgi_lit.inference import fit, Stop
from vgi_lit.kernels import RBF
from vgi_lit.softmax import Softmax
from vgi_lit.models.multi import MultiGP, MultiGLM, CoregionalGP, MultiCov
from vgi_lit.models.multi_sparse import MultiSparseGP
from vgi_lit.methods.multi_output import MultiGaussian
from vgi_lit.methods.multiclass import MultiPosterior
from vgi_lit.methods.multiclass import fpi_multi, multi_vlb
from vgi_lit.methods.multi_hyper import MultiHyperParams, learn_multi, multi_prior_adjoint, noise_adjoint


def _iris(n):
    X, y = load_iris(return_X_y=True); X = (X - X.mean(0)) / X.std(0)
    idx = np.linspace(0, 149, n).astype(int)
    return X[idx], y[idx]


def _outputs(X, seed=0, missing=True):
    rng = np.random.default_rng(seed)
    Y = np.c_[np.sin(X[:, 0]), np.cos(X[:, 1]), X[:, 2]] + 0.3 * rng.standard_normal((len(X), 3))
    if missing: Y[1, 1] = np.nan; Y[4, [0, 2]] = np.nan
    return Y


SE = np.array([[0.2, 0.05, 0.0], [0.05, 0.3, 0.02], [0.0, 0.02, 0.25]])


def _fd_dir(model, fixed=None, learn_mean=False, seed=0, h=1e-5):
    hp = MultiHyperParams(model, fixed, learn_mean); rg = np.random.default_rng(seed)
    th = hp.theta0 + 0.1 * rg.standard_normal(len(hp.theta0)); u = rg.standard_normal(len(th)); u /= np.linalg.norm(u)
    F = lambda t: fit(hp.build(t), 'fpi', tol=1e-11, max_iter=5000)
    p = F(th); gu = hp.grad(p.model, p.m, p.cov) @ u
    return abs(gu - (F(th + h * u).vlb - F(th - h * u).vlb) / (2 * h)) / abs(gu)


def test_gaussian_gradients_match_differences():
    "Gaussian outputs (FPi exact in one step): ICM with noise and mean, and independent per-output kernels, along random directions."
    X, _ = _iris(12); Y = _outputs(X)
    icm = CoregionalGP(X, Y, MultiGaussian(SE), RBF(1.0, 1.0), np.random.default_rng(1).standard_normal((3, 1)), [0.1, 0.2, 0.3])
    assert _fd_dir(icm, fixed=[], learn_mean=True) < 1e-6
    ind = MultiGP(X, Y, MultiGaussian(SE), [RBF(1.0, 1.0), RBF(0.5, 2.0), RBF(2.0, [1.0, 1.0, 1.0, 1.0])])
    assert _fd_dir(ind, seed=2) < 1e-6


def test_adjoint_site_and_weight_space_agree():
    X, y = _iris(12)
    gp = MultiGP(X, y, Softmax(3), RBF(1.0, 1.0)); p = fit(gp, 'fpi', tol=1e-9)
    A, _ = multi_prior_adjoint(gp, p.m, p.cov); Aw, _ = multi_prior_adjoint(gp, p.m, MultiCov(gp, p.cov.lam, 'w'))
    assert np.allclose(A, Aw, atol=1e-8 * np.max(np.abs(A)))


def _exact_lml(model):
    yv = model.y.T.ravel(); o = ~np.isnan(yv)
    Kt = (model.prior_dense() + np.kron(model.likelihood.noise_cov, np.eye(model.n)))[np.ix_(o, o)]
    L = np.linalg.cholesky(Kt); z = solve_triangular(L, yv[o] - model.mu[o], lower=True)
    return -0.5 * z @ z - np.sum(np.log(np.diag(L))) - 0.5 * o.sum() * np.log(2 * np.pi)


@pytest.mark.slow
def test_gaussian_learned_vlb_is_max_marginal_likelihood():
    "ICM prior (W, lengthscale; κ held) and the noise factor: the learned VLB is the maximum of the exact log marginal likelihood."
    X, _ = _iris(20); Y = _outputs(X, seed=3)
    m = CoregionalGP(X, Y, MultiGaussian(SE), RBF(1.0, 1.0), np.full((3, 1), 0.5), [0.2, 0.2, 0.2])
    assert MultiHyperParams(m).fixed == ("kernel.variance",)
    hp = MultiHyperParams(m, fixed={"kernel.variance", "kappa"})
    L = learn_multi(m, fixed={"kernel.variance", "kappa"}, tol=1e-7, max_iter=100, inner=dict(tol=1e-10))
    ref = minimize(lambda t: -_exact_lml(hp.build(t)), hp.theta0, method="BFGS", options=dict(gtol=1e-9))
    assert L.converged and abs(L.vlb + ref.fun) <= 1e-8 * abs(ref.fun), (L.stop, L.vlb, -ref.fun)
    assert isinstance(L, MultiPosterior) and L.info['theta']['kernel.variance'] == 1.0 and L.info['fixed'] == ("kernel.variance", "kappa[0]", "kappa[1]", "kappa[2]")


@pytest.mark.slow
def test_warm_start_reaches_the_cold_optimum():
    X, y = _iris(15)
    gp = MultiGP(X, y, Softmax(3), RBF(2.0, 1.5)); cold = fit(gp, 'fpi', tol=1e-9, anderson=5)
    gp2 = MultiGP(X, y, Softmax(3), RBF(2.2, 1.4)); ref = fit(gp2, 'fpi', tol=1e-9, anderson=0)
    warm = fpi_multi(gp2, m0=gp2.mu + gp2.prior_matmul(cold.r), lam0=cold.cov.lam, tol=1e-9, anderson=5)
    assert warm.converged and abs(warm.vlb - ref.vlb) < 1e-9 * abs(ref.vlb) and warm.n_iter < ref.n_iter


@pytest.mark.slow
def test_fit_learn_dispatch_and_plain_fit():
    X, y = _iris(15)
    glm = MultiGLM(X, y, Softmax(3), prior_cov=1.0)
    lf = fit(glm, learn=True, tol=1e-6)
    assert isinstance(lf, MultiPosterior) and lf.converged and set(lf.info['theta']) == {"prior_var"}
    assert lf.model.priors[0].variances()[0] == pytest.approx(lf.info['theta']['prior_var'])
    assert 'theta' not in fit(glm).info and 'theta' not in fit(glm, learn=False).info


def test_bad_input():
    X, y = _iris(12)
    gp = MultiGP(X, y, Softmax(3), RBF())
    with pytest.raises(ValueError, match="unknown parameter 'kernel.period'"): learn_multi(gp, fixed={"kernel.period"})
    with pytest.raises(TypeError, match="strings"): learn_multi(gp, fixed=[1])
    with pytest.raises(ValueError, match="method must be"): learn_multi(gp, method="laplace")
    with pytest.raises(ValueError, match="full prior covariance"): learn_multi(MultiGLM(X, y, Softmax(3), prior_cov=np.eye(4)))
    with pytest.raises(ValueError, match="MultiGLM's prior mean"): learn_multi(MultiGLM(X, y, Softmax(3)), learn_mean=True)
    with pytest.raises(TypeError, match="MultiLGM"): learn_multi(object())
    with pytest.raises(ValueError, match="lam0 must have shape"): fpi_multi(gp, m0=gp.mu, lam0=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="tol"): learn_multi(gp, tol=-1)
    Y = _outputs(X, missing=False)
    icm = CoregionalGP(X, Y, MultiGaussian(SE), RBF(), np.ones((3, 1)), 0.1)
    with pytest.raises(ValueError, match="method='grad'"): learn_multi(icm, method="grad")


def test_all_fixed_is_one_fit():
    X, y = _iris(12)
    gp = MultiGP(X, y, Softmax(3), RBF())
    L = learn_multi(gp, fixed={"kernel"})
    assert L.stop is Stop.GRAD_TOL and L.info['fixed'] == ("kernel.variance", "kernel.lengthscale") and len(L.history) == 1
    assert abs(L.vlb - fit(gp, 'fpi', tol=1e-9).vlb) < 1e-9 * abs(L.vlb)


@pytest.mark.slow
@pytest.mark.parametrize("n", [30])
def test_iris_softmax_gp_agrees_with_derivative_free_route(n):
    "Shared RBF kernel on iris: learn_multi's optimum against Nelder-Mead on the optimal VLB (cold inner FPi, tol 1e-10)."
    X, y = _iris(n)
    gp = MultiGP(X, y, Softmax(3), RBF(1.0, 1.0))
    L = learn_multi(gp, tol=1e-6)
    hp = MultiHyperParams(gp)
    F = lambda t: -fit(hp.build(t), 'fpi', tol=1e-10, max_iter=5000, anderson=5).vlb
    th = np.log([L.info['theta'][k] for k in hp.names])
    ref = minimize(F, th + 0.3, method="Nelder-Mead", options=dict(xatol=1e-8, fatol=1e-13, maxiter=3000))
    assert abs(L.vlb + ref.fun) <= 1e-6 * abs(ref.fun)
    assert np.max(np.abs(np.exp(th) - np.exp(ref.x)) / np.exp(ref.x)) < 1e-4


@pytest.mark.slow
def test_iris_per_class_kernels_and_grad_inner():
    """Per-class kernels: FPi and GRAD as the inner solve learn the same optimum. The VLBs agree to 1e-7 relative. The learned
    values agree as far as F identifies them: two points whose envelope gradients are g_a and g_b (each solved again to
    ‖∇_q‖ ≤ 1e-11) lie H⁻¹(g_a − g_b) apart to first order, H the Hessian of F in the log-parameters off the box's edge (central
    differences of the envelope gradient), so each log-value must agree to 1e-3 plus twice that first-order spread. On these
    30 flowers class 1's kernel variance ends at or near the box's lower edge (e^-12; F is flat there, and one run may stop
    short of the edge), which leaves F nearly flat in its lengthscale: there the spread is what the outer tolerance allows, not 1e-3. Both points must be stationary (‖g‖∞ ≤ 1e-5 by
    the exact inner solves), so a wrong optimum cannot widen the spread."""
    X, y = _iris(30)
    gp = MultiGP(X, y, Softmax(3), [RBF(1.0, 1.0), RBF(1.0, 1.0), RBF(1.0, 1.0)])
    a = learn_multi(gp, tol=1e-6); b = learn_multi(gp, method="grad", tol=1e-6, inner=dict(tol=1e-9))
    assert abs(a.vlb - b.vlb) <= 1e-7 * abs(a.vlb)
    hp = MultiHyperParams(gp)
    ta, tb = (np.log([r.info['theta'][k] for k in hp.names]) for r in (a, b))
    edge_a, edge_b = np.abs(ta) >= 12.0 - 1e-9, np.abs(tb) >= 12.0 - 1e-9
    edge = edge_a | edge_b
    assert np.array_equal(np.sign(ta[edge]), np.sign(tb[edge])), (ta, tb)            # the same side of the box
    def G_all(t):
        p = fpi_multi(hp.build(t), tol=1e-11, tol_rel=0.0, max_iter=5000); return hp.grad(p.model, p.m, p.cov)
    # A log-value at the edge in one run and inside in the other (class 1's variance: -12 by FPi, about -11.6 by GRAD):
    # F is flat between them (the VLBs agree above), and the run inside stopped where F's slope in it is below the tolerance.
    for t, e in ((ta, edge_a), (tb, edge_b)):
        if np.any(edge & ~e): assert np.max(np.abs(G_all(t)[edge & ~e])) <= 1e-5, (t, G_all(t))
    def G(t): return G_all(t)[~edge]
    h = 1e-3; E = np.eye(len(ta))[~edge]
    Hs = np.array([(G(ta + h * e) - G(ta - h * e)) / (2 * h) for e in E]); Hs = 0.5 * (Hs + Hs.T)
    assert np.all(np.linalg.eigvalsh(Hs) < 0), np.linalg.eigvalsh(Hs)                   # a maximum off the edge
    ga, gb = G(ta), G(tb)
    assert max(np.max(np.abs(ga)), np.max(np.abs(gb))) <= 1e-5, (ga, gb)                 # both stationary, by an exact inner solve
    spread = np.abs(np.linalg.solve(Hs, ga - gb))
    gap = np.abs(ta - tb)[~edge]
    assert np.all(gap <= 1e-3 + 2.0 * spread), dict(zip(np.array(hp.names)[~edge], zip(gap, spread)))


@pytest.mark.slow
def test_iris_learned_kernel_against_an_outer_lbfgs_with_differences():
    """fit(MultiGP(iris, Softmax(3), RBF), learn=True) against an independent outer route: L-BFGS-B on the log kernel
    parameters with central-difference gradients of the optimal VLB, each inner fit a cold FPi to ‖∇‖ ≤ 1e-10 (no VLB-change
    stop). A seeded subset of 45 flowers and the two sepal inputs (overlapping classes: an interior optimum), and the product
    Gauss-Hermite rule with 48 nodes per axis, whose ∂E/∂V is the derivative of its E to ~5e-8 (the default 32 nodes: ~4e-6,
    which moves the flat optimum of the envelope gradient by ~2e-5 in the kernel variance)."""
    X, y = load_iris(return_X_y=True); X = (X - X.mean(0)) / X.std(0)
    sub = np.sort(np.random.default_rng(0).choice(150, 45, replace=False)); X, y = X[sub][:, :2], y[sub]
    gp = MultiGP(X, y, Softmax(3, n_gh=48), RBF(1.0, 1.0))
    L = fit(gp, learn=True, tol=1e-8, inner=dict(tol=1e-10, tol_rel=0.0, max_iter=1000))
    assert L.stop is Stop.GRAD_TOL, L.stop
    F = lambda t: -fpi_multi(MultiGP(X, y, Softmax(3, n_gh=48), RBF(*np.exp(t))), tol=1e-10, tol_rel=0.0, max_iter=1000).vlb
    def F_and_grad(t, h=1e-4):
        return F(t), np.array([(F(t + h * e) - F(t - h * e)) / (2 * h) for e in np.eye(2)])
    ref = minimize(F_and_grad, np.zeros(2), jac=True, method="L-BFGS-B", options=dict(gtol=1e-9, ftol=0.0, maxiter=100))
    th = np.array([L.info['theta']['kernel.variance'], L.info['theta']['kernel.lengthscale']])
    dvlb, dth = abs(L.vlb + ref.fun) / abs(ref.fun), np.max(np.abs(th - np.exp(ref.x)) / np.exp(ref.x))
    print(f"learned {th}, VLB {L.vlb:.12f}; outer L-BFGS-B {np.exp(ref.x)}, VLB {-ref.fun:.12f}; relative gaps: VLB {dvlb:.1e}, parameters {dth:.1e}")
    assert dvlb < 1e-9 and dth < 1e-6, (dvlb, dth)


# --- the sparse multiclass GP: kernel and inducing inputs (eq. S) ---------------------------------------------------------

def _sparse(n=12, M=4, kernel=None, lik=None, y=None, mean=0.0, seed=4):
    X, yi = _iris(n); rg = np.random.default_rng(seed)
    Z = X[rg.choice(n, M, replace=False)] + 0.2 * rg.standard_normal((M, X.shape[1]))
    return MultiSparseGP(X, yi if y is None else y, lik or Softmax(3), kernel or RBF(1.0, 1.3), Z, mean=mean)


def test_sparse_parameters_names_fixed_and_build():
    "Names (kernel, then Z[i,j], then the mean), `fixed`, `learn_inducing`, and build(θ0) is the model itself; bad input refused by name."
    from vgi_lit.kernels import Linear
    sg = _sparse(M=2)
    hp = MultiHyperParams(sg, learn_mean=True)
    assert hp.names == ["kernel.variance", "kernel.lengthscale"] + [f"Z[{i},{j}]" for i in range(2) for j in range(4)] + ["mean"]
    assert MultiHyperParams(sg, fixed={"Z"}).fixed == tuple(f"Z[{i},{j}]" for i in range(2) for j in range(4))
    assert MultiHyperParams(sg, fixed={"Z[1,2]"}).fixed == ("Z[1,2]",)
    assert MultiHyperParams(sg, learn_inducing=False).names == ["kernel.variance", "kernel.lengthscale"]
    b = hp.build(hp.theta0)
    assert type(b) is MultiSparseGP and np.array_equal(b.Z, sg.Z) and b.jitter == pytest.approx(sg.jitter, rel=1e-12)
    q = fit(sg, 'fpi', tol=1e-9)
    assert abs(multi_vlb(b, q.m, MultiCov(b, q.cov.lam))[0] - q.vlb) < 1e-10 * abs(q.vlb)
    with pytest.raises(ValueError, match="no inducing inputs"): learn_multi(MultiGP(*_iris(12), Softmax(3), RBF()), learn_inducing=True)
    with pytest.raises(ValueError, match="learn_inducing must be"): learn_multi(sg, learn_inducing="yes")
    with pytest.raises(TypeError, match="stationary kernel"): learn_multi(_sparse(kernel=Linear(1.0)))
    with pytest.raises(ValueError, match="unknown parameter 'Z'"): learn_multi(sg, learn_inducing=False, fixed={"Z"})
    with pytest.raises(TypeError, match="inner must be a dict"): learn_multi(sg, inner=[("tol", 1e-6)])


@pytest.mark.slow
def test_sparse_gradient_matches_differences_of_the_optimal_vlb():
    "ARD RBF kernel, Z and the constant mean free: the envelope gradient against central differences of the optimal VLB."
    assert _fd_dir(_sparse(kernel=RBF(1.0, [1.0, 1.5, 1.0, 0.8]), mean=0.2), learn_mean=True, seed=1) < 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("case", ["matern", "gaussian_noise", "M1"])
def test_sparse_gradient_sweep(case):
    "A Matérn-5/2 kernel; multi-output Gaussian noise learned with the kernel and Z; a single inducing input."
    from vgi_lit.kernels import Matern52
    if case == "matern": m, kw = _sparse(kernel=Matern52(0.8, 1.1), M=5), {}
    elif case == "gaussian_noise":
        X, _ = _iris(12); m, kw = _sparse(lik=MultiGaussian(SE), y=_outputs(X)), dict(learn_mean=True)
    else: m, kw = _sparse(M=1), {}
    for seed in (0, 1): assert _fd_dir(m, seed=seed, **kw) < 1e-6, (case, seed)


@pytest.mark.slow
def test_sparse_with_z_equal_x_learns_the_dense_kernel():
    """With Z = X held and no jitter the sparse model is the dense MultiGP term for term: fit(..., learn=True) learns the same
    kernel and VLB (30 flowers, the default softmax rule), and the GRAD inner route the same optimum as FPi. The VLBs agree to
    1e-9; the kernels to 1e-5 relative: both outer runs stop at ‖∇F‖∞ ≤ 1e-7 in the log-parameters, which leaves them 1.0e-6
    apart in the variance (about 81, the classes nearly separated: F is flat that way)."""
    X, y = _iris(30)
    s = fit(MultiSparseGP(X, y, Softmax(3), RBF(1.0, 1.0), X, jitter=0.0), learn=True, fixed={"Z"}, tol=1e-7)
    d = fit(MultiGP(X, y, Softmax(3), RBF(1.0, 1.0), jitter=0.0), learn=True, tol=1e-7)
    assert s.converged and d.converged and abs(s.vlb - d.vlb) <= 1e-9 * abs(d.vlb), (s.vlb, d.vlb)
    for k, v in d.info['theta'].items(): assert abs(s.info['theta'][k] - v) <= 1e-5 * v, (k, s.info['theta'][k], v)
    Z0 = X[::6] + 0.1
    a = learn_multi(MultiSparseGP(X, y, Softmax(3), RBF(1.0, 1.0), Z0), tol=1e-6)
    b = learn_multi(MultiSparseGP(X, y, Softmax(3), RBF(1.0, 1.0), Z0), method="grad", tol=1e-6, inner=dict(tol=1e-9))
    assert abs(a.vlb - b.vlb) <= 1e-7 * abs(a.vlb), (a.vlb, b.vlb)
    assert a.vlb > fit(MultiSparseGP(X, y, Softmax(3), RBF(1.0, 1.0), Z0), 'fpi', tol=1e-9).vlb


@pytest.mark.parametrize("chunk", [1 << 20, 40])
def test_sparse_adjoint_by_pairs_equals_the_double_sum(chunk, monkeypatch):
    """Ā of (S) by pairs c ≤ c' (one product per chunk of rows) equals the plain double sum over (c, c') as one einsum,
    on 60 iris rows with M = 7 and a random q, in one chunk and in chunks of 40 / (6 · 7) → 1 row."""
    from vgi_lit.methods import multi_hyper
    monkeypatch.setattr(multi_hyper, "_PAIR_CHUNK", chunk)
    sg = _sparse(n=60, M=7, mean=0.2); rg = np.random.default_rng(9)
    lq = rg.standard_normal((60, 3, 3)); lq = lq @ np.swapaxes(lq, 1, 2) / 3
    cov, m = MultiCov(sg, lq), 0.5 * rg.standard_normal(sg.d)
    Abar, Bbar, trG, dmean = multi_hyper.multi_sparse_adjoint(sg, m, cov)
    A, R = multi_prior_adjoint(sg, m, cov); H = sg.X
    _, gm, GV = sg.likelihood.expected_log_lik(sg.y, sg.site_mean(m), cov.site_cov())
    Ki = np.linalg.solve(sg.priors[0].dense(), np.eye(7))
    ref = gm @ R + 2.0 * np.einsum('icd,ip,cpdq->iq', GV, H, cov.dense().reshape(3, 7, 3, 7) @ Ki) - 2.0 * np.trace(GV, axis1=1, axis2=2)[:, None] * H
    np.testing.assert_allclose(Abar, ref, rtol=1e-9, atol=1e-12 * np.max(np.abs(ref)))
