"""The `vgi-lit` command line end to end on a small CSV file written from the ionosphere data, and each error
case: one line on standard error naming the problem, exit code 2, no traceback."""
import csv, subprocess, sys
from pathlib import Path
import numpy as np
import pytest

from vgi_lit.apps.cli import main, read_csv
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
    assert P.shape == (15, 3) and np.all(P[:, 1] > 0) and np.all((P[:, 2] > 0) & (P[:, 2] < 1))
    assert main(["predict", str(d / "fit.npz"), new, "--predictions", str(d / "q.csv")]) == 0
    post = load(d / "fit.npz"); X_new = read_csv(new)[1]
    assert np.array_equal(read_csv(d / "q.csv")[1][:, 0], post.predict(X_new)[0])


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
            (["fit", str(d / "labels.csv"), "--target", "y", "--model", "glm"], "column 'y'"),
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
