"""FPi and GRAD for the multi-latent models (`vgi_lit.methods.multiclass`): `fit` dispatch and its errors; (slow) the
optimum of FPi against GRAD and against the independent Newton-Krylov solver of the stationarity conditions, on iris
(GLM and GP) and on a digits subset (GLM, 10 classes); (slow) saving and loading, which the page checks too."""
import numpy as np
import pytest
from sklearn.datasets import load_iris, load_digits
import vgi_lit
from vgi_lit.softmax import Softmax
from vgi_lit.models.multi import MultiGLM, MultiGP
from vgi_lit.kernels import RBF
from vgi_lit.methods.multiclass import fpi_multi, grad_multi, solve_stationarity, MultiPosterior, multi_vlb
from vgi_lit.methods.multiclass import _precision_factor
from vgi_lit.models.multi import MultiCov


def _iris(rows=None):
    X, y = load_iris(return_X_y=True); X = (X - X.mean(0)) / X.std(0)
    return (X, y) if rows is None else (X[rows], y[rows])


def test_fit_dispatch_and_errors():
    X, y = _iris(np.r_[0:4, 50:54, 100:104])
    mod = MultiGLM(X, y, Softmax(3, n_gh=8))
    post = vgi_lit.fit(mod, tol=1e-6)
    assert isinstance(post, MultiPosterior) and post.method == "fpi" and post.converged
    assert post.predict_proba(X).shape == (12, 3)
    with pytest.raises(ValueError, match="available: fpi, grad"): vgi_lit.fit(mod, "dual")
    assert "theta" in vgi_lit.fit(mod, learn=True, max_iter=1).info          # learn=True: learn_multi (vgi_lit.methods.multi_hyper)
    with pytest.raises(TypeError, match="MultiLGM"): fpi_multi(object())
    with pytest.raises(ValueError, match="max_iter"): fpi_multi(mod, max_iter=-1)


def _agree(a, b, tol):
    return np.max(np.abs(a - b)) / np.max(np.abs(b))


@pytest.mark.slow
@pytest.mark.parametrize("latent", ["glm", "gp"])
def test_optimum_on_iris(latent):
    """FPi, GRAD (GLM) and Newton-Krylov agree to 1e-6 relative in m and V on iris (60 rows for the GP). Newton-Krylov
    starts from a coarse FPi point (tol 1e-2), as on digits: from zero its trial points leave the positive-definite
    covariances (the softmax's expectation rejects a negative variance)."""
    X, y = _iris() if latent == "glm" else _iris(np.r_[0:20, 50:70, 100:120])
    mod = MultiGLM(np.c_[np.ones(len(X)), X], y, Softmax(3)) if latent == "glm" else MultiGP(X, y, Softmax(3), RBF(variance=4.0, lengthscale=2.0))
    post = fpi_multi(mod, tol=1e-9, tol_rel=0, max_iter=3000)
    assert post.converged, post.message
    c = fpi_multi(mod, tol=1e-2, anderson=0)
    al0 = mod.likelihood.expected_log_lik(mod.y, mod.site_mean(c.m), c.cov.site_cov())[1]
    m, V, res = solve_stationarity(mod, alpha0=al0, lam0=c.cov.lam)
    assert res < 1e-9 and _agree(m, post.m, 0) < 1e-6 and _agree(V, post.V, 0) < 1e-6, (_agree(m, post.m, 0), _agree(V, post.V, 0))
    if latent == "glm":
        pg = grad_multi(mod, tol=1e-8)
        assert abs(pg.vlb - post.vlb) < 1e-9 * abs(post.vlb) and _agree(pg.m, post.m, 0) < 1e-5


def _digits_glm():
    "A ten-class softmax GLM on a 150-row digits subset: 8 principal directions and an intercept, prior covariance I."
    X, y = load_digits(return_X_y=True); idx = np.random.default_rng(0).choice(len(y), 150, replace=False)
    Xs = X[idx] - X[idx].mean(0); U, s, Vt = np.linalg.svd(Xs, full_matrices=False); Z = U[:, :8] * np.sqrt(len(idx))
    return MultiGLM(np.c_[np.ones(len(idx)), Z], y[idx], Softmax(10), prior_cov=1.0)


@pytest.mark.slow
def test_optimum_on_digits_glm():
    """Ten classes (a 150-row digits subset, 8 principal directions and an intercept): FPi and Newton-Krylov agree to 1e-6.
    Newton-Krylov starts from a coarse FPi point (tol 1e-2; from zero its line search stalls with ten classes) and
    converges to 1e-9 on its own."""
    mod = _digits_glm()
    post = fpi_multi(mod, tol=1e-9, tol_rel=0, max_iter=3000)
    assert post.converged, post.message
    c = fpi_multi(mod, tol=1e-2, anderson=0)
    al0 = mod.likelihood.expected_log_lik(mod.y, mod.site_mean(c.m), c.cov.site_cov())[1]
    m, V, res = solve_stationarity(mod, alpha0=al0, lam0=c.cov.lam, f_tol=1e-9)
    assert _agree(m, post.m, 0) < 1e-6 and _agree(V, post.V, 0) < 1e-6, (res, _agree(m, post.m, 0), _agree(V, post.V, 0))


@pytest.mark.slow
def test_save_and_load(tmp_path):
    "A MultiPosterior (GLM by FPi, GLM by GRAD, GP) saved by vgi_lit.io and loaded predicts the same to the bit; labels checked."
    from vgi_lit.io import save, load
    X, y = _iris(np.r_[0:4, 50:54, 100:104])
    glm, gp = MultiGLM(X, y, Softmax(3, n_gh=6), prior_cov=2.0), MultiGP(X, y, Softmax(3, n_gh=6), RBF(variance=2.0, lengthscale=1.5))
    for name, post, lab in (("f", vgi_lit.fit(glm), ["a", "b", "c"]), ("g", grad_multi(glm, tol=1e-5), None), ("p", vgi_lit.fit(gp), [1.0, 2.0, 5.0])):
        back = load(save(post, tmp_path / f"{name}.npz", labels=lab))
        assert type(back) is MultiPosterior and back.vlb == post.vlb and back.method == post.method
        assert np.array_equal(back.predict_proba(X[::3]), post.predict_proba(X[::3]))
        assert (back.info["labels"] is None) if lab is None else back.info["labels"].tolist() == lab
    with pytest.raises(ValueError, match="3 class labels"): save(post, tmp_path / "x.npz", labels=["a", "b"])
    with pytest.raises(ValueError, match="distinct"): save(post, tmp_path / "x.npz", labels=["a", "a", "b"])


@pytest.mark.slow
def test_anderson_on_digits_glm():
    "Ten classes (the digits subset above): Anderson(5) and the default Anderson(3) reach plain FPi's optimum in under half its iterations (62 -> 21 measured)."
    mod = _digits_glm()
    plain = fpi_multi(mod, tol=1e-6, tol_rel=0, max_iter=3000, anderson=0)
    for acc in (fpi_multi(mod, tol=1e-6, tol_rel=0, max_iter=3000, anderson=5), fpi_multi(mod, tol=1e-6, tol_rel=0, max_iter=3000)):
        assert plain.converged and acc.converged and 2 * acc.n_iter < plain.n_iter, (plain.n_iter, acc.n_iter)
        assert abs(acc.vlb - plain.vlb) <= 1e-8 * abs(plain.vlb) and _agree(acc.m, plain.m, 0) < 1e-4


def test_cv_compare_folds_and_errors():
    "The cross-validation of the experiments page: the same seeded folds for every method, and its bad input."
    from vgi_lit.experiments.multiclass import cv_compare, fit_predict
    a, b = cv_compare("iris", methods=("logreg",), n_splits=3), cv_compare("iris", methods=("logreg",), n_splits=3)
    assert a["logreg"].shape == (3, 3) and np.array_equal(a["logreg"][:, :2], b["logreg"][:, :2])
    with pytest.raises(ValueError, match="name must be one of"): cv_compare("mnist")
    with pytest.raises(ValueError, match="unknown method"): fit_predict("svm", *_iris(), _iris()[0])


@pytest.mark.slow
def test_vg_gp_is_what_vgclassifier_fits():
    "The page's 'vg_gp' column is VGClassifier with the same fixed kernel: the same probabilities on one iris fold."
    from sklearn.model_selection import StratifiedKFold
    from vgi_lit.apps.sklearn import VGClassifier
    from vgi_lit.experiments.multiclass import fit_predict
    X, y = load_iris(return_X_y=True)
    tr, te = next(StratifiedKFold(5, shuffle=True, random_state=0).split(X, y))
    mu, sd = X[tr].mean(0), X[tr].std(0)
    P, _ = fit_predict("vg_gp", (X[tr] - mu) / sd, y[tr], (X[te] - mu) / sd, tol=1e-6)
    clf = VGClassifier(kernel=RBF(variance=4.0, lengthscale=2.0), learn_hyperparameters=False).fit(X[tr], y[tr])
    assert np.max(np.abs(clf.predict_proba(X[te]) - P)) < 1e-5


def _gp5(n=15, seed=0):
    "A five-class softmax GP on n seeded points in two dimensions (two kernels), the Sobol' rule of 256 points."
    rng = np.random.default_rng(seed); y = np.arange(n) % 5
    X = rng.normal(size=(5, 2))[y] * 1.5 + rng.normal(size=(n, 2))
    return MultiGP(X, y, Softmax(5, n_qmc=256), [RBF(variance=3.0), RBF(variance=2.0, lengthscale=2.0)] * 2 + [RBF()])


def test_whitened_space_with_indefinite_blocks():
    """Λ_i with negative eigenvalues and a positive definite posterior precision: whitened and weight space agree with the
    dense inverse, predictions at the training inputs equal the site marginals; site space and a non-PD P are refused."""
    mod = _gp5(); n, C, d = mod.n, mod.C, mod.d; rng = np.random.default_rng(1)
    lam = rng.normal(size=(n, C, C)); lam = lam @ np.swapaxes(lam, 1, 2) / 5 - 0.05 * np.eye(C)
    assert np.linalg.eigvalsh(lam).min() < 0
    Sig = mod.prior_dense(); Vd = np.linalg.inv(np.linalg.inv(Sig) + mod.curvature_sum(lam))
    cu, cw = MultiCov(mod, lam), MultiCov(mod, lam, 'w')
    assert cu.space == 'u'
    for cv in (cu, cw):
        assert np.allclose(cv.dense(), Vd, atol=1e-8) and np.isclose(cv.logdet(), np.linalg.slogdet(Vd)[1])
    assert np.isclose(cu.kl_cov_part(), cw.kl_cov_part(), rtol=1e-9)
    mm = mod.prior_matmul(rng.normal(size=d))
    mean, cov = mod.predict_latent(mm, cu, mod.Xtrain)
    assert np.allclose(mean, mod.site_mean(mm), atol=1e-5) and np.allclose(cov, cu.site_cov(), atol=1e-6)
    with pytest.raises(ValueError, match="positive semi-definite"): MultiCov(mod, lam, 'n')
    with pytest.raises(ValueError, match="not positive definite"): MultiCov(mod, lam - 10 * np.eye(C))


def test_fpi_with_the_exact_curvature_is_stationary():
    """C = 5, the Sobol' rule with the exact Γ: FPi's optimum is a stationary point of the VLB it reports (central
    differences along V and m vanish), Newton-Krylov finds the same point, and predictions work."""
    mod = _gp5()
    post = fpi_multi(mod, tol=1e-10, tol_rel=0)
    assert post.converged and mod.likelihood.curvature == 'exact'
    V, m = post.V, post.m; L = np.linalg.cholesky(V); rng = np.random.default_rng(2)
    def vlb(mm, VV):
        cv = MultiCov(mod, np.zeros((mod.n, 5, 5)), 'w'); cv._V = VV; cv.L = _precision_factor(VV)
        return multi_vlb(mod, mm, cv)[0]
    for _ in range(2):
        Z = rng.normal(size=V.shape); D = L @ (Z + Z.T) @ L.T / 2; u = rng.normal(size=mod.d); h = 1e-5
        assert abs(vlb(m, V + h * D) - vlb(m, V - h * D)) / (2 * h) < 1e-6
        assert abs(vlb(m + h * u, V) - vlb(m - h * u, V)) / (2 * h) < 1e-6
    m2, V2, res = solve_stationarity(mod)
    assert res < 1e-9 and _agree(m2, m, 0) < 1e-6 and _agree(V2, V, 0) < 1e-6
    P = post.predict_proba(mod.Xtrain[:4])
    assert np.allclose(P.sum(1), 1)


def test_precision_factor():
    rng = np.random.default_rng(0); B = rng.normal(size=(6, 6)); V = B @ B.T + 0.1 * np.eye(6)
    L = _precision_factor(V)
    assert np.allclose(L, np.tril(L)) and np.allclose(L @ L.T @ V, np.eye(6))
    with pytest.raises(ValueError, match="GRAD's result"): _precision_factor(V - 10 * np.eye(6))


def test_grad_result_predicts_with_its_own_covariance():
    "GRAD's dense V on a GP (held in weight space) gives predictions at the training inputs equal to its site marginals, not the prior's."
    X, y = _iris(np.r_[0:3, 50:53, 100:103])
    mod = MultiGP(X, y, Softmax(3, n_gh=6), RBF(variance=2.0, lengthscale=1.5))
    post = grad_multi(mod, tol=1e-6)
    mean, cov = post.predict(X)
    assert np.allclose(mean, mod.site_mean(post.m), atol=1e-5) and np.allclose(cov, post.cov.site_cov(), atol=1e-6)
    assert np.max(np.abs(cov - mod.prior_site_cov())) > 1e-2
