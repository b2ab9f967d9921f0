"""A `VGRecommender` scored without the test ratings: MovieLens 100K, fold 0 of the seeded 80/20 folds set aside, its
training part split 80/20 again (seed 123); the recommender is fitted on the 64,000 ratings and scored (RMSE, NLL per
rating) on the other 16,000. For choosing settings without looking at a test fold. Run with one BLAS thread:
    OPENBLAS_NUM_THREADS=1 python tools/recommender_validate.py [--likelihood ordinal] [--fit-options '{"n_f": 1}']"""
import argparse, json, time, warnings
import numpy as np
from vgi_lit import datasets as ds
from vgi_lit.apps.recommender import VGRecommender, UnseenIdWarning


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--likelihood", default="gaussian"); ap.add_argument("--K", type=int, default=10)
    ap.add_argument("--fit-options", default="{}", help="JSON of PMFOptions fields passed as fit_options")
    a = ap.parse_args(argv)
    r = ds.load_movielens_100k(data_dir=ds.shared_data_dir())
    tr, _ = ds.fold_split(ds.rating_folds(len(r.ratings), 5, seed=0), 0)
    perm = np.random.default_rng(123).permutation(tr); n_val = len(tr) // 5
    va, trn = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    opts = json.loads(a.fit_options)
    t, c = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnseenIdWarning)
        rec = VGRecommender(K=a.K, likelihood=a.likelihood, fit_options=opts or None).fit(r.users[trn], r.items[trn], r.ratings[trn])
        sec, cpu = time.perf_counter() - t, time.process_time() - c
        p = rec.predict(r.users[va], r.items[va])
        nll = -float(np.mean(rec.log_density(r.users[va], r.items[va], r.ratings[va], discrete=True)))
    print(json.dumps(dict(likelihood=a.likelihood, K=a.K, fit_options=opts, rmse=round(float(np.sqrt(np.mean((p - r.ratings[va])**2))), 4),
                          nll=round(nll, 4), seconds=round(sec, 1), cpu_seconds=round(cpu, 1), sweeps=rec.n_iter_, stop=rec.stop_.value,
                          bound=round(float(rec.posterior_.vlb), 1))))


if __name__ == "__main__": main()
