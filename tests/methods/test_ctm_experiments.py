"CTM experiments: the Dirichlet KL of the LDA reference against Monte Carlo, and the claims table on constructed traces."
import numpy as np
from scipy.stats import dirichlet
from vgi_lit.experiments.ctm_experiments import dirichlet_neg_kl, claims, METHODS, _at, train_method, compact, claims_table
from vgi_lit.corpora import load_reuters, split_documents


def test_dirichlet_neg_kl_matches_monte_carlo():
    rng = np.random.default_rng(0); lam = rng.uniform(0.5, 4.0, size=(2, 4)); eta = 0.7
    mc = 0.0
    for k in range(2):
        x = rng.dirichlet(lam[k], size=50_000)
        lp = dirichlet.logpdf(x.T, np.full(4, eta)) - dirichlet.logpdf(x.T, lam[k])
        mc += lp.mean()
    assert abs(dirichlet_neg_kl(lam, eta) - mc) < 0.03 and dirichlet_neg_kl(lam, eta) < 0
    assert abs(dirichlet_neg_kl(np.full((3, 5), 0.7), 0.7)) < 1e-12          # q = prior: no KL


def _row(method, K, secs, vlb, nll, comp):
    return dict(method=method, K=K, seconds=secs, vlb=vlb, is_nll=nll, is_se=0.001, completion=comp)


def test_claims_on_constructed_runs():
    rows = [_row("h-mc-ssvi", 10, [0, 2, 4, 8], [-100, -80, -60, -50], 7.0, 7.1),
            _row("s-dsvi", 10, [0, 3, 6], [-100, -90, -85], 7.2, 7.4),
            _row("simple", 10, [0, 1, 2], [-100, -95, -94], 7.5, 7.6),
            _row("meanfield", 10, [0, 1, 5], [-100, -70, -55], 7.1, 7.2)]
    got = {c["claim"].split(" (")[0][:30]: c["held"] for c in claims(rows)}
    assert all(got.values()) and len(got) == 6, got
    rows[0]["vlb"][-1] = -56; rows[1]["vlb"] = [-100, -60, -50]                # H-MC-SSVI below mean field; S-DSVI crosses it
    c = {x["claim"][:20]: x["held"] for x in claims(rows)}
    assert not c["H-MC-SSVI catches up"] and not c["S-DSVI is slower and"]
    assert _at(rows[0], 3.0) == -80 and np.isnan(_at(rows[0], -1.0))


def test_time_budget_stops_at_a_sweep_end():
    "fit_ctm's own max_seconds stops inside a sweep (partial-sweep parameters, a lower bound); the budget is applied at sweep ends."
    tr, _ = split_documents(load_reuters().subset(np.arange(40)), 0.2, seed=0)
    for meth in ("h-mc-ssvi", "s-dsvi"):
        r = train_method(tr, 3, meth, max_seconds=0.15)
        assert r["stop"] == "callback" and r["documents"] == r["n_iter"] * tr.n_docs and r["seconds"][-1] >= 0.15


def test_compact_copy_of_a_result():
    "compact: trace times to 0.01 s, bounds to 0.1, own bound's last value, other floats to 6 digits; claims and the input untouched."
    res = {"rows": [{"method": "simple", "seconds": [0.0, 1.23456], "vlb": [-10.04, -5.06], "own": [float("nan"), -7.123],
                     "is_nll": 7.123456789, "n_iter": 3}],
           "claims": [{"K": 10, "claim": "c", "held": True, "numbers": "7.123456789"}]}
    c = compact(res); r = c["rows"][0]
    assert r["seconds"] == [0.0, 1.23] and r["vlb"] == [-10.0, -5.1] and r["own"] == [-7.1] and r["is_nll"] == 7.12346 and r["n_iter"] == 3
    assert c["claims"] == res["claims"] and len(res["rows"][0]["own"]) == 2 and res["rows"][0]["seconds"][1] == 1.23456
    assert claims_table(c).splitlines()[2] == "| 10 | c | yes | 7.123456789 |"
