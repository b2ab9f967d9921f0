"""Models are values, and awkward input is refused by name.

A model copies its data at construction and keeps them read-only, so editing the user's arrays afterwards
never changes a model (or the quantities it caches), and editing the model's arrays raises. Each
awkward input below gets one ValueError or TypeError that names the mistake."""
import warnings

import numpy as np
import pytest

from vgi_lit.inference import fit
from vgi_lit.kernels import RBF
from vgi_lit.likelihoods import Logistic, Poisson
from vgi_lit.models import GLM, GP, SparseGP, PriorCov
from vgi_lit.vlb import vlb
from vgi_lit.covariance import DenseCov


def _glm_data(seed=3, n=60):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 4))
    y = np.where(X[:, 0] - .5 * X[:, 1] + .3 * rng.standard_normal(n) > 0, 1., -1.)
    return X, y


# ---- 1. the model is a value ------------------------------------------------------------------------------

def test_editing_the_users_X_does_not_change_a_fitted_glm():
    X, y = _glm_data()
    model = GLM(X, y, Logistic())
    before = fit(model).vlb
    X *= 3.0                                                   # the user edits their own array
    again, by_grad = fit(model, "fpi").vlb, fit(model, "grad").vlb
    assert again == pytest.approx(before, rel=1e-9)            # the model still holds the old problem
    assert by_grad == pytest.approx(before, rel=1e-6)          # and every method sees the same one
    new = fit(GLM(X, y, Logistic()), "fpi").vlb                # the edited data make a different problem
    assert abs(new - before) > 1.0


def test_editing_the_users_X_does_not_change_gp_predictions():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((30, 2)); y = np.where(X[:, 0] > 0, 1.0, -1.0); Xs = rng.standard_normal((5, 2))
    post = fit(GP(X, y, Logistic(), RBF(1.0, 1.0)))
    m0, v0 = post.predict(Xs)
    X += 1.0
    m1, v1 = post.predict(Xs)
    np.testing.assert_array_equal(m0, m1); np.testing.assert_array_equal(v0, v1)


class _MutableRBF:
    "A user's kernel whose lengthscale can be edited in place."
    def __init__(self, ls): self.ls = ls
    def K(self, A, B=None): return RBF(1.0, self.ls).K(A, B)
    def Kdiag(self, A): return RBF(1.0, self.ls).Kdiag(A)


def test_editing_the_users_kernel_does_not_change_a_gp():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((20, 1)); y = np.where(X[:, 0] > 0, 1.0, -1.0); Xs = np.linspace(-2, 2, 7)[:, None]
    kern = _MutableRBF(1.0)
    post = fit(GP(X, y, Logistic(), kern))
    m0, v0 = post.predict(Xs)
    kern.ls = 0.1                                             # the prior K was built with lengthscale 1
    m1, v1 = post.predict(Xs)
    np.testing.assert_array_equal(m0, m1); np.testing.assert_array_equal(v0, v1)


def test_editing_the_users_y_does_not_change_a_poisson_model():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((25, 3)); y = rng.poisson(2.0, 25).astype(float)
    model = GLM(X, y, Poisson(), prior_cov=0.5)
    y[0] = -5.0                                                # not a count: would make the VLB -inf
    assert model.y[0] >= 0
    assert np.isfinite(vlb(model, np.zeros(3), DenseCov(0.3 * np.eye(3))))
    assert np.isfinite(fit(model).vlb)


def _all_models():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((15, 2)); y = np.where(X[:, 0] > 0, 1.0, -1.0)
    return [GLM(X, y, Logistic(), prior_cov=rng.uniform(0.5, 1, 2)), GLM(X, y, Logistic(), prior_cov=np.eye(2)),
            GP(X, y, Logistic(), RBF(1.0, 1.0), mean=0.3), SparseGP(X, y, Logistic(), RBF(1.0, 1.0), X[::3])]


@pytest.mark.parametrize("i", range(4))
def test_the_models_arrays_are_read_only(i):
    model = _all_models()[i]
    arrays = {"X": model.X, "y": model.y, "mu": model.mu, "a": model.a, "c": model.c}
    if model.H is not None: arrays["H"] = model.H
    if hasattr(model, "Z"): arrays["Z"] = model.Z
    if model.prior.kind == "dense": arrays["prior.L"] = model.prior.L
    for name, arr in arrays.items():
        with pytest.raises(ValueError, match="read-only"):
            arr[(0,) * arr.ndim] = 1.0
    before = model.prior.dense()
    model.prior.dense()[0, 0] += 1.0; model.prior.diag()[0] += 1.0    # copies: editing them changes nothing
    np.testing.assert_array_equal(model.prior.dense(), before)


def test_a_model_built_from_another_models_arrays_is_independent():
    X, y = _glm_data()
    a = GLM(X, y, Logistic()); b = GLM(a.X, a.y, Logistic())
    assert np.shares_memory(a.X, b.X) or not b.X.flags.writeable    # sharing a frozen array is safe
    assert not b.X.flags.writeable


# ---- 2. awkward input, one clear error --------------------------------------------------------------------

X2 = np.random.default_rng(5).standard_normal((10, 2))
Y2 = np.where(X2[:, 0] > 0, 1.0, -1.0)


def test_empty_gp_is_refused_by_name():
    with pytest.raises(ValueError, match="no rows"):
        GP(np.zeros((0, 2)), np.zeros(0), Logistic(), RBF())


def test_empty_inducing_set_is_refused_by_name():
    with pytest.raises(ValueError, match="Z has no rows"):
        SparseGP(X2, Y2, Logistic(), RBF(), np.zeros((0, 2)))


@pytest.mark.parametrize("make, says", [
    (lambda: GP(X2, Y2, Logistic, RBF()), r"Logistic\(\)"),
    (lambda: GLM(X2, Y2, Logistic), r"Logistic\(\)"),
    (lambda: GP(X2, Y2, Logistic(), RBF), r"RBF\(\)"),
    (lambda: SparseGP(X2, Y2, Logistic(), RBF, X2[:3]), r"RBF\(\)"),
])
def test_a_class_instead_of_an_instance_is_refused(make, says):
    with pytest.raises(TypeError, match=says):
        make()


class _SklearnLike:
    "The scikit-learn kernel interface: k(X, Y=None) and k.diag(X), no K / Kdiag."
    def __call__(self, X, Y=None): return RBF().K(X, Y)
    def diag(self, X): return RBF().Kdiag(X)


@pytest.mark.parametrize("kernel, says", [(_SklearnLike(), "scikit-learn"), (object(), "K"), ("rbf", "K")])
def test_an_object_without_K_and_Kdiag_is_refused(kernel, says):
    with pytest.raises(TypeError, match=says):
        GP(X2, Y2, Logistic(), kernel)
    with pytest.raises(TypeError, match=says):
        SparseGP(X2, Y2, Logistic(), kernel, X2[:3])


def test_a_likelihood_without_check_y_is_refused():
    with pytest.raises(TypeError, match="likelihood"):
        GLM(X2, Y2, "logistic")


def test_fit_none_is_refused():
    with pytest.raises(TypeError, match="model"):
        fit(None)
    with pytest.raises(TypeError, match="model"):
        fit(X2, "fpi")


@pytest.mark.parametrize("mean", ["a", None, [1.0, 2.0], float("nan")])
def test_a_bad_mean_is_refused_by_name(mean):
    with pytest.raises(ValueError, match="mean"):
        GP(X2, Y2, Logistic(), RBF(), mean=mean)


def test_complex_inputs_are_refused_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for make in (lambda: GLM(X2 + 1j, Y2, Logistic()), lambda: GP(X2 + 0j, Y2, Logistic(), RBF()),
                     lambda: SparseGP(X2, Y2, Logistic(), RBF(), X2[:3] + 1j)):
            with pytest.raises(TypeError, match="complex"):
                make()
        post = fit(GLM(X2, Y2, Logistic()))
        with pytest.raises(TypeError, match="X_new.*complex"):
            post.predict(X2 + 1j)


@pytest.mark.parametrize("i", range(4))
def test_X_new_with_the_wrong_number_of_columns_is_named(i):
    post = fit(_all_models()[i])
    with pytest.raises(ValueError, match="X_new has 3 columns") as e:
        post.predict(np.zeros((4, 3)))
    assert "X2" not in str(e.value)


@pytest.mark.parametrize("kind", ["glm", "gp", "sgp"])
def test_one_input_models_predict_at_a_1d_X_new(kind):
    rng = np.random.default_rng(6)
    x = rng.standard_normal(20); y = np.where(x > 0, 1.0, -1.0); xs = np.linspace(-1, 1, 5)
    model = {"glm": lambda: GLM(x, y, Logistic()), "gp": lambda: GP(x, y, Logistic(), RBF()),
             "sgp": lambda: SparseGP(x, y, Logistic(), RBF(), x[::4])}[kind]()
    post = fit(model)
    for a, b in zip(post.predict(xs), post.predict(xs[:, None])): np.testing.assert_array_equal(a, b)
    assert post.predict_y(xs).shape == (5,)


def test_a_1d_X_new_for_a_multi_input_model_is_refused_by_name():
    post = fit(GLM(X2, Y2, Logistic()))
    with pytest.raises(ValueError, match=r"X_new is 1-d.*\(n_new, 2\)"):
        post.predict(np.zeros(2))


class _Frame:
    "The two things a model reads from a data frame: its column names and its values."
    def __init__(self, data, columns): self._a, self.columns = np.asarray(data, float), list(columns)
    def __array__(self, dtype=None, copy=None): return self._a if dtype is None else self._a.astype(dtype)
    def __len__(self): return len(self._a)


def _frame_checks(frame):
    rng = np.random.default_rng(7)
    A = rng.standard_normal((20, 3)); y = np.where(A[:, 0] - A[:, 2] > 0, 1.0, -1.0); As = rng.standard_normal((4, 3))
    for model in (GLM(frame(A, ["a", "b", "c"]), y, Logistic()), GP(frame(A, ["a", "b", "c"]), y, Logistic(), RBF())):
        assert tuple(model.feature_names) == ("a", "b", "c")
        post = fit(model)
        ref = post.predict(As)                                            # a plain array: by position
        for a, b in zip(ref, post.predict(frame(As, ["a", "b", "c"]))): np.testing.assert_array_equal(a, b)
        with pytest.raises(ValueError, match="X_new.*columns.*order"):
            post.predict(frame(As[:, [1, 0, 2]], ["b", "a", "c"]))       # reordered
        with pytest.raises(ValueError, match="X_new.*columns"):
            post.predict(frame(As, ["a", "b", "d"]))                      # different
    assert GLM(A, y, Logistic()).feature_names is None


def test_data_frame_columns_are_remembered_and_checked():
    _frame_checks(_Frame)


def test_pandas_data_frame_columns_are_remembered_and_checked():
    pd = pytest.importorskip("pandas")
    _frame_checks(lambda a, cols: pd.DataFrame(a, columns=cols))


# ---- 3. cost: the dense prior is checked once, cheaply ------------------------------------------------------

def test_dense_prior_construction_does_no_elementwise_allclose(monkeypatch):
    "The n x n symmetry test is one tiled pass, not np.allclose (several n x n temporaries), and runs once."
    def refuse(*a, **k): raise AssertionError("np.allclose/isclose on the prior covariance")
    monkeypatch.setattr(np, "allclose", refuse); monkeypatch.setattr(np, "isclose", refuse)
    rng = np.random.default_rng(8); X = rng.standard_normal((300, 2))
    GP(X, np.where(X[:, 0] > 0, 1.0, -1.0), Logistic(), RBF())
    A = rng.standard_normal((300, 300)); PriorCov(A @ A.T + np.eye(300), 300)


@pytest.mark.parametrize("n", [1, 5, 300, 1100])
def test_dense_prior_symmetry_check_still_refuses_asymmetry(n):
    rng = np.random.default_rng(n); A = rng.standard_normal((n, n)); S = A @ A.T + n * np.eye(n)
    P = PriorCov(S, n)
    np.testing.assert_array_equal(P.dense(), P.dense().T)
    np.testing.assert_allclose(P.dense(), S, rtol=1e-14, atol=1e-14 * n)
    if n > 1:
        B = S.copy(); B[n - 1, 0] += 1e-6 * np.abs(S).max()                    # one entry, far corner
        with pytest.raises(ValueError, match="not symmetric"):
            PriorCov(B, n)
    C = S.copy(); C[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        PriorCov(C, n)


def test_sparse_design_matrix_kept_sparse_by_glm_refused_by_name_elsewhere():
    "A GLM keeps a scipy.sparse X as CSR (other formats converted); NaN among its entries is named; a GP refuses it by name."
    import scipy.sparse as sps
    from vgi_lit.models import GLM, GP
    from vgi_lit.likelihoods import Logistic
    from vgi_lit.kernels import RBF
    X = sps.random(20, 5, density=0.3, format="csr", random_state=0)
    for F in (X, X.tocsc(), X.tocoo()):
        g = GLM(F, np.ones(20), Logistic())
        assert g.sites.kind == "csr" and g.H.format == "csr" and np.array_equal(g.H.toarray(), X.toarray())
        assert not g.H.data.flags.writeable
    Xn = X.copy(); Xn.data[3] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or inf"): GLM(Xn, np.ones(20), Logistic())
    with pytest.raises(ValueError, match="rows but y"): GLM(X, np.ones(19), Logistic())
    with pytest.raises(TypeError, match=r"X is a scipy.sparse matrix .*toarray"):
        GP(X, np.ones(20), Logistic(), RBF())


class _Categorical:
    "The part of a pandas Categorical a model sees: dtype 'category', its categories, and its values through __array__."
    dtype = "category"
    def __init__(self, values): self._v = np.asarray(values); self.categories = sorted(set(self._v.tolist()))
    def __array__(self, dtype=None, copy=None): return self._v if dtype is None else self._v.astype(dtype)
    def __len__(self): return len(self._v)


@pytest.mark.parametrize("values", [np.where(Y2 > 0, "g", "b"), Y2.astype(int)])
@pytest.mark.parametrize("kind", ["glm", "gp", "sgp"])
def test_a_categorical_y_is_refused_by_name(kind, values):
    "Numeric categories used to pass as their values (np.asarray), string ones as 'strings': both are named as a categorical."
    make = {"glm": lambda y: GLM(X2, y, Logistic()), "gp": lambda y: GP(X2, y, Logistic(), RBF()),
            "sgp": lambda y: SparseGP(X2, y, Logistic(), RBF(), X2[:3])}[kind]
    with pytest.raises(ValueError, match="categorical with categories"):
        make(_Categorical(values))


def test_a_real_pandas_categorical_is_refused_by_name():
    pd = pytest.importorskip("pandas")
    for y in (pd.Categorical(np.where(Y2 > 0, "g", "b")), pd.Series(pd.Categorical(Y2.astype(int)))):
        with pytest.raises(ValueError, match="categorical"):
            GLM(X2, y, Logistic())


def test_every_prior_structure_answers_matrix_read_only():
    """`PriorCov.matrix` (what `K_site` of a GP returns) is Σ as a read-only d × d array for every structure: the dense one's
    own array (the same object each call), a new one for a scalar or a diagonal Σ."""
    import numpy as np
    from vgi_lit.models import PriorCov
    for cov in (2.0, np.array([1.0, 2.0, 3.0]), np.diag([2.0, 3.0, 4.0]) + 0.5):
        c = PriorCov(cov, 3)
        M = c.matrix()
        assert np.array_equal(M, c.dense()) and not M.flags.writeable
        if c.is_dense: assert c.matrix() is M


class _SkewedRBF(RBF):
    "A user's subclass of a library kernel whose K(X, X) is not symmetric: not `exact_symmetric`, so it is checked."
    def _K(self, A, B, same):
        K = super()._K(A, B, same)
        return K + 0.05 * np.triu(K, 1) if same else K


class _Plain:
    "A kernel with only K and Kdiag (the checked path), wrapping a library kernel."
    def __init__(self, k): self.k = k
    def K(self, A, B=None): return self.k.K(A, B)
    def Kdiag(self, A): return self.k.Kdiag(A)


def test_kernel_prior_without_symmetry_pass_same_as_checked_and_bad_kernels_still_refused():
    from vgi_lit.kernels import Matern32, Linear, exact_symmetric
    rng = np.random.default_rng(4); X = rng.standard_normal((80, 3)); X[5] = X[1]; y = np.where(X[:, 0] > 0, 1.0, -1.0)
    for k in (RBF(1.3, [0.5, 1.0, 2.0]), Matern32(0.7, 1.1) * Linear(0.3) + RBF(0.2, 0.4)):
        assert exact_symmetric(k) and not exact_symmetric(_Plain(k))
        a, b = GP(X, y, Logistic(), k).prior, GP(X, y, Logistic(), _Plain(k)).prior
        assert np.array_equal(a.L, b.L) and np.array_equal(a.matrix(), b.matrix()) and a.jitter == b.jitter
        assert not a.matrix().flags.writeable and not a.L.flags.writeable
        s = SparseGP(X, y, Logistic(), k, X[:12]).prior; t = SparseGP(X, y, Logistic(), _Plain(k), X[:12]).prior
        assert np.array_equal(s.L, t.L) and np.array_equal(s.matrix(), t.matrix())
    assert not exact_symmetric(_SkewedRBF())
    with pytest.raises(ValueError, match="kernel matrix K.X, X. is not symmetric"):
        GP(X, y, Logistic(), _SkewedRBF())
    with pytest.raises(ValueError, match="inducing kernel matrix K.Z, Z. is not symmetric"):
        SparseGP(X, y, Logistic(), _SkewedRBF(), X[:12])
    with pytest.raises(ValueError, match=r"K\(X, X\) \(80x80\) is not positive definite even with jitter 0 added.*eigenvalue"):
        GP(np.repeat(X[:40], 2, axis=0), y, Logistic(), RBF(), jitter=0.0)        # repeated inputs: K singular, no jitter
    with pytest.raises(ValueError, match=r"K\(Z, Z\) \(3x3\) is not positive definite even with jitter 0 added"):
        SparseGP(X[:, :1], y, Logistic(), Linear(1.0), X[:3, :1], jitter=0.0)          # rank one: K(Z, Z) = zzᵀ is singular
