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
    """The README's command, read from README.md and run as written (the output file in tmp_path) from a clone's place
    beside `shared`: a folder in tmp_path next to a link `shared` to the data's parent (found as the rest of the suite
    finds it, `shared_data_dir`), so `../shared/data` resolves from a clone or a git worktree alike; the package is
    this repository's; about 1.5 s."""
    import os, re
    found = re.findall(r"`(vgi-lit fit [^`]+)`", (ROOT / "README.md").read_text())
    assert found, "README.md has no `vgi-lit fit ...` example"
    cmd = found[0].split()
    assert cmd == "vgi-lit fit ../shared/data/randhie.csv --target mdvis --likelihood poisson --model glm --out fitted.npz".split()
    data = shared_data_dir(ROOT)
    assert data is not None and (data / "randhie.csv").is_file(), f"no shared/data/randhie.csv above {ROOT}"
    (tmp_path / "shared").symlink_to(data.parent, target_is_directory=True)
    clone = tmp_path / "clone"; clone.mkdir()
    argv = cmd[1:-1] + [str(tmp_path / "fitted.npz")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    r = subprocess.run([sys.executable, "-m", "vgi_lit"] + argv, capture_output=True, text=True, cwd=clone, env=env)
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


# --- tables as they come: a raw real table with a Yes/No target and string columns -------------------------------

def _bikeshare_busy(d, n_train=400, n_test=400, seed=0):
    """Capital Bikeshare hours as read from ISLP's CSV (raw units: day 1-365, hour 0-23, temperature 0-1; `mnth` and
    `weathersit` are text), with the target `busy` = Yes when more riders than the median hour, else No; the rider
    counts themselves dropped. Random rows (seed) split into train and test files."""
    rows = list(csv.reader(open(shared_data_dir(ROOT) / "bikeshare.csv", newline="")))
    h, R = rows[0], rows[1:]
    b = np.array([float(r[h.index("bikers")]) for r in R]); med = np.median(b)
    keep = [c for c in h if c not in ("casual", "registered", "bikers")]
    idx = np.random.default_rng(seed).permutation(len(R))
    def write(path, sel):
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh); w.writerow(keep + ["busy"])
            for i in sel: w.writerow([R[i][h.index(c)] for c in keep] + ["Yes" if b[i] > med else "No"])
        return str(path)
    return write(d / "bike_train.csv", idx[:n_train]), write(d / "bike_test.csv", idx[n_train:n_train + n_test])


def _labels(path, col="busy"):
    return np.array([r[col] for r in csv.DictReader(open(path, newline=""))])


def _log_loss(p_yes, is_yes):
    return float(-np.mean(np.where(is_yes, np.log(p_yes), np.log1p(-p_yes))))


def test_raw_table_with_yes_no_target_and_string_columns(tmp_path, capsys):
    """Done-when: the CLI on the raw bikeshare table (Yes/No target, text columns, no preprocessing by hand) reads the
    likelihood from the target, one-hot encodes the text columns, standardises, and beats the constant predictor
    on held-out rows by a wide margin (measured: log-loss 0.425 against 0.697); `predict` from the saved file
    reproduces the predictions with the labels as written in the table."""
    tr, te = _bikeshare_busy(tmp_path)
    rc = main(["fit", tr, "--target", "busy", "--no-progress", "--predict", te, "--predictions", str(tmp_path / "p.csv"),
               "--out", str(tmp_path / "fit.npz")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    for line in ("likelihood logistic (read from the target column 'busy'", "labels     No -> -1, Yes -> +1",
                 "categories mnth: one-hot, 12 columns", "categories weathersit: one-hot, 3 columns (clear, cloudy/misty, light rain/snow)",
                 "inputs     10 numeric columns standardised", "15 one-hot columns kept as 0/1"):
        assert line in cap.out, (line, cap.out)
    assert "warning" not in cap.err
    p = np.array([float(r["p_positive"]) for r in csv.DictReader(open(tmp_path / "p.csv"))])
    pred = np.array([r["y_pred"] for r in csv.DictReader(open(tmp_path / "p.csv"))])
    y_tr, y_te = _labels(tr) == "Yes", _labels(te) == "Yes"
    assert set(pred) <= {"Yes", "No"} and np.array_equal(pred == "Yes", p > 0.5)
    model_loss, const_loss = _log_loss(p, y_te), _log_loss(np.full(len(y_te), y_tr.mean()), y_te)
    lpd = float(cap.out.split("mean log predictive density of the test labels ")[1].split()[0])
    assert lpd == pytest.approx(-model_loss, abs=1e-4)
    assert model_loss < const_loss - 0.15, (model_loss, const_loss)
    assert main(["predict", str(tmp_path / "fit.npz"), te, "--predictions", str(tmp_path / "q.csv")]) == 0
    capsys.readouterr()
    assert open(tmp_path / "q.csv").read() == open(tmp_path / "p.csv").read()


def test_degenerate_fit_is_reported(tmp_path, capsys):
    """Labels shuffled against the inputs: learning ends at the trivial model (p near the class frequency everywhere),
    the further starts end there too, and the command says so on standard error, with what to do; the fit itself
    succeeds."""
    tr, _ = _bikeshare_busy(tmp_path, n_train=200, n_test=0)
    rows = list(csv.reader(open(tr, newline=""))); y = [r[-1] for r in rows[1:]]
    y = np.random.default_rng(1).permutation(y)
    with open(tmp_path / "shuffled.csv", "w", newline="") as fh:
        w = csv.writer(fh); w.writerow(rows[0])
        for r, v in zip(rows[1:], y): w.writerow(r[:-1] + [v])
    rc = main(["fit", str(tmp_path / "shuffled.csv"), "--target", "busy", "--no-progress"])
    cap = capsys.readouterr()
    assert rc == 0
    assert "restarts   learning ended at a degenerate fit; learning again from the start and 2 perturbed starts" in cap.out
    assert "vgi-lit: warning: the fitted model does not use its inputs" in cap.err and "no evidence that y depends" in cap.err, cap.err
    assert cap.err.count("What to") == 1 and "What to try" not in cap.err, cap.err           # one piece of advice, for what was done
    assert ("Already done: the inputs are standardised, the kernel started from the data, the hyperparameters were learned from "
            "3 starts. What to do: learn from more starts (--restarts 5), or check that the inputs carry information about y") in cap.err, cap.err


def test_table_errors_name_the_cell(tmp_path, capsys):
    d = tmp_path
    (d / "t.csv").write_text("age,city,label\n31,Oslo,Yes\n45,Rome,No\n27,Oslo,No\n52,Lima,Yes\n38,Rome,Yes\n")
    (d / "gap.csv").write_text("age,city,label\n31,Oslo,Yes\n,Rome,No\n27,Oslo,No\n")
    (d / "na.csv").write_text("age,city,label\n31,Oslo,Yes\n45,NA,No\n27,Oslo,No\n")
    (d / "ylab.csv").write_text("age,city,label\n31,Oslo,Yes\n45,Rome,No\n27,Oslo,\n")
    (d / "three.csv").write_text("age,label\n31,Yes\n45,No\n27,Maybe\n")
    (d / "counts.csv").write_text("x,visits\n" + "".join(f"{i},{i % 20}\n" for i in range(40)))
    (d / "reals.csv").write_text("x,y\n1,0.5\n2,1.5\n3,-0.25\n")
    (d / "new_city.csv").write_text("age,city\n40,Paris\n")
    assert main(["fit", str(d / "t.csv"), "--target", "label", "--model", "glm", "--no-progress", "--out", str(d / "f.npz")]) == 0
    capsys.readouterr()
    for argv, what in [(["fit", str(d / "gap.csv"), "--target", "label"], "gap.csv line 3, column 'age': missing value ''"),
                       (["fit", str(d / "na.csv"), "--target", "label"], "na.csv line 3, column 'city': missing value 'NA'"),
                       (["fit", str(d / "ylab.csv"), "--target", "label"], "ylab.csv line 4, column 'label': missing value ''"),
                       (["fit", str(d / "three.csv"), "--target", "label", "--likelihood", "poisson"], "try --likelihood softmax (unordered classes)"),
                       (["fit", str(d / "counts.csv"), "--target", "visits", "--likelihood", "logistic"], "try --likelihood poisson or negative-binomial"),
                       (["fit", str(d / "reals.csv"), "--target", "y", "--likelihood", "poisson"], "try --likelihood gaussian"),
                       (["fit", str(d / "t.csv"), "--target", "label", "--likelihood", "gaussian"], "try --likelihood logistic"),
                       (["predict", str(d / "f.npz"), str(d / "new_city.csv")], "line 2, column 'city': category 'Paris' was not seen in training")]:
        rc = main(argv + (["--no-progress"] if argv[0] == "fit" else []))
        err = capsys.readouterr().err
        assert rc == 2 and what in err and err.count("\n") == 1 and "Traceback" not in err, (argv, err)


def test_likelihood_read_from_the_target(tmp_path, capsys):
    "Counts 0-19 fit as Poisson and real values as Gaussian when no likelihood is given, and the summary says so."
    rng = np.random.default_rng(0); x = rng.uniform(0, 100, 60)
    (tmp_path / "c.csv").write_text("x,visits\n" + "".join(f"{float(a)!r},{int(v)}\n" for a, v in zip(x, np.minimum(rng.poisson(1 + x / 10), 19))))
    (tmp_path / "r.csv").write_text("x,y\n" + "".join(f"{float(a)!r},{float(a / 50 + rng.normal())!r}\n" for a in x))
    for f, lik in (("c.csv", "poisson"), ("r.csv", "gaussian")):
        target = "visits" if lik == "poisson" else "y"
        assert main(["fit", str(tmp_path / f), "--target", target, "--model", "glm", "--no-progress"]) == 0
        out = capsys.readouterr().out
        assert f"likelihood {lik} (read from the target column '{target}'" in out, out


def test_glm_coefficient_table_matches_the_estimator(tmp_path, capsys):
    """The GLM summary's coefficient table (one-hot names included, raw-input scale) agrees with VGClassifier(latent='glm')
    fitted to the same encoded design, whose coef_ / coef_std_ are on the raw scale too."""
    sk = pytest.importorskip("sklearn")
    from vgi_lit.apps.sklearn import VGClassifier
    rng = np.random.default_rng(3); n = 120
    age = rng.uniform(20, 70, n); city = rng.choice(["Lima", "Oslo", "Rome"], n)
    f = 0.08 * (age - 45) + np.where(city == "Oslo", 1.0, 0.0)
    lab = np.where(rng.uniform(size=n) < 1 / (1 + np.exp(-f)), "Yes", "No")
    with open(tmp_path / "t.csv", "w", newline="") as fh:
        w = csv.writer(fh); w.writerow(["age", "city", "label"]); w.writerows(zip([repr(float(a)) for a in age], city, lab))
    assert main(["fit", str(tmp_path / "t.csv"), "--target", "label", "--model", "glm", "--no-progress"]) == 0
    out = capsys.readouterr().out
    table = out.split("coefficients (per unit of each input as read; 95% interval: mean ± 1.96 sd under q)\n")[1].splitlines()
    assert table[0].split() == ["feature", "mean", "sd", "2.5%", "97.5%"]
    rows = {r.split()[0]: [float(v) for v in r.split()[1:]] for r in table[1:6]}
    assert list(rows) == ["age", "city=Lima", "city=Oslo", "city=Rome", "(intercept)"]
    for m, s, lo, hi in rows.values(): assert s > 0 and lo == pytest.approx(m - 1.96 * s, rel=1e-3, abs=1e-3) and hi == pytest.approx(m + 1.96 * s, rel=1e-3, abs=1e-3)
    X = np.column_stack([age] + [(city == c).astype(float) for c in ("Lima", "Oslo", "Rome")])
    clf = VGClassifier(latent="glm").fit(X, lab)
    # the estimator standardises the indicator columns too (it cannot tell them apart), so compare the fitted function
    # through the age coefficient, which both report per year; and the CLI's own numbers against its posterior
    assert rows["age"][0] == pytest.approx(clf.coef_[0, 0], rel=0.05) and rows["age"][1] == pytest.approx(clf.coef_std_[0, 0], rel=0.1)
    assert 0.04 < rows["age"][0] < 0.15


def test_predict_to_a_closed_pipe_ends_quietly(tmp_path, capsys):
    """`vgi-lit predict fit.npz big.csv | head -n 2`: two lines out, nothing on standard error (no BrokenPipeError). The
    fit is made in this process (`main`; `python -m vgi_lit fit` runs in `test_readme_example`), the prediction in a
    process of its own, whose standard output is the pipe."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2)); y = np.where(X[:, 0] > 0, 1.0, -1.0)
    tr = _write(tmp_path / "tr.csv", X, y); big = _write(tmp_path / "big.csv", rng.normal(size=(5000, 2)))   # about 300 kB out, several pipe buffers
    assert main(["fit", tr, "--target", "y", "--model", "glm", "--no-progress", "--out", str(tmp_path / "f.npz")]) == 0
    assert capsys.readouterr().err == ""
    cmd = f"'{sys.executable}' -m vgi_lit predict '{tmp_path / 'f.npz'}' '{big}' | head -n 2"
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.splitlines()[0] == "f_mean,f_var,y_pred,p_positive" and len(r.stdout.splitlines()) == 2
    assert r.stderr == "", r.stderr


def test_student_t_df_running_off_is_reported(tmp_path, capsys):
    """Gaussian noise fitted with a Student-t likelihood: df runs to the edge of its box and the command names it;
    `--fix likelihood.df` holds it and the warning goes."""
    rng = np.random.default_rng(0); x = rng.normal(size=1000)              # enough rows for df to run off (at 200, df ends near 9; at 500 near 150)
    (tmp_path / "g.csv").write_text("x,y\n" + "".join(f"{float(a)!r},{float(2 * a + 0.3 * rng.normal())!r}\n" for a in x))
    argv = ["fit", str(tmp_path / "g.csv"), "--target", "y", "--likelihood", "student-t", "--model", "glm", "--no-progress"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "learning ran a parameter to its bound" in err and "likelihood.df" in err, err
    assert main(argv + ["--fix", "likelihood.df"]) == 0
    cap = capsys.readouterr()
    assert cap.err == "" and "  likelihood.df = 3\n" in cap.out, cap      # held at the Student-t default start


def test_standardize_and_kernel_start_options(tmp_path, capsys):
    """By default the inputs are standardised and the kernel starts at the median distance between them (variance 1
    for balanced labels); --no-standardize keeps the inputs as read, --kernel-start unit starts at variance 1 and
    lengthscale 1. The saved fit predicts a new table the same way."""
    from vgi_lit.apps.tables import median_distance
    rng = np.random.default_rng(0); X = np.column_stack([100 + 20 * rng.normal(size=50), 0.4 + 0.1 * rng.normal(size=50)])
    y = np.where(X[:, 0] - 100 > 0, 1.0, -1.0); tr = _write(tmp_path / "tr.csv", X, y)
    runs = {}
    for name, extra in [("default", []), ("raw", ["--no-standardize"]), ("unit", ["--kernel-start", "unit"])]:
        assert main(["fit", tr, "--target", "y", "--no-learn", "--no-progress", "--out", str(tmp_path / f"{name}.npz"),
                     "--predict", tr, "--predictions", str(tmp_path / f"{name}.csv")] + extra) == 0
        runs[name] = (capsys.readouterr().out, load(tmp_path / f"{name}.npz"))
    Z = (X - X.mean(0)) / X.std(0)
    assert "inputs     2 numeric columns standardised" in runs["default"][0] and "inputs " not in runs["raw"][0]
    assert np.allclose(runs["default"][1].model.X, Z) and np.array_equal(runs["raw"][1].model.X, X)
    assert runs["default"][1].model.kernel.lengthscale == pytest.approx(median_distance(Z))
    assert runs["raw"][1].model.kernel.lengthscale == pytest.approx(median_distance(X))
    assert runs["unit"][1].model.kernel.lengthscale == 1.0 and runs["unit"][1].model.kernel.variance == 1.0
    for name in runs:
        assert main(["predict", str(tmp_path / f"{name}.npz"), tr, "--predictions", str(tmp_path / f"{name}_again.csv")]) == 0
        assert open(tmp_path / f"{name}_again.csv").read() == open(tmp_path / f"{name}.csv").read()


def test_learning_that_does_not_converge_gets_advice(files, capsys):
    """Learning with an inner method that does not maximise the VLB (Laplace maximises the log joint) stalls; the
    summary says why and what to do."""
    d, tr, _, _ = files
    assert main(["fit", tr, "--target", "y", "--method", "laplace", "--no-progress", "--restarts", "0"]) == 0
    out = capsys.readouterr().out
    assert "learning   stalled (NOT converged)\n  advice: the inner method laplace maximises the log_joint, not the VLB" in out, out


def _iris_csv(d, n=30, text=True):
    "The first n rows of iris in a random order (seed 0), as train.csv and the next 15 as test.csv; species as text or 0, 1, 2."
    from sklearn.datasets import load_iris
    ds = load_iris(); idx = np.random.default_rng(0).permutation(150)
    def write(path, rows):
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh); w.writerow(["sl", "sw", "pl", "pw", "species"])
            for i in rows: w.writerow([repr(float(v)) for v in ds.data[i]] + [ds.target_names[ds.target[i]] if text else int(ds.target[i])])
        return str(path)
    return write(d / "train.csv", idx[:n]), write(d / "test.csv", idx[n:n + 15]), ds, idx


@pytest.mark.slow
def test_softmax_glm_text_classes_end_to_end(tmp_path, capsys):
    tr, te, ds, idx = _iris_csv(tmp_path)
    rc = main(["fit", tr, "--target", "species", "--model", "glm", "--no-progress", "--predict", te,
               "--predictions", str(tmp_path / "p.csv"), "--out", str(tmp_path / "f.npz")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    assert "likelihood softmax: 3 unordered classes (setosa, versicolor, virginica)" in cap.out and "--likelihood to choose" in cap.out
    assert re.search(r"learning   (grad_tol|rel_tol) \(converged\); \d+ evaluations of the optimal VLB", cap.out) and "  prior_var = " in cap.out
    for lab in ("setosa", "versicolor", "virginica"): assert f"class {lab}: coefficients" in cap.out
    assert re.search(r"accuracy [01]\.\d+ over 30 training rows", cap.out) and "mean log predictive density" in cap.out
    with open(tmp_path / "p.csv") as fh: rows = list(csv.reader(fh))
    assert rows[0] == ["y_pred", "p_setosa", "p_versicolor", "p_virginica"] and len(rows) == 16
    P = np.array([[float(v) for v in r[1:]] for r in rows[1:]])
    assert np.allclose(P.sum(1), 1.0, atol=1e-12) and [r[0] for r in rows[1:]] == [["setosa", "versicolor", "virginica"][k] for k in P.argmax(1)]
    acc = np.mean(P.argmax(1) == ds.target[idx[30:45]])
    assert acc >= 0.8, acc
    post = load(tmp_path / "f.npz")
    assert type(post).__name__ == "MultiPosterior" and post.info["labels"].tolist() == ["setosa", "versicolor", "virginica"]
    assert main(["predict", str(tmp_path / "f.npz"), te, "--predictions", str(tmp_path / "q.csv")]) == 0
    with open(tmp_path / "q.csv") as fh: assert list(csv.reader(fh)) == rows        # the saved fit predicts the same, to the bit


def test_few_integer_values_are_not_silently_counts(tmp_path, capsys):
    tr, te, _, _ = _iris_csv(tmp_path, text=False)
    assert main(["fit", tr, "--target", "species", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "3 distinct integer values (0, 1, 2)" in err and "--likelihood softmax" in err and "poisson" in err and "ordinal" in err
    for extra, words in ((["--likelihood", "softmax", "--no-learn", "--fix", "kernel.variance"], "it needs learning (drop --no-learn)"),
                         (["--likelihood", "softmax", "--restarts", "2"], "drop --restarts"),
                         (["--likelihood", "logistic"], "or --likelihood softmax (unordered classes)")):
        assert main(["fit", tr, "--target", "species", "--no-progress", *extra]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err


def test_softmax_sparse_gp(tmp_path, capsys):
    tr, te, ds, idx = _iris_csv(tmp_path, n=45, text=False)
    assert main(["fit", tr, "--target", "species", "--likelihood", "softmax", "--model", "sparse-gp", "--inducing", "8", "--no-learn",
                 "--no-progress", "--predict", te, "--predictions", str(tmp_path / "p.csv"), "--out", str(tmp_path / "f.npz")]) == 0
    names, P = read_csv(tmp_path / "p.csv")
    assert names == ["y_pred", "p_0", "p_1", "p_2"] and np.mean(P[:, 0] == ds.target[idx[45:60]]) >= 0.8
    post = load(tmp_path / "f.npz")
    assert type(post.model).__name__ == "MultiSparseGP" and post.model.Z.shape == (8, 4)
    assert main(["predict", str(tmp_path / "f.npz"), te, "--predictions", str(tmp_path / "q.csv")]) == 0
    assert np.array_equal(read_csv(tmp_path / "q.csv")[1], P)


@pytest.mark.slow
def test_softmax_sparse_gp_learns_its_kernel(tmp_path, capsys):
    """--likelihood softmax learns by default, as the other likelihoods do: the sparse GP's kernel is learned (its inducing rows
    held at the drawn rows), the summary gives the verdict and the values, --fix holds the variance at its start, and the
    learned fit has a higher VLB than the fit at the start."""
    from vgi_lit.apps.cli import SOFTMAX_VARIANCE
    tr, te, ds, idx = _iris_csv(tmp_path, n=30, text=False)
    base = ["fit", tr, "--target", "species", "--likelihood", "softmax", "--model", "sparse-gp", "--inducing", "8", "--no-progress"]
    fits = {}
    for name, extra in (("start", ["--no-learn"]), ("learned", []), ("fixed", ["--fix", "kernel.variance"])):
        assert main(base + extra + ["--out", str(tmp_path / f"{name}.npz")]) == 0
        fits[name] = (capsys.readouterr().out, load(tmp_path / f"{name}.npz"))
    out, post = fits["learned"]
    assert re.search(r"learning   (grad_tol|rel_tol) \(converged\)", out) and "  kernel.variance = " in out and "  kernel.lengthscale = " in out
    assert post.vlb > fits["start"][1].vlb and np.array_equal(post.model.Z, fits["start"][1].model.Z)
    assert post.model.kernel.variance != SOFTMAX_VARIANCE and fits["fixed"][1].model.kernel.variance == SOFTMAX_VARIANCE
    assert "learning" not in fits["start"][0]


@pytest.mark.slow
def test_softmax_gp_integer_classes(tmp_path, capsys):
    tr, te, ds, idx = _iris_csv(tmp_path, n=60, text=False)
    assert main(["fit", tr, "--target", "species", "--likelihood", "softmax", "--no-learn", "--no-progress", "--predict", te,
                 "--predictions", str(tmp_path / "p.csv")]) == 0
    out = capsys.readouterr().out
    assert "coded 0..2" in out and "read from the target" not in out and "learning" not in out
    names, P = read_csv(tmp_path / "p.csv")
    assert names == ["y_pred", "p_0", "p_1", "p_2"] and np.mean(P[:, 0] == ds.target[idx[60:75]]) >= 0.8


def test_softmax_fit_that_ignores_its_inputs_warns(tmp_path, capsys):
    "A softmax GLM held at prior variance 1e-8 (text target at 70/20/10%) predicts the same probabilities everywhere: the command says so."
    rng = np.random.default_rng(2); X = rng.normal(size=(200, 4)); cls = rng.choice(["a", "b", "c"], size=200, p=[0.7, 0.2, 0.1])
    path = tmp_path / "noise3.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh); w.writerow([f"x{j}" for j in range(4)] + ["cls"])
        for i in range(200): w.writerow([repr(float(v)) for v in X[i]] + [cls[i]])
    assert main(["fit", str(path), "--target", "cls", "--model", "glm", "--prior-var", "1e-8", "--no-learn", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "does not use its inputs" in err and "class depends on the inputs" in err, err


def test_predict_names_every_missing_column_and_fractional_counts_get_no_class_advice(tmp_path, capsys):
    rng = np.random.default_rng(0); X = rng.normal(size=(30, 3)); y = np.where(X[:, 0] > 0, 1.0, -1.0)
    tr = _write(tmp_path / "tr.csv", X, y); te = _write(tmp_path / "te.csv", X[:5, :1])
    assert main(["fit", tr, "--target", "y", "--model", "glm", "--no-learn", "--no-progress", "--out", str(tmp_path / "f.npz")]) == 0
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "f.npz"), te]) == 2
    err = capsys.readouterr().err
    assert "missing columns 'x1', 'x2'" in err, err
    (tmp_path / "frac.csv").write_text("x0,y\n1.0,1\n2.0,2\n3.0,3.5\n4.0,4\n")
    assert main(["fit", str(tmp_path / "frac.csv"), "--target", "y", "--likelihood", "poisson", "--model", "glm", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "non-negative integers" in err and "softmax" not in err, err


@pytest.mark.slow
def test_bikeshare_default_model_is_sparse_and_converges(capsys):
    """The bike-share table as it comes (8,645 rows; the twelve input columns, not the two counts that sum to the target):
    the default --model auto fits a sparse GP and says why, and learning (kernel and constant mean, Poisson) ends converged:
    its last line search fails with the outer gradient at 1.7e-2, where L-BFGS-B's model predicts a rise of 6e-10 nats."""
    path = shared_data_dir(ROOT) / "bikeshare.csv"
    if not path.exists(): pytest.skip(f"{path} not found")
    feats = "season,mnth,day,hr,holiday,weekday,workingday,weathersit,temp,atemp,hum,windspeed"
    assert main(["fit", str(path), "--target", "bikers", "--features", feats, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "model      a sparse GP with 50 inducing inputs (rows of the data), chosen because the data have 8645 rows" in out, out
    assert "SparseGP(n=8645, d=50" in out and "NOT converged" not in out and "\nlearning   " in out, out
    learning = out.split("\nlearning   ")[1].split("\n")[0]
    assert learning.startswith(("grad_tol (converged)", "rel_tol (converged)")), learning


def test_build_model_resolves_the_automatic_model():
    "build_model with the parser's default --model auto: a dense GP for a few rows (as cmd_fit resolves it), a clear error for an unknown kind."
    from vgi_lit.apps.cli import parser, build_model, CLIError
    from vgi_lit.models import GP
    rng = np.random.default_rng(0); X = rng.normal(size=(20, 2)); y = np.where(X[:, 0] > 0, 1.0, -1.0)
    a = parser().parse_args(["fit", "t.csv", "--target", "y", "--likelihood", "logistic"])
    assert a.model == "auto" and type(build_model(X, y, ["a", "b"], a)) is GP
    a.model = "dense"
    with pytest.raises(CLIError, match="unknown model 'dense'"): build_model(X, y, ["a", "b"], a)


def test_ard_names_the_inputs_the_fit_ignores(tmp_path, capsys):
    """With --ard, the lengthscales of the two inputs without signal run up to the box's edge: the command names those
    inputs and gives no runaway warning (whose advice, to hold the parameter or standardise, does not apply)."""
    rng = np.random.default_rng(0); X = rng.standard_normal((150, 4))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.standard_normal(150)
    path = _write(tmp_path / "ard.csv", X, y)
    assert main(["fit", path, "--target", "y", "--likelihood", "gaussian", "--ard", "--no-progress"]) == 0
    cap = capsys.readouterr()
    assert "learning ran a parameter to its bound" not in cap.err, cap.err
    line = [s for s in cap.out.splitlines() if s.startswith("inputs the fit does not depend on")]
    assert len(line) == 1 and "x2 (lengthscale" in line[0] and "x3 (lengthscale" in line[0] and "x0" not in line[0], cap.out


def test_counts_read_from_the_target_weigh_the_negative_binomial(tmp_path, capsys):
    """Counts whose likelihood the command reads from the data are fitted by the Poisson and by the negative binomial, and
    the negative binomial is kept only when its VLB is the higher by more than `OVERDISPERSION_NATS` (over-dispersed
    counts, generated with r = 2); on Poisson counts the Poisson is kept; a likelihood given by name is fitted alone."""
    from vgi_lit.likelihoods import NegativeBinomial, Poisson
    rng = np.random.default_rng(0); X = rng.normal(size=(300, 2)); mu = np.exp(1.5 + 0.6 * X[:, 0])     # generated
    runs = {"nb": (rng.negative_binomial(2, 2 / (2 + mu)), []), "poisson": (rng.poisson(mu), []),
            "given": (rng.negative_binomial(2, 2 / (2 + mu)), ["--likelihood", "poisson"])}
    for name, (y, extra) in runs.items():
        src = _write(tmp_path / f"{name}.csv", X, y); out = str(tmp_path / f"{name}.npz")
        assert main(["fit", src, "--target", "y", "--model", "glm", "--no-progress", "--out", out] + extra) == 0
        text, lik = capsys.readouterr().out, load(out).model.likelihood
        kept = re.search(r"likelihood (\S+) kept by the VLB: (\S+) for negative-binomial, (\S+) for poisson", text)
        if name == "given": assert kept is None and type(lik) is Poisson, text; continue
        assert kept is not None, text
        gap = float(kept.group(2)) - float(kept.group(3))
        if name == "nb": assert kept.group(1) == "negative-binomial" and gap > 100 and type(lik) is NegativeBinomial, text
        else: assert kept.group(1) == "poisson" and abs(gap) < 0.1 and type(lik) is Poisson, text


def test_output_and_prediction_files_are_checked_before_the_fit(tmp_path, capsys):
    """`--out` into a folder that does not exist and a `--predict` file that lacks an input column are one-line errors
    before any fitting (the summary's fit lines never printed), and `predict` with a file saved by another model (a
    recommender's) names what it holds instead of an AttributeError."""
    rng = np.random.default_rng(0); X = rng.normal(size=(40, 3)); y = np.where(X[:, 0] > 0, 1.0, -1.0)
    src = _write(tmp_path / "tr.csv", X, y); narrow = _write(tmp_path / "narrow.csv", X[:, :2])
    for extra, says in ((["--out", str(tmp_path / "no" / "such" / "f.npz")], "does not exist"), (["--predict", narrow], "missing column 'x2'")):
        assert main(["fit", src, "--target", "y", "--model", "glm", "--no-progress"] + extra) == 2
        out, err = capsys.readouterr()
        assert says in err and "VLB" not in out and "Traceback" not in err, (out, err)
    from vgi_lit.apps.recommender import VGRecommender
    VGRecommender().fit(rng.integers(0, 10, 80), rng.integers(0, 12, 80), rng.integers(1, 6, 80).astype(float)).save(str(tmp_path / "rec.npz"))
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "rec.npz"), narrow]) == 2
    err = capsys.readouterr().err                                       # a VGRecommender here, where its module registered its loader
    assert re.search(r"holds a (VGRecommender|PMFPosterior of a PMF), not a fit of 'vgi-lit fit'", err) and "Traceback" not in err, err


def test_a_stochastic_method_with_learning_is_refused_with_the_alternatives(tmp_path, capsys):
    """`--method svi` (or another stochastic method) with learning would run a whole stochastic fit of q per outer step (over
    100 s on 400 rows where the default takes seconds): a one-line error naming the default method and --no-learn; with
    --no-learn the stochastic method runs."""
    rng = np.random.default_rng(0); X = rng.normal(size=(60, 2)); y = X[:, 0] + 0.3 * rng.normal(size=60)
    src = _write(tmp_path / "tr.csv", X, y)
    for m in ("svi", "mc-ssvi"):
        assert main(["fit", src, "--target", "y", "--model", "glm", "--method", m, "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert f"--method {m} with learning" in err and "--no-learn" in err and "leave out --method" in err, err
    assert main(["fit", src, "--target", "y", "--model", "glm", "--method", "svi", "--no-learn", "--no-progress"]) == 0


def test_count_choices_follow_learning_and_fix(tmp_path, capsys):
    """Counts read from the target: without learning the two likelihoods are not weighed (the dispersion would sit at its
    start), and a --fix of the negative binomial's dispersion chooses that likelihood (the Poisson fit refused the name);
    --out naming a folder is refused before the fit."""
    rng = np.random.default_rng(0); X = rng.normal(size=(200, 2)); mu = np.exp(1.5 + 0.6 * X[:, 0])     # generated
    src = _write(tmp_path / "c.csv", X, rng.negative_binomial(8, 8 / (8 + mu)))
    base = ["fit", src, "--target", "y", "--model", "glm", "--no-progress"]
    assert main(base + ["--no-learn", "--out", str(tmp_path / "a.npz")]) == 0
    out = capsys.readouterr().out
    assert "not weighed by their VLBs" in out and "kept by the VLB" not in out and type(load(str(tmp_path / "a.npz")).model.likelihood).__name__ == "Poisson"
    assert main(base + ["--fix", "likelihood.dispersion", "--out", str(tmp_path / "b.npz")]) == 0
    out = capsys.readouterr().out
    assert "negative-binomial (--fix names its dispersion)" in out and type(load(str(tmp_path / "b.npz")).model.likelihood).__name__ == "NegativeBinomial"
    (tmp_path / "adir").mkdir()
    assert main(base + ["--out", str(tmp_path / "adir")]) == 2
    out, err = capsys.readouterr()
    assert "is a folder" in err and "VLB" not in out


def test_softmax_auto_counts_rows_times_classes(tmp_path, monkeypatch, capsys):
    "--model auto with the softmax resolves on rows × classes (the C latent functions are fitted jointly): 1,100 rows, 3 classes."
    import vgi_lit.apps.cli as cli
    rng = np.random.default_rng(0); X = rng.normal(size=(1100, 2)); lab = np.array(["a", "b", "c"])[np.digitize(X[:, 0], [-0.4, 0.4])]
    path = tmp_path / "three.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh); w.writerow(["x1", "x2", "label"])
        for r, l in zip(X, lab): w.writerow([repr(float(r[0])), repr(float(r[1])), l])
    seen = {}
    def stop(Z, y, names, a, cuts):
        seen["model"] = a.model; raise cli.CLIError("stopped before the fit")
    monkeypatch.setattr(cli, "build_model", stop)
    assert main(["fit", str(path), "--target", "label", "--likelihood", "softmax", "--no-progress"]) != 0
    assert seen["model"] == "sparse-gp" and "sparse GP" in capsys.readouterr().out
