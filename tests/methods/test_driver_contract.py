"""The driver's contract, for every registered method on every model it accepts: `max_iter`, `max_seconds` and
`callback` are honoured, the stop reason is honest (`converged` exactly for GRAD_TOL / REL_TOL, MAX_ITER only when the
budget of steps was spent), and the returned state is the best one the run visited (exact methods: the returned VLB
is at least every VLB in the trace, up to rounding). Small generated problems (seeded), single-latent and
multiclass (softmax) models, one with a coupled (LMC) prior. The two-level models' methods
(`PMF`, `CTM`, `GME`) are held to the same budgets in `test_two_level_fit.py`."""
import time
import numpy as np
import pytest

import vgi_lit
from vgi_lit.inference import CONVERGED_STOPS, Stop, methods_for
from vgi_lit.kernels import RBF
from vgi_lit.likelihoods import Logistic
from vgi_lit.models import GLM, GP, SparseGP
from vgi_lit.models.multi import MultiGLM, MultiGP, LMCGP
from vgi_lit.softmax import Softmax

STOCHASTIC = {"svi", "mc-ssvi", "h-mc-ssvi", "s-dsvi"}
_rng = np.random.default_rng(11)
_X = _rng.normal(size=(40, 3)); _y = np.where(_X @ [1.0, -0.5, 0.3] + 0.3 * _rng.normal(size=40) > 0, 1.0, -1.0)
_c = np.argmax(_X @ [[1.0, -0.5, 0.0], [0.2, 0.8, -1.0], [0.0, 0.3, 0.5]] + 0.3 * _rng.normal(size=(40, 3)), axis=1)   # three classes
MODELS = {"glm": lambda: GLM(_X, _y, Logistic()),
          "gp": lambda: GP(_X, _y, Logistic(), RBF(2.0, 1.5)),
          "sparse_gp": lambda: SparseGP(_X, _y, Logistic(), RBF(2.0, 1.5), _X[:6]),
          "multi_glm": lambda: MultiGLM(_X[:15], _c[:15], Softmax(3)),
          "multi_gp": lambda: MultiGP(_X[:15], _c[:15], Softmax(3), RBF(2.0, 1.5)),
          "multi_lmc": lambda: LMCGP(_X[:10], _c[:10], Softmax(3, n_gh=8), [RBF(1.0, 1.5), RBF(1.0, 0.5)], [[[1.0], [0.5], [-0.3]], [[0.2], [-0.6], [0.8]]], [0.1, 0.1])}
CASES = [(m, k) for k in MODELS for m in sorted(methods_for(MODELS[k]()))]      # the methods fit offers for each model


def _fit(method, kind, **kw):
    try: return vgi_lit.fit(MODELS[kind](), method, **kw)
    except (ValueError, TypeError, NotImplementedError) as e:       # a method that does not accept this model says so up front
        pytest.skip(f"{method} does not accept {kind}: {e}")


def _honest(post):
    assert isinstance(post.stop, Stop) and post.history.stop is post.stop
    assert post.converged == (post.stop in CONVERGED_STOPS)


@pytest.mark.parametrize("method,kind", CASES)
def test_max_iter_is_honoured(method, kind):
    post = _fit(method, kind, max_iter=2)
    _honest(post)
    steps = post.info.get("n_steps", post.n_iter)              # a nested schedule (FPb) records several steps per iteration
    assert post.n_iter <= 2 and len(post.history) <= steps + 2, (post.n_iter, steps, len(post.history))   # the start, the steps, a best-state record
    if post.stop is Stop.MAX_ITER: assert post.n_iter == 2


@pytest.mark.parametrize("method,kind", CASES)
def test_callback_stops_the_run(method, kind):
    seen = []
    post = _fit(method, kind, callback=lambda rec: seen.append(rec.iter) or rec.iter >= 1)
    _honest(post)
    assert post.stop in (Stop.CALLBACK, *CONVERGED_STOPS), post.stop
    assert seen and seen == sorted(seen) and seen[0] == 0
    if post.stop is Stop.CALLBACK: assert max(seen) <= 2, seen


@pytest.mark.parametrize("method,kind", CASES)
def test_max_seconds_is_honoured(method, kind):
    t0 = time.perf_counter()
    post = _fit(method, kind, max_seconds=0.05, callback=lambda rec: time.sleep(0.03), tol=0.0, max_iter=10**6)
    secs = time.perf_counter() - t0
    _honest(post)
    assert post.stop in (Stop.MAX_SECONDS, Stop.STALLED, *CONVERGED_STOPS), post.stop
    assert secs < 5.0, secs


@pytest.mark.parametrize("method,kind", [c for c in CASES if c[0] not in STOCHASTIC])
def test_the_returned_state_is_the_best_visited(method, kind):
    post = _fit(method, kind)
    _honest(post)
    if post.objective != "vlb": pytest.skip(f"{method} maximises {post.objective}, not the VLB")
    v = post.history.vlb; v = v[np.isfinite(v)]
    assert v.size and post.vlb >= v.max() - 1e-9 * (1 + abs(v.max())), (post.vlb, v.max())
