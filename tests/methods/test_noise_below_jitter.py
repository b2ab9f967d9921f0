"""GP regression with noise below the jitter (generated data: x = linspace(0, 1, 100), y = sin(6x) + 3e-8 N(0, 1), seed 0):
the exact profile of the VLB in the noise variance rises from the first box's edge down to the jitter's level, so learn
widens the box (its inner solves are the closed form, fast) and reports the noise variance at the jitter's level."""
import time, warnings
import numpy as np
from vgi_lit.models import GP
from vgi_lit.likelihoods import Gaussian
from vgi_lit.kernels import RBF
from vgi_lit.methods.hyper import learn


def test_noise_far_below_the_jitter_is_learned_down_to_the_jitter_level_and_reported():
    """Noise variance 9e-16 against a jitter of 2e-8: along σ² the exact profile
    L*(σ²) = −½Σ[log(λ_k + σ²) + z_k²/(λ_k + σ²)] rises by hundreds of nats from the edge e^−12 down to the floor of K's
    eigenvalues. learn widens the box until less than 0.5 nat is left to σ² → 0 at the learned kernel, reports σ² at the
    jitter's level once (the event and the edge), and ends hundreds of nats above the first box's edge (461.19 there)."""
    x = np.linspace(0, 1, 100); y = np.sin(6 * x) + 3e-8 * np.random.default_rng(0).normal(size=100)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore"); hf = learn(GP(x[:, None], y, Gaussian(0.1), RBF(1.0, 1.0)))
    seconds = time.perf_counter() - t
    details = [e.detail for r in hf.history for e in r.events]
    assert sum("jitter's level" in d for d in details) == 1 and any("widened" in d for d in details), details
    assert hf.theta["likelihood.variance"] < 1e-12 and "likelihood.variance" in hf.edges
    lam, U = np.linalg.eigh(hf.model.K_site()); lam = np.maximum(lam, 0.0); z2 = (U.T @ y) ** 2
    L = lambda s2: -0.5 * np.sum(np.log(lam + s2) + z2 / (lam + s2))
    assert L(0.0) - L(hf.theta["likelihood.variance"]) < 0.5                 # the supremum along σ², to half a nat
    assert L(0.0) - L(np.exp(-12.0)) > 200 and hf.vlb > 461.19 + 300         # far above the first box's edge
    assert seconds < 5.0 and hf.n_inner < 300
