"""Saving and loading fitted posteriors (`vgi_lit.io`): round trips for every model kind and covariance
representation, predictions equal to 1e-12; files that are not posterior files are refused by name."""
import json
import numpy as np
import pytest

import vgi_lit
from vgi_lit.io import save, load, FORMAT_VERSION
from vgi_lit.models import GLM, GP, SparseGP
from vgi_lit.kernels import RBF, Matern52, Linear, White
from vgi_lit.likelihoods import Logistic, Gaussian, Poisson, Laplace, Ordinal, StudentT

RNG = np.random.default_rng(7)
X = RNG.normal(size=(30, 2)); XS = RNG.normal(size=(12, 2))
YB = np.where(X[:, 0] - X[:, 1] + 0.3 * RNG.normal(size=30) > 0, 1.0, 0.0)     # {0, 1} coding, saved as ±1
YR = np.sin(X[:, 0]) + 0.1 * RNG.normal(size=30)
YC = RNG.poisson(np.exp(0.5 * X[:, 0]))

CASES = [
    ("glm-logistic-fpi", lambda: GLM(X, YB, Logistic(), prior_mean=0.2, prior_cov=2.0), "fpi"),
    ("glm-ordinal-grad", lambda: GLM(X, RNG.integers(0, 3, 30), Ordinal([-0.5, 0.5])), "grad"),
    ("glm-poisson-dense-prior", lambda: GLM(X, YC, Poisson(), prior_cov=np.array([[1.0, 0.3], [0.3, 2.0]])), "fpi"),
    ("gp-logistic-fpi", lambda: GP(X, YB, Logistic(), RBF(1.2, [0.5, 2.0]), mean=0.1), "fpi"),
    ("gp-laplace-svi", lambda: GP(X, YR, Laplace(0.3), Matern52() + White(0.01)), "svi"),
    ("gp-gaussian-grad", lambda: GP(X, YR, Gaussian(0.05), RBF() * Linear()), "grad"),
    ("sgp-studentt-fpi", lambda: SparseGP(X, YR, StudentT(4.0, 0.1), RBF(), X[:6], mean=-0.2), "fpi"),
]


@pytest.mark.parametrize("name,make,method", CASES, ids=[c[0] for c in CASES])
def test_round_trip_predictions_equal(tmp_path, name, make, method):
    post = vgi_lit.fit(make(), method)
    back = load(save(post, tmp_path / "p.npz"))
    (m0, v0), (m1, v1) = post.predict(XS), back.predict(XS)
    assert np.max(np.abs(m1 - m0)) <= 1e-12 and np.max(np.abs(v1 - v0)) <= 1e-12
    assert np.max(np.abs(back.predict_y(XS) - post.predict_y(XS))) <= 1e-12
    assert (back.method, back.vlb, back.stop, back.n_iter, type(back.cov)) == (post.method, post.vlb, post.stop, post.n_iter, type(post.cov))
    assert back.model.kind == post.model.kind and np.array_equal(back.model.y, post.model.y)


def test_learned_fit_saves_its_posterior(tmp_path):
    h = vgi_lit.fit(GP(X, YB, Logistic(), RBF()), "fpi", learn=True, max_iter=5)
    back = load(save(h, tmp_path / "h.npz"))
    assert back.model.kernel == h.model.kernel and np.array_equal(back.predict(XS)[0], h.posterior.predict(XS)[0])


def test_feature_names_survive(tmp_path):
    class Frame(np.ndarray):           # the smallest thing with `columns`: a data frame stand-in (pandas is not installed)
        pass
    F = X.view(Frame); F.columns = ("a", "b")
    back = load(save(vgi_lit.fit(GLM(F, YB, Logistic())), tmp_path / "f.npz"))
    assert back.model.feature_names == ("a", "b")


def test_not_a_posterior_file(tmp_path):
    (tmp_path / "t.csv").write_text("a,b\n1,2\n")
    np.savez(tmp_path / "o.npz", x=np.ones(2))
    for f, what in [(tmp_path / "t.csv", "not a NumPy .npz"), (tmp_path / "o.npz", "not a vgi_lit posterior"),
                    (tmp_path / "none.npz", "no such file")]:
        with pytest.raises(ValueError, match=what): load(f)


def test_no_pickle_in_file(tmp_path):
    p = save(vgi_lit.fit(GLM(X, YB, Logistic())), tmp_path / "p.npz")
    with np.load(p, allow_pickle=False) as z:
        assert all(z[k].dtype != object for k in z.files)
        assert json.loads(str(z["settings"]))["version"] == 1                # a dense X: version 1 (FORMAT_VERSION, 2, for a sparse X)


def test_labels_round_trip_and_old_files(tmp_path):
    """Class labels travel in the file (ordinal: one per class; binary: those of y = -1, +1) and survive a second
    save; a file written without the `labels` entry still loads, with none."""
    post = vgi_lit.fit(GLM(X, np.digitize(X[:, 0], [-0.3, 0.4]), Ordinal([-0.5, 0.5])), "fpi")
    back = load(save(post, tmp_path / "o.npz", labels=[1, 3, 5]))
    assert back.info["labels"].tolist() == [1.0, 3.0, 5.0]
    assert load(save(back, tmp_path / "o2.npz")).info["labels"].tolist() == [1.0, 3.0, 5.0]
    binary = vgi_lit.fit(GLM(X, YB, Logistic()), "fpi")
    assert load(save(binary, tmp_path / "b.npz", labels=["no", "yes"])).info["labels"].tolist() == ["no", "yes"]
    assert load(save(binary, tmp_path / "n.npz")).info["labels"] is None
    with np.load(tmp_path / "o.npz") as z: arrays = {k: z[k] for k in z.files}
    settings = json.loads(str(arrays.pop("settings"))); del settings["labels"]
    np.savez(tmp_path / "old.npz", settings=np.array(json.dumps(settings)), **arrays)
    old = load(tmp_path / "old.npz")
    assert old.info["labels"] is None and np.array_equal(old.predict(XS)[0], back.predict(XS)[0])
    for labels, what in [([1, 2], "must be 3 class labels"), ([1, 1, 2], "distinct"), ([1.0, np.nan, 2.0], "NaN")]:
        with pytest.raises(ValueError, match=what): save(post, tmp_path / "x.npz", labels=labels)
    with pytest.raises(ValueError, match="Poisson likelihood has none"):
        save(vgi_lit.fit(GLM(X, YC, Poisson())), tmp_path / "x.npz", labels=[0, 1])


# --- a learned fit (HyperFit) saved whole ----------------------------------------------------------------------------

def _same_hyperfit(back, h):
    "A loaded HyperFit equals the saved one: values, trace, stop, message, counts, model and predictions."
    from vgi_lit.methods.hyper import HyperFit
    from vgi_lit.io import kernel_spec, likelihood_spec
    assert isinstance(back, HyperFit) and back.model is back.posterior.model
    assert back.theta == h.theta and list(back.theta) == list(h.theta)                  # names, order and values exact
    assert (back.stop, back.message, back.n_inner, back.fixed, back.edges) == (h.stop, h.message, h.n_inner, h.fixed, h.edges)
    assert back.history.stop is h.history.stop and len(back.history) == len(h.history)
    assert np.array_equal(back.history.vlb, h.history.vlb) and np.array_equal(back.history.grad_norm, h.history.grad_norm, equal_nan=True)
    for a, b in zip(back.history, h.history):
        assert (a.iter, a.time, a.step, a.events) == (b.iter, b.time, b.step, b.events) and a.extra.keys() == b.extra.keys()
        assert np.array_equal(a["theta"], b["theta"]) and (a["inner_iter"], a["inner_stop"], a["outer_iter"]) == (b["inner_iter"], b["inner_stop"], b["outer_iter"])
    if h.model.kind == "glm": assert np.array_equal(back.model.prior.dense(), h.model.prior.dense()) and np.array_equal(back.model.mu, h.model.mu)
    else: assert kernel_spec(back.model.kernel) == kernel_spec(h.model.kernel) and back.model.mean == h.model.mean
    assert likelihood_spec(back.model.likelihood) == likelihood_spec(h.model.likelihood)
    assert np.array_equal(back.model.X, h.model.X) and np.array_equal(back.model.y, h.model.y)
    assert (back.vlb, back.posterior.stop, back.converged) == (h.vlb, h.posterior.stop, h.converged)
    (m0, v0), (m1, v1) = h.posterior.predict(XS), back.posterior.predict(XS)
    assert np.max(np.abs(m1 - m0)) <= 1e-12 and np.max(np.abs(v1 - v0)) <= 1e-12
    assert np.max(np.abs(back.posterior.predict_y(XS) - h.posterior.predict_y(XS))) <= 1e-12
    assert np.array_equal(back.predict(XS)[0], back.posterior.predict(XS)[0])              # a fit reads like its posterior


def test_learned_fit_round_trips_whole(tmp_path):
    "fit(..., learn=True) saved and loaded: a HyperFit with the same θ (names, values), trace (records, stop), model and predictions."
    h = vgi_lit.fit(GP(X, YB, Logistic(), RBF(1.0, [1.0, 1.0]), mean=0.1), learn=True)
    assert len(h.history) > 3 and "kernel.lengthscale[1]" in h.theta
    _same_hyperfit(load(save(h, tmp_path / "h.npz")), h)


def test_learned_fit_with_likelihood_parameters_fixed_names_and_edges_round_trips(tmp_path):
    "A Student-t GP with df fixed (likelihood parameters in θ, `fixed` kept) and an ARD GP whose irrelevant input ran off (`edges`)."
    h = vgi_lit.fit(GP(X, YR, StudentT(4.0, 0.05), RBF()), learn=True, fixed={"likelihood.df"})
    assert h.fixed == ("likelihood.df",) and h.theta["likelihood.df"] == 4.0
    _same_hyperfit(load(save(h, tmp_path / "t.npz")), h)
    rng = np.random.default_rng(0); X2 = rng.normal(size=(25, 2)); y2 = np.where(np.sin(2 * X2[:, 0]) + 0.3 * rng.normal(size=25) > 0, 1.0, -1.0)
    with pytest.warns(UserWarning, match="kernel.lengthscale"):
        e = vgi_lit.fit(GP(X2, y2, Logistic(), RBF(1.0, [1.0, 1.0])), learn=True)
    assert list(e.edges) == ["kernel.lengthscale[1]"]
    _same_hyperfit(load(save(e, tmp_path / "e.npz")), e)


def test_learned_fit_file_has_no_pickle_and_a_second_save_keeps_it_whole(tmp_path):
    h = vgi_lit.fit(GLM(X, YB, Logistic()), learn=True)
    p = save(h, tmp_path / "g.npz")
    with np.load(p, allow_pickle=False) as z: assert all(z[k].dtype != object for k in z.files)
    back = load(p)
    _same_hyperfit(load(save(back, tmp_path / "g2.npz")), h)


def test_a_result_of_an_unknown_class_is_refused_by_name(tmp_path):
    p = save(vgi_lit.fit(GLM(X, YB, Logistic())), tmp_path / "p.npz")
    with np.load(p) as z: arrays = {k: z[k] for k in z.files}
    settings = json.loads(str(arrays.pop("settings"))); settings["result"] = {"class": "NoSuchFit"}
    np.savez(tmp_path / "r.npz", settings=np.array(json.dumps(settings)), **arrays)
    with pytest.raises(ValueError, match="NoSuchFit"): load(tmp_path / "r.npz")


@pytest.mark.parametrize("lik", ["NegativeBinomial", "ZeroInflatedPoisson"])
def test_count_likelihoods_round_trip(tmp_path, lik):
    "The count likelihoods with a learned parameter save with it and predict the same after loading (generated counts)."
    import vgi_lit
    from vgi_lit import likelihoods as L
    from vgi_lit.models import GLM
    r = np.random.default_rng(0); X = r.normal(size=(50, 2)); y = r.poisson(np.exp(X[:, 0])).astype(float)
    model = GLM(X, y, L.NegativeBinomial(2.0) if lik == "NegativeBinomial" else L.ZeroInflatedPoisson(0.1))
    post = vgi_lit.fit(model)
    back = vgi_lit.io.load(vgi_lit.io.save(post, tmp_path / "c.npz"))
    assert type(back.model.likelihood).__name__ == lik
    assert np.max(np.abs(back.predict_y(X) - post.predict_y(X))) == 0.0 and back.vlb == post.vlb


def test_files_without_a_class_setting_load_as_before(tmp_path):
    """The settings name the saved class (`class`); a file written before that setting existed (a posterior, a learned
    fit) is read by its other fields and loads as the same class with the same predictions."""
    for obj in (vgi_lit.fit(GLM(X, YB, Logistic())), vgi_lit.fit(GLM(X, YB, Logistic()), learn=True, max_iter=3)):
        p = save(obj, tmp_path / "n.npz")
        with np.load(p) as z: arrays = {k: z[k] for k in z.files}
        settings = json.loads(str(arrays.pop("settings")))
        assert settings["class"] == type(obj).__name__
        del settings["class"]
        np.savez(tmp_path / "old.npz", settings=np.array(json.dumps(settings)), **arrays)
        old, new = load(tmp_path / "old.npz"), load(p)
        assert type(old) is type(new) is type(obj) and np.array_equal(old.predict(XS)[0], new.predict(XS)[0])


def test_one_table_of_formats():
    "Every result class is one entry of `FORMATS`; a class registered twice replaces its entry; an object of no registered class is refused by name."
    from vgi_lit.io import FORMATS, register_format
    from vgi_lit.inference import VGPosterior
    from vgi_lit.methods.hyper import HyperFit
    assert FORMATS["VGPosterior"].cls is VGPosterior and FORMATS["HyperFit"].cls is HyperFit
    assert {"PMFPosterior", "CTMPosterior", "GMEPosterior"} <= set(FORMATS)
    with pytest.raises(TypeError, match="needs a class"): register_format("VGPosterior", print, print)
    with pytest.raises(ValueError, match="marker"): register_format(VGPosterior, print, print, marker="settings")
    with pytest.raises(TypeError, match="got dict"): save({}, "x.npz")


def test_missing_file_and_folder_are_os_errors_and_value_errors(tmp_path):
    "A missing path is a FileNotFoundError, a folder an IsADirectoryError, each also a ValueError (as before), naming the path."
    with pytest.raises(FileNotFoundError, match="no such file"): load(tmp_path / "none.npz")
    with pytest.raises(IsADirectoryError, match="a folder, not a posterior file"): load(tmp_path)
    with pytest.raises(ValueError): load(tmp_path)
