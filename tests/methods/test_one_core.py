"""One model, every method, one optimum: each registered method with its default options on
GP-logistic ionosphere and sonar (the problems of Sheth & Khardon 2016, §4) reports the exact VLB of
the q it returns, computed by the shared `vgi_lit.vlb.vlb`, and lands on the FPi optimum: within 1e-8
relative for the batch methods, 1e-3 for the stochastic ones. A method whose objective is not the VLB
(`post.objective != "vlb"`, e.g. the Laplace approximation) must say so, and is checked for the first
property only."""
import time
import numpy as np
import pytest

import vgi_lit
from vgi_lit.vlb import vlb as shared_vlb
from vgi_lit.experiments.fp_experiments import make_problem

STOCHASTIC = {"svi", "mc-ssvi", "h-mc-ssvi", "s-dsvi"}
PROBLEMS = ["gp-logistic-ionosphere", "gp-logistic-sonar"]
_CACHE = {}


def _problem(name):
    if name not in _CACHE:
        model = make_problem(name)[0]
        _CACHE[name] = (model, vgi_lit.fit(model, "fpi"))
    return _CACHE[name]


def test_every_method_is_covered():
    "The parametrisation below lists every registered method: a new method joins this test."
    assert set(vgi_lit.METHODS) == set(METHOD_NAMES)


METHOD_NAMES = ["fpi", "fpb", "grad", "dual", "prox", "laplace", "svi", "mc-ssvi", "h-mc-ssvi", "s-dsvi"]


def _cases():
    """(problem, method) for every problem and method; the stochastic methods' default fits of the larger problem (3-8 s
    each: hundreds of full passes) run with `-m slow`, the smaller problem keeps every method in the default run."""
    return [pytest.param(p, m, marks=pytest.mark.slow) if (m in STOCHASTIC and p == PROBLEMS[0]) else (p, m)
            for p in PROBLEMS for m in METHOD_NAMES]


@pytest.mark.parametrize("problem, method", _cases())
def test_default_method_reaches_the_one_optimum(problem, method):
    model, ref = _problem(problem)
    assert ref.converged and ref.objective == "vlb"
    t0 = time.perf_counter()
    post = vgi_lit.fit(model, method)
    secs = time.perf_counter() - t0
    recomputed = shared_vlb(model, post.m, post.cov)
    assert post.vlb == pytest.approx(recomputed, rel=1e-12, abs=1e-10), (method, post.vlb, recomputed)
    assert np.all(np.linalg.eigvalsh(post.V) > 0), f"{method} returned a covariance that is not positive definite"
    if post.objective != "vlb":
        assert method == "laplace", f"{method} optimises {post.objective!r} by default"
        return
    rel = abs(post.vlb - ref.vlb) / abs(ref.vlb)
    tol = 1e-3 if method in STOCHASTIC else 1e-8
    assert post.vlb <= ref.vlb + 1e-8 * abs(ref.vlb), (method, post.vlb, ref.vlb)
    assert rel <= tol, f"{method} on {problem}: VLB {post.vlb:.10f} vs FPi {ref.vlb:.10f} (relative gap {rel:.2e}, {secs:.1f} s)"


@pytest.mark.parametrize("method", METHOD_NAMES)
def test_max_iter_zero_returns_the_start_honestly(method):
    "max_iter=0 is a request for the start: every method returns it with Stop.MAX_ITER, never as a converged fit."
    from vgi_lit.models import GLM
    from vgi_lit.likelihoods import Logistic
    from vgi_lit.inference import Stop
    X = np.random.default_rng(0).normal(size=(30, 3)); y = np.sign(X[:, 0])
    post = vgi_lit.fit(GLM(X, y, Logistic()), method, max_iter=0)
    assert post.stop is Stop.MAX_ITER and not post.converged and np.isfinite(post.vlb)
