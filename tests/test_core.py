"""Sweeps over seeds, shapes and spaces for the core: prior covariance, posterior representations,
VLB gradients and GRAD, each against an independent dense computation."""
import numpy as np
import pytest
from scipy.stats import multivariate_normal

from vgi_lit.quadrature import gh_nodes
from vgi_lit.linalg import cholesky
from vgi_lit.vlb import kl_gauss
from vgi_lit.kernels import RBF
from vgi_lit.likelihoods import Likelihood, Logistic
from vgi_lit.models import GLM, GP, SparseGP, PriorCov
from vgi_lit.covariance import DenseCov, SiteCov, as_cov
from vgi_lit.vlb import site_terms, vlb, grad_m, grad_L, kl_to_prior
from vgi_lit.methods.grad import fit_grad


class AnyY(Likelihood):                     # the protocol's attributes from the base class, its defaults unless set
    def check_y(self, y): return np.asarray(y, float)


class GaussSite(AnyY):
    def __init__(self, s2): self.s2 = s2
    def expected_log_lik(self, y, m, v):
        return (-0.5 * np.log(2 * np.pi * self.s2) - ((y - m) ** 2 + v) / (2 * self.s2),
                (y - m) / self.s2, np.full_like(m, -0.5 / self.s2))


class GHPoisson(AnyY):
    curvature_bounded, log_link = False, True
    "Closed-form Poisson site written independently of the library (E = y m - exp(m + v/2) - log y!)."
    def expected_log_lik(self, y, m, v):
        from scipy.special import gammaln
        r = np.exp(m + v / 2)
        return y * m - r - gammaln(y + 1), y - r, -r / 2


def models(seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(30, 4))
    A = rng.normal(size=(4, 4))
    Xg = rng.uniform(-2, 2, size=(15, 2))
    yield GLM(X, rng.normal(size=30), AnyY(), prior_cov=0.3)
    yield GLM(X, rng.normal(size=30), AnyY(), prior_mean=rng.normal(size=4), prior_cov=rng.uniform(0.1, 2, 4))
    yield GLM(X, rng.normal(size=30), AnyY(), prior_cov=A @ A.T + np.eye(4))
    yield GLM(rng.normal(size=(6, 11)), rng.normal(size=6), AnyY(), prior_cov=0.5)
    yield GP(Xg, rng.normal(size=15), AnyY(), RBF(1.7, [0.6, 1.2]), mean=0.3)
    yield SparseGP(Xg, rng.normal(size=15), AnyY(), RBF(1.7, 0.9), Xg[::3], mean=-0.2)


@pytest.mark.parametrize("seed", range(4))
def test_sitecov_matches_dense_in_both_spaces(seed):
    rng = np.random.default_rng(100 + seed)
    for model in models(seed):
        lam = rng.exponential(size=model.n) * rng.choice([0, 1, 100], size=model.n)
        Hd = np.eye(model.n) if model.H is None else model.H
        S = model.prior.dense()
        V = np.linalg.inv(np.linalg.inv(S) + Hd.T @ (lam[:, None] * Hd))
        for space in "dn":
            cov = SiteCov(model, lam, space=space)
            np.testing.assert_allclose(cov.dense(), V, rtol=1e-7, atol=1e-9)
            np.testing.assert_allclose(cov.site_var(), model.c + np.einsum("ij,jk,ik->i", Hd, V, Hd), rtol=1e-7, atol=1e-9)
            assert cov.logdet() == pytest.approx(np.linalg.slogdet(V)[1], abs=1e-7)
            assert cov.trace_prior_inv() == pytest.approx(np.trace(np.linalg.solve(S, V)), abs=1e-7)
            m = rng.normal(size=model.d)
            assert kl_to_prior(model, m, cov) == pytest.approx(kl_gauss(m, V, model.mu, S), rel=1e-8, abs=1e-8)


def test_sitecov_rejects_bad_lambda():
    model = next(models(0))
    with pytest.raises(ValueError, match="non-negative"):
        SiteCov(model, -np.ones(model.n))
    with pytest.raises(ValueError, match="shape"):
        SiteCov(model, np.ones(model.n + 1))
    with pytest.raises(ValueError, match="NaN"):
        SiteCov(model, np.full(model.n, np.nan))


@pytest.mark.parametrize("seed", range(3))
def test_vlb_gradients_finite_differences(seed):
    rng = np.random.default_rng(seed)
    for model in models(seed):
        model.likelihood = GHPoisson()
        model.y = rng.poisson(2.0, size=model.n).astype(float)
        m = 0.3 * rng.normal(size=model.d)
        L = np.tril(0.2 * rng.normal(size=(model.d, model.d))) + 0.8 * np.eye(model.d)
        t = site_terms(model, m, DenseCov(L))
        gm, gL = grad_m(model, m, t), grad_L(model, L, t)
        h = 1e-6
        f = lambda m_, L_: vlb(model, m_, DenseCov(L_))
        for j in rng.choice(model.d, size=min(model.d, 4), replace=False):
            e = np.zeros(model.d); e[j] = h
            assert gm[j] == pytest.approx((f(m + e, L) - f(m - e, L)) / (2 * h), rel=1e-5, abs=1e-6)
        rows, cols = np.tril_indices(model.d)
        for k in rng.choice(len(rows), size=6, replace=False):
            E = np.zeros_like(L); E[rows[k], cols[k]] = h
            assert gL[rows[k], cols[k]] == pytest.approx((f(m, L + E) - f(m, L - E)) / (2 * h), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_grad_gaussian_glm_is_exact_posterior(seed):
    rng = np.random.default_rng(seed)
    n, d = 40, 5
    X = rng.normal(size=(n, d)); y = X @ rng.normal(size=d) + 0.4 * rng.normal(size=n)
    delta, s2 = 0.7, 0.16
    post = fit_grad(GLM(X, y, GaussSite(s2), prior_cov=delta), tol=1e-6, rtol=0.0)   # the gradient test, not the certified gap
    logml = multivariate_normal(np.zeros(n), delta * X @ X.T + s2 * np.eye(n)).logpdf(y)
    assert post.converged and post.info["grad_norm"] <= 1e-6
    assert post.vlb == pytest.approx(logml, rel=1e-10)
    V = np.linalg.inv(np.eye(d) / delta + X.T @ X / s2)
    np.testing.assert_allclose(post.m, V @ X.T @ y / s2, rtol=1e-5, atol=1e-7)
    # predictions: latent mean and variance at new inputs are x* m and x* V x*
    Xs = rng.normal(size=(7, d)); mu_s, var_s = post.predict(Xs)
    np.testing.assert_allclose(mu_s, Xs @ post.m); np.testing.assert_allclose(var_s, np.einsum("ij,jk,ik->i", Xs, post.V, Xs))


def test_history_is_monotone_for_grad_and_timed():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(40, 3)); y = rng.poisson(np.exp(0.3 * X[:, 0])).astype(float)
    post = fit_grad(GLM(X, y, GHPoisson(), prior_cov=0.5), V0=0.1)
    h = post.history
    assert post.converged and len(h) >= 3 and np.all(np.diff(h.time) >= 0)
    assert h.vlb[-1] >= h.vlb[0] and h.vlb[-1] == pytest.approx(post.vlb, abs=1e-9)


def test_bad_inputs_are_named():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 2)); y = rng.normal(size=10)
    cases = [
        (lambda: GLM(X, y[:5], AnyY()), "rows"),
        (lambda: GLM(np.where(X > 1, np.inf, X), y, AnyY()), "NaN or inf"),
        (lambda: GLM(X, y, AnyY(), prior_cov=0.0), "positive"),
        (lambda: GLM(X, y, AnyY(), prior_cov=np.ones(3)), "length"),
        (lambda: GLM(X, y, AnyY(), prior_cov=np.array([[1.0, 0.5], [0.0, 1.0]])), "symmetric"),
        (lambda: GLM(X, y, AnyY(), prior_cov=np.array([[1.0, 2.0], [2.0, 1.0]])), "not positive definite"),
        (lambda: RBF(variance=-1.0), "variance"),
        (lambda: RBF(lengthscale=0.0), "lengthscale"),
        (lambda: GP(X, y, AnyY(), RBF(1.0, [1.0, 1.0, 1.0])), "ARD lengthscale"),
        (lambda: SparseGP(X, y, AnyY(), RBF(), np.ones((3, 5))), "columns"),
        (lambda: GLM(X, y, AnyY()).project(np.ones((2, 3))), "columns"),
        (lambda: cholesky(np.ones((2, 3))), "square"),
        (lambda: gh_nodes(0), "positive integer"),
    ]
    for make, words in cases:
        with pytest.raises(ValueError, match=words):
            make()


def test_kernel_not_pd_reports_jitter():
    X = np.zeros((3, 1))                    # three identical inputs: K has rank one
    with pytest.raises(ValueError, match="jitter"):
        GP(X, np.zeros(3), AnyY(), RBF(1.0, 1.0), jitter=0.0)
    gp = GP(X, np.zeros(3), AnyY(), RBF(1.0, 1.0), jitter=1e-6)
    assert gp.prior.jitter == pytest.approx(1e-6)   # the jitter actually used is recorded


@pytest.mark.parametrize("seed", range(3))
def test_matvec_split_and_data_reduction_match_dense(seed):
    "(V x, Σ⁻¹V x) and diag(Cᵀ S B⁻¹ S C) against explicit inverses, both spaces, λ with zeros and large values."
    rng = np.random.default_rng(200 + seed)
    for model in models(seed):
        lam = rng.exponential(size=model.n) * rng.choice([0, 1, 100], size=model.n)
        Hd = np.eye(model.n) if model.H is None else model.H
        S = model.prior.dense(); Sinv = np.linalg.inv(S)
        V = np.linalg.inv(Sinv + Hd.T @ (lam[:, None] * Hd))
        x = rng.normal(size=model.d)
        for space in "dn":
            cov = SiteCov(model, lam, space=space)
            Vx, SiVx = cov.matvec_split(x)
            np.testing.assert_allclose(Vx, V @ x, rtol=1e-7, atol=1e-9)
            np.testing.assert_allclose(SiVx, Sinv @ (V @ x), rtol=1e-6, atol=1e-8)
            np.testing.assert_allclose(cov.matvec(x), Vx, rtol=1e-10, atol=1e-12)
        cov = SiteCov(model, lam, space="n")
        C = rng.normal(size=(model.n, 3))
        s = np.sqrt(lam)
        ref = np.einsum("ij,jk,ki->i", C.T * s, np.linalg.inv(np.eye(model.n) + s[:, None] * (Hd @ S @ Hd.T) * s), s[:, None] * C)
        np.testing.assert_allclose(cov.data_reduction(C), ref, rtol=1e-8, atol=1e-10)
        with pytest.raises(ValueError, match="shape"):
            cov.data_reduction(C[:, 0])


@pytest.mark.parametrize("n", [1, 2, 95, 96, 97, 200, 301])
def test_tri_inv_and_lapack_cholesky(n):
    from vgi_lit.linalg import tri_inv
    rng = np.random.default_rng(n)
    G = rng.normal(size=(n, n)); A = G @ G.T / n + np.eye(n)
    L = cholesky(A)
    np.testing.assert_allclose(L @ L.T, A, rtol=0, atol=1e-12 * np.abs(A).max())
    assert not np.triu(L, 1).any()
    Li = tri_inv(L)
    np.testing.assert_allclose(Li @ L, np.eye(n), rtol=0, atol=1e-11)
    assert not np.triu(Li, 1).any()
    AF = np.asfortranarray(A); A_copy = A.copy()
    cholesky(A_copy, overwrite=True)                     # an input that is not Fortran-contiguous is copied, not destroyed
    if n > 1: np.testing.assert_array_equal(A_copy, A)
    LF = cholesky(AF, overwrite=True)
    assert np.shares_memory(LF, AF) and np.abs(LF - L).max() <= 1e-12 * np.abs(L).max()
    U = np.array(L) if n > 1 else np.eye(2)
    U[0, -1] = 1.0                                       # an entry above the diagonal
    with pytest.raises(ValueError, match="lower-triangular"):
        tri_inv(U)


def test_gp_predict_latent_direct_route_matches_generic():
    "GP.predict_latent (k** − k*ᵀSB⁻¹Sk*) equals the generic route through project, with λ containing zeros."
    from vgi_lit.models import LGM
    rng = np.random.default_rng(7)
    X = rng.uniform(-2, 2, size=(40, 2))
    gp = GP(X, rng.normal(size=40), AnyY(), RBF(1.3, 0.8), mean=0.4)
    lam = rng.exponential(size=40) * rng.choice([0, 1, 50], size=40)
    cov = SiteCov(gp, lam)
    m = 0.4 + gp.prior.matmul(0.1 * rng.normal(size=40))
    Xs = rng.uniform(-3, 3, size=(30, 2))
    (mu_d, v_d), (mu_g, v_g) = gp.predict_latent(m, cov, Xs), LGM.predict_latent(gp, m, cov, Xs)
    np.testing.assert_allclose(mu_d, mu_g, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(v_d, v_g, rtol=1e-7, atol=1e-10)
    dense = DenseCov(np.linalg.cholesky(cov.dense()))             # a dense V takes the generic route
    np.testing.assert_allclose(gp.predict_latent(m, dense, Xs)[1], v_g, rtol=1e-6, atol=1e-9)


def test_progress_bar_follows_learning_and_keeps_the_callback(capsys):
    "fit(..., progress=True) with learn=True: the bar goes to standard error, the user's callback still sees every outer record."
    import vgi_lit
    from vgi_lit.likelihoods import Logistic
    rng = np.random.default_rng(0); X = rng.normal(size=(30, 2)); y = np.where(X[:, 0] + 0.3 * rng.normal(size=30) > 0, 1.0, -1.0)
    seen = []
    h = vgi_lit.fit(GLM(X, y, Logistic()), method="fpi", learn=True, progress=True, callback=seen.append, max_iter=5)
    err = capsys.readouterr().err
    assert len(seen) == len(h.history) > 0 and "learn fpi" in err and "vlb=" in err
    quiet = vgi_lit.fit(GLM(X, y, Logistic()), method="fpi", learn=True, max_iter=5)
    assert capsys.readouterr().err == "" and quiet.theta == h.theta


def test_as_cov_reads_a_matrix_as_said_and_names_bad_input():
    rng = np.random.default_rng(0)
    for d in (1, 3, 6):
        L = np.tril(rng.normal(size=(d, d))) + 2 * np.eye(d); V = L @ L.T
        np.testing.assert_allclose(as_cov(V).dense(), V, rtol=1e-12)
        np.testing.assert_allclose(as_cov(L, "factor").dense(), V, rtol=1e-12)
        np.testing.assert_allclose(as_cov(V).var_at(None), np.diag(V), rtol=1e-12)
    c = DenseCov(L); assert as_cov(c) is c
    with pytest.raises(ValueError, match="S must be a square matrix"): as_cov(np.ones((2, 3)), name="S")
    with pytest.raises(ValueError, match="S .* not positive definite"): as_cov(-np.eye(2), name="S")
    with pytest.raises(ValueError, match="given must be"): as_cov(np.eye(2), "precision")
    V = L @ L.T                                                   # a factor is used as given: none of these is a lower factor of V
    for bad, msg in ((L.T, "F must be lower triangular"), (V, "F must be lower triangular"), (np.triu(np.ones((2, 2))), "lower triangular"),
                     (np.full((2, 2), np.nan), "F contains NaN"), (np.diag([1.0, 0.0]), "F is singular")):
        with pytest.raises(ValueError, match=msg): as_cov(bad, "factor", name="F")


@pytest.mark.parametrize("seed", [0, 1])
def test_sitecov_set_site_quadratic_gives_the_same_quantities(seed):
    rng = np.random.default_rng(seed)
    model = GLM(rng.normal(size=(25, 6)), np.where(rng.random(25) < 0.5, 1.0, -1.0), Logistic(), prior_cov=rng.uniform(0.3, 2, 6))
    lam = rng.uniform(0, 3, 25); lam[:3] = 0.0
    ref, new = SiteCov(model, lam, space="d"), SiteCov(model, lam, space="d")
    new.set_site_quadratic(np.sum((model.H @ ref.site_factor().T) ** 2, 1))
    assert new.site_quadratic_known and not SiteCov(model, lam, space="d").site_quadratic_known
    np.testing.assert_allclose(new.site_var(), ref.site_var(), rtol=1e-12)
    np.testing.assert_allclose(new.trace_prior_inv(), ref.trace_prior_inv(), rtol=1e-12)
    with pytest.raises(ValueError, match="hv has shape"): new.set_site_quadratic(np.ones(24))
    with pytest.raises(ValueError, match="NaN or inf"): new.set_site_quadratic(np.full(25, np.inf))
    with pytest.raises(ValueError, match="non-negative"): new.set_site_quadratic(np.r_[np.ones(24), -1e-3])
    with pytest.raises(ValueError, match="n-space"): SiteCov(model, lam, space="n").set_site_quadratic(np.ones(25))


@pytest.mark.parametrize("kind", ["scalar", "diag", "dense"])
def test_prior_half_and_half_T_are_the_factor_and_its_transpose(kind):
    "Σ = L Lᵀ: `half` applies L and `half_T` applies Lᵀ, so half(half_T(B)) = Σ B and Bᵀ half(x) = (half_T(B))ᵀ x."
    rng = np.random.default_rng(3); d = 4
    A = rng.standard_normal((d, d))
    cov = {"scalar": 2.5, "diag": rng.random(d) + 0.5, "dense": A @ A.T + d * np.eye(d)}[kind]
    P = PriorCov(cov, d); B = rng.standard_normal((d, 3)); x = rng.standard_normal(d)
    np.testing.assert_allclose(P.half(P.half_T(B)), P.matmul(B), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(B.T @ P.half(x), P.half_T(B).T @ x, rtol=1e-12, atol=1e-12)
    if kind == "dense": np.testing.assert_allclose(P.half_T(B), np.linalg.cholesky(cov).T @ B, rtol=1e-12, atol=1e-12)


def test_progress_bar_shows_the_methods_budget(capsys):
    "fit(progress=True) gives the bar the method's own iteration budget (its default max_iter, + 1 for the start record)."
    import inspect
    import vgi_lit
    from vgi_lit.models import GLM
    from vgi_lit.likelihoods import Logistic
    X = np.random.default_rng(0).normal(size=(30, 2)); y = np.sign(X[:, 0])
    vgi_lit.fit(GLM(X, y, Logistic()), "fpi", progress=True)
    default = inspect.signature(vgi_lit.METHODS["fpi"]).parameters["max_iter"].default
    assert f"/{default + 1}" in capsys.readouterr().err
    vgi_lit.fit(GLM(X, y, Logistic()), "fpi", progress=True, max_iter=7, max_seconds=30)
    err = capsys.readouterr().err
    assert "/8" in err and "/30s" in err, err[-300:]


@pytest.mark.parametrize("n", [1, 47, 48, 49, 59, 60, 64, 65, 127, 128, 200, 257])
@pytest.mark.parametrize("leaf", [1, 7, 48])
def test_tri_inv_plan_agrees_with_lapack_at_every_order(n, leaf):
    from scipy.linalg.lapack import dtrtri
    from vgi_lit.linalg import tri_inv, _tri_inv_inplace, _tri_inv_rec
    rng = np.random.default_rng(n + 1000 * leaf)
    G = rng.normal(size=(n, n)); L = np.linalg.cholesky(G @ G.T / n + np.eye(n))
    ref = dtrtri(L, lower=1)[0]; tol = 1e-12 * np.abs(ref).max()
    for _ in range(2):                                   # the plan made by the first call, reused by the second
        A = np.asfortranarray(L.copy()); _tri_inv_inplace(A, leaf)
        assert np.abs(A - ref).max() <= tol and not np.triu(A, 1).any()
    for Li in (tri_inv(L, leaf=leaf), _tri_inv_rec(L, leaf)):
        assert np.abs(Li - ref).max() <= tol and Li.flags.f_contiguous
    Z = np.asfortranarray(L.copy()); Z[n // 2, n // 2] = 0.0
    with pytest.raises(ValueError, match=f"zero diagonal entry at index {n // 2}"):
        tri_inv(Z, leaf=leaf)


@pytest.mark.parametrize("d", [1, 2, 5, 40])
def test_dense_cov_diagonal_start_matches_the_general_route(d):
    rng = np.random.default_rng(d)
    A = rng.normal(size=(d, d)); prior = PriorCov(A @ A.T / d + np.eye(d), d)
    diag = np.diag(rng.uniform(0.5, 2.0, d))
    dc = DenseCov(diag)
    assert dc.is_diagonal and np.array_equal(dc.L, diag)
    Lg = diag.copy()
    if d > 1: Lg[d - 1, 0] = 1e-200                        # not diagonal: the general route, the same V to rounding
    gc = DenseCov(Lg)
    assert d == 1 or not gc.is_diagonal
    np.testing.assert_allclose(dc.var_at(None), gc.var_at(None), rtol=1e-14)
    np.testing.assert_allclose(dc.trace_prior_inv(prior), gc.trace_prior_inv(prior), rtol=1e-13)
    np.testing.assert_allclose(dc.trace_prior_inv(prior), np.trace(np.linalg.solve(prior.dense(), diag @ diag)), rtol=1e-12)
    H = rng.normal(size=(3, d))
    np.testing.assert_allclose(dc.var_at(H), np.sum((H @ diag)**2, 1), rtol=1e-14)
    if d > 1:
        U = diag.copy(); U[0, d - 1] = 3.0                   # above the diagonal: ignored (tril), so V is diagonal,
        assert not DenseCov(U).is_diagonal and np.array_equal(DenseCov(U).L, diag)   # and the general route takes it
        N = diag.copy(); N[1, 0] = np.nan
        assert not DenseCov(N).is_diagonal
