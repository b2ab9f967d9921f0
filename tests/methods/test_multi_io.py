"""Save and load of every multi-latent result (`multi_to_file`, `multi_from_file` through `vgi_lit.io`): the coregionalised
GP, the LMC, the multi-output Gaussian (missing outputs) and robust-max likelihoods round-trip with the same predictions and
the same VLB recomputed at the loaded state; what the format does not know is refused by name."""
import numpy as np
import pytest
from vgi_lit import io as vio
from vgi_lit.inference import fit
from vgi_lit.kernels import RBF, Matern32
from vgi_lit.models.lgm import PriorCov
from vgi_lit.models.multi import MultiGLM, MultiGP, CoregionalGP, LMCGP, MultiLGM
from vgi_lit.models.multi_sparse import MultiSparseGP
from vgi_lit.softmax import Softmax, RobustMax
from vgi_lit.methods.multi_output import MultiGaussian
from vgi_lit.methods.multiclass import multi_vlb, multi_to_file, multi_from_file

rng = np.random.default_rng(3)
X = rng.normal(size=(10, 2)); c = rng.integers(0, 3, 10)
Y = np.sin(X @ rng.normal(size=(2, 3))) + 0.3 * rng.normal(size=(10, 3)); Y[1, 0] = Y[4, [1, 2]] = np.nan
SE = np.array([[0.3, 0.1, 0.0], [0.1, 0.4, 0.05], [0.0, 0.05, 0.2]])
W1, W2 = [[1.0], [0.5], [-0.3]], [[0.2, 0.1], [-0.6, 0.3], [0.8, 0.0]]
Xq = rng.normal(size=(4, 2))

MODELS = {
    "coregional_softmax": lambda: CoregionalGP(X, c, Softmax(3, n_gh=6), RBF(1.0, 1.3), W1, [0.1, 0.2, 0.3], mean=0.1, jitter=1e-6),
    "lmc_softmax": lambda: LMCGP(X, c, Softmax(3, n_gh=6), [RBF(1.0, 1.3), Matern32(0.5, 0.6)], [W1, W2], [[0.1, 0.2, 0.3], 0.05]),
    "lmc_gaussian": lambda: LMCGP(X, Y, MultiGaussian(SE), [RBF(1.0, 1.3), RBF(1.0, 0.4)], [W1, W2], [0.1, 0.0], mean=-0.2),
    "coregional_gaussian": lambda: CoregionalGP(X, Y, MultiGaussian(SE), RBF(1.0, 1.3), W2, 0.1),
    "gp_gaussian": lambda: MultiGP(X, Y, MultiGaussian(SE), [RBF(), RBF(0.5, 2.0), RBF(2.0, 0.7)]),
    "glm_robustmax": lambda: MultiGLM(np.c_[np.ones(10), X], c, RobustMax(3, 0.05), prior_cov=[4.0, 1.0, 1.0]),
    "gp_robustmax": lambda: MultiGP(X, c, RobustMax(3, 0.02), RBF(1.0, 1.0)),
    "sparse_softmax": lambda: MultiSparseGP(X, c, Softmax(3, n_gh=6), RBF(1.0, 1.3), X[::3], mean=0.2, jitter=1e-6),
}


def _round_trip(post, tmp_path, name, labels=None):
    back = vio.load(vio.save(post, tmp_path / f"{name}.npz", labels=labels))
    assert type(back.model) is type(post.model) and type(back.model.likelihood) is type(post.model.likelihood)
    assert back.vlb == post.vlb and back.stop == post.stop and back.n_iter == post.n_iter and back.method == post.method
    assert np.array_equal(back.m, post.m) and np.allclose(back.V, post.V, rtol=1e-12, atol=1e-14)
    Xn = np.c_[np.ones(4), Xq] if isinstance(post.model, MultiGLM) else Xq
    for a, b in zip(post.predict(Xn), back.predict(Xn)): assert np.allclose(a, b, rtol=1e-12, atol=1e-14)
    assert abs(multi_vlb(back.model, back.m, back.cov)[0] - post.vlb) <= 1e-10 * abs(post.vlb)      # the model rebuilt as it was
    return back


@pytest.mark.parametrize("name", list(MODELS))
def test_round_trip(name, tmp_path):
    mod = MODELS[name]()
    post = fit(mod, tol=1e-8, max_iter=20 if "robustmax" in name else 1000)
    back = _round_trip(post, tmp_path, name)
    if isinstance(mod.likelihood, RobustMax):
        assert back.model.likelihood.epsilon == mod.likelihood.epsilon
        assert np.allclose(back.predict_proba(Xq if name != "glm_robustmax" else np.c_[np.ones(4), Xq]),
                           post.predict_proba(Xq if name != "glm_robustmax" else np.c_[np.ones(4), Xq]), rtol=1e-12)
    if isinstance(mod.likelihood, MultiGaussian):
        assert np.array_equal(back.model.likelihood.noise_cov, SE) and np.array_equal(np.isnan(back.model.y), np.isnan(Y))
    if isinstance(mod, LMCGP):
        assert all(np.array_equal(a, b) for a, b in zip(back.model.W, mod.W)) and back.model.jitter == mod.jitter
    if isinstance(mod, MultiSparseGP):
        assert np.array_equal(back.model.Z, mod.Z) and abs(back.model.jitter - mod.jitter) <= 1e-15 * mod.jitter


def test_sparse_svi_result(tmp_path):
    post = fit(MODELS["sparse_softmax"](), "svi", max_iter=30)
    _round_trip(post, tmp_path, "sparse_svi")


def test_grad_result_and_labels(tmp_path):
    post = fit(MODELS["lmc_softmax"](), "grad", tol=1e-5)
    back = _round_trip(post, tmp_path, "grad", labels=["a", "b", "c"])
    assert list(back.info["labels"]) == ["a", "b", "c"]


def test_refused_by_name(tmp_path):
    gauss = fit(MODELS["gp_gaussian"](), tol=1e-6)
    with pytest.raises(ValueError, match="MultiGaussian has real outputs"): vio.save(gauss, tmp_path / "a.npz", labels=["x", "y", "z"])
    plain = MultiLGM(c, Softmax(3), 0.0, [PriorCov(1.0, 10)] * 3, 0.0, 0.0, None)
    with pytest.raises(ValueError, match="cannot save a posterior of a MultiLGM"): vio.save(fit(plain, max_iter=2), tmp_path / "b.npz")

    class MySoftmax(Softmax): pass
    mine = fit(MultiGP(X, c, MySoftmax(3, n_gh=6), RBF()), max_iter=2)
    with pytest.raises(ValueError, match="cannot save a MySoftmax likelihood: the multi-latent format knows Softmax, RobustMax and MultiGaussian"):
        vio.save(mine, tmp_path / "c.npz")
    s, A = multi_to_file(fit(MODELS["lmc_softmax"](), max_iter=3))
    s = dict(s, model="lmc_sparse")
    with pytest.raises(ValueError, match="unknown multi-latent model kind 'lmc_sparse'"): multi_from_file(s, A, "f.npz")
    s = dict(s, likelihood={"class": "Logit"})
    with pytest.raises(ValueError, match="unknown multi-latent likelihood 'Logit'"): multi_from_file(s, A, "f.npz")


def test_file_without_likelihood_class_is_softmax():
    post = fit(MultiGP(X, c, Softmax(3, n_gh=6), RBF()), tol=1e-6)
    s, A = multi_to_file(post)
    s["likelihood"] = {k: v for k, v in s["likelihood"].items() if k != "class"}       # the settings as written before the class was recorded
    back = multi_from_file(s, A, "old.npz")
    assert type(back.model.likelihood) is Softmax and np.array_equal(back.predict_proba(Xq), post.predict_proba(Xq))


def test_likelihood_settings_travel(tmp_path):
    "The softmax's curvature and robust-max's rule (n_qmc, seed) are written and read back."
    for k, lik in enumerate((Softmax(3, n_gh=6, curvature="exact"), RobustMax(4, 0.01, n_qmc=256, seed=3))):
        yk = c if lik.C == 3 else np.arange(10) % 4
        post = fit(MultiGP(X, yk, lik, RBF()), max_iter=3)
        back = vio.load(vio.save(post, tmp_path / f"l{k}.npz")).model.likelihood
        assert (back.curvature == "exact") if k == 0 else (back.n_qmc, back.seed) == (256, 3)
        assert np.array_equal(back.predict_y(*post.predict(Xq)), lik.predict_y(*post.predict(Xq)))
