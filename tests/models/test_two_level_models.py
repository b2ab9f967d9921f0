"""The two-level models of `vgi_lit.models` (PMF, CTM, GME) as values: bad input is a clear error naming the problem,
the grouping of observations is exact over seeds and shapes, and the models are read-only values. Data are generated
(seeded)."""
import numpy as np
import pytest
from scipy import sparse

import vgi_lit
from vgi_lit.likelihoods import Gaussian, Ordinal, Poisson
from vgi_lit.models import PMF, CTM, GME, check_indices, check_counts, check_beta, init_beta


def _pmf(seed, NU=20, NV=15, K=2, frac=0.5):
    "Generated data: U, V from N(0, I), a fraction `frac` of the entries observed with Gaussian noise."
    rng = np.random.default_rng(seed)
    r, c = np.nonzero(rng.uniform(size=(NU, NV)) < frac)
    return PMF(r, c, Gaussian(0.5).sample(np.sum(rng.normal(size=(NU, K))[r] * rng.normal(size=(NV, K))[c], 1), rng), Gaussian(0.5), K, NU, NV)


def test_models_live_in_one_folder_and_the_methods_use_them():
    from vgi_lit.methods import pmf, ctm, gme
    assert pmf.PMF is PMF and ctm.CTM is CTM and gme.GME is GME and vgi_lit.PMF is PMF
    assert (PMF.kind, CTM.kind, GME.kind) == ("pmf", "ctm", "gme")
    assert all(c.__module__.startswith("vgi_lit.models.") for c in (PMF, CTM, GME, vgi_lit.GLM, vgi_lit.GP, vgi_lit.SparseGP))


def test_pmf_bad_input():
    model = _pmf(8)
    with pytest.raises(ValueError, match="Likelihood"): model.with_likelihood("gaussian")
    with pytest.raises(ValueError, match="labels"): model.with_likelihood(Ordinal([0.0, 1.0]))
    with pytest.raises(ValueError, match="negative index"): PMF([0, -1], [0, 1], [1.0, 2.0], Gaussian(), 2)
    with pytest.raises(ValueError, match="one length"): PMF([0, 1], [0, 1], [1.0], Gaussian(), 2)
    with pytest.raises(ValueError, match=r">= its dimension"): PMF([0, 5], [0, 1], [1.0, 2.0], Gaussian(), 2, n_rows=3)
    with pytest.raises(ValueError, match="labels"): PMF([0, 1], [0, 1], [0.0, 7.0], Ordinal([0.0, 1.0]), 2)
    with pytest.raises(ValueError, match="integer indices"): check_indices(np.array([0.5]), "rows")


@pytest.mark.parametrize("seed,shape,frac", [(0, (5, 4), 0.9), (1, (30, 7), 0.3), (2, (1, 12), 1.0), (3, (40, 40), 0.05)])
def test_pmf_groups_every_observation_once(seed, shape, frac):
    model = _pmf(seed, *shape, frac=frac)
    for side in (0, 1):
        seen = np.concatenate([model.observations(side, j)[0] for j in range(model.n(side))])
        assert np.array_equal(np.sort(seen), np.arange(model.nnz))
    with pytest.raises(ValueError): model.rows[0] = 1


def test_ctm_bad_input():
    C = sparse.csr_matrix(np.array([[1, 0, 2], [0, 3, 1]]))
    cases = [(lambda: CTM(C.toarray(), 2), "scipy.sparse"), (lambda: CTM(-C, 2), "negative"),
             (lambda: CTM(C * 0.5, 2), "non-integer"), (lambda: CTM(sparse.csr_matrix(np.array([[1, 0, 2], [0, 0, 0]])), 2), "empty"),
             (lambda: CTM(C, 1), "K"), (lambda: CTM(C, 2.0), "K"),
             (lambda: CTM(C, 2, beta=np.array([[0.5, 0.5, 0.1], [0.2, 0.3, 0.5]])), "sum to 1"),
             (lambda: CTM(C, 2, beta=np.array([[1.0, 0.0, 0.0], [0.2, 0.3, 0.5]])), "positive"),
             (lambda: CTM(C, 3, mu=np.zeros(3)), "mu"), (lambda: CTM(C, 3, Sigma=-np.eye(2)), "Sigma")]
    for f, word in cases:
        with pytest.raises(ValueError, match=word): f()


@pytest.mark.parametrize("seed", range(4))
def test_ctm_counts_and_default_topics(seed):
    rng = np.random.default_rng(seed)
    D, V, K = rng.integers(2, 30), rng.integers(2, 20), rng.integers(2, 6)
    dense = rng.poisson(0.7, size=(D, V)); dense[np.arange(D), rng.integers(0, V, size=D)] += 1   # no empty document
    coo = sparse.coo_matrix(dense)
    dup = sparse.coo_matrix((np.r_[coo.data, coo.data], (np.r_[coo.row, coo.row], np.r_[coo.col, coo.col])), shape=(D, V))
    assert np.array_equal(check_counts(dup).toarray(), 2 * dense)                      # duplicates summed
    B = init_beta(check_counts(coo), int(K), seed)
    assert np.array_equal(check_beta(B, int(K), int(V)), B)
    model = CTM(coo, int(K), seed=seed)
    assert model.D == D and model.V == V and np.array_equal(model.n_words, dense.sum(1)) and np.array_equal(model.beta, B)


def test_gme_bad_input_and_value():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(30, 2)); y = rng.poisson(1.0, size=30).astype(float)
    for kw, word in [(dict(tau=0.0), "tau"), (dict(tau=np.inf), "tau"), (dict(prior_var=0.0), "prior_var"),
                     (dict(prior_mean=np.nan), "prior_mean"), (dict(prior_var=[1.0, 2.0]), "prior_var"), (dict(tau=True), "tau")]:
        with pytest.raises(ValueError, match=word): GME(X, y, Poisson(), **kw)
    with pytest.raises(ValueError): GME(X[:5], y, Poisson())
    g = GME(X, y, Poisson(), prior_mean=0.5, prior_var=2.0, tau=3.0)
    h = g.with_prior(prior_var=4.0)
    assert (g.prior_mean, g.prior_var, g.tau) == (0.5, 2.0, 3.0) and (h.prior_mean, h.prior_var, h.tau) == (0.5, 4.0, 3.0)
    np.testing.assert_allclose(h.glm.prior.dense(), 4.0 * np.eye(2))
