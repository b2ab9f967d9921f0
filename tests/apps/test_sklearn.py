"""scikit-learn's estimator checks (`parametrize_with_checks`) for the four estimators of `vgi_lit.apps.sklearn`,
with a linear latent function fitted by GRAD (the checks fit many tiny data sets); the regressor's run in the
default suite, the others are marked slow. Checks that cannot apply are listed with the reason in
`EXPECTED_FAILED_CHECKS` (also shown on the estimators' page)."""
import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn")
from sklearn.utils.estimator_checks import parametrize_with_checks
from vgi_lit.apps.sklearn import (VGClassifier, VGRegressor, VGPoissonRegressor, VGOrdinalRegressor,
                                  EXPECTED_FAILED_CHECKS)

FAST = [VGRegressor(latent="glm", method="grad")]
SLOW = [VGClassifier(latent="glm", method="grad"), VGPoissonRegressor(latent="glm", method="grad"),
        VGOrdinalRegressor(latent="glm", method="grad")]


def _expected(est): return EXPECTED_FAILED_CHECKS.get(type(est).__name__, {})


@parametrize_with_checks(FAST, expected_failed_checks=_expected)
def test_regressor_passes_sklearn_checks(estimator, check):
    check(estimator)


@pytest.mark.slow
@parametrize_with_checks(SLOW, expected_failed_checks=_expected)
def test_estimators_pass_sklearn_checks(estimator, check):
    check(estimator)


def test_classifier_labels_and_uncertainty():
    "String labels round-trip through classes_; probabilities in [0, 1] sum to 1; a GP's return_std grows away from the data."
    rng = np.random.default_rng(0); X = rng.normal(size=(40, 2))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=40) > 0, "yes", "no")
    clf = VGClassifier(latent="glm", method="grad").fit(X, y)
    assert list(clf.classes_) == ["no", "yes"] and set(clf.predict(X)) <= {"no", "yes"} and clf.score(X, y) > 0.8
    P = clf.predict_proba(X); assert np.allclose(P.sum(1), 1.0) and P.min() >= 0
    reg = VGRegressor(latent="gp", learn_hyperparameters=False).fit(X, np.sin(X[:, 0]))
    _, s_near = reg.predict(X[:3], return_std=True); _, s_far = reg.predict(X[:3] + 20.0, return_std=True)
    assert np.all(s_far > s_near)


def test_unknown_options_are_refused_at_fit():
    X = np.random.default_rng(1).normal(size=(10, 2)); y = np.arange(10) % 2
    for est, msg in [(VGClassifier(likelihood="cauchit"), "likelihood"), (VGClassifier(latent="tree"), "latent"),
                     (VGRegressor(likelihood="huber"), "likelihood"), (VGClassifier(kernel="rbf"), "kernel")]:
        with pytest.raises((ValueError, TypeError), match=msg): est.fit(X, y)


def test_sparse_gp_and_likelihood_parameters_are_learned():
    "A sparse-GP regressor learns the kernel and the Gaussian noise variance; return_std uses the learned noise."
    rng = np.random.default_rng(0); X = rng.normal(size=(120, 2)); y = np.sin(2 * X[:, 0]) + 0.3 * rng.normal(size=120)
    reg = VGRegressor(latent="sparse_gp", n_inducing=15, random_state=0).fit(X, y)
    hp = reg.hyperparameters_
    assert {"kernel.variance", "kernel.lengthscale"} <= set(hp) and reg.score(X, y) > 0.6
    if "likelihood.variance" in hp:                              # the learner fits likelihood parameters
        assert reg.posterior_.model.likelihood.variance == pytest.approx(hp["likelihood.variance"])
    mu, sd = reg.predict(X[:4], return_std=True)
    f_mu, f_sd = reg.predict_latent(X[:4]); s = np.std(y)
    assert np.allclose(mu, f_mu) and np.allclose(sd**2, f_sd**2 + s**2 * reg.posterior_.model.likelihood.variance)
