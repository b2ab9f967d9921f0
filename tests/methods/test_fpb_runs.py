"""FPb runs at the rounding floor of the mean gradient ('11b_fpb', 'At the rounding floor of the mean gradient'; the test
``_mean_floor`` of '11c_fp_stopping', 'The rounding floor of the mean gradient'): a tol below the floor ends the run there with
`Stop.STALLED`, not after every outer iteration of the budget."""
import numpy as np
import pytest
from vgi_lit import likelihoods, models, kernels
from vgi_lit.inference import fit, EventKind, Stop
from vgi_lit.vlb import vlb as core_vlb


def _poisson_gp(seed, n=30, ls=0.2):
    "GENERATED: x ~ U(0, 1), y ~ Poisson(exp(sin 6x)); GP-Poisson, RBF variance 1 and lengthscale `ls` (jitter 1e-8)."
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 1, (n, 1)); y = rng.poisson(np.exp(np.sin(6 * x[:, 0]))).astype(float)
    return models.GP(x, y, likelihoods.Poisson(), kernels.RBF(1.0, ls))


@pytest.mark.parametrize("seed, tol", [(7, 1e-11), (8, 1e-10)])
def test_fpb_below_the_gradient_rounding_floor_stops_there_not_at_max_iter(seed, tol):
    "The floor near 1e-8 is reached after about fifteen outer iterations of a few steps each; without the floor stop the run went on to all 200."
    gp = _poisson_gp(seed)
    p = fit(gp, "fpb", tol=tol, tol_rel=0.0, max_iter=200)
    ref = fit(gp, "fpb", tol=1e-7, tol_rel=0.0)                            # above the floor (at 1e-8 meeting tol is rounding luck)
    assert p.stop is Stop.STALLED and "rounding floor" in p.message and p.n_iter <= 20, (p.stop, p.n_iter, p.message)
    assert not p.history.count(EventKind.HANDOVER) and not p.history.count(EventKind.BEST_STATE)   # no GRAD polish; the last state
    assert tol < min(r["grad_m"] for r in p.history[-10:]) and max(r["grad_m"] for r in p.history[-10:]) < 1e-6   # far above tol, far below a real gradient
    assert max(r["grad_V"] for r in p.history[-10:]) <= tol                # V stationary at the floor's states
    assert ref.converged and abs(p.vlb - ref.vlb) <= 1e-12 * abs(ref.vlb)
    assert abs(core_vlb(gp, p.m, p.cov) - p.vlb) <= 1e-12 * abs(p.vlb)   # the reported VLB is the returned state's
