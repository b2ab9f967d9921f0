"""The softmax likelihood (`vgi_lit.softmax`): labels and shapes refused with clear errors, the zero-variance limit,
the shift invariance, and (slow) the accuracy of E and Γ against high-precision references over a sweep of site
covariances and seeds."""
import numpy as np
import pytest
from scipy.special import logsumexp
from vgi_lit.softmax import Softmax, mvn_rule


@pytest.mark.parametrize("bad, msg", [([0, 3], "0..2"), ([0.5, 1], "fractions"), ([np.nan, 1], "NaN"), ([np.inf, 0], "NaN"),
                                      (["a", "b"], "encode"), ([[0, 1]], "1-d"), ([True, False], "encode"), ([-1, 0], "0..2")])
def test_bad_labels(bad, msg):
    with pytest.raises(ValueError, match=msg): Softmax(3).check_y(np.array(bad))


@pytest.mark.parametrize("arg", [1, 0, 2.5, True, "3"])
def test_bad_n_classes(arg):
    with pytest.raises(ValueError, match="n_classes"): Softmax(arg)


def test_bad_site_moments():
    lik = Softmax(3); y = np.array([0, 1])
    with pytest.raises(ValueError, match="shape"): lik.expected_log_lik(y, np.zeros((2, 2)), np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match="shape"): lik.expected_log_lik(y, np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="NaN"): lik.expected_log_lik(y, np.array([[0, np.nan, 0], [0, 0, 0]]), np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match="sites"): lik.log_pred_density(np.array([0]), np.zeros((2, 3)), np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match="power of two"): mvn_rule(5, n_qmc=1000)


@pytest.mark.parametrize("C", [2, 3, 5])
def test_zero_variance_limit_and_shift_invariance(C):
    rng = np.random.default_rng(C); lik = Softmax(C); n = 6
    m = rng.normal(size=(n, C)) * 3; y = lik.check_y(rng.integers(0, C, n))
    E, dm, dV = lik.expected_log_lik(y, m, np.zeros((n, C, C)))
    p = np.exp(m - logsumexp(m, 1, keepdims=True))
    assert np.allclose(E, lik.logp(y, m), atol=1e-13)
    assert np.allclose(dm, np.eye(C)[y] - p, atol=1e-13)
    B = rng.normal(size=(n, C, C)); V = B @ np.swapaxes(B, 1, 2)
    E1, dm1, dV1 = lik.expected_log_lik(y, m, V)
    E2, dm2, dV2 = lik.expected_log_lik(y, m + 7.0, V + 2.0)            # a common shift of every f_k, random or not
    assert np.allclose(E1, E2, atol=1e-12) and np.allclose(dm1, dm2, atol=1e-12) and np.allclose(dV1, dV2, atol=1e-12)
    assert np.allclose(dV1 @ np.ones(C), 0, atol=1e-13) and np.allclose(dm1.sum(1), 0, atol=1e-13)
    assert lik.curvature == 'exact' or np.min(np.linalg.eigvalsh(-2 * dV1)) > -1e-13     # Price's Γ ⪰ 0 by construction


def test_curvature_option():
    with pytest.raises(ValueError, match="curvature"): Softmax(5, curvature="hessian")
    assert Softmax(4).curvature == "price" and Softmax(5).curvature == "exact" and Softmax(6, n_gh=3).curvature == "price"
    assert Softmax(3, curvature="exact").curvature_psd is False and Softmax(6, curvature="price").curvature_psd


@pytest.mark.parametrize("C, seed", [(5, 0), (7, 1), (3, 2)])
def test_exact_curvature_is_the_derivative_of_the_rule(C, seed):
    """'exact' Γ = −2 × central differences of the rule's E in V (to 1e-6 relative), for a small Sobol' rule (256 points,
    where Price's form is off by more than 1e-4) and for the product rule; the row sums vanish and Γ is symmetric."""
    rng = np.random.default_rng(seed); n = 3
    lik = Softmax(C, n_qmc=256, curvature="exact") if C > 4 else Softmax(C, n_gh=6, curvature="exact")
    m = rng.normal(size=(n, C)) * 2; y = rng.integers(0, C, n); B = rng.normal(size=(n, C, C)); V = B @ np.swapaxes(B, 1, 2) / C
    _, _, dV = lik.expected_log_lik(y, m, V)
    fd = np.zeros_like(dV); h = 1e-5
    for k in range(C):
        for j in range(k, C):
            D = np.zeros((C, C)); D[k, j] += h / 2; D[j, k] += h / 2
            fd[:, k, j] = fd[:, j, k] = (lik.expected_log_lik(y, m, V + D)[0] - lik.expected_log_lik(y, m, V - D)[0]) / (2 * h)
    assert np.max(np.abs(fd - dV)) < 1e-6 * np.max(np.abs(dV))
    assert np.allclose(dV, np.swapaxes(dV, 1, 2), atol=1e-15) and np.allclose(dV.sum(2), 0, atol=1e-13)
    if C > 4:
        dVp = Softmax(C, n_qmc=256, curvature="price").expected_log_lik(y, m, V)[2]
        assert np.max(np.abs(dVp - dV)) > 1e-4 * np.max(np.abs(dV))


def test_exact_curvature_at_singular_covariances():
    "V = 0 and a rank-one V: Γ finite and symmetric, Γ1 = 0; at V = 0 the Gaussian value diag p − ppᵀ (both forms agree)."
    rng = np.random.default_rng(3); C = 6; lik = Softmax(C); n = 3
    m = rng.normal(size=(n, C)); y = np.array([0, 2, 5]); u = rng.normal(size=(n, C))
    for V in (np.zeros((n, C, C)), u[:, :, None] * u[:, None, :]):
        G = -2 * lik.expected_log_lik(y, m, V)[2]
        assert np.all(np.isfinite(G)) and np.allclose(G, np.swapaxes(G, 1, 2)) and np.allclose(G.sum(2), 0, atol=1e-13)
    Gp = -2 * Softmax(C, curvature="price").expected_log_lik(y, m, np.zeros((n, C, C)))[2]
    assert np.allclose(-2 * lik.expected_log_lik(y, m, np.zeros((n, C, C)))[2], Gp, atol=1e-14)


def test_predictions_are_probabilities():
    rng = np.random.default_rng(0); lik = Softmax(4); n = 5
    m = rng.normal(size=(n, 4)); B = rng.normal(size=(n, 4, 4)); V = B @ np.swapaxes(B, 1, 2)
    P, S = lik.predict_y(m, V, return_std=True)
    assert np.allclose(P.sum(1), 1) and P.min() > 0 and S.min() >= 0
    y = np.array([0, 1, 2, 3, 0])
    assert np.allclose(lik.log_pred_density(y, m, V), np.log(P[np.arange(n), y]), atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("C", [3, 4, 10])
def test_accuracy_sweep(C):
    """E and Γ against a reference with many more nodes: product Gauss-Hermite 64 per dimension (C ≤ 3; 40 for C = 4),
    8 scramblings of 2^15 Sobol' points (C = 10); site covariances s·BBᵀ/C, s from 0.01 to 3, three seeds (two for C = 10).
    Tolerances are the measured accuracy with a margin: the product rules are exact to rounding at s ≤ 1 for C = 3 and
    lose digits as the Gaussian widens past the bend of the log-sum-exp; the Sobol' rule is good to a few 1e-3 in E, and its
    Γ (the exact derivative of the rule's E, which carries the derivative of the rule's error) to a few per cent at s = 3."""
    worst = {}
    tol_E = {3: (1e-9, 3e-5), 4: (3e-4, 3e-3)}.get(C)
    for seed in range(3 if C <= 4 else 2):
        rng = np.random.default_rng(seed); lik = Softmax(C); n = 4
        for s in (0.01, 0.1, 1.0, 3.0):
            m = rng.normal(size=(n, C)) * 2; y = rng.integers(0, C, n)
            B = rng.normal(size=(n, C, C)); V = s * B @ np.swapaxes(B, 1, 2) / C
            E, _, dV = lik.expected_log_lik(y, m, V)
            if C <= 4: Er, _, dVr = Softmax(C, n_gh=64 if C <= 3 else 40).expected_log_lik(y, m, V); se = 0.0
            else:
                runs = [Softmax(C, n_qmc=2**15, seed=100 + k).expected_log_lik(y, m, V) for k in range(8)]
                Er = np.mean([r[0] for r in runs], 0); dVr = np.mean([r[2] for r in runs], 0)
                se = np.max(np.std([r[0] for r in runs], 0)) / np.sqrt(8)
            eE = np.max(np.abs(E - Er)); eG = np.max(np.abs(dV - dVr)) / np.max(np.abs(dVr))
            worst[s] = max(worst.get(s, 0), eE)
            tolE = tol_E[s > 1] if tol_E else (3e-3 + 4 * se if s <= 1 else 1e-2)
            tolG = (1e-6 if s <= 1 else 1e-3) if C == 3 else (3e-2 if s <= 1 else 6e-2)   # C = 10: the exact derivative of the rule
            assert eE < tolE and eG < tolG, (C, s, seed, eE, eG)
    print(C, worst)


# ---- robust-max ---------------------------------------------------------------------------------------------------------
from vgi_lit.softmax import RobustMax, orthant


@pytest.mark.parametrize("make, msg", [
    (lambda: RobustMax(11), "2 <= n_classes <= 10"), (lambda: RobustMax(1), "n_classes"), (lambda: RobustMax(True), "n_classes"),
    (lambda: RobustMax(4, n_qmc=1000), "power of two"), (lambda: RobustMax(5, 0.8), "epsilon"),
    (lambda: RobustMax(3, 0.0), "epsilon"), (lambda: RobustMax(3, 2 / 3), "epsilon"), (lambda: RobustMax(2, "0.1"), "epsilon"),
    (lambda: RobustMax(3).check_y(np.array([0.5, 1])), "fractions"), (lambda: RobustMax(3).check_y(np.array(["a"])), "encode"),
    (lambda: RobustMax(3).expected_log_lik(np.array([0]), np.zeros((1, 2)), np.eye(3)[None]), "shape"),
    (lambda: RobustMax(3).expected_log_lik(np.array([0]), np.zeros((1, 3)), np.ones((1, 3, 3))), "singular"),
    (lambda: RobustMax(2).expected_log_lik(np.array([0]), np.zeros((1, 2)), np.ones((1, 2, 2))), "positive"),
    (lambda: RobustMax(4).expected_log_lik(np.array([0]), np.zeros((1, 4)), np.ones((1, 4, 4))), "positive definite"),
    (lambda: orthant(np.zeros((1, 0)), np.zeros((1, 0, 0))), "q must be a positive integer"),
])
def test_robustmax_bad_input(make, msg):
    with pytest.raises(ValueError, match=msg): make()


@pytest.mark.parametrize("C", [2, 3, 4, 10])
def test_robustmax_limits_and_invariance(C):
    rng = np.random.default_rng(10 + C); lik = RobustMax(C, 0.05, n_qmc=1024 if C <= 4 else 128); n = 8   # C = 10: a small rule (P to ~1e-2), for time
    m = rng.normal(size=(n, C)) * 2; y = lik.check_y(rng.integers(0, C, n))
    B = rng.normal(size=(n, C, C)); V = B @ np.swapaxes(B, 1, 2) / C + 0.05 * np.eye(C)
    E, dm, dV = lik.expected_log_lik(y, m, V)
    E2, dm2, dV2 = lik.expected_log_lik(y, m + 3.0, V + 1.5)                # a common shift of every f_k changes nothing
    assert np.allclose(E, E2, atol=1e-12) and np.allclose(dm, dm2, atol=1e-12) and np.allclose(dV, dV2, atol=1e-12)
    assert np.allclose(dm.sum(1), 0, atol=1e-12) and np.allclose(dV.sum(2), 0, atol=1e-12)   # Γ1 = 0, Σ ∂E/∂m = 0
    assert np.allclose(lik.expected_log_lik(y, m, 1e-16 * V)[0], lik.logp(y, m))
    P = lik.predict_y(m, V); eps = lik.epsilon
    assert np.allclose(P.sum(1), 1, rtol=0, atol={2: 1e-13, 3: 1e-13, 4: 1e-3, 10: 1e-2}[C]) and P.min() >= eps / (C - 1) - 1e-12 and P.max() <= 1 - eps + 1e-12
    assert np.allclose(np.exp(lik.log_pred_density(y, m, V)), P[np.arange(n), y])
    draws = lik.sample(np.tile(m[:1], (40_000, 1)), rng)
    assert abs(np.mean(draws == np.argmax(m[0])) - (1 - eps)) < 5 * np.sqrt(eps * (1 - eps) / 40_000)


@pytest.mark.slow
def test_robustmax_accuracy_sweep():
    "E and Γ against mpmath (quadrature of P at 30 digits) over scales 1e-6..1e6 and 40 seeds (the notebook's reference)."
    import mpmath
    mpmath.mp.dps = 30
    def ref(lik, y, m, V):
        C = lik.C; ks = [k for k in range(C) if k != y]; D = mpmath.matrix(C - 1, C)
        for r_, k in enumerate(ks): D[r_, y] = 1; D[r_, k] = -1
        mu = D * mpmath.matrix(m.tolist()); S = D * mpmath.matrix(V.tolist()) * D.T
        if C == 2: return float(lik.log_miss + lik.kappa * mpmath.ncdf(mu[0] / mpmath.sqrt(S[0, 0])))
        s1, s2 = mpmath.sqrt(S[0, 0]), mpmath.sqrt(S[1, 1]); r = S[0, 1] / (s1 * s2); c = mpmath.sqrt(1 - r * r); h1, h2 = mu[0] / s1, mu[1] / s2
        inner = sorted(p for p in [mpmath.mpf(-8), mpmath.mpf(0), mpmath.mpf(8)] + ([-h2 / r] if r != 0 else []) if p > -h1)
        return float(lik.log_miss + lik.kappa * mpmath.quad(lambda z: mpmath.npdf(z) * mpmath.ncdf((h2 + r * z) / c), [-h1] + inner + [mpmath.inf]))
    worst = 0.0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        for C in (2, 3):
            lik = RobustMax(C, 1e-3)
            for s in 10.0 ** np.arange(-6, 7, 2):
                B = rng.normal(size=(C, C)); V = s * B @ B.T / C; m = 2 * np.sqrt(s) * rng.normal(size=C); y = int(rng.integers(0, C))
                worst = max(worst, abs(lik.expected_log_lik(np.array([y]), m[None], V[None])[0][0] - ref(lik, y, m, V)))
    assert worst < 1e-12, worst


@pytest.mark.slow
def test_robustmax_fpi_and_grad_agree():
    "On a GLM (weight space, where FPi takes the indefinite Γ as it is) FPi and GRAD reach the same optimum."
    from vgi_lit.models.multi import MultiGLM
    from vgi_lit.methods.multiclass import fpi_multi, grad_multi
    rng = np.random.default_rng(7); y = np.repeat(np.arange(3), 10)
    X = np.c_[np.array([[0.0, 2.0], [-1.7, -1.0], [1.7, -1.0]])[y] + rng.normal(size=(30, 2)), np.ones(30)]
    mod = MultiGLM(X, y, RobustMax(3, 0.01))
    pf, pg = fpi_multi(mod, max_iter=500, tol=1e-8), grad_multi(mod, tol=1e-8)
    assert abs(pf.vlb - pg.vlb) < 1e-7 * abs(pg.vlb) and np.allclose(pf.m, pg.m, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gp", "glm"])
def test_robustmax_digits_fit(kind):
    """Five digit classes (150 training, 300 test images): `fit` (FPi) of the robust-max GP and GLM ends on the gradient test
    (damped where Γ is indefinite) and predicts held-out labels about as well as the softmax model on the same split."""
    from sklearn.datasets import load_digits
    from vgi_lit.inference import fit
    from vgi_lit.kernels import RBF
    from vgi_lit.models.multi import MultiGLM, MultiGP
    C = 5; X, y = load_digits(return_X_y=True); X, y = X[y < C], y[y < C]
    idx = np.random.default_rng(0).permutation(len(y)); X, y = X[idx], y[idx]
    sd = X.std(0); X = (X[:, sd > 0] - X[:, sd > 0].mean(0)) / sd[sd > 0]
    if kind == "glm": X = np.c_[X, np.ones(len(X))]
    Xtr, ytr, Xte, yte = X[:150], y[:150], X[150:450], y[150:450]
    out = {}
    for lik in (Softmax(C), RobustMax(C, 1e-3)):
        mod = MultiGP(Xtr, ytr, lik, RBF(variance=4.0, lengthscale=np.sqrt(Xtr.shape[1]))) if kind == "gp" else MultiGLM(Xtr, ytr, lik, prior_cov=0.1)
        post = fit(mod, tol=1e-4, max_iter=300)
        P = post.predict_proba(Xte)
        out[type(lik).__name__] = (post.stop.value, np.mean(P.argmax(1) == yte), -np.mean(post.log_pred_density(Xte, yte)))
        assert np.allclose(P.sum(1), 1, atol=1e-3)
    print(out)
    assert out["RobustMax"][0] in ("grad_tol", "rel_tol") and out["RobustMax"][1] > 0.9 and out["RobustMax"][1] > out["Softmax"][1] - 0.05


@pytest.mark.slow
def test_robustmax_four_classes_fpi_and_grad_agree():
    """C = 4 (the quasi-Monte Carlo orthant): E, ∂E/∂m and ∂E/∂V are one function and its derivatives, so FPi and GRAD
    reach the same optimum of the rule's VLB."""
    from vgi_lit.models.multi import MultiGLM
    from vgi_lit.methods.multiclass import fpi_multi, grad_multi
    C = 4; rng = np.random.default_rng(7); y = np.repeat(np.arange(C), 10); ang = 2 * np.pi * np.arange(C) / C
    X = np.c_[1.5 * np.c_[np.cos(ang), np.sin(ang)][y] + rng.normal(size=(len(y), 2)), np.ones(len(y))]
    mod = MultiGLM(X, y, RobustMax(C, 0.05, n_qmc=256))
    pf, pg = fpi_multi(mod, max_iter=500, tol=1e-8), grad_multi(mod, tol=1e-8, max_iter=3000)
    assert pf.stop.value in ("grad_tol", "rel_tol") and abs(pf.vlb - pg.vlb) < 1e-8 * abs(pg.vlb) and np.allclose(pf.m, pg.m, atol=1e-3)


def test_wide_route_dispatch_and_mixed_blocks():
    """`wide_route(K)`: `expected_lse` for K ≤ 2 and `expected_lse_wide` for K = 3 with the default rule, None for a given
    `n_gh` or K ≥ 4. A block holding
    narrow and wide sites gives, site by site, the product rule's numbers at the narrow ones and `expected_lse`'s at the wide ones."""
    from vgi_lit.softmax_range import expected_lse
    assert Softmax(3).wide_route(2) is expected_lse and Softmax(2).wide_route(1) is expected_lse
    from vgi_lit.softmax_wide import expected_lse_wide
    assert Softmax(4).wide_route(3) is expected_lse_wide and Softmax(4, n_gh=16).wide_route(3) is None
    assert Softmax(3, n_gh=32).wide_route(2) is None and Softmax(5).wide_route(4) is None
    rng = np.random.default_rng(4); lik = Softmax(3); n = 8
    m = rng.normal(size=(n, 3)); y = rng.integers(0, 3, n)
    B = rng.normal(size=(n, 3, 3)); V = B @ np.swapaxes(B, 1, 2) * np.where(np.arange(n) % 2, 4.0, 0.02)[:, None, None]
    D = np.zeros((n, 2, 3))
    for i, yi in enumerate(y): D[i, [0, 1], [k for k in range(3) if k != yi]] = 1.0; D[i, :, yi] = -1.0
    S = D @ V @ np.swapaxes(D, 1, 2); wide = np.linalg.eigvalsh(S)[:, -1] > lik.RULE_RANGE[2] ** 2
    assert wide.any() and not wide.all()
    E, dm, dV = lik.expected_log_lik(y, m, V)
    Er, dmr, dVr = Softmax(3, n_gh=32).expected_log_lik(y[~wide], m[~wide], V[~wide])
    assert np.array_equal(E[~wide], Er) and np.array_equal(dm[~wide], dmr) and np.array_equal(dV[~wide], dVr)
    Ew, gw, dSw = expected_lse(np.einsum('ikc,ic->ik', D[wide], m[wide]), S[wide])
    np.testing.assert_allclose(E[wide], -Ew, rtol=0, atol=1e-13)
    np.testing.assert_allclose(dm[wide], -np.einsum('ikc,ik->ic', D[wide], gw), rtol=0, atol=1e-13)
    np.testing.assert_allclose(dV[wide], -np.swapaxes(D[wide], 1, 2) @ dSw @ D[wide], rtol=0, atol=1e-13)


def test_four_classes_wide_sites_by_the_nested_rule():
    """C = 4: sites whose differences have a s.d. above `RULE_RANGE[3]` go to `expected_lse_wide`, narrow ones keep the 16³
    product rule (bit for bit); at a wide site ∂E/∂V matches central differences of E (the curvature FPi uses is the
    derivative of the E the VLB reports) and E agrees with a 40³ product rule at a scale where that rule is still accurate."""
    from vgi_lit.softmax_wide import expected_lse_wide
    rng = np.random.default_rng(7); lik = Softmax(4); n = 6
    m = rng.normal(size=(n, 4)); y = rng.integers(0, 4, n)
    B = rng.normal(size=(n, 4, 4)); V = B @ np.swapaxes(B, 1, 2) * np.where(np.arange(n) % 2, 1.5, 0.01)[:, None, None]
    E, dm, dV = lik.expected_log_lik(y, m, V)
    D = np.zeros((n, 3, 4))
    for i, yi in enumerate(y): D[i, [0, 1, 2], [k for k in range(4) if k != yi]] = 1.0; D[i, :, yi] = -1.0
    S = D @ V @ np.swapaxes(D, 1, 2); wide = np.linalg.eigvalsh(S)[:, -1] > lik.RULE_RANGE[3] ** 2
    assert wide.any() and not wide.all()
    Er = Softmax(4, n_gh=16).expected_log_lik(y[~wide], m[~wide], V[~wide])[0]
    assert np.array_equal(E[~wide], Er)
    Ew = expected_lse_wide(np.einsum('ikc,ic->ik', D[wide], m[wide]), S[wide])[0]
    np.testing.assert_allclose(E[wide], -Ew, rtol=0, atol=1e-13)
    i = int(np.flatnonzero(wide)[0]); h = 1e-5; P = rng.normal(size=(4, 4)); P = P + P.T
    Ep = lik.expected_log_lik(y[[i]], m[[i]], V[[i]] + h * P)[0][0]; Em = lik.expected_log_lik(y[[i]], m[[i]], V[[i]] - h * P)[0][0]
    assert abs((Ep - Em) / (2 * h) - np.sum(dV[i] * P)) < 1e-6 * (1 + np.abs(dV[i]).sum())
    assert abs(E[i] - Softmax(4, n_gh=40).expected_log_lik(y[[i]], m[[i]], V[[i]])[0][0]) < 1e-6
