"""Orthant probabilities in any dimension (`vgi_lit.orthant`): bad input refused by name, the derivatives are those of the
value returned (central differences), q = 1 exact and q = 2 against the closed forms, the zero-variance limit, blocking
changes nothing; (slow) the value against `scipy.stats.multivariate_normal.cdf` at q = 5 and 9 and against adaptive
quadrature at q = 3 with the face formulas for the derivatives, over seeds."""
import numpy as np
import pytest
from scipy.special import ndtr
from vgi_lit.orthant import orthant_rule, orthant_sov
from vgi_lit.softmax import orthant


def _case(rng, n, q, shift=0.0, ridge=0.1):
    A = rng.normal(size=(n, q, q)); S = A @ np.swapaxes(A, 1, 2) / q + ridge * np.eye(q)
    return rng.normal(size=(n, q)) + shift, S


@pytest.mark.parametrize("make, msg", [
    (lambda: orthant_sov(np.zeros(3), np.eye(3)), "shape"),
    (lambda: orthant_sov(np.zeros((1, 3)), np.eye(3)), "shape"),
    (lambda: orthant_sov(np.full((1, 3), np.nan), np.eye(3)[None]), "NaN"),
    (lambda: orthant_sov(np.zeros((1, 3)), np.array([[[1.0, 0.5, 0], [0, 1, 0], [0, 0, 1]]])), "symmetric"),
    (lambda: orthant_sov(np.zeros((1, 3)), np.ones((1, 3, 3))), "positive definite"),
    (lambda: orthant_sov(np.zeros((1, 3)), -np.eye(3)[None]), "positive definite"),
    (lambda: orthant(np.zeros((1, 4)), np.ones((1, 4, 4))), "positive definite"),
    (lambda: orthant_sov(np.zeros((1, 3)), np.eye(3)[None], n_qmc=1000), "power of two"),
    (lambda: orthant_rule(0), "positive integer"), (lambda: orthant_rule(2.0), "positive integer"),
])
def test_orthant_bad_input(make, msg):
    with pytest.raises(ValueError, match=msg): make()


@pytest.mark.parametrize("q", [3, 4, 7])
def test_derivatives_are_those_of_the_value(q):
    "∇P̂, ∇²P̂ and ∂P̂/∂S against central differences of P̂ (and of ∇P̂); one site in the tail."
    rng = np.random.default_rng(q); mu, S = _case(rng, 3, q, shift=0.7)
    mu[0] -= 4.0
    P, g, dS, H = orthant_sov(mu, S, 64, hessian=True); h = 1e-6
    for j in range(q):
        e = np.zeros(q); e[j] = h
        Pp, gp, _, _ = orthant_sov(mu + e, S, 64, hessian=True); Pm, gm, _, _ = orthant_sov(mu - e, S, 64, hessian=True)
        assert np.allclose((Pp - Pm) / (2 * h), g[:, j], rtol=1e-6, atol=1e-10)
        assert np.allclose((gp - gm) / (2 * h), H[:, :, j], rtol=1e-5, atol=1e-9)
        for k in range(j, q):
            E = np.zeros((q, q)); E[j, k] += h / 2; E[k, j] += h / 2          # dP = tr(∂P/∂S dS) = (∂P/∂S)_jk h
            fd = (orthant_sov(mu, S + E, 64, derivatives=False)[0] - orthant_sov(mu, S - E, 64, derivatives=False)[0]) / (2 * h)
            assert np.allclose(fd, dS[:, j, k], rtol=1e-6, atol=1e-10)
    assert np.all((P > 0) & (P < 1)) and np.allclose(H, np.swapaxes(H, 1, 2), atol=1e-15) and np.allclose(dS, np.swapaxes(dS, 1, 2))
    a = orthant_sov(mu, S, 64)
    assert len(a) == 3 and np.array_equal(a[0], P) and np.allclose(a[1], g, rtol=1e-14) and np.allclose(a[2], dS, rtol=1e-14)


def test_low_dimensions_and_limits():
    rng = np.random.default_rng(0)
    for q, tol in ((1, 1e-14), (2, 1e-4)):                                   # against the closed forms; ∂P/∂S = ½∇²P (Price) for these
        mu, S = _case(rng, 5, q); P, g, dS, H = orthant_sov(mu, S, hessian=True); Pc, gc, Hc = orthant(mu, S)
        assert max(np.max(np.abs(P - Pc)), np.max(np.abs(g - gc)), np.max(np.abs(H - Hc)), np.max(np.abs(dS - Hc / 2))) < tol
    mu = np.array([[0.2, -0.1, 0.3, 0.5, 0.1], [0.2, 0.1, 0.3, 0.5, 0.1]]); S = _case(rng, 2, 5)[1]
    P, g, dS, H = orthant_sov(mu, 1e-14 * S, hessian=True)
    assert np.array_equal(P, [0.0, 1.0]) and np.max(np.abs(g)) == 0 and np.all(np.isfinite(H)) and np.all(np.isfinite(dS))
    P, g, _ = orthant_sov(np.full((1, 4), -40.0), np.eye(4)[None])          # P = Φ(−40)⁴, far below the smallest double: 0, not NaN
    assert P[0] == 0.0 and np.all(g == 0)
    mu, S = _case(rng, 1, 4); mu[0] = -6.0                                   # the tail with independent coordinates: exact
    P, g, _ = orthant_sov(mu, np.diag(np.diag(S[0]))[None])
    s = np.sqrt(np.diag(S[0])); Pr = np.prod(ndtr(mu[0] / s))
    assert abs(P[0] / Pr - 1) < 1e-12


def test_orthant_dispatches_to_sov_for_q_at_least_3():
    rng = np.random.default_rng(2); mu, S = _case(rng, 3, 4)
    P, g, H = orthant(mu, S, n_qmc=64); a = orthant_sov(mu, S, 64, hessian=True)
    assert np.array_equal(P, a[0]) and np.array_equal(g, a[1]) and np.array_equal(H, a[3])
    P2, g2, H2 = orthant(mu, S, n_qmc=64, derivatives=False)
    assert np.allclose(P2, P, rtol=1e-14) and g2 is None and H2 is None


def test_blocks_change_nothing():
    rng = np.random.default_rng(1); mu, S = _case(rng, 7, 5)
    a, b = orthant_sov(mu, S, 128, hessian=True), orthant_sov(mu, S, 128, hessian=True, block=1)
    assert all(np.allclose(x, y, rtol=1e-13, atol=1e-16) for x, y in zip(a, b))
    assert np.allclose(orthant_sov(mu, S, 128, derivatives=False)[0], a[0], rtol=1e-14)


@pytest.mark.slow
@pytest.mark.parametrize("q", [5, 9])
def test_value_against_scipy(q):
    "P̂ (default rule) against Genz's lattice rule in SciPy (absolute tolerance 1e-6) over 12 seeded sites."
    from scipy.stats import multivariate_normal as mvn
    worst = 0.0
    for seed in range(12):
        rng = np.random.default_rng(100 + seed); C = q + 1
        m = rng.normal(size=C); B = rng.normal(size=(C, C)); V = B @ B.T / C + 0.1 * np.eye(C)
        D = np.c_[np.ones((q, 1)), -np.eye(q)]; mu, S = D @ m, D @ V @ D.T
        ref = mvn.cdf(mu, cov=S, abseps=1e-6, releps=0, maxpts=4 * 10 ** 6, rng=np.random.default_rng(seed))
        worst = max(worst, abs(orthant_sov(mu[None], S[None], derivatives=False)[0][0] - ref))
    print(q, worst)
    assert worst < 3e-4, worst


@pytest.mark.slow
def test_q3_against_quadrature_and_faces():
    "q = 3: P by adaptive quadrature of the closed-form bivariate orthant, ∇P and ∇²P by the face formulas, 40 seeded sites."
    from scipy import integrate
    def cond(mu, S, idx):
        rest = [k for k in range(len(mu)) if k not in idx]
        K = np.linalg.solve(S[np.ix_(idx, idx)], S[np.ix_(idx, rest)]).T
        return mu[rest] - K @ mu[idx], S[np.ix_(rest, rest)] - K @ S[np.ix_(idx, rest)]
    def ref(mu, S):
        s1 = np.sqrt(S[0, 0])
        def f(x):
            cm, cS = cond(np.r_[mu[0] - x, mu[1:]], S, [0])
            return np.exp(-0.5 * ((x - mu[0]) / s1) ** 2) / (np.sqrt(2 * np.pi) * s1) * orthant(cm[None], cS[None])[0][0]
        lo, hi = max(0.0, mu[0] - 40 * s1), mu[0] + 40 * s1
        P = 0.0 if hi <= 0 else integrate.quad(f, lo, hi, epsabs=1e-15, epsrel=1e-13, limit=500, points=[mu[0]] if lo < mu[0] < hi else None)[0]
        g, H = np.empty(3), np.empty((3, 3))
        for j in range(3):
            cm, cS = cond(mu, S, [j])
            g[j] = np.exp(-0.5 * mu[j] ** 2 / S[j, j]) / np.sqrt(2 * np.pi * S[j, j]) * orthant(cm[None], cS[None])[0][0]
            for k in set(range(3)) - {j}:
                B = S[np.ix_([j, k], [j, k])]; mm = mu[[j, k]]; cm, cS = cond(mu, S, [j, k])
                H[j, k] = np.exp(-0.5 * mm @ np.linalg.solve(B, mm)) / (2 * np.pi * np.sqrt(np.linalg.det(B))) * ndtr(cm[0] / np.sqrt(cS[0, 0]))
        for j in range(3): H[j, j] = -mu[j] / S[j, j] * g[j] - sum(S[k, j] / S[j, j] * H[j, k] for k in set(range(3)) - {j})
        return P, g, H
    rng = np.random.default_rng(7); n = 40
    mu, S = _case(rng, n, 3, ridge=0.05); mu *= 1.5
    P, g, _, H = orthant_sov(mu, S, hessian=True)
    R = [ref(mu[i], S[i]) for i in range(n)]
    eP = max(abs(P[i] - R[i][0]) for i in range(n)); eg = max(np.max(np.abs(g[i] - R[i][1])) for i in range(n))
    eH = max(np.max(np.abs(H[i] - R[i][2])) for i in range(n))
    print(eP, eg, eH)
    assert eP < 1e-4 and eg < 3e-4 and eH < 3e-3
