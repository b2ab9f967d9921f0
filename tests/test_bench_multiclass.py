"""The multiclass benchmark (`vgi_lit.bench.multiclass`): its data and bad-input errors, the stationarity residual it
reports (zero at FPi's optimum, not at a perturbed V); (slow) the command line without the peer and its registration
as a suite (the page runs it too); (slow, only where GPflow is installed) GPflow's natural gradients on the joint model agree with FPi to 1e-6."""
import importlib.util
import json
import numpy as np
import pytest
from vgi_lit.bench import multiclass as bm
from vgi_lit.bench.core import suites
from vgi_lit.kernels import Matern52
from vgi_lit.models.multi import MultiGP
from vgi_lit.softmax import Softmax
from vgi_lit.methods.multiclass import fpi_multi


def test_problem_and_errors():
    X, y, C = bm.problem("digits", n_digits=50, every=2)
    assert X.shape[0] == 25 and C == int(y.max()) + 1 and np.allclose(X.std(0), 1)
    with pytest.raises(ValueError, match="unknown problem"): bm.problem("wine")
    with pytest.raises(ValueError, match="n_digits"): bm.problem("digits", n_digits=5)
    with pytest.raises(ValueError, match="every"): bm.problem("iris", every=0)


def test_stationarity_residual():
    X, y, C = bm.problem("iris", every=10)
    mod = bm.fixed_model(X, y, C)
    post = fpi_multi(mod, tol=1e-10, tol_rel=0)
    rm, rV = bm.stationarity_residual(mod, post.m, post.V)
    assert rm < 1e-8 and rV < 1e-8
    assert bm.stationarity_residual(mod, 1.01 * post.m, post.V)[0] > 1e-3
    assert bm.stationarity_residual(mod, post.m, 0.99 * post.V)[1] > 1e-3
    with pytest.raises(ValueError, match="shapes"): bm.stationarity_residual(mod, post.m[:-1], post.V)


def test_peer_needs_one_rbf_kernel():
    X, y, C = bm.problem("iris", every=10)
    with pytest.raises(ValueError, match="one RBF kernel"): bm.gpflow_natgrad(MultiGP(X, y, Softmax(C), Matern52()))


@pytest.mark.slow
def test_command_line_without_peer(capsys):
    assert "multiclass" in suites()
    rows = bm.measure(["--problems", "iris", "--every", "5", "--no-peer", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out[0]["n"] == 30 and out[0]["gpflow"] is None and "m" not in out[0]["ours"]
    assert rows[0]["t_ours"] is not None and rows[0]["t_ours"] <= rows[0]["ours"]["seconds"]
    assert rows[0]["ours"]["vlb"] >= rows[0]["target"]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("gpflow") is None, reason="GPflow is not installed")
def test_gpflow_agrees_on_iris_subset():
    r = bm.compare("iris", every=5)
    g = r["gpflow"]
    assert g["vlb_rel"] < 1e-6 and g["m_rel"] < 1e-6 and g["V_rel"] < 1e-6, (g["vlb_rel"], g["m_rel"], g["V_rel"])
    assert g["residual_m"] < 1e-6 and g["residual_V"] < 1e-6
