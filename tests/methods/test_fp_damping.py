"""The damping factor of FPi's damped step from step to step ('11a_fpi', 'The damping factor from step to step'): the
trust-region rule of ``_next_rho``, the ρ carried through the continuation's stages (`rho0`, `info['rho']`), on real
ionosphere inputs at kernel variances 1 and 1e8."""
from pathlib import Path
import numpy as np
import pytest
from vgi_lit import likelihoods, models, kernels, datasets
from vgi_lit.inference import fit, EventKind
from vgi_lit.methods.fixed_point import DAMP_GROW, _next_rho, _scale_stages, _scale_start

DATA = datasets.shared_data_dir(Path(__file__))


def _gp(n, variance):
    "GP-logistic on the first n ionosphere rows (z-scored), RBF kernel of lengthscale √p and the given variance."
    ion = datasets.load_ionosphere(data_dir=DATA)
    X, y = datasets.zscore(ion.X).X, ion.y
    return models.GP(X[:n], y[:n], likelihoods.Logistic(), kernels.RBF(variance=variance, lengthscale=np.sqrt(X.shape[1])))


def _halvings(post):
    "How many times the run's damped steps halved ρ (the counts of its DAMPED events)."
    return sum(e.count for rec in post.history for e in rec.events if e.kind is EventKind.DAMPED)


def test_next_rho_backs_off_a_factor_rejected_again_and_waits_damp_grow_for_signed_gamma():
    rho, d = _next_rho(1.0, 0.25, dict(ok=0, fails={}))                  # halved twice: 1 and ½ rejected, ¼ next
    assert rho == 0.25 and d == dict(ok=0, fails={1.0: 1, 0.5: 1})
    rho, d = _next_rho(rho, rho, d); assert rho == 0.5                   # ½ rejected once: tried again after one success
    rho, d = _next_rho(rho, 0.25, d); assert rho == 0.25 and d['fails'][0.5] == 2
    grown = []
    for _ in range(3): rho, d = _next_rho(rho, rho, d); grown.append(rho)
    assert grown == [0.25, 0.5, 1.0]                                      # ½ rejected twice: two successes; 1 (once): one
    d3 = dict(ok=0, fails={1.0: 5})
    assert [_next_rho(0.5, 0.5, dict(d3, ok=k))[0] for k in range(DAMP_GROW)] == [0.5] * (DAMP_GROW - 1) + [1.0]   # at most DAMP_GROW
    assert [_next_rho(0.5, 0.5, dict(ok=k, fails={}), signed=True)[0] for k in range(DAMP_GROW)] == [0.5] * (DAMP_GROW - 1) + [1.0]
    assert _next_rho(1.0, 1.0, dict(ok=7, fails={}))[0] == 1.0            # never above 1
    assert _next_rho(0.5, 1.0, d, damped=False) == (0.5, d)               # a Newton step leaves the damping


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.5, float("nan"), True, "0.5", None])
def test_rho0_outside_the_unit_interval_is_an_error_naming_it(bad):
    with pytest.raises(ValueError, match="rho0"):
        fit(_gp(20, 1.0), "fpi", rho0=bad)


def test_variance_1_never_damps_and_reports_rho_1():
    p = fit(_gp(120, 1.0), "fpi")
    assert p.converged and _halvings(p) == 0 and p.info['rho'] == 1.0


def test_at_variance_1e8_the_stages_hand_on_their_rho_and_the_fit_halves_at_most_once():
    gp = _gp(60, 1e8)
    m0, lam0, k, rho = _scale_start(gp, _scale_stages(gp, 1.0))
    assert rho < 1.0 and k > 0                                            # the stages damped: the fit starts below 1
    p = fit(gp, "fpi")
    ref = fit(gp, "fpi", scale_start=False, tol=1e-8, tol_rel=0.0)
    assert p.converged and _halvings(p) <= 2 and 0 < p.info['rho'] <= 1
    assert abs(p.vlb - ref.vlb) <= 1e-9 * abs(ref.vlb)
    # the same start with ρ = 1 instead of the carried ρ: the first damped step must halve back down to it
    q = fit(gp, "fpi", m0=m0, lam0=lam0, rho0=1.0, scale_start=False)
    assert _halvings(q) > _halvings(fit(gp, "fpi", m0=m0, lam0=lam0, rho0=rho, scale_start=False))
