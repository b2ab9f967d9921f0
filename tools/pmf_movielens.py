"""MovieLens 100K, seeded 80/20 split (fold 0 of `rating_folds(n, 5, seed)`): test RMSE and wall time of the default PMF fit
(Gaussian likelihood, K = 10, offsets) against a user + item bias model by regularised least squares and, when installed,
scikit-surprise's SVD and BaselineOnly. With --validate the test part is set aside and the training part split again
80/20 (seed 123): the fit sees 64,000 ratings and is scored on the other 16,000, so that modelling choices are compared
without the test ratings. Run with one BLAS thread:
    OPENBLAS_NUM_THREADS=1 python tools/pmf_movielens.py [--seed 0] [--K 10] [--method h-mc-ssvi] [--no-offsets] [--learn-lik]
        [--noise s2] [--warmup n] [--prior shared|ard] [--no-rotate] [--validate] [--surprise]"""
import argparse, time, warnings
import numpy as np
import vgi_lit
from vgi_lit import datasets as ds
from vgi_lit.likelihoods import Gaussian
from vgi_lit.models import PMF
from vgi_lit.methods.pmf import PMFOptions


def bias_als(u, i, y, nu, ni, lam=10.0, sweeps=30):
    "y ≈ b + a_u + c_i by regularised least squares (penalty lam on a and c), alternating exact updates."
    b = y.mean(); a = np.zeros(nu); c = np.zeros(ni)
    for _ in range(sweeps):
        a = np.bincount(u, y - b - c[i], nu) / (np.bincount(u, minlength=nu) + lam)
        c = np.bincount(i, y - b - a[u], ni) / (np.bincount(i, minlength=ni) + lam)
        b = np.mean(y - a[u] - c[i])
    return lambda uu, ii: b + a[uu] + c[ii]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0); ap.add_argument("--K", type=int, default=10)
    ap.add_argument("--method", default=None); ap.add_argument("--no-offsets", action="store_true")
    ap.add_argument("--learn-lik", action="store_true"); ap.add_argument("--noise", type=float, default=None)
    ap.add_argument("--max-iter", type=int, default=None); ap.add_argument("--surprise", action="store_true")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--prior", choices=("shared", "ard"), default="shared")
    ap.add_argument("--no-rotate", action="store_true", help="with --prior ard: no rotation of the factors after the sweeps")
    ap.add_argument("--validate", action="store_true", help="score on a 20%% split of the training part, not on the test fold")
    a = ap.parse_args(argv)
    r = ds.load_movielens_100k(data_dir=ds.shared_data_dir())
    tr, te = ds.fold_split(ds.rating_folds(len(r.ratings), 5, seed=a.seed), 0)
    if a.validate:                                                     # the test fold is not used at all
        perm = np.random.default_rng(123).permutation(tr); n_val = len(tr) // 5
        tr, te = np.sort(perm[n_val:]), np.sort(perm[:n_val])
        print(f"validation: {len(tr)} training ratings of fold 0's training part, scored on its other {len(te)}")
    y = r.ratings.astype(float)
    rmse = lambda p: float(np.sqrt(np.mean((p - y[te])**2)))
    t = time.perf_counter(); f = bias_als(r.users[tr], r.items[tr], y[tr], r.n_users, r.n_items)
    print(f"bias model (regularised least squares, lambda 10): RMSE {rmse(f(r.users[te], r.items[te])):.4f} in {time.perf_counter() - t:.2f} s")
    lik = Gaussian() if a.noise is None else Gaussian(a.noise)
    model = PMF(r.users[tr], r.items[tr], y[tr], lik, a.K, r.n_users, r.n_items, offsets=not a.no_offsets)
    opts = PMFOptions(learn_lik=a.learn_lik, prior=a.prior, rotate=False if a.no_rotate else None, **({} if a.warmup is None else dict(warmup=a.warmup)))
    extra = {} if a.max_iter is None else dict(max_iter=a.max_iter)
    t = time.perf_counter(); c = time.process_time()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        res = vgi_lit.fit(model, a.method, options=opts, **extra)
    sec, cpu = time.perf_counter() - t, time.process_time() - c
    mean, var = res.predict(r.users[te], r.items[te])
    print(f"PMF {res.method} K={a.K} offsets={not a.no_offsets} learn_lik={a.learn_lik} prior={a.prior}{' (no rotation)' if a.no_rotate else ''}: RMSE {rmse(mean):.4f} in {sec:.2f} s ({cpu:.2f} s CPU); "
          f"{res.message}; bound {res.vlb:.1f}; sigma2={res.model.likelihood.variance:.4g} prior_var={tuple(round(v, 4) for v in res.prior_var)} "
          f"effect_var={tuple(round(v, 4) for v in res.effect_var)} b0={res.b0:.4f}")
    if a.prior == "ard" and a.K:
        print("  sigma2_U,k * sigma2_V,k, largest first:", np.round(np.sort(np.prod(res.factor_var, 0))[::-1], 5).tolist())
    print(f"  test log predictive density per rating: {np.mean(res.log_pred_density(r.users[te], r.items[te], y[te])):.4f}")
    for x in w: print("  warning:", x.message)
    if a.surprise:
        try:
            from surprise import SVD, BaselineOnly, Reader
            from surprise.dataset import DatasetAutoFolds
        except ImportError: print("surprise not installed"); return
        data = DatasetAutoFolds.__new__(DatasetAutoFolds)                  # the training ratings as surprise's raw tuples
        data.raw_ratings = [(int(u), int(i), float(v), None) for u, i, v in zip(r.users[tr], r.items[tr], y[tr])]
        data.reader, data.has_been_split = Reader(rating_scale=(1, 5)), False
        trainset = data.build_full_trainset()
        for name, algo in (("SVD", SVD(random_state=a.seed)), ("BaselineOnly", BaselineOnly(verbose=False))):
            t = time.perf_counter(); c = time.process_time(); algo.fit(trainset); sec, cpu = time.perf_counter() - t, time.process_time() - c
            p = np.array([algo.predict(uu, ii).est for uu, ii in zip(r.users[te], r.items[te])])
            print(f"surprise {name} default: RMSE {rmse(p):.4f}, fit in {sec:.2f} s ({cpu:.2f} s CPU)")


if __name__ == "__main__": main()
