"""`vgi_lit.fit` on the two-level models (PMF, CTM, GME of `vgi_lit.models`): every method each model accepts honours the
common options (`max_iter`, `max_seconds`, `callback`, `progress`), returns an honest `Stop`, and its result saves and
loads through `vgi_lit.io` with equal predictions. All data are generated (seeded), small enough for a few seconds."""
import numpy as np
import pytest
from scipy import sparse

import vgi_lit
from vgi_lit import fit, io
from vgi_lit.inference import Stop, Posterior, MODEL_METHODS, DEFAULT_METHOD
from vgi_lit.likelihoods import Gaussian, Logistic, Poisson
from vgi_lit.models import PMF, CTM, GME


def _pmf(lik=None):
    "Generated PMF data: a 10 × 8 matrix, U and V from N(0, I), 60% of the entries observed with Gaussian noise."
    rng = np.random.default_rng(0)
    r, c = np.nonzero(rng.random((10, 8)) < 0.6)
    f = np.sum(rng.normal(size=(10, 2))[r] * rng.normal(size=(8, 2))[c], 1)
    return PMF(r, c, f + 0.3 * rng.normal(size=f.size), Gaussian(0.1), 2, 10, 8)


def _ctm():
    "Generated corpus: 20 documents of Poisson counts over 9 words, no empty document."
    rng = np.random.default_rng(1)
    return CTM(sparse.csr_matrix(rng.poisson(1.0, size=(20, 9)) + np.eye(20, 9, dtype=int)), 3, seed=0)


def _gme():
    "Generated GME data: 60 inputs from N(0, I/4), counts from the model with w₂ = 0.3."
    rng = np.random.default_rng(2)
    X = rng.normal(size=(60, 3)) / 2
    return GME(X, rng.poisson(np.exp(X @ [0.6, -0.4, 0.3] + np.sqrt(0.3) * rng.normal(size=60))).astype(float), Poisson(), tau=1.0)


MODELS = {"pmf": _pmf, "ctm": _ctm, "gme": _gme}
CASES = [(k, m) for k in MODELS for m in sorted(MODEL_METHODS[k])]
TOL = {"pmf": dict(tol=0.0), "ctm": dict(tol=0.0), "gme": {}}       # no convergence test: the budget decides


def _new_data(kind, model):
    "Arguments of `predict` at new data for each model."
    if kind == "pmf": return (np.array([0, 9, 4]), np.array([7, 0, 3]))
    if kind == "ctm": return (sparse.csr_matrix(np.array([[1, 0, 2, 0, 0, 1, 0, 0, 3], [0, 4, 0, 0, 1, 0, 0, 0, 0]])),)
    return (np.random.default_rng(3).normal(size=(5, 3)),)


def test_every_two_level_model_has_the_paper_methods():
    assert set(MODEL_METHODS["pmf"]) == {"mc-ssvi", "h-mc-ssvi", "s-dsvi"}
    assert set(MODEL_METHODS["ctm"]) == {"h-mc-ssvi", "s-dsvi", "simple", "mean-field"}
    assert set(MODEL_METHODS["gme"]) == {"mc-ssvi", "h-mc-ssvi", "s-dsvi", "mean-field"}
    for kind in MODELS: assert DEFAULT_METHOD[kind] in MODEL_METHODS[kind]


@pytest.mark.parametrize("kind,method", CASES)
def test_max_iter_is_honoured_and_the_stop_is_honest(kind, method):
    model = MODELS[kind]()
    post = fit(model, method, max_iter=2, **TOL[kind])
    assert isinstance(post, Posterior) and post.method == method and post.stop is Stop.MAX_ITER and not post.converged
    assert post.n_iter == 2 and len(post.history) == 3 and post.history.stop is Stop.MAX_ITER
    assert np.isfinite(post.vlb) and post.vlb == post.history[-1].vlb


@pytest.mark.parametrize("kind,method", CASES)
def test_max_seconds_and_callback(kind, method):
    model = MODELS[kind]()
    post = fit(model, method, max_iter=50, max_seconds=1e-9, **TOL[kind])
    assert post.stop is Stop.MAX_SECONDS and post.n_iter <= 1
    seen = []
    post = fit(model, method, max_iter=50, callback=lambda rec: seen.append(rec.iter) or True, **TOL[kind])
    assert post.stop is Stop.CALLBACK and post.n_iter <= 1 and seen[0] == 0 and len(seen) == len(post.history)


@pytest.mark.parametrize("kind,method", CASES)
def test_progress_runs_the_same_fit(kind, method, capsys):
    model = MODELS[kind]()
    plain = fit(model, method, max_iter=2, **TOL[kind])
    seen = []
    shown = fit(model, method, max_iter=2, progress=True, callback=seen.append, **TOL[kind])
    assert shown.vlb == plain.vlb and shown.stop is plain.stop and len(seen) == len(shown.history) == len(plain.history)
    assert f"fit {method}" in capsys.readouterr().err


@pytest.mark.parametrize("kind,method", CASES)
def test_io_round_trip(kind, method, tmp_path):
    model = MODELS[kind]()
    post = fit(model, method, max_iter=2, **TOL[kind])
    back = io.load(io.save(post, tmp_path / "post.npz"))
    assert type(back) is type(post) and back.method == method and back.stop is post.stop and back.vlb == post.vlb
    assert back.n_iter == post.n_iter and back.info["loaded_from"] == str(tmp_path / "post.npz")
    args = _new_data(kind, model)
    for a, b in zip(post.predict(*args), back.predict(*args)):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)


def test_default_methods_and_clear_errors():
    pmf, ctm, gme = _pmf(), _ctm(), _gme()
    assert fit(ctm, max_iter=1).method == "h-mc-ssvi" and fit(gme, max_iter=1).method == "mean-field" and fit(pmf, max_iter=1).method == "mc-ssvi"
    with pytest.raises(ValueError, match=r"unknown method 'fpi' for a PMF; available: h-mc-ssvi, mc-ssvi, s-dsvi"): fit(pmf, "fpi")
    with pytest.raises(ValueError, match=r"'simple' is a method of the kinds ctm"): fit(pmf, "simple")
    with pytest.raises(ValueError, match="mean-field"): fit(gme, "no-such")
    with pytest.raises(TypeError, match=r"options=PMFOptions\(batch_size=...\)"): fit(pmf, batch_size=3)
    with pytest.raises(TypeError, match="options must be a CTMOptions"): fit(ctm, options=vgi_lit.PMFOptions())
    with pytest.raises(TypeError, match="unexpected option 'tol'"): fit(gme, "s-dsvi", tol=1e-3)
    with pytest.raises(TypeError, match="learn"): fit(pmf, learn_prior=True)      # the priors' switch is fit's learn
    with pytest.raises(TypeError, match="two-level model"): fit("a model")


def test_options_reach_the_algorithms():
    "The grouped options are the keywords of fit_pmf, fit_ctm and gme_fit: the same run either way."
    from vgi_lit.methods.pmf import fit_pmf
    from vgi_lit.methods.ctm import fit_ctm
    from vgi_lit.methods.gme import gme_fit
    pmf, ctm, gme = _pmf(), _ctm(), _gme()
    a = fit(pmf, "mc-ssvi", learn=False, max_iter=2, options=vgi_lit.PMFOptions(batch_size=3, seed=5))
    b = fit_pmf(pmf, "mc-ssvi", max_iter=2, batch_size=3, seed=5, learn_prior=False)
    assert a.vlb == b.vlb and a.prior_var == b.prior_var == pmf.prior_var
    a = fit(ctm, "simple", learn=False, max_iter=2, tol=0, options=vgi_lit.CTMOptions(cov="full", seed=2))
    b = fit_ctm(ctm, "simple", "full", max_iter=2, tol=0, seed=2, learn=False)
    assert a.vlb == b.vlb and a.state.cov == "full"
    a = fit(gme, "h-mc-ssvi", max_iter=4, m0=0.1, V0=2.0, options=vgi_lit.GMEOptions(bound="suboptimal", batch_size=20))
    b = gme_fit(gme, "h-mc-ssvi", "suboptimal", batch_size=20, max_iter=4, m0=0.1, V0=2.0)
    assert a.vlb == b.vlb and a.sigma == b.sigma and a.info["bound"] == "suboptimal"
    assert gme_fit(gme, "s-dsvi", batch_size=30, max_epochs=1.0).stop is Stop.BUDGET      # the epochs end it: no claim of convergence


@pytest.mark.parametrize("kind,method", [("ctm", m) for m in sorted(MODEL_METHODS["ctm"])] + [("gme", "h-mc-ssvi"), ("gme", "s-dsvi")])
def test_learn_switches_the_models_own_hyperparameter_learning(kind, method):
    "learn=False holds the model's hyperparameters; learn=True learns them by the model's own closed forms and steps; the default is the model's own."
    model = MODELS[kind]()
    kw = dict(options=vgi_lit.GMEOptions(bound="suboptimal")) if kind == "gme" else {}        # the cheaper bound: the switch is tested
    held = fit(model, method, learn=False, max_iter=3, **TOL[kind], **kw)
    learned = fit(model, method, learn=True, max_iter=3, **TOL[kind], **kw)
    default = fit(model, method, max_iter=3, **TOL[kind], **kw)            # a topic model learns by default, a GME holds its prior
    assert default.vlb == (learned.vlb if kind == "ctm" else held.vlb)
    if kind == "ctm":
        assert np.array_equal(held.mu, model.mu) and np.array_equal(held.Sigma, model.Sigma) and np.array_equal(held.beta, model.beta)
        assert not np.array_equal(learned.Sigma, model.Sigma) and not np.array_equal(learned.beta, model.beta)
        pr = vgi_lit.models.closed_form_prior(learned.m, learned.S, "full")       # the blocks' closed form of the final q
        np.testing.assert_allclose(learned.Sigma, pr.prior.dense(), atol=1e-12)
    else:
        assert (held.prior_mean, held.prior_var, held.tau) == (model.prior_mean, model.prior_var, model.tau)
        assert learned.prior_var != model.prior_var and learned.tau == learned.sigma
    with pytest.raises(TypeError, match="learn"): fit(model, method, learn_prior=True)


def test_mean_field_gme_refuses_learn():
    with pytest.raises(ValueError, match="learn=True"): fit(_gme(), "mean-field", learn=True)
