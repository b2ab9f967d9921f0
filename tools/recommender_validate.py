"""A `VGRecommender` scored without the test ratings: MovieLens 100K, fold 0 of the seeded 80/20 folds set aside, its
training part split 80/20 again (seed 123); the recommender is fitted on the 64,000 ratings and scored (RMSE, NLL per
rating) on the other 16,000. For choosing settings without looking at a test fold; `--split test` fits on fold 0's
80,000 training ratings and scores its 20,000 test ratings instead. `--binary-from T`: the ratings T and above as the
positive value, the others as the negative (a binary likelihood; AUC printed too). Run with one BLAS thread:
    OPENBLAS_NUM_THREADS=1 python tools/recommender_validate.py [--likelihood ordinal] [--fit-options '{"n_f": 1}']
    OPENBLAS_NUM_THREADS=1 python tools/recommender_validate.py --split test --likelihood binary --binary-from 4"""
import argparse, json, time, warnings
import numpy as np
from vgi_lit import datasets as ds
from vgi_lit.apps.recommender import VGRecommender, UnseenIdWarning


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--likelihood", default="gaussian"); ap.add_argument("--K", type=int, default=10)
    ap.add_argument("--fit-options", default="{}", help="JSON of PMFOptions fields passed as fit_options")
    ap.add_argument("--split", choices=("validation", "test"), default="validation")
    ap.add_argument("--binary-from", type=float, default=None, help="ratings at least this are 1, the others 0")
    a = ap.parse_args(argv)
    r = ds.load_movielens_100k(data_dir=ds.shared_data_dir())
    tr, te = ds.fold_split(ds.rating_folds(len(r.ratings), 5, seed=0), 0)
    if a.split == "test": trn, va = tr, te
    else:
        perm = np.random.default_rng(123).permutation(tr); n_val = len(tr) // 5
        va, trn = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    y = r.ratings.astype(float) if a.binary_from is None else (r.ratings >= a.binary_from).astype(float)
    opts = json.loads(a.fit_options)
    t, c = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnseenIdWarning)
        rec = VGRecommender(K=a.K, likelihood=a.likelihood, fit_options=opts or None).fit(r.users[trn], r.items[trn], y[trn])
        sec, cpu = time.perf_counter() - t, time.process_time() - c
        p = rec.predict(r.users[va], r.items[va])
        nll = -float(np.mean(rec.log_density(r.users[va], r.items[va], y[va], discrete=a.likelihood == "gaussian")))
    out = dict(likelihood=a.likelihood, K=a.K, fit_options=opts, split=a.split, rmse=round(float(np.sqrt(np.mean((p - y[va])**2))), 4),
               nll=round(nll, 4), seconds=round(sec, 1), cpu_seconds=round(cpu, 1), sweeps=rec.n_iter_, stop=rec.stop_.value,
               bound=round(float(rec.posterior_.vlb), 1))
    if a.binary_from is not None:
        from sklearn.metrics import roc_auc_score
        out["auc"] = round(float(roc_auc_score(y[va], p)), 4)
    print(json.dumps(out))


if __name__ == "__main__": main()
