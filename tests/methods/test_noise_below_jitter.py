"""GP regression with noise below the jitter (generated data: x = linspace(0, 1, 100), y = sin(6x) + 3e-8 N(0, 1), seed 0):
the exact profile of the VLB in the noise variance decides that the edge of the first box is the result (reported), fast."""
import re, time, warnings
import numpy as np
from vgi_lit.models import GP
from vgi_lit.likelihoods import Gaussian
from vgi_lit.kernels import RBF
from vgi_lit.methods.hyper import learn


def test_noise_far_below_the_jitter_is_reported_at_the_first_edge_by_the_exact_profile():
    """Noise variance 9e-16 against a jitter of 2e-8: along σ² (kernel held at the result) the exact profile
    L*(σ²) = −½Σ[log(λ_k + σ²) + z_k²/(λ_k + σ²)] rises monotonically from the edge e^−12 down to the floor of K's eigenvalues
    and nearly flat below it (within 1 nat of L*(0) at σ² = floor/100, of about 250 gained above): its supremum, at σ² → 0, is the jitter's, not the
    data's. learn keeps the first box and reports σ² at its edge with the gain to the floor (over 200 nats), without widening."""
    x = np.linspace(0, 1, 100); y = np.sin(6 * x) + 3e-8 * np.random.default_rng(0).normal(size=100)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore"); hf = learn(GP(x[:, None], y, Gaussian(0.1), RBF(1.0, 1.0)))
    seconds = time.perf_counter() - t
    details = [e.detail for r in hf.history for e in r.events]
    verdict = [d for d in details if "jitter's level" in d]
    assert len(verdict) == 1 and not any("widened" in d for d in details), details
    assert abs(np.log(hf.theta["likelihood.variance"]) + 12.0) < 1e-9 and "likelihood.variance" in hf.edges
    lam, U = np.linalg.eigh(hf.model.K_site()); lam = np.maximum(lam, 0.0); z2 = (U.T @ y) ** 2
    L = lambda s2: -0.5 * np.sum(np.log(lam + s2) + z2 / (lam + s2))
    floor = hf.model.prior.jitter + 100 * np.finfo(float).eps * lam[-1]
    grid = np.exp(np.linspace(-12.0, np.log(floor), 60))
    prof = np.array([L(s) for s in grid])
    assert np.all(np.diff(prof) > 0)                                        # rising all the way down to the floor
    assert L(0.0) - L(floor / 100) < 1.0 and L(0.0) > L(floor)              # flat below it: the supremum is at σ² → 0
    stated = float(re.search(r"floor, ([-+.\deE]+) nats above the edge", verdict[0]).group(1))
    assert stated > 200 and L(0.0) - L(np.exp(-12.0)) > 200                # the event states a gain of that size (its profile is of
                                                                             # the edge-stopped iterate, the kernel re-fitted after it)
    assert seconds < 5.0 and hf.n_inner < 200
