"""The n × n work arrays of one FPi fit ('04_covariance', 'Work arrays of one fit'): an array is handed out again only
when no live object holds it, the fit's results are bit-identical to those of fresh arrays, and nothing of the pool
outlives the fit."""
import weakref
from pathlib import Path
import numpy as np
import pytest
from vgi_lit import likelihoods, models, kernels, datasets
import vgi_lit.covariance as covariance
from vgi_lit.covariance import DenseCov, SiteCov, WorkArrays, with_work_arrays
from vgi_lit.methods.fixed_point import fpi

DATA = datasets.shared_data_dir(Path(__file__))


def _gp(n, variance=10.0):
    "GP-logistic on the first n ionosphere rows (z-scored), RBF kernel of lengthscale √p."
    ion = datasets.load_ionosphere(data_dir=DATA)
    X, y = datasets.zscore(ion.X).X, ion.y
    return models.GP(X[:n], y[:n], likelihoods.Logistic(), kernels.RBF(variance=variance, lengthscale=np.sqrt(X.shape[1])))


def _same(a, b):
    "Two fits with the same VLB, iterations, stop, m and λ, bit for bit."
    assert a.vlb == b.vlb and a.n_iter == b.n_iter and a.stop is b.stop
    assert np.array_equal(a.m, b.m) and np.array_equal(a.cov.lam, b.cov.lam)
    assert [r.vlb for r in a.history] == [r.vlb for r in b.history]


def test_work_arrays_hand_out_only_arrays_nothing_holds():
    wa = WorkArrays()
    A = wa.take(4); view = A[1:, :2]; del A
    B = wa.take(4)
    assert not np.shares_memory(B, view)                                 # a view holds its base
    del view
    assert wa.take(4) is not B and wa.made == 2                          # B is held by this test; the first array is free again
    held = [wa.take(4) for _ in range(3)]
    assert len({id(h) for h in held}) == 3 and all(not np.shares_memory(h, B) for h in held)
    with pytest.raises(ValueError, match="n must be an integer"): wa.take(-1)
    with pytest.raises(ValueError, match="max_arrays"): WorkArrays(max_arrays=1.5)
    wa.close()
    assert not wa._arrays and wa.take(4) is not wa.take(4)


def test_fpi_bit_identical_with_and_without_work_arrays():
    model = _gp(150)
    for opts in ({}, dict(newton=False, mean_steps=0), dict(newton=True), dict(anderson=3, newton=False)):
        _same(fpi(model, **opts), fpi.__wrapped__(model, **opts))      # the undecorated fpi: every array fresh


def test_no_two_live_covariances_share_an_array_and_the_pool_ends_with_the_fit(monkeypatch):
    model = _gp(120)
    pools, live, take, init = [], weakref.WeakSet(), WorkArrays.take, SiteCov.__init__
    def checked(self, n):
        A = take(self, n)
        if self not in pools: pools.append(self)
        for o in list(live):                                              # every live SiteCov: none reads the array handed out
            for X in (o.__dict__.get('_LB'), o.__dict__.get('_LBi')):
                assert X is None or not np.shares_memory(A, X)
        return A
    def tracked(self, *args, **kwargs): init(self, *args, **kwargs); live.add(self)
    monkeypatch.setattr(WorkArrays, "take", checked)
    monkeypatch.setattr(SiteCov, "__init__", tracked)
    post = fpi(model, newton=False, mean_steps=0, tol=1e-9, tol_rel=0.0)
    assert post.n_iter >= 5 and len(pools) == 1 and len(live) >= 1
    pool = pools[0]
    assert pool.reused > 0 and pool.closed and not pool._arrays            # arrays were reused; none is held after the fit
    assert covariance._WORK.get() is None
    assert not np.shares_memory(post.cov.LB, post.cov.LBi)


def test_released_arrays_come_back_with_the_same_numbers():
    model = _gp(60)
    lam = np.linspace(0.05, 3.0, 60)
    for cov in (SiteCov(model, lam), SiteCov(model, lam, space='d')):
        LB, LBi, hv = cov.LB.copy(), cov.LBi.copy(), cov.site_var().copy()
        cov.release_arrays()
        assert cov._LB is None and cov._LBi is None
        assert np.array_equal(cov.LB, LB) and np.array_equal(cov.LBi, LBi) and np.array_equal(cov.site_var(), hv)


def test_the_start_factor_is_held_by_its_diagonal_and_built_the_same_from_a_work_array():
    ref = np.zeros((7, 7)); ref.reshape(-1)[::8] = 0.3                   # the factor as np.zeros and its diagonal
    lazy = DenseCov.scaled_identity(7, 0.3)
    assert lazy._L is None and lazy.is_diagonal                          # variances, trace, log-determinant: no 7 × 7 array
    assert np.array_equal(lazy.var_at(None), np.full(7, 0.09)) and np.isclose(lazy.logdet(), 14 * np.log(0.3), rtol=1e-14) and lazy._L is None
    def inside():
        cov = DenseCov.scaled_identity(7, 0.3); L = cov.L                # built within a fit: a work array
        return cov, L, covariance._WORK.get()
    cov, L, pool = with_work_arrays(inside)()
    assert pool.made == 1 and L.flags.c_contiguous and np.array_equal(L, ref) and np.array_equal(lazy.L, ref)
    cov.release_arrays(); assert cov._L is None and np.array_equal(cov.L, ref)
    dense = DenseCov(np.tril(np.ones((3, 3)))); dense.release_arrays()
    assert dense._L is not None                                          # a dense factor is kept


def test_the_pool_is_closed_when_the_fit_raises():
    seen = []
    @with_work_arrays
    def failing():
        seen.append(covariance._WORK.get()); raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"): failing()
    assert seen[0].closed and covariance._WORK.get() is None
