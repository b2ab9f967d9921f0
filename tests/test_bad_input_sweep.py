"""The bad-input sweep: every model (GLM, GP, SparseGP) x likelihood x registered method, on tiny data (n = 8).

Each outcome is one of two things: a ValueError whose message names the problem, raised at construction where the
problem is in the data (no fit needed), or a correct result where the input is legal: a finite VLB equal to the shared
`vgi_lit.vlb.vlb` of the returned q, a positive-definite V, an honest stop. Parametrised so that a failure names its case."""
import warnings

import numpy as np
import pytest

from vgi_lit import likelihoods as L
from vgi_lit.inference import METHODS, DegenerateFitWarning, Stop, fit
from vgi_lit.kernels import RBF
from vgi_lit.models import GLM, GP, SparseGP
from vgi_lit.vlb import vlb as shared_vlb

N = 8
_rng = np.random.default_rng(0)
X = _rng.normal(size=(N, 2))
_f = X[:, 0] - 0.5 * X[:, 1]
LIKS = {
    "Gaussian": (lambda: L.Gaussian(0.5), _f + 0.3 * _rng.normal(size=N)),
    "Logistic": (L.Logistic, np.where(_f > 0, 1.0, -1.0)),
    "Probit": (L.Probit, np.where(_f > 0, 1.0, -1.0)),
    "Poisson": (L.Poisson, _rng.poisson(np.exp(_f)).astype(float)),
    "Laplace": (lambda: L.Laplace(1.0), _f + _rng.laplace(size=N)),
    "StudentT": (lambda: L.StudentT(3.0, 0.3), _f + 0.5 * _rng.standard_t(3, size=N)),
    "Exponential": (L.Exponential, _rng.exponential(np.exp(-_f))),
    "StochasticVolatility": (L.StochasticVolatility, _rng.normal(size=N) * np.exp(_f / 2)),
    "Ordinal": (lambda: L.Ordinal([-0.5, 0.5]), np.digitize(_f, [-0.5, 0.5]).astype(float)),
}
KINDS = ("glm", "gp", "sgp")


def make(kind, lik, y, X=X, kernel=None, Z=None):
    kernel = RBF(1.0, 1.0) if kernel is None else kernel
    if kind == "glm": return GLM(X, y, lik)
    if kind == "gp": return GP(X, y, lik, kernel)
    return SparseGP(X, y, lik, kernel, X[:3] if Z is None else Z)


def _refused(build, *says):
    "`build()` raises a ValueError whose message contains each of `says` (case-insensitive), without any warning first."
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError) as e:
            build()
    msg = str(e.value).lower()
    assert all(s.lower() in msg for s in says), f"message {str(e.value)!r} does not name {says}"


# ---- 1. bad data: refused at construction, by name ----------------------------------------------------------

def _with(a, i, v):
    a = np.array(a, dtype=float); a.flat[i] = v; return a


DATA_CASES = [(what, X_, None, says) for what, X_, says in [
    ("X_nan", _with(X, 3, np.nan), ("X", "NaN")), ("X_inf", _with(X, 3, np.inf), ("X", "inf"))]] + \
    [(what, None, fn, says) for what, fn, says in [
        ("y_nan", lambda y: _with(y, 0, np.nan), ("NaN",)), ("y_inf", lambda y: _with(y, 0, np.inf), ("inf",)),
        ("y_short", lambda y: y[:-1], ("rows", "entries")), ("y_column", lambda y: y[:, None], ("1-d",))]]


@pytest.mark.parametrize("what, X_bad, y_fn, says", DATA_CASES, ids=[c[0] for c in DATA_CASES])
@pytest.mark.parametrize("lik", list(LIKS))
@pytest.mark.parametrize("kind", KINDS)
def test_bad_data_is_refused_at_construction(kind, lik, what, X_bad, y_fn, says):
    make_lik, y = LIKS[lik]
    _refused(lambda: make(kind, make_lik(), y if y_fn is None else y_fn(y), X=X if X_bad is None else X_bad), *says)


OUT_OF_SUPPORT = [
    ("Logistic", "two_and_minus_one", lambda y: np.where(y > 0, 2.0, -1.0), ("-1, +1", "2.0")),
    ("Logistic", "three_codes", lambda y: _with(y, 0, 0.0), ("one coding",)),
    ("Probit", "two_and_minus_one", lambda y: np.where(y > 0, 2.0, -1.0), ("-1, +1", "2.0")),
    ("Poisson", "negative_count", lambda y: _with(y, 0, -1.0), ("non-negative integers", "-1")),
    ("Poisson", "non_integer_count", lambda y: _with(y, 0, 1.5), ("non-negative integers", "1.5")),
    ("Exponential", "zero", lambda y: _with(y, 0, 0.0), ("positive", "0.0")),
    ("Exponential", "negative", lambda y: _with(y, 0, -1.0), ("positive", "-1")),
    ("Ordinal", "above_the_last_class", lambda y: _with(y, 0, 3.0), ("0..2", "3.0")),
    ("Ordinal", "negative", lambda y: _with(y, 0, -1.0), ("0..2", "-1")),
    ("Ordinal", "non_integer", lambda y: _with(y, 0, 0.5), ("integers", "0.5")),
    ("Logistic", "strings", lambda y: np.where(y > 0, "g", "b"), ("numeric", "'g'")),
]


@pytest.mark.parametrize("lik, what, y_fn, says", OUT_OF_SUPPORT, ids=[f"{c[0]}-{c[1]}" for c in OUT_OF_SUPPORT])
@pytest.mark.parametrize("kind", KINDS)
def test_labels_outside_the_support_are_refused(kind, lik, what, y_fn, says):
    make_lik, y = LIKS[lik]
    _refused(lambda: make(kind, make_lik(), y_fn(y)), lik.replace("Logistic", "logistic").replace("Probit", "probit"), *says)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lik", ["Logistic", "Probit"])
def test_zero_one_labels_are_the_same_problem(kind, lik):
    "{0, 1} coding is legal: the model holds the {-1, +1} labels and fits the same problem."
    make_lik, y = LIKS[lik]
    a, b = make(kind, make_lik(), y), make(kind, make_lik(), (y + 1) / 2)
    np.testing.assert_array_equal(a.y, b.y)
    assert fit(a, "fpi").vlb == fit(b, "fpi").vlb


class _Kernel:
    "A user's kernel whose K(X, X) is edited by `edit` (cross-covariances and the diagonal stay RBF's)."
    def __init__(self, edit): self.edit = edit
    def K(self, A, B=None):
        K = RBF(1.0, 1.0).K(A, B)
        return K if B is not None else self.edit(K)
    def Kdiag(self, A): return np.diag(self.K(A))


KERNELS = [
    ("nan_entry", lambda K: _with(K, K.shape[1] - 1, np.nan), ("NaN",)),
    ("not_symmetric", lambda K: K + 0.1 * np.triu(np.ones_like(K), 1), ("not symmetric",)),
    ("negative_variance", lambda K: K - 2.0 * np.eye(len(K)), ("not positive definite", "variance")),
    ("indefinite", lambda K: K + 3.0 * (np.ones_like(K) - np.eye(len(K))), ("not positive definite", "eigenvalue")),
]


@pytest.mark.parametrize("what, edit, says", KERNELS, ids=[k[0] for k in KERNELS])
@pytest.mark.parametrize("kind", ["gp", "sgp"])
def test_bad_kernel_matrices_are_refused(kind, what, edit, says):
    make_lik, y = LIKS["Logistic"]
    Z = X[:4]
    _refused(lambda: make(kind, make_lik(), y, kernel=_Kernel(edit), Z=Z), "K(", *says)


@pytest.mark.parametrize("kind", KINDS)
def test_bad_prediction_inputs_are_named(kind):
    make_lik, y = LIKS["Logistic"]
    post = fit(make(kind, make_lik(), y), "fpi")
    _refused(lambda: post.predict(_with(X[:3], 1, np.nan)), "X_new", "NaN")
    _refused(lambda: post.predict(np.zeros((3, 3))), "X_new has 3 columns")
    _refused(lambda: post.log_pred_density(X[:3], y[:3, None]), "y_new")


def test_bad_sparse_gp_inducing_inputs_and_glm_priors_are_named():
    make_lik, y = LIKS["Logistic"]
    _refused(lambda: SparseGP(X, y, make_lik(), RBF(), _with(X[:3], 2, np.nan)), "Z", "NaN")
    _refused(lambda: SparseGP(X, y, make_lik(), RBF(), X[:3, :1]), "Z has 1 columns")
    _refused(lambda: GLM(X, y, make_lik(), prior_cov=np.nan), "prior covariance", "NaN")
    _refused(lambda: GLM(X, y, make_lik(), prior_cov=np.array([[1.0, 2.0], [2.0, 1.0]])), "prior covariance", "positive definite")
    _refused(lambda: GLM(X, y, make_lik(), prior_cov=np.ones(3)), "prior covariance", "length 3")
    _refused(lambda: GLM(X, y, make_lik(), prior_mean=np.nan), "prior mean", "NaN")


# ---- 2. every model x likelihood x method: a refusal by name, or a correct result -----------------------------

GRID = [(k, lk, m) for k in KINDS for lk in LIKS for m in sorted(METHODS)]
_MODELS = {}


def _model(kind, lik):
    if (kind, lik) not in _MODELS:
        make_lik, y = LIKS[lik]; _MODELS[kind, lik] = make(kind, make_lik(), y)
    return _MODELS[kind, lik]


@pytest.mark.parametrize("kind, lik, method", GRID, ids=[f"{k}-{lk}-{m}" for k, lk, m in GRID])
def test_every_method_refuses_by_name_or_returns_a_correct_result(kind, lik, method):
    """20 iterations of every method on legal data: either the method declines the model (a ValueError naming the
    likelihood or the site noise it cannot handle) or the result is a finite q whose reported VLB is the shared VLB
    of that q, with V positive definite and a stop that claims convergence only through the method's own test."""
    model = _model(kind, lik)
    said = DegenerateFitWarning if (method, lik) == ("laplace", "Laplace") else None   # no curvature: V is the prior's, and it says so
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("error")                       # no RuntimeWarning (overflow, invalid value) on the way
        if said: warnings.simplefilter("always", said)
        try:
            post = fit(model, method, max_iter=20)
        except ValueError as e:
            msg = str(e)
            assert type(model.likelihood).__name__ in msg or "c = 0" in msg, f"{method} refused {kind}/{lik} without naming why: {msg}"
            return
    assert not said or any(issubclass(w.category, said) for w in seen), f"{method} on {kind}/{lik} gave no {said.__name__}"
    assert np.all(np.isfinite(post.m)) and np.isfinite(post.vlb), (post.stop, post.message)
    assert post.vlb == pytest.approx(shared_vlb(model, post.m, post.cov), rel=1e-10, abs=1e-10)
    assert np.linalg.eigvalsh(post.V)[0] > 0
    assert isinstance(post.stop, Stop) and post.converged == (post.stop in (Stop.GRAD_TOL, Stop.REL_TOL))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("method", sorted(METHODS))
def test_max_iter_zero_returns_the_start_with_its_true_vlb(kind, method):
    "max_iter=0 asks for the start: Stop.MAX_ITER, not converged, and the reported VLB is the shared VLB of the start."
    model = _model(kind, "Poisson")
    try: post = fit(model, method, max_iter=0)
    except ValueError as e:
        assert "c = 0" in str(e), str(e); return                 # laplace on a sparse GP
    assert post.stop is Stop.MAX_ITER and not post.converged
    assert np.isfinite(post.vlb) and post.vlb == shared_vlb(model, post.m, post.cov)
    if post.objective == "vlb" and method != "dual":           # the dual starts from a dual point, recorded in its own terms
        assert post.history[0].vlb == pytest.approx(post.vlb, rel=1e-12)


BAD_OPTIONS = [("m0_nan", dict(m0=np.array([np.nan, 0.0])), ("m0", "NaN")),
               ("V0_not_pd", dict(V0=np.array([[1.0, 2.0], [2.0, 1.0]])), ("V0",)),
               ("V0_nan", dict(V0=np.nan), ("V0",)),
               ("tol_negative", dict(tol=-1.0), ("tol",)),
               ("max_iter_negative", dict(max_iter=-1), ("max_iter",)),
               ("max_iter_fraction", dict(max_iter=2.5), ("max_iter",)),
               ("max_seconds_zero", dict(max_seconds=0.0), ("max_seconds",))]


@pytest.mark.parametrize("what, opts, says", BAD_OPTIONS, ids=[b[0] for b in BAD_OPTIONS])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_bad_options_are_refused_by_name(method, what, opts, says):
    make_lik, y = LIKS["Logistic"]
    model = _model("glm", "Logistic")
    if method in ("prox", "laplace") and what.startswith("V0"): says = ("V0",)
    _refused(lambda: fit(model, method, **opts), *says)


def test_text_in_X_names_the_text_entry():
    Xo = X.astype(object); Xo[3, 1] = "a"
    with pytest.raises(TypeError, match=r"such as 'a' at index \[3, 1\]"): GLM(Xo, LIKS["Logistic"][1], L.Logistic())


def test_a_short_y_new_is_named_against_the_rows_of_X_new():
    post = fit(GLM(X, LIKS["Logistic"][1], L.Logistic()))
    with pytest.raises(ValueError, match="y_new has 7 entries and X_new 8 rows"): post.log_pred_density(X, LIKS["Logistic"][1][:-1])


def test_a_stochastic_run_that_spends_its_epochs_names_the_option():
    post = fit(GLM(X, LIKS["Poisson"][1], L.Poisson()), "mc-ssvi", max_epochs=1, seed=0)
    assert post.stop is Stop.BUDGET and "raise max_epochs" in post.message and "max_epochs=1" in post.message
