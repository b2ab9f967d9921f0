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
        assert json.loads(str(z["settings"]))["version"] == FORMAT_VERSION


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
