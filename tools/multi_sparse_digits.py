"""digits (scikit-learn's load_digits: 1797 rows × 64 pixels, 10 classes), a seeded stratified split with a third held out:
held-out log-loss (mean −log p(y*), p by the softmax averaged under q), accuracy and wall time of
  - the sparse multiclass GP (`MultiSparseGP`, Z by seeded k-means on the training inputs, M inducing inputs) fitted by FPi
    and by natural-gradient SVI (minibatches),
  - the dense `MultiGP` on a seeded training subset (its d = C·n makes the whole training set too costly),
  - with --gpflow (and GPflow installed) GPflow's SVGP with its Softmax likelihood, num_latent_gps = C, the same Z and kernel
    held fixed, q(u) factorised over the classes (one M × M covariance per class), fitted by natural gradients on q; its q
    is also scored by this package's VLB (the same quadrature), beside ours.
Fixed kernel, as the multiclass benchmark: RBF with variance 4 and lengthscale √p on inputs standardised by the training
rows (constant columns dropped). Run with one BLAS thread:
    OPENBLAS_NUM_THREADS=1 python tools/multi_sparse_digits.py [--M 50 100] [--seed 0] [--dense-n 300] [--batch 200]
        [--epochs 20] [--gpflow] [--gpflow-iters 300]"""
import argparse, time
import numpy as np
import vgi_lit
from vgi_lit.kernels import RBF
from vgi_lit.models import MultiGP, MultiSparseGP
from vgi_lit.softmax import Softmax
from vgi_lit.methods.multiclass import multi_vlb
from vgi_lit.methods.multi_svi import PrecisionMultiCov


def data(seed=0):
    "(Xtr, ytr, Xte, yte) standardised by the training rows."
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=1 / 3, random_state=seed, stratify=y)
    sd = Xtr.std(0); keep = sd > 0; mu = Xtr[:, keep].mean(0)
    return (Xtr[:, keep] - mu) / sd[keep], ytr, (Xte[:, keep] - mu) / sd[keep], yte


def scores(post, Xte, yte):
    "(log-loss, accuracy) on the held-out rows."
    P = post.predict_proba(Xte)
    return float(-np.mean(post.log_pred_density(Xte, yte))), float(np.mean(np.argmax(P, 1) == yte))


def timed(label, fn, Xte, yte, rows):
    t0 = time.perf_counter(); post = fn(); secs = time.perf_counter() - t0
    ll, acc = scores(post, Xte, yte)
    rows.append((label, post.vlb, ll, acc, secs, post.n_iter, post.stop.value))
    print(f"{label:34s} VLB {post.vlb:11.3f}  log-loss {ll:.4f}  accuracy {acc:.4f}  {secs:7.1f} s  {post.n_iter:4d} it  {post.stop.value}", flush=True)
    return post


def gpflow_svgp(Xtr, ytr, Z, C, variance, lengthscale, iters, gamma=0.1, seed=0):
    "GPflow SVGP with Softmax(C), shared fixed kernel and Z, q factorised over classes, natural gradients on q: (model, seconds)."
    from vgi_lit.bench.core import gpflow_one_thread
    tf, gpflow = gpflow_one_thread()
    tf.random.set_seed(seed)
    kern = gpflow.kernels.SharedIndependent(gpflow.kernels.SquaredExponential(variance=variance, lengthscales=lengthscale), output_dim=C)
    iv = gpflow.inducing_variables.SharedIndependentInducingVariables(gpflow.inducing_variables.InducingPoints(Z.copy()))
    m = gpflow.models.SVGP(kern, gpflow.likelihoods.Softmax(C), iv, num_latent_gps=C, whiten=False, q_diag=False)
    gpflow.set_trainable(m.kernel, False); gpflow.set_trainable(m.inducing_variable, False)
    data_ = (tf.constant(Xtr), tf.constant(ytr[:, None].astype(np.int64)))
    loss = m.training_loss_closure(data_)
    opt = gpflow.optimizers.NaturalGradient(gamma=gamma)
    t0 = time.perf_counter()
    for _ in range(iters): opt.minimize(loss, var_list=[(m.q_mu, m.q_sqrt)])
    return m, time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--M", type=int, nargs="+", default=[50, 100]); ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dense-n", type=int, default=300); ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--epochs", type=float, default=20); ap.add_argument("--gpflow", action="store_true")
    ap.add_argument("--gpflow-iters", type=int, default=300); ap.add_argument("--no-fpi", action="store_true")
    a = ap.parse_args(argv)
    from sklearn.cluster import KMeans
    Xtr, ytr, Xte, yte = data(a.seed)
    C, p = 10, Xtr.shape[1]
    var, ls = 4.0, float(np.sqrt(p))
    lik = Softmax(C)
    print(f"digits: {len(ytr)} training rows, {len(yte)} held out, p = {p}, C = {C}; RBF variance {var}, lengthscale {ls:.3f}")
    rows = []
    for M in a.M:
        Z = KMeans(M, n_init=4, random_state=a.seed).fit(Xtr).cluster_centers_
        mod = MultiSparseGP(Xtr, ytr, lik, RBF(var, ls), Z)
        if not a.no_fpi: pf = timed(f"sparse M={M} fpi", lambda: vgi_lit.fit(mod, "fpi", tol=1e-6), Xte, yte, rows)
        ps = timed(f"sparse M={M} svi (batch {a.batch})", lambda: vgi_lit.fit(mod, "svi", batch_size=a.batch, max_epochs=a.epochs, seed=a.seed), Xte, yte, rows)
        if a.gpflow:
            gm, secs = gpflow_svgp(Xtr, ytr, Z, C, var, ls, a.gpflow_iters, seed=a.seed)
            qm, qs = gm.q_mu.numpy(), gm.q_sqrt.numpy()                  # (M, C), (C, M, M)
            V = np.zeros((C * M, C * M))
            for c in range(C): V[c * M:(c + 1) * M, c * M:(c + 1) * M] = qs[c] @ qs[c].T
            cov = PrecisionMultiCov(mod, np.linalg.inv(V) - mod.prior_solve(np.eye(mod.d)))
            vlb = multi_vlb(mod, qm.T.ravel(), cov)[0]
            Pm = gm.predict_y(Xte)[0].numpy()
            ll = float(-np.mean(np.log(np.maximum(Pm[np.arange(len(yte)), yte], 1e-300)))); acc = float(np.mean(np.argmax(Pm, 1) == yte))
            rows.append((f"GPflow SVGP M={M}", vlb, ll, acc, secs, a.gpflow_iters, "iters"))
            print(f"{'GPflow SVGP M=%d (natgrad %d it)' % (M, a.gpflow_iters):34s} VLB {vlb:11.3f}  log-loss {ll:.4f}  accuracy {acc:.4f}  {secs:7.1f} s  "
                  f"(GPflow's own ELBO {float(gm.elbo((Xtr, ytr[:, None].astype(np.int64)))):.3f}, MC)", flush=True)
    if a.dense_n:
        sub = np.sort(np.random.default_rng(a.seed).choice(len(ytr), a.dense_n, replace=False))
        dm = MultiGP(Xtr[sub], ytr[sub], lik, RBF(var, ls))
        timed(f"dense MultiGP n={a.dense_n} fpi", lambda: vgi_lit.fit(dm, "fpi", tol=1e-6), Xte, yte, rows)
        Z = KMeans(50, n_init=4, random_state=a.seed).fit(Xtr[sub]).cluster_centers_
        timed(f"sparse M=50 on the same {a.dense_n} fpi", lambda: vgi_lit.fit(MultiSparseGP(Xtr[sub], ytr[sub], lik, RBF(var, ls), Z), "fpi", tol=1e-6), Xte, yte, rows)
    return rows


if __name__ == "__main__":
    main()
