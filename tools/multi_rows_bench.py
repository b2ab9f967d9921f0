"""Times, on the digits sparse multiclass GP (C = 10, M inducing inputs by seeded k-means, the split and kernel of
tools/multi_sparse_digits.py), one FPi iteration (the median of the first four, wall and CPU seconds), one SVI step (batch 200,
ρ = 0.5, the median of five) and with --fit the whole default FPi fit (tol 1e-6), for each vgi_lit tree given, each in its own
subprocess with one BLAS thread, in turn. A tree is a folder holding a `vgi_lit` package, e.g. an older commit's:
    git archive 554f395 vgi_lit | tar -x -C /tmp/old
    python tools/multi_rows_bench.py --trees /tmp/old . [--M 100] [--fit] [--reps 2]
(scikit-learn is needed: the data and k-means.)"""
import argparse, json, os, subprocess, sys, time
CHILD = r'''
import json, sys, time, numpy as np
sys.path.insert(0, sys.argv[1])
import vgi_lit
from vgi_lit.kernels import RBF
from vgi_lit.models import MultiSparseGP
from vgi_lit.softmax import Softmax
from vgi_lit.methods.multiclass import fpi_multi
from vgi_lit.methods.multi_svi import PrecisionMultiCov, multi_svi_step
sys.path.insert(0, sys.argv[2]); from multi_sparse_digits import data
from sklearn.cluster import KMeans
M, fit = int(sys.argv[3]), sys.argv[4] == "1"
Xtr, ytr, Xte, yte = data(0)
Z = KMeans(M, n_init=4, random_state=0).fit(Xtr).cluster_centers_
mod = MultiSparseGP(Xtr, ytr, Softmax(10), RBF(4.0, float(np.sqrt(Xtr.shape[1]))), Z)
out = dict(tree=vgi_lit.__file__, n=mod.n, d=mod.d)
cpu = []; p = fpi_multi(mod, tol=1e-6, max_iter=4, callback=lambda r: cpu.append(time.process_time()))
out["fpi_iter_s"] = float(np.median(np.diff(p.history.time))); out["fpi_iter_cpu_s"] = float(np.median(np.diff(cpu)))
out["fpi_start_s"] = float(p.history.time[0])
rng = np.random.default_rng(0); Sinv = mod.prior_solve(np.eye(mod.d))
cov = PrecisionMultiCov(mod, np.zeros((mod.d, mod.d)), Sinv); m = mod.mu.copy(); ts = []
for t in range(5):
    idx = np.sort(rng.choice(mod.n, 200, replace=False)); cov.dense()
    t0 = time.perf_counter(); m, cov, _, _ = multi_svi_step(mod, m, cov, idx, 0.5, Sinv); ts.append(time.perf_counter() - t0)
out["svi_step_s"] = float(np.median(ts))
if fit:
    t0, c0 = time.perf_counter(), time.process_time(); pf = vgi_lit.fit(mod, "fpi", tol=1e-6); out["fit_s"], out["fit_cpu_s"] = time.perf_counter() - t0, time.process_time() - c0
    out.update(fit_iter=pf.n_iter, fit_vlb=pf.vlb, fit_stop=pf.stop.value)
print(json.dumps(out))
'''
ap = argparse.ArgumentParser(); ap.add_argument("--M", type=int, default=100); ap.add_argument("--trees", nargs="+", required=True)
ap.add_argument("--fit", action="store_true"); ap.add_argument("--reps", type=int, default=1)
a = ap.parse_args()
tools = os.path.dirname(os.path.abspath(__file__))
env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
for r in range(a.reps):
    for tree in a.trees:
        res = subprocess.run([sys.executable, "-c", CHILD, os.path.abspath(tree), tools, str(a.M), "1" if a.fit else "0"], env=env, capture_output=True, text=True)
        print(res.stdout.strip() or res.stderr[-2000:], flush=True)
