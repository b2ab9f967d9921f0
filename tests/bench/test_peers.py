"""The peers benchmark (`vgi_lit.bench.peers`): the whitened form of the optimum against brute force, the step-size race,
its problems and bad-input errors, the package's side on Sonar, its registration as a suite; (slow, only where GPflow or
GPyTorch is installed) each peer's ELBO at the package's optimum equals the package's VLB."""
import importlib.util
import numpy as np
import pytest
from vgi_lit.bench import peers as bp
from vgi_lit.bench.core import suites


@pytest.mark.parametrize("n,seed", [(3, 0), (10, 1), (25, 2)])
def test_whitened_optimum_against_brute_force(n, seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, n)); S = A @ A.T + n * np.eye(n)
    m, lam = rng.standard_normal(n), rng.uniform(0.0, 3.0, n)
    V = np.linalg.inv(np.linalg.inv(S) + np.diag(lam))               # brute force, the oracle
    L = np.linalg.cholesky(S); Li = np.linalg.inv(L)
    mu_v, P_v, th1 = bp.whitened_optimum(S, m, lam)
    assert np.allclose(mu_v, Li @ m) and np.allclose(P_v, np.linalg.inv(Li @ V @ Li.T), rtol=1e-8, atol=1e-8)
    assert np.allclose(th1, P_v @ mu_v)
    R = bp.lower_sqrt_inverse(P_v)
    assert np.allclose(R, np.tril(R)) and np.allclose(R @ R.T, Li @ V @ Li.T, atol=1e-10)


def test_race_caps_and_choice():
    need = {1.0: None, 0.5: 4.0, 0.1: 3.0}                           # seconds each rate needs (None: never)
    caps = []
    def run_rate(rate, cap):
        caps.append(cap); t = need[rate]
        return dict(seconds=t if t is not None and t <= cap else None, cpu=t, gap=1e-3, steps=2, failed=None)
    r = bp.race(run_rate, max_seconds=5.0)
    assert caps == [5.0, 5.0, 4.0] and r["rate"] == 0.1 and r["seconds"] == 3.0 and set(r["tried"]) == {1.0, 0.5, 0.1}
    none = bp.race(lambda rate, cap: dict(seconds=None, cpu=1.0, gap=0.1, steps=1, failed=None), max_seconds=1.0)
    assert none["rate"] is None and none["seconds"] is None


def test_problems_and_errors():
    model, info = bp.peer_problem("a7a", 30, lik="probit")
    assert model.n == 30 and info["D"] == 123 and np.isclose(model.prior.dense()[0, 0] - 10.0, bp.JITTER, rtol=1e-9)
    assert model.likelihood.method == "gh" and model.likelihood.n_gh == bp.N_GH
    with pytest.raises(ValueError, match="unknown problem"): bp.peer_problem("wine")
    with pytest.raises(ValueError, match="positive row count"): bp.peer_problem("a7a")
    with pytest.raises(ValueError, match="cannot take"): bp.peer_problem("a7a", 10 ** 6)
    with pytest.raises(ValueError, match="used whole"): bp.peer_problem("sonar", 100)
    with pytest.raises(ValueError, match="lik must be"): bp.peer_problem("sonar", lik="softmax")
    with pytest.raises(ValueError, match="n × n"): bp.whitened_optimum(np.eye(3), np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match="square"): bp.lower_sqrt_inverse(np.ones((2, 3)))
    with pytest.raises(ValueError, match="rtol"): bp.measure(["--sizes", "--extra", "--peers", "--rtol", "2"])


def test_ours_on_sonar_and_registration():
    row = bp.measure_problem("sonar", None, peers=())
    o = row["ours"]
    assert o["seconds"] is not None and o["seconds"] <= o["wall_call"] and o["cpu"] <= o["cpu_call"]
    assert abs(o["vlb"] - row["vlb_ref"]) <= 1e-6 * abs(row["vlb_ref"]) and row["t_chol"] > 0
    assert "peers" in suites()


@pytest.mark.slow
@pytest.mark.parametrize("peer", ["gpflow", "gpytorch"])
@pytest.mark.parametrize("lik", ["logistic", "probit"])
def test_peer_elbo_at_optimum(peer, lik):
    if importlib.util.find_spec(peer) is None: pytest.skip(f"{peer} is not installed")
    model, _ = bp.peer_problem("sonar", lik=lik)
    post = bp.reference(model)
    res = bp.PEERS[peer](model, post, rates=(1.0,), max_seconds=60.0)
    # GPflow's VGP is the same function; GPyTorch predicts f(X) through K(K + jI)⁻¹u, a jK⁻¹-sized change
    assert abs(res["elbo_at_opt"] - post.vlb) <= (1e-10 if peer == "gpflow" else 1e-6) * abs(post.vlb)
    assert res["seconds"] is not None and res["rate"] == 1.0          # γ = 1 reaches the target on Sonar (6 and 19 steps)


def test_race_and_ours_repeat_short_runs_and_report_medians():
    times = iter([0.02, 0.05, 0.03, 0.01, 0.04])                      # the race's run of rate 1, then its four repeats
    calls = []
    def run_rate(rate, cap):
        calls.append(rate); t = next(times) if rate == 1.0 else None
        return dict(seconds=t, cpu=t, gap=0.0, steps=3, failed=None)
    r = bp.race(run_rate, rates=(1.0, 0.5), repeats=5, below=1.0)
    assert r["rate"] == 1.0 and r["runs"] == 5 and r["seconds"] == 0.03 and calls == [1.0, 0.5, 1.0, 1.0, 1.0, 1.0]
    slow = bp.race(lambda rate, cap: dict(seconds=2.0, cpu=2.0, gap=0.0, steps=1, failed=None), rates=(1.0,), repeats=5, below=1.0)
    assert slow["runs"] == 1 and slow["seconds"] == 2.0                 # above `below`: one run
    model, _ = bp.peer_problem("a7a", 60)
    ref = bp.reference(model).vlb
    o = bp.ours(model, ref - 1e-6 * abs(ref), repeats=3)
    assert o["runs"] == 3 and o["cpu"] is not None and o["cpu"] <= o["cpu_call"] and o["iterations"] >= 1
    assert bp.ours(model, ref - 1e-6 * abs(ref), repeats=3, below=0.0)["runs"] == 1
    with pytest.raises(ValueError, match="repeats"): bp.measure(["--sizes", "--extra", "--peers", "--repeats", "0"])
