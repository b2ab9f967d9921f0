"""The VLB an FPi run reports is the VLB of the state it returns, also from a start far beyond the optimum (the carried
Σ⁻¹(m − μ) of '11c_fp_stopping', 'The VLB of a far start'), on real ionosphere inputs at kernel variance 1e8."""
from pathlib import Path
import numpy as np
from vgi_lit import likelihoods, models, kernels, datasets
from vgi_lit.inference import fit, Stop
from vgi_lit.vlb import vlb as core_vlb

DATA = datasets.shared_data_dir(Path(__file__))


def _gp(n, variance):
    "GP-logistic on the first n ionosphere training rows (z-scored), RBF kernel of lengthscale √p and the given variance."
    ion = datasets.load_ionosphere(data_dir=DATA)
    X, y = datasets.zscore(ion.X).X, ion.y
    return models.GP(X[:n], y[:n], likelihoods.Logistic(), kernels.RBF(variance=variance, lengthscale=np.sqrt(X.shape[1])))


def test_fpi_from_a_far_start_reports_the_vlb_of_its_state_and_reaches_the_optimum():
    gp = _gp(60, 1e8)
    opt = fit(gp, method="fpi", tol=1e-9, tol_rel=0.0)
    m_far = gp.mu + 1e12 * (opt.m - gp.mu)                  # |m_i| ~ 1e16: the first steps cancel nearly all of Σ⁻¹(m − μ)
    for k in (1, 2, 5):
        r = fit(gp, method="fpi", m0=m_far, lam0=opt.cov.lam, max_iter=k, polish=False)
        true = core_vlb(gp, r.m, r.cov)
        assert abs(r.vlb - true) <= 1e-9 * abs(true), (k, r.vlb, true)
    r = fit(gp, method="fpi", m0=m_far, lam0=opt.cov.lam)
    assert abs(r.vlb - core_vlb(gp, r.m, r.cov)) <= 1e-9 * abs(r.vlb)
    assert r.stop in (Stop.GRAD_TOL, Stop.REL_TOL) and abs(r.vlb - opt.vlb) <= 1e-8 * abs(opt.vlb), (r.stop, r.vlb, opt.vlb, r.message)
