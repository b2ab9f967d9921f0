"""DaskSites: every operation against the in-memory products, with the threads scheduler and with a `distributed`
LocalCluster of worker processes (one cluster for the module); bad input; vgi_lit without dask."""
import subprocess, sys
from functools import partial

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
from vgi_lit.dask_sites import DaskSites
from vgi_lit.likelihoods import Logistic, Poisson
from vgi_lit.kernels import RBF
from vgi_lit.models import GLM, SparseGP
from vgi_lit.inference import fit, Stop


def _data(seed=0, n=611, d=5):
    rng = np.random.default_rng(seed)
    H = rng.standard_normal((n, d))
    return H, rng.standard_normal(d), rng.standard_normal(n), rng.random(n), np.tril(rng.standard_normal((d, d))) + 2 * np.eye(d)


def _close(a, b, rtol=1e-12):
    return np.allclose(a, b, rtol=rtol, atol=rtol * max(1.0, float(np.max(np.abs(b)))))


def _glm_terms(lik, s, e, mb, qb, y):
    "Module-level (picklable) chunk function of a GLM's fused pass."
    E, dm, dv = lik.expected_log_lik(y, mb, qb)
    return dict(E=E, dE=dm, w=-2.0 * dv, sq=np.abs(dm), keep_gamma=-2.0 * dv)


def _check_all_ops(S, H, x, r, w, A):
    assert _close(S.matvec(x), H @ x) and _close(S.matvec(np.c_[x, 2 * x]), H @ np.c_[x, 2 * x])
    assert _close(S.rmatvec(r), H.T @ r) and _close(S.rmatvec(np.c_[r, w]), H.T @ np.c_[r, w])
    for ww in (w, r):                                            # w >= 0 (syrk form) and signed weights
        G = S.gram(ww)
        assert _close(G, H.T @ (ww[:, None] * H)) and np.array_equal(G, G.T)
    assert _close(S.quad(A), np.einsum('ij,jk,ik->i', H, A.T @ A, H))
    assert _close(S.quad(A[:2]), np.sum((H @ A[:2].T)**2, 1))
    assert _close(S.sq_rmatvec(r), (H * H).T @ r) and _close(S.row_norms2(), np.sum(H * H, 1))
    assert _close(S.sq_rmatvec(np.c_[r, w]), (H * H).T @ np.c_[r, w])
    idx = np.array([S.n - 1, 0, 17, 17, 300])
    assert np.array_equal(S.rows(idx), H[idx]) and S.rows(np.array([], dtype=int)).shape == (0, S.d)
    assert np.array_equal(S.dense(), H)
    assert np.array_equal(np.vstack([b for _, _, b in S.blocks()]), H)
    y = np.where(np.random.default_rng(3).random(S.n) < 0.4, 1.0, -1.0)
    m = 0.2 * x
    fn = partial(_glm_terms, Logistic())
    ref = fn(0, S.n, H @ m, np.einsum('ij,jk,ik->i', H, A.T @ A, H), y)
    for ys in (y, da.from_array(y, chunks=97)):
        out = S.site_pass(m, A, fn, rows=(ys,))
        assert np.isclose(out["E"], ref["E"].sum(), rtol=1e-12)
        assert _close(out["g"], H.T @ ref["dE"]) and _close(out["gram"], H.T @ (ref["w"][:, None] * H))
        assert _close(out["sq"], (H * H).T @ ref["sq"]) and _close(out["keep_gamma"], ref["w"])
        assert np.array_equal(out["gram"], out["gram"].T)


@pytest.mark.parametrize("chunks", [((100, 200, 11, 300), (5,)), ((611,), (5,)), ((50,) * 12 + (11,), (2, 3))])
def test_operations_threads(chunks):
    H, x, r, w, A = _data()
    S = DaskSites(da.from_array(H, chunks=chunks))
    assert S.X.chunks[1] == (5,) and S.X.chunks[0] == chunks[0]
    _check_all_ops(S, H, x, r, w, A)


def test_operations_integer_and_float32_inputs_are_converted_to_float64():
    H = np.arange(24).reshape(8, 3)
    for X in (da.from_array(H, chunks=(3, 3)), da.from_array(H.astype(np.float32), chunks=(3, 3))):
        S = DaskSites(X)
        assert S.matvec(np.ones(3)).dtype == np.float64 and np.array_equal(S.dense(), H.astype(float))
        assert np.array_equal(S.gram(np.ones(8)), H.T.astype(float) @ H)


def test_bad_input():
    with pytest.raises(TypeError, match="dask.array"): DaskSites(np.ones((3, 2)))
    with pytest.raises(TypeError, match="real numbers"): DaskSites(da.ones((3, 2), dtype=complex))
    with pytest.raises(TypeError, match="real numbers"): DaskSites(da.ones((3, 2), dtype=bool))
    with pytest.raises(ValueError, match="two-dimensional"): DaskSites(da.ones(3))
    with pytest.raises(ValueError, match="at least one row"): DaskSites(da.ones((0, 2)))
    with pytest.raises(ValueError, match="column chunks"): DaskSites(da.ones((4, 4), chunks=(2, 2)), rechunk=False)
    X = da.from_array(np.arange(10.0).reshape(5, 2), chunks=(2, 2))
    with pytest.raises(ValueError, match="unknown size"): DaskSites(X[X[:, 0] > 3])
    S = DaskSites(X)
    with pytest.raises(ValueError, match=r"shape \(2,\)"): S.matvec(np.ones(3))
    with pytest.raises(ValueError, match="r must have shape"): S.rmatvec(np.ones(4))
    with pytest.raises(ValueError, match="NaN"): S.gram(np.array([1.0, np.nan, 1, 1, 1]))
    with pytest.raises(ValueError, match="A must have shape"): S.quad(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"\[0, 5\)"): S.rows(np.array([5]))
    with pytest.raises(ValueError, match="integer"): S.rows(np.array([0.5]))
    with pytest.raises(ValueError, match="rows\\[0\\]"): S.site_pass(np.ones(2), None, lambda s, e, mb, qb, y: {}, rows=(np.ones(4),))
    with pytest.raises(ValueError, match="unknown entry"): S.site_pass(np.ones(2), None, lambda s, e, mb, qb: dict(bad=mb))


@pytest.mark.parametrize("op", ["matvec", "rmatvec", "gram", "quad", "row_norms2", "site_pass", "dense", "check"])
def test_nan_in_a_chunk_is_an_error_of_the_pass_naming_the_row(op):
    H = np.ones((40, 3)); H[27, 1] = np.inf
    S = DaskSites(da.from_array(H, chunks=(10, 3)))          # constructed without reading any chunk
    call = dict(matvec=lambda: S.matvec(np.ones(3)), rmatvec=lambda: S.rmatvec(np.ones(40)), gram=lambda: S.gram(np.ones(40)),
                quad=lambda: S.quad(np.eye(3)), row_norms2=S.row_norms2, dense=S.dense, check=S.check,
                site_pass=lambda: S.site_pass(np.ones(3), None, lambda s, e, mb, qb: dict(E=mb)))[op]
    with pytest.raises(ValueError, match=r"row chunk starting at row 20: first at row 27, column 1"): call()


def test_rows_reads_only_the_chunks_it_needs():
    reads = []
    def chunk(block_info=None):
        (s, e), _ = block_info[None]["array-location"]; reads.append(s)
        return np.arange(s, e, dtype=float)[:, None] * np.ones((1, 2))
    X = da.map_blocks(chunk, chunks=((10,) * 10, (2,)), dtype=float)
    S = DaskSites(X)
    out = S.rows(np.array([95, 3, 5]))
    assert np.array_equal(out[:, 0], [95, 3, 5]) and sorted(reads) == [0, 90]


def test_vgi_lit_imports_without_dask():
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'dask' or name.startswith('dask.') or name == 'distributed': raise ImportError('no dask here')\n"
            "sys.meta_path.insert(0, Block())\n"
            "import vgi_lit, vgi_lit.methods\n"
            "assert 'dask' not in sys.modules\n"
            "try:\n"
            "    import vgi_lit.dask_sites\n"
            "except ImportError: print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def _glm_pair(seed=0, n=700, d=5, chunks=120):
    "(in-memory GLM, the same GLM built from a dask X, its sites a DaskSites): logistic labels from a seeded X."
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) / np.sqrt(d); w = 2 * rng.standard_normal(d)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-X @ w)), 1.0, -1.0)
    dsk = GLM(da.from_array(X, chunks=(chunks, d)), y, Logistic())
    assert isinstance(dsk.sites, DaskSites)
    return GLM(X, y, Logistic()), dsk


def _sgp_pair(seed=0, n=500, M=12, chunks=90):
    "(in-memory SparseGP classification, the same model built from a dask X: H = K_xu K_uu⁻¹ per chunk, a DaskSites)."
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2)); y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] + 0.5 * rng.standard_normal(n) > 0, 1.0, -1.0)
    Z = X[rng.choice(n, M, replace=False)]; kern = RBF(1.0, 1.0)
    dsk = SparseGP(da.from_array(X, chunks=(chunks, 2)), y, Logistic(), kern, Z, mean=0.3)
    assert isinstance(dsk.sites, DaskSites)
    return SparseGP(X, y, Logistic(), kern, Z, mean=0.3), dsk


def _assert_same_fit(mem, dsk, method="fpi", converged=True, iters=6):
    """The same iterates: after exactly `iters` iterations VLB and mean agree to 1e-10 relative; converged (tol 1e-9), the VLB
    to 1e-10 and the mean to 1e-8 (at the optimum the bound is flat: a mean moved by 1e-9 changes the VLB by ~1e-18,
    so where each run stops is decided by rounding)."""
    p, q = fit(mem, method, tol=0.0, tol_rel=0.0, max_iter=iters), fit(dsk, method, tol=0.0, tol_rel=0.0, max_iter=iters)
    assert p.n_iter == q.n_iter == iters
    assert abs(q.vlb - p.vlb) <= 1e-10 * abs(p.vlb) and np.max(np.abs(q.m - p.m)) <= 1e-10 * np.max(np.abs(p.m))
    if not converged: return
    p, q = fit(mem, method, tol=1e-9, tol_rel=0.0), fit(dsk, method, tol=1e-9, tol_rel=0.0)
    assert p.stop in (Stop.GRAD_TOL, Stop.REL_TOL) and q.stop in (Stop.GRAD_TOL, Stop.REL_TOL)   # both converged
    assert abs(q.vlb - p.vlb) <= 1e-10 * abs(p.vlb), (q.vlb, p.vlb)
    assert np.max(np.abs(q.m - p.m)) <= 1e-8 * np.max(np.abs(p.m))


def test_fpi_on_dask_sites_equals_the_in_memory_fit_threads():
    _assert_same_fit(*_glm_pair())


@pytest.mark.slow
def test_fpi_on_a_sparse_gp_with_dask_inputs_equals_the_in_memory_fit_threads():
    _assert_same_fit(*_sgp_pair())


def test_fpi_makes_one_pass_per_iteration_on_dask_sites():
    """fit(GLM(dask X), "fpi"), counted by `count_passes`: no pass while the model is built, one `site_pass` per
    iteration plus at most three outside the iterations (start, start-scale search, the final gradient)."""
    from vgi_lit.experiments.scale import count_passes
    rng = np.random.default_rng(4)
    X = rng.standard_normal((1200, 4)); y = np.where(rng.random(1200) < 1 / (1 + np.exp(-X @ np.ones(4))), 1.0, -1.0)
    with count_passes() as built:
        model = GLM(da.from_array(X, chunks=(200, 4)), y, Logistic())
    assert built.total == 0
    with count_passes() as pc:
        post = fit(model, "fpi", tol=0.0, tol_rel=0.0, max_iter=10)
    assert post.n_iter == 10 and pc.by_op["site_pass"] <= post.n_iter + 3 and pc.total <= post.n_iter + 4, pc
    with count_passes() as again:
        model.sites.matvec(np.ones(4)); model.sites.gram(np.ones(1200)); model.sites.rows(np.array([3]))
    assert again.by_op == {"matvec": 1, "gram": 1}                       # rows(idx) reads only its chunks: not a pass
    assert DaskSites.site_pass.__qualname__ == "DaskSites.site_pass"      # the class is restored afterwards


def test_the_scale_experiments_have_no_fitting_engine_of_their_own():
    "The scale page and bench fit with the library's `fit(model, 'fpi')`: no second FPi in the experiments tier."
    import inspect
    import vgi_lit.experiments.scale as ex, vgi_lit.bench.scale as bs
    assert not hasattr(ex, "fpi_pass") and not hasattr(ex, "PassFit") and not hasattr(ex, "sgp_sites")
    for f in (bs.iteration_cost, bs._fit_counted, ex.california_sgp):
        assert 'fit(' in inspect.getsource(f)


def test_svi_streams_mini_batches_from_dask_sites():
    "The stochastic methods read mini-batches through model.rows, here DaskSites.rows: the same run as in memory."
    from vgi_lit.methods.svi import svi_run
    mem, dsk = _glm_pair(seed=2, n=600, chunks=100)
    p, q = (svi_run(m, "svi", batch_size=100, max_epochs=2, seed=0) for m in (mem, dsk))
    assert p.n_iter == q.n_iter and abs(q.vlb - p.vlb) <= 1e-10 * abs(p.vlb)
    assert np.max(np.abs(q.m - p.m)) <= 1e-10 * np.max(np.abs(p.m))


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  memory_limit="1GiB", silence_logs=40) as cluster, distributed.Client(cluster) as c:
        yield c


@pytest.mark.slow
def test_fpi_on_dask_sites_equals_the_in_memory_fit_local_cluster(client):
    "Two iterations on the cluster (each FPi iteration is a few graphs, each a round trip to the workers); converged: slow test below."
    _assert_same_fit(*_glm_pair(), converged=False, iters=2)


@pytest.mark.slow
@pytest.mark.parametrize("pair", [_glm_pair, _sgp_pair])
def test_fpi_on_dask_sites_equals_the_in_memory_fit_local_cluster_converged(client, pair):
    _assert_same_fit(*pair())


@pytest.mark.slow
def test_operations_on_a_local_cluster(client):
    H, x, r, w, A = _data(seed=1, n=523)
    S = DaskSites(da.from_array(H, chunks=(100, 5)))
    _check_all_ops(S, H, x, r, w, A)
    Hb = H.copy(); Hb[444, 3] = np.nan
    with pytest.raises(ValueError, match="first at row 444, column 3"):
        DaskSites(da.from_array(Hb, chunks=(100, 5))).gram(w)


@pytest.mark.slow
def test_peak_memory_of_a_glm_fit_on_a_local_cluster_stays_below_the_data_size(client):
    """N = 5·10⁵, d = 100 logistic GLM generated lazily (X would be 381 MB in one process): `fit(GLM(dask X), "fpi")`
    for two iterations on the cluster adds less than 300 MB to the process tree's resident memory (measured after a
    warm-up fit on a small array, so the workers' imports are in the baseline). Materialising X anywhere, or gathering
    the chunks, would exceed it. What it does add grows with n, not d: the per-row vectors (the model's y on the client and
    in pieces on the workers, the state's site precisions, variances and curvatures on the client, scattered or returned
    at each pass)."""
    from vgi_lit.experiments.scale import glm_data, count_passes, PeakRSS
    Xw, yw, _ = glm_data(1000, 100, seed=1, chunk_rows=500)
    fit(GLM(Xw, yw.compute(), Logistic()), "fpi", max_iter=1)                  # warm-up: imports on the workers
    base = PeakRSS().sample()
    with PeakRSS() as pk, count_passes() as pc:
        X, y, _ = glm_data(5 * 10**5, 100, seed=0, chunk_rows=25_000)
        post = fit(GLM(X, y.compute(), Logistic()), "fpi", max_iter=2, tol=0.0, tol_rel=0.0)
    assert post.n_iter == 2 and pc.total <= 6, pc
    assert (pk.peak - base) / 2**20 < 300, f"peak {pk.peak_mb:.0f} MB, baseline {base / 2**20:.0f} MB"


def test_a_scalar_offset_is_one_float_and_gives_the_same_fit_as_the_full_vector():
    """A scalar a or c is kept as a read-only stride-0 vector (one float in memory for any n) and shipped to a chunk as one
    number; the fit equals that of the same offsets given as full vectors (to rounding: NumPy and BLAS may group a
    reduction over a stride-0 operand differently) and the in-memory fit."""
    from vgi_lit.models import LGM, PriorCov
    rng = np.random.default_rng(5)
    X = rng.standard_normal((600, 4)); y = np.where(rng.random(600) < 0.5, 1.0, -1.0)
    Xd = da.from_array(X, chunks=(150, 4))
    const = LGM(y, Logistic(), 0.0, PriorCov(1.0, 4), 0.3, 0.2, DaskSites(Xd))
    full = LGM(y, Logistic(), 0.0, PriorCov(1.0, 4), np.full(600, 0.3), np.full(600, 0.2), DaskSites(Xd))
    assert const.a.strides == (0,) and const.c.strides == (0,) and const.a.base.nbytes == 8
    assert not const.a.flags.writeable and full.a.strides == (8,)
    assert LGM(y, Logistic(), 0.0, PriorCov(1.0, 4), const.a, 0.0, X).a.strides == (0,)     # another model's constant stays one
    p, q = (fit(mdl, "fpi", tol=0.0, tol_rel=0.0, max_iter=4) for mdl in (const, full))
    assert abs(p.vlb - q.vlb) <= 1e-13 * abs(q.vlb) and _close(p.m, q.m, 1e-12)
    mem = fit(LGM(y, Logistic(), 0.0, PriorCov(1.0, 4), 0.3, 0.2, X), "fpi", tol=0.0, tol_rel=0.0, max_iter=4)
    assert abs(mem.vlb - p.vlb) <= 1e-10 * abs(mem.vlb)


@pytest.mark.slow
def test_scatter_path_equals_the_threads_path(client):
    """On the cluster per-row data are scattered, not embedded in the graph: the same kernels on the same pieces, in the
    same summation tree. Equal to rounding only (about 1e-16 relative): the workers' chunks are copies of the arrays,
    and NumPy's reductions may group terms differently for differently aligned memory."""
    import dask
    _, dsk = _glm_pair(n=900, chunks=200)
    q = fit(dsk, "fpi", tol=0.0, tol_rel=0.0, max_iter=3)                 # the client is the default scheduler
    with dask.config.set(scheduler="threads"):
        p = fit(dsk, "fpi", tol=0.0, tol_rel=0.0, max_iter=3)
    assert abs(p.vlb - q.vlb) <= 1e-13 * abs(p.vlb) and _close(q.m, p.m, 1e-12) and _close(q.cov.lam, p.cov.lam, 1e-12)


def test_the_scatter_cache_never_returns_another_arrays_pieces(client):
    """A read-only array's pieces are scattered once and reused while it lives; a different array (alive at the same time,
    or made after the first died and possibly at its address), a writable array changed in place, or a read-only view of
    a writable array changed through its base, each gets its own pieces."""
    from vgi_lit import dask_sites as ds
    H, _, r, w, _ = _data(seed=7, n=400)
    S = DaskSites(da.from_array(H, chunks=(100, 5)))
    r1 = r.copy(); r1.flags.writeable = False
    assert _close(S.rmatvec(r1), H.T @ r1)
    before = dict(ds._SCATTERED)
    assert _close(S.rmatvec(r1), H.T @ r1) and ds._SCATTERED.keys() == before.keys()          # reused, not scattered again
    r2 = 2.0 * r + 1.0; r2.flags.writeable = False
    assert _close(S.rmatvec(r2), H.T @ r2)
    for k in range(5):                                                    # freed arrays: ids reused, entries released
        del r1; r1 = r + k; r1.flags.writeable = False
        assert _close(S.rmatvec(r1), H.T @ r1)
    assert sum(1 for key in ds._SCATTERED if key[0] in (id(r1), id(r2))) == 2 and len(ds._SCATTERED) <= len(before) + 2
    wv = w.copy()
    g1 = S.gram(wv); wv[:50] = 3.0
    assert _close(S.gram(wv), H.T @ (wv[:, None] * H)) and not np.allclose(g1, S.gram(wv))
    base = r.copy(); view = base[:]; view.flags.writeable = False
    S.rmatvec(view); base[:] = w
    assert _close(S.rmatvec(view), H.T @ w)


def test_the_scatter_cache_sees_a_changed_content_and_a_writable_buffer(client):
    """An array that owns its memory can be made writable, written and frozen again; a read-only view of a bytearray
    changes with the bytearray. Neither may be served the pieces scattered before the change."""
    from vgi_lit import dask_sites as ds
    H, _, r, w, _ = _data(seed=8, n=400)
    S = DaskSites(da.from_array(H, chunks=(100, 5)))
    z = r.copy(); z.flags.writeable = False
    assert ds._frozen(z) and _close(S.rmatvec(z), H.T @ r)
    z.flags.writeable = True; z[:] = w; z.flags.writeable = False
    assert _close(S.rmatvec(z), H.T @ w)
    buf = bytearray(r.tobytes()); b = np.frombuffer(buf, dtype=np.float64); b.flags.writeable = False
    assert not ds._frozen(b) and _close(S.rmatvec(b), H.T @ r)
    buf[:] = w.tobytes()
    assert _close(S.rmatvec(b), H.T @ w)


def test_scattered_pieces_are_copies_so_the_cache_entry_goes_with_the_array():
    """A worker in the client's own process keeps the objects it is given: pieces that were views would keep the array
    alive, and its cache entry (and the pieces on the workers) would never go. A stand-in client records what it is sent."""
    import gc, weakref
    from vgi_lit import dask_sites as ds
    class Recorder:
        def __init__(self): self.sent = []
        def scatter(self, data, hash=True): self.sent.append(list(data)); return [object() for _ in data]
    rec, v = Recorder(), np.arange(12.0)
    v.flags.writeable = False
    key = (id(v), id(rec), (6, 6))
    futs, reused = ds._scattered_once(v, rec, key, lambda x: [x[:6], x[6:]])
    assert not reused and len(futs) == 2 and ds._scattered_once(v, rec, key, lambda x: [x[:6], x[6:]]) == (futs, True)
    assert not any(np.shares_memory(p, v) for p in rec.sent[0]) and np.array_equal(np.concatenate(rec.sent[0]), v)
    ref = weakref.ref(v); del v; gc.collect()
    assert ref() is None and key not in ds._SCATTERED


def test_site_pass_by_row_slices_equals_the_whole_chunk(monkeypatch):
    "Chunks longer than the slice length (7 rows here): the sliced products b Aᵀ, diag(√w) b and b∘b add up to the whole chunk's."
    from vgi_lit import dask_sites as ds
    monkeypatch.setattr(ds, "_SUB_ROWS", 7)
    rng = np.random.default_rng(0); n, d = 60, 4
    H = rng.standard_normal((n, d)); A = rng.standard_normal((3, d)); m = rng.standard_normal(d)
    w, t = rng.random(n), rng.standard_normal(n)
    S = DaskSites(da.from_array(H, chunks=(25, d)))
    out = S.site_pass(m, A, lambda s, e, mb, qb, wb, tb: dict(w=wb, sq=tb, keep_q=qb, dE=tb), rows=(w, t))
    assert _close(out["gram"], H.T @ (w[:, None] * H)) and _close(out["sq"], (H * H).T @ t)
    assert _close(out["keep_q"], np.sum((H @ A.T) ** 2, 1)) and _close(out["g"], H.T @ t)


def _graph_sizes(monkeypatch, sizes, tag):
    "Record the pickled size of every graph handed to the scheduler (dask.compute, Client.compute) under sizes[tag()]."
    import cloudpickle, dask, distributed
    real, real_client = dask.compute, distributed.Client.compute
    def spy(*args, **kw):
        sizes.setdefault(tag(), []).append(len(cloudpickle.dumps(args)))
        return real(*args, **kw)
    def spy_client(self, collections, *args, **kw):
        sizes.setdefault(tag(), []).append(len(cloudpickle.dumps(collections)))
        return real_client(self, collections, *args, **kw)
    monkeypatch.setattr(dask, "compute", spy)
    monkeypatch.setattr(distributed.Client, "compute", spy_client)


def test_the_graph_of_a_site_pass_on_a_cluster_does_not_grow_with_n(client, monkeypatch):
    """One `site_pass` with the per-row vectors of an FPi pass (labels y read-only, a = c = 0 as stride-0 views, site
    variances and λ writable): embedded in the graph they would cost 8 bytes per row each (≥ 96 KB at n = 4,000);
    scattered, and the constants as one number per chunk, the pickled graph holds O(number of chunks) bytes, the same
    for n = 4,000 and n = 40,000."""
    from vgi_lit.experiments.scale import glm_data
    sizes, out = {}, {}
    _graph_sizes(monkeypatch, sizes, lambda: n)
    for n in (4_000, 40_000):
        X, y, _ = glm_data(n, 5, seed=0, chunk_rows=n // 4)                # X generated per chunk: no data in the graph
        rng = np.random.default_rng(0)
        y = np.sign(rng.standard_normal(n)); y.flags.writeable = False
        zero = np.broadcast_to(0.0, (n,)); v, lam = rng.random(n) + 0.1, rng.random(n)
        def fn(s, e, mb, qb, yb, ab, cb, vb, lb, lik=Logistic()):
            E, dE, dv = lik.expected_log_lik(yb, ab + mb, cb + vb)
            return dict(E=E, dE=dE, w=np.maximum(-2 * dv, 0), sq=np.abs(lb + 2 * dv), keep_v=cb + vb, keep_gamma=-2 * dv)
        S = DaskSites(X)
        for _ in range(2): out[n] = S.site_pass(np.full(5, 0.1), None, fn, rows=(y, zero, zero, v, lam))
        assert np.array_equal(out[n]["keep_v"], v)
    assert len(sizes[40_000]) == 2 and max(sizes[40_000]) < 3 * 8 * 4_000, sizes
    assert max(sizes[40_000]) < 1.5 * max(sizes[4_000]), sizes


@pytest.mark.slow
def test_the_graph_of_a_pass_on_a_cluster_does_not_grow_with_n(client, monkeypatch):
    """The pickled graph one FPi pass hands the scheduler: with per-row vectors (y, a, c, site variances, λ) embedded it
    would hold ≥ 8 bytes per row and vector; scattered (y once, λ and site variances per pass) and with a GLM's a = c = 0
    as one number per chunk it holds O(number of chunks) bytes, the same for n = 4,000 and n = 40,000 rows."""
    sizes = {}
    _graph_sizes(monkeypatch, sizes, lambda: n)
    from vgi_lit.experiments.scale import glm_data
    for n in (4_000, 40_000):
        X, y, _ = glm_data(n, 5, seed=0, chunk_rows=n // 4)                # X generated per chunk: no data in the graph
        y = y.compute()
        fit(GLM(X, y, Logistic()), "fpi", tol=0.0, tol_rel=0.0, max_iter=2)
    assert len(sizes[40_000]) >= 4 and max(sizes[40_000]) < 4 * 8 * 4_000, sizes                      # below a single vector of the small problem
    assert max(sizes[40_000]) < 1.5 * max(sizes[4_000]), sizes
