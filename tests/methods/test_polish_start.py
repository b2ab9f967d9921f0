"GRAD's polish from an FP state whose V, formed as a d × d matrix, is not positive definite in floating point."
import numpy as np
from vgi_lit.covariance import SiteCov
from vgi_lit.kernels import RBF
from vgi_lit.likelihoods import StudentT
from vgi_lit.models import GP
from vgi_lit.inference import Stop, EventKind, History, Record
from vgi_lit.methods.fixed_point import _polish


def _noiseless_studentt_gp():
    "A Student-t GP at the values learning reached on noiseless linear targets (generated data: y = x₁ − x₂, 80 rows)."
    X = np.random.default_rng(0).standard_normal((80, 3)); y = X[:, 0] - X[:, 1]
    return GP(X, y - y.mean(), StudentT(df=3813.9, scale2=3.775e-11), RBF(20778.2, 2827.2))


def test_polish_keeps_the_fp_state_when_v_is_not_positive_definite_as_a_matrix():
    model = _noiseless_studentt_gp()
    cov = SiteCov(model, np.full(model.n, 1e12))                  # site precisions ~ 1/scale2: Σ − ΣSB⁻¹SΣ cancels
    assert np.linalg.eigvalsh(cov.dense()).min() < 0                # the premise: indefinite in floating point
    m = np.zeros(model.n)
    hist = History(); hist.append(Record(0, 0.0, -1.0, 1.0, "fp", [], {}))
    m2, cov2, stop, msg = _polish(model, m, cov, np.zeros(model.n), hist, Stop.STALLED, "stalled", stalled=True)
    assert m2 is m and cov2 is cov and stop is Stop.STALLED          # the FP state is returned (was a ValueError about V0)
    assert "not positive definite" in msg
    assert any(e.kind is EventKind.HANDOVER and "GRAD cannot start" in e.detail for e in hist[-1].events)
