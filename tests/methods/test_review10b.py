"""Review of the closed-form inner solve of a GP with Gaussian noise (`gaussian_optimum` in `learn`)."""
import numpy as np
import pytest
from vgi_lit.models import GP
from vgi_lit.likelihoods import Gaussian
from vgi_lit.kernels import RBF
from vgi_lit.methods.hyper import learn


def _gp():
    x = np.linspace(0, 1, 40)
    return GP(x[:, None], np.sin(6 * x) + 0.1 * np.random.default_rng(0).normal(size=40), Gaussian(0.5), RBF(1.0, 0.3))


@pytest.mark.parametrize("method", ["fpi", "fpb"])
@pytest.mark.parametrize("inner,err,match", [({"nonsense": 1}, TypeError, "nonsense"), ({"tol": -1.0}, ValueError, "tol"),
                                             ({"tol_rel": float("nan")}, ValueError, "tol_rel")])
def test_bad_inner_options_are_refused_where_the_inner_solve_is_the_closed_form(method, inner, err, match):
    "The closed form takes no inner options, but a misspelt or invalid one is still an error, as for every other model."
    with pytest.raises(err, match=match):
        learn(_gp(), method=method, inner=inner)


def test_valid_inner_options_leave_the_closed_form_result_unchanged():
    a, b = learn(_gp()), learn(_gp(), inner={"tol": 1e-9, "max_iter": 3, "callback": lambda r: True})
    assert a.vlb == b.vlb and b.posterior.info.get("closed_form")


def test_gaussian_optimum_takes_one_cholesky_factor():
    """Σ + σ²I = σ²B with B = I + SΣS the posterior's own matrix: one factorisation gives both m* and V* (a second, of
    Σ + σ²I, made the closed form slower than FPi's warm-started iterations in VGRegressor)."""
    from vgi_lit.bench.fixed_point import count_factorisations
    from vgi_lit.methods.hyper import gaussian_optimum
    gp = _gp()
    with count_factorisations() as counts: post = gaussian_optimum(gp)
    A = gp.K_site() + 0.5 * np.eye(gp.n); r = gp.y - gp.mean
    ml = -0.5 * r @ np.linalg.solve(A, r) - 0.5 * np.linalg.slogdet(A)[1] - 0.5 * gp.n * np.log(2 * np.pi)
    assert counts["cholesky"] == 1 and abs(post.vlb - ml) < 1e-10 * abs(ml), (counts, post.vlb, ml)
    assert np.allclose(post.m, gp.y - 0.5 * np.linalg.solve(A, r), rtol=0, atol=1e-12)
