"""The `vgi-lit` command line end to end on a small CSV file written from the ionosphere data, and each error
case: one line on standard error naming the problem, exit code 2, no traceback."""
import csv, re, subprocess, sys
from pathlib import Path
import numpy as np
import pytest

from vgi_lit.apps.cli import main, read_csv
from vgi_lit.apps.tables import Standardizer
from vgi_lit.datasets import load_ionosphere, shared_data_dir
from vgi_lit.io import load

ROOT = Path(__file__).resolve().parents[2]


def _write(path, X, y=None):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh); w.writerow([f"x{j}" for j in range(X.shape[1])] + ([] if y is None else ["y"]))
        for i in range(len(X)): w.writerow([repr(float(v)) for v in X[i]] + ([] if y is None else [repr(float(y[i]))]))
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    ds = load_ionosphere(data_dir=shared_data_dir(ROOT), resplit=False, download=False)
    return d, _write(d / "train.csv", ds.X[:60], ds.y[:60]), _write(d / "test.csv", ds.X_test[:15], ds.y_test[:15]), \
        _write(d / "new.csv", ds.X_test[15:25])


def test_fit_gp_end_to_end(files, capsys):
    d, tr, te, new = files
    rc = main(["fit", tr, "--target", "y", "--likelihood", "logistic", "--model", "gp", "--kernel", "rbf", "--method", "fpi",
               "--predict", te, "--predictions", str(d / "p.csv"), "--out", str(d / "fit.npz")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    for word in ("VLB", "iterations", "time", "kernel.variance", "kernel.lengthscale", "stop", "learning", "mean log predictive density"):
        assert word in cap.out, (word, cap.out)
    assert "learn fpi" in cap.err                                  # the progress bar is on in the command line
    P = read_csv(d / "p.csv")[1]
    assert P.shape == (15, 4) and np.all(P[:, 1] > 0) and np.all((P[:, 3] > 0) & (P[:, 3] < 1))
    assert np.array_equal(P[:, 2], np.where(P[:, 3] > 0.5, 1.0, -1.0))      # the more probable label, in the file's coding
    assert load(d / "fit.npz").info["labels"].tolist() == [-1.0, 1.0]
    assert main(["predict", str(d / "fit.npz"), new, "--predictions", str(d / "q.csv")]) == 0
    post = load(d / "fit.npz"); X_new = read_csv(new)[1]
    Z_new = Standardizer.fit(read_csv(tr)[1][:, :-1]).transform(X_new)     # the inputs standardised as in training
    assert np.allclose(read_csv(d / "q.csv")[1][:, 0], post.predict(Z_new)[0], rtol=1e-12, atol=1e-12)
    assert read_csv(d / "q.csv")[0] == ["f_mean", "f_var", "y_pred", "p_positive"]     # the labels read back from the file


def test_fit_sparse_gp_and_glm_without_learning(files, capsys):
    d, tr, te, _ = files
    for model in ("sparse-gp", "glm"):
        assert main(["fit", tr, "--target", "y", "--model", model, "--no-learn", "--inducing", "10", "--no-progress"]) == 0
        out = capsys.readouterr().out
        assert "VLB" in out and "learning" not in out


def _cases(d, tr, te):
    (d / "word.csv").write_text("x0,y\n1.0,1\nabc,0\n")
    (d / "empty.csv").write_text("")
    (d / "short.csv").write_text("x0,y\n1.0\n")
    (d / "labels.csv").write_text("x0,y\n1.0,1\n2.0,0\n3.0,2\n")
    (d / "counts.csv").write_text("x0,y\n1.0,1\n2.0,-1\n")
    return [(["fit", tr, "--target", "label"], "missing column 'label'"),
            (["fit", tr, "--target", "y", "--features", "x0,x99"], "missing column(s) ['x99']"),
            (["fit", str(d / "word.csv"), "--target", "y"], "line 3, column 'x0': non-numeric value 'abc'"),
            (["fit", str(d / "empty.csv"), "--target", "y"], "is empty"),
            (["fit", str(d / "short.csv"), "--target", "y"], "line 2: 1 fields"),
            (["fit", str(d / "labels.csv"), "--target", "y", "--model", "glm", "--likelihood", "logistic"], "column 'y'"),
            (["fit", str(d / "counts.csv"), "--target", "y", "--likelihood", "poisson", "--model", "glm"], "non-negative integers"),
            (["fit", tr, "--target", "y", "--likelihood", "cauchit"], "invalid choice: 'cauchit'"),
            (["fit", tr, "--target", "y", "--kernel", "spline"], "invalid choice: 'spline'"),
            (["fit", tr, "--target", "y", "--method", "newton"], "unknown method 'newton'"),
            (["fit", tr], "--target"),
            (["fit", str(d / "nothere.csv"), "--target", "y"], "cannot read"),
            (["predict", tr, te], "not a vgi_lit posterior file"),
            (["frobnicate"], "invalid choice: 'frobnicate'")]


def test_errors_are_one_line_and_exit_2(files, capsys):
    d, tr, te, _ = files
    for argv, what in _cases(d, tr, te):
        rc = main(argv + (["--no-progress"] if argv[0] == "fit" and len(argv) > 2 else []))
        err = capsys.readouterr().err
        assert rc == 2 and what in err and err.count("\n") == 1 and err.startswith("vgi-lit: error:") and "Traceback" not in err, (argv, err)


def test_python_m_vgi_lit(files):
    d, tr, _, _ = files
    r = subprocess.run([sys.executable, "-m", "vgi_lit", "fit", tr, "--target", "nope"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.strip() == f"vgi-lit: error: {tr}: missing column 'nope' (--target); the file has " + \
        str([f"x{j}" for j in range(34)] + ["y"])


def _housing_ratings(d):
    """Boston housing (standardised inputs) with its median value binned at the quintiles into ratings 1..5:
    an ordinal target coded 1..5, not 0..4. Rows 0..299 (permuted, seed 0) train, 300..399 test."""
    D = np.loadtxt(shared_data_dir(ROOT) / "housing.data")
    X, t = (D[:, :13] - D[:, :13].mean(0)) / D[:, :13].std(0), D[:, 13]
    y = 1.0 + np.searchsorted(np.quantile(t, [0.2, 0.4, 0.6, 0.8]), t, side="right")
    p = np.random.default_rng(0).permutation(len(y))
    return _write(d / "h_train.csv", X[p[:300]], y[p[:300]]), _write(d / "h_test.csv", X[p[300:400]], y[p[300:400]]), y[p[:300]]


def test_ordinal_glm_learned_cutpoints(tmp_path, capsys):
    tr, te, y = _housing_ratings(tmp_path)
    rc = main(["fit", tr, "--target", "y", "--likelihood", "ordinal", "--model", "glm", "--no-progress", "--predict", te,
               "--predictions", str(tmp_path / "p.csv"), "--out", str(tmp_path / "fit.npz")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "ordinal    5 classes [1, 2, 3, 4, 5], coded 0..4" in out and "learning   grad_tol (converged)" in out
    cuts = [float(l.split("=")[1]) for l in out.splitlines() if "likelihood.cutpoints[" in l]
    cum = np.cumsum(np.bincount(y.astype(int) - 1))[:-1] / len(y)
    assert len(cuts) == 4 and np.all(np.diff(cuts) > 0)
    assert not np.allclose(cuts, np.log(cum / (1 - cum)), atol=1e-3)   # learned: moved from the frequency start
    assert "(intercept)" not in load(tmp_path / "fit.npz").model.feature_names  # the cut points play the intercept's part
    hdr = open(tmp_path / "p.csv").readline().strip().split(",")
    assert hdr == ["f_mean", "f_var", "y_pred", "p_1", "p_2", "p_3", "p_4", "p_5"]
    P = read_csv(tmp_path / "p.csv")[1]
    assert P.shape == (100, 8) and np.allclose(P[:, 3:].sum(1), 1) and np.all(P[:, 3:] >= 0)
    assert np.array_equal(P[:, 2], 1.0 + np.argmax(P[:, 3:], 1))       # the most probable class, in the file's coding
    y_te = read_csv(te, ["y"])[1][:, 0]
    assert np.mean(P[:, 2] == y_te) > 0.5                               # five balanced classes: chance is 0.2
    lpd = float(out.split("mean log predictive density of the test labels ")[1].split()[0])
    assert lpd > np.log(0.2) + 0.5
    # predict from the saved fit: the same table, the labels read back from the file
    assert main(["predict", str(tmp_path / "fit.npz"), te, "--predictions", str(tmp_path / "q.csv")]) == 0
    assert np.array_equal(read_csv(tmp_path / "q.csv")[1], P)
    with np.load(tmp_path / "fit.npz") as z: arrays = {k: z[k] for k in z.files}
    assert "ordinal_classes" not in arrays and load(tmp_path / "fit.npz").info["labels"].tolist() == [1, 2, 3, 4, 5]
    import json                                     # a file with the labels as a separate array (no labels field) reads the same
    s = json.loads(str(arrays.pop("settings"))); del s["labels"]
    np.savez(tmp_path / "old.npz", settings=np.array(json.dumps(s)), ordinal_classes=np.arange(1.0, 6.0), **arrays)
    assert main(["predict", str(tmp_path / "old.npz"), te, "--predictions", str(tmp_path / "r.csv")]) == 0
    assert np.array_equal(read_csv(tmp_path / "r.csv")[1], P)


def test_ordinal_gp_no_learn_start_is_the_class_frequencies(tmp_path, capsys):
    tr, _, y = _housing_ratings(tmp_path)
    assert main(["fit", tr, "--target", "y", "--likelihood", "ordinal", "--model", "gp", "--no-learn", "--no-progress",
                 "--out", str(tmp_path / "gp.npz")]) == 0
    capsys.readouterr()
    cum = np.cumsum(np.bincount(y.astype(int) - 1))[:-1] / len(y)
    assert np.allclose(load(tmp_path / "gp.npz").model.likelihood.cutpoints, np.log(cum) - np.log1p(-cum), rtol=0, atol=1e-12)


def test_ordinal_errors(tmp_path, capsys):
    (tmp_path / "half.csv").write_text("x0,y\n1.0,1\n2.0,2.5\n3.0,3\n")
    (tmp_path / "one.csv").write_text("x0,y\n1.0,2\n2.0,2\n")
    tr, _, _ = _housing_ratings(tmp_path)
    (tmp_path / "te6.csv").write_text(",".join(f"x{j}" for j in range(13)) + ",y\n" + ",".join(["0.0"] * 13) + ",6\n")
    for argv, what in [([str(tmp_path / "half.csv")], "column 'y': ordinal labels must be integers, got e.g. 2.5"),
                       ([str(tmp_path / "one.csv")], "at least two classes, got only [2]"),
                       ([tr, "--predict", str(tmp_path / "te6.csv"), "--predictions", str(tmp_path / "p6.csv")],
                        "test labels: 6 not among the training classes [1, 2, 3, 4, 5]")]:
        rc = main(["fit"] + argv + ["--target", "y", "--likelihood", "ordinal", "--model", "glm", "--no-learn", "--no-progress"])
        err = capsys.readouterr().err
        assert rc == 2 and what in err and err.count("\n") == 1 and "Traceback" not in err, (argv, err)


def test_readme_example(tmp_path):
    """The README's command, read from README.md and run as written from the repository root (the output file in
    tmp_path); about 1.5 s."""
    import re
    found = re.findall(r"`(vgi-lit fit [^`]+)`", (ROOT / "README.md").read_text())
    assert found, "README.md has no `vgi-lit fit ...` example"
    cmd = found[0].split()
    assert cmd == "vgi-lit fit ../shared/data/randhie.csv --target mdvis --likelihood poisson --model glm --out fitted.npz".split()
    argv = cmd[1:-1] + [str(tmp_path / "fitted.npz")]
    r = subprocess.run([sys.executable, "-m", "vgi_lit"] + argv, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "GLM(n=20190, d=10, likelihood=Poisson" in r.stdout
    assert re.search(r"^stop +(grad_tol|rel_tol) \(converged\)", r.stdout, re.M), r.stdout   # either converged stop
    assert "learning   grad_tol (converged)" in r.stdout and "prior_var = " in r.stdout
    assert "learn fpi" in r.stderr                                       # the progress bar, on by default in the CLI
    post = load(tmp_path / "fitted.npz")
    assert post.model.feature_names[0] == "lncoins" and post.model.feature_names[-1] == "(intercept)"
    vlb = float(r.stdout.split("VLB")[1].split()[0])
    assert abs(post.vlb - vlb) < 1e-5 and np.isfinite(vlb)
    mu = np.exp(post.predict(post.model.X)[0])                           # fitted mean visits near the observed mean
    assert abs(mu.mean() - post.model.y.mean()) < 0.05 * post.model.y.mean()


@pytest.mark.parametrize("name", ["fp_experiments", "prox_tables", "svi_experiments", "hyper_experiments", "pmf_experiments", "demo"])
def test_experiment_commands_have_no_progress(name, capsys):
    import importlib
    mod = importlib.import_module(f"vgi_lit.experiments.{name}")
    with pytest.raises(SystemExit) as e: mod.main(["--help"])
    assert e.value.code == 0 and "--no-progress" in capsys.readouterr().out


def test_demo_progress_on_in_the_command_off_in_the_library(tmp_path, capfd):
    from vgi_lit.experiments.demo import main as demo_main, run_demo
    demo_main(["--methods", "fpi", "--no-learn", "--figure", str(tmp_path / "d.png")])
    assert "fit fpi" in capfd.readouterr().err                          # the command: a bar per run by default
    demo_main(["--methods", "fpi", "--no-learn", "--figure", str(tmp_path / "d.png"), "--no-progress"])
    assert capfd.readouterr().err == ""
    import io
    buf = io.StringIO(); run_demo(["fpi"], learn=False, figure=None, data_dir=str(shared_data_dir(ROOT)), out=buf)
    assert capfd.readouterr().err == "" and "fpi" in buf.getvalue()     # the library: silent unless asked


def test_stop_line_says_what_happened():
    """A fit whose relative tolerance is below the VLB's rounding (tol_rel = 1e-300) stops when two successive VLBs are
    equal in floating point; the stop line says that and the gradient norm left, not 'relative VLB change <=
    tol_rel=1e-300' (as it said 'tol_rel=0.0' after learning). A relative-change stop at tol_rel = 1e-9 quotes the
    measured change."""
    import vgi_lit
    from vgi_lit.apps.cli import summary
    from vgi_lit.inference import Stop
    from vgi_lit.likelihoods import Logistic
    from vgi_lit.models import GLM
    rng = np.random.default_rng(0); X = rng.standard_normal((60, 2)); y = np.where(X[:, 0] + 0.3 * rng.standard_normal(60) > 0, 1.0, -1.0)
    model = GLM(np.hstack([X, np.ones((60, 1))]), y, Logistic(), prior_cov=38.5)
    post = vgi_lit.fit(model, "fpi", tol=1e-15, tol_rel=1e-300, max_iter=500)
    assert post.stop is Stop.REL_TOL and post.history.vlb[-1] == post.history.vlb[-2]
    line = [l for l in summary(post, post, 0.0).splitlines() if l.startswith("stop")][0]
    assert "tol_rel=" not in line and "no longer changes in floating point" in line, line
    assert float(line.split("gradient norm ")[1]) == pytest.approx(post.history.grad_norm[-1], rel=1e-2)
    post = vgi_lit.fit(model, "fpi", tol=1e-15, tol_rel=1e-9, max_iter=500)
    v = post.history.vlb
    line = [l for l in summary(post, post, 0.0).splitlines() if l.startswith("stop")][0]
    change = float(line.split("relative VLB change ")[1].split()[0])
    assert post.stop is Stop.REL_TOL and 0 < change <= 1e-9 and change == pytest.approx(abs(v[-1] - v[-2]) / abs(v[-1]), rel=1e-2), line
