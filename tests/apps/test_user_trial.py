"""What a user trips on with data nobody tuned the package for: files in another format than the command line reads,
target values a likelihood cannot take, text where numbers are needed. Each error names the problem and where it is."""
import csv
from pathlib import Path
import numpy as np
import pytest

from vgi_lit.apps.cli import main
from vgi_lit.apps.tables import TableError, read_table, target_coding, column_values
from vgi_lit.datasets import shared_data_dir

ROOT = Path(__file__).resolve().parents[2]
DATA = shared_data_dir(ROOT)


def _need(name):
    if DATA is None or not (DATA / name).is_file(): pytest.skip(f"{name} not in the shared data directory")
    return DATA / name


def _error(argv, capsys):
    rc = main(argv); err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, (rc, err)
    return err


@pytest.mark.parametrize("sep, what", [(";", "semicolons"), ("\t", "tabs"), ("|", "vertical bars")])
def test_another_separator_is_named(tmp_path, sep, what):
    p = tmp_path / "t.csv"
    p.write_text(sep.join(["x1", "x2", "y"]) + "\n" + "\n".join(sep.join(["1.5", "2", str(i % 2)]) for i in range(4)) + "\n")
    with pytest.raises(TableError, match=f"separated by {what}, not commas"): read_table(p)


def test_decimal_commas_with_semicolons_are_named(tmp_path):
    p = tmp_path / "eu.csv"; p.write_text("x1;x2;y\n1,5;2;1\n3;4,25;0\n")
    with pytest.raises(TableError, match="separated by semicolons"): read_table(p)


def test_one_named_column_is_still_a_table(tmp_path):
    p = tmp_path / "one.csv"; p.write_text("body mass\n3.2\n4.1\n")
    header, rows, lines = read_table(p)
    assert header == ["body mass"] and rows == [["3.2"], ["4.1"]] and lines == [2, 3]


def test_whitespace_file_without_header_is_named(capsys):
    err = _error(["fit", str(_need("housing.data")), "--target", "y", "--no-progress"], capsys)
    assert "separated by spaces, not commas, and has no header line" in err, err


def test_csv_without_header_is_named_not_as_repeated_columns(capsys):
    err = _error(["fit", str(_need("ionosphere.data-tra.csv")), "--target", "y", "--no-progress"], capsys)
    assert "line 1 holds only numbers" in err and "no header line" in err and "repeated" not in err, err


def test_a_non_count_is_named_by_its_line(tmp_path, capsys):
    p = tmp_path / "c.csv"
    with open(p, "w", newline="") as fh:
        w = csv.writer(fh); w.writerow(["x", "visits"])
        for i in range(30): w.writerow([0.1 * i, "3.5" if i == 17 else f"{i % 13}.0"])
    err = _error(["fit", str(p), "--target", "visits", "--likelihood", "poisson", "--no-progress"], capsys)
    assert "line 19 has '3.5'" in err, err                         # row 17 of the data is line 19 (after the header)
    h, r, ln = read_table(p)
    with pytest.raises(TableError, match="row 17 has '3.5'"): target_coding(column_values(h, r, ln, "visits"), "poisson", "visits")


def test_a_text_label_for_a_real_likelihood_is_named_by_its_line(tmp_path):
    p = tmp_path / "t.csv"; p.write_text("x,y\n1,2.5\n2,3\n3,n.a.\n")
    h, r, ln = read_table(p)
    with pytest.raises(TableError, match="line 4 has 'n.a.'"): target_coding(column_values(h, r, ln, "y"), "gaussian", "y", ln)


def test_randhie_counts_as_floats_are_counts(tmp_path, capsys):
    "randhie's count column written as 3.0, 0.0, ... is still read as counts (Poisson), not refused."
    src = _need("randhie.csv")
    with open(src) as fh: rows = list(csv.reader(fh))[:301]
    p = tmp_path / "r.csv"
    with open(p, "w", newline="") as fh:
        w = csv.writer(fh); w.writerow(rows[0])
        for r in rows[1:]: w.writerow([f"{float(r[0]):.1f}"] + r[1:])
    assert main(["fit", str(p), "--target", "mdvis", "--model", "glm", "--no-progress", "--no-learn"]) == 0
    assert "likelihood poisson" in capsys.readouterr().out


sk = pytest.importorskip("sklearn")


def test_regressors_refuse_text_targets_by_name():
    from vgi_lit.apps.sklearn import VGRegressor, VGPoissonRegressor
    X = np.random.default_rng(0).standard_normal((12, 2)); y = np.where(X[:, 0] > 0, "high", "low")
    for E in (VGRegressor, VGPoissonRegressor):
        with pytest.raises(ValueError, match="not numeric .*'(high|low)'.*VGClassifier"): E(latent="glm").fit(X, y)


def test_text_in_X_is_named_by_row_and_column():
    from vgi_lit.apps.sklearn import VGClassifier
    rng = np.random.default_rng(0)
    X = rng.standard_normal((16, 3)).astype(object); X[5, 2] = "Oslo"; y = np.arange(16) % 2
    with pytest.raises(ValueError, match="row 5, column 2 is 'Oslo'"): VGClassifier(latent="glm").fit(X, y)
    est = VGClassifier(latent="glm", learn_hyperparameters=False).fit(X[:, :2].astype(float), y)
    Xt = X[:4, :2].copy(); Xt[1, 0] = "n/a"
    with pytest.raises(ValueError, match="row 1, column 0 is 'n/a'"): est.predict(Xt)
    X[5, 2] = {"a": 1}                                              # not text: scikit-learn's own TypeError stands
    with pytest.raises(TypeError): VGClassifier(latent="glm").fit(X, y)


def test_a_large_dense_gp_is_announced_before_fitting(tmp_path, capsys, monkeypatch):
    """A dense GP asked for on many rows (bikeshare's 8,645: about 42 s to learn at 2,000 rows, cubic beyond) is said to be
    slow first (the default, --model auto, fits a sparse GP there)."""
    import vgi_lit.apps.cli as cli
    monkeypatch.setattr(cli, "LARGE_GP_ROWS", 30)
    rng = np.random.default_rng(0); p = tmp_path / "g.csv"
    with open(p, "w", newline="") as fh:
        w = csv.writer(fh); w.writerow(["x", "y"])
        for x in rng.standard_normal(40): w.writerow([x, int(rng.poisson(np.exp(0.5 * x)))])
    assert main(["fit", str(p), "--target", "y", "--likelihood", "poisson", "--model", "gp", "--no-learn", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "a dense GP on 40 rows" in out and "--model sparse-gp" in out, out
    assert main(["fit", str(p), "--target", "y", "--likelihood", "poisson", "--model", "sparse-gp", "--inducing", "10",
                 "--no-learn", "--no-progress"]) == 0
    assert "dense GP" not in capsys.readouterr().out


def test_stalled_learning_advice_is_in_command_line_terms():
    "The learner's message advises Python callers (inner={...}, restarts=3); the command line's advice names its own options."
    from types import SimpleNamespace
    from vgi_lit.apps.cli import learning_advice
    from vgi_lit.inference import Stop
    res = SimpleNamespace(stop=Stop.STALLED, message="ABNORMAL: : learning stalled (NOT converged): Tighten the inner solves "
                          "(inner={'tol': 1e-9}), or learn with restarts (restarts=3)")
    text = learning_advice(res, SimpleNamespace(objective="vlb", converged=True, stop=Stop.GRAD_TOL))
    assert "inner={" not in text and "restarts=" not in text and "--restarts" not in text and "--fix NAME" in text, text


def test_estimators_warn_before_a_large_dense_gp(monkeypatch):
    import warnings
    import vgi_lit.apps.sklearn as sk
    from vgi_lit.apps.sklearn import VGClassifier, VGPoissonRegressor
    from vgi_lit.apps.tables import LargeGPWarning
    monkeypatch.setattr(sk, "LARGE_GP_ROWS", 30)
    rng = np.random.default_rng(0); X = rng.standard_normal((40, 2))
    with pytest.warns(LargeGPWarning, match="dense GP on 40 rows.*latent='sparse_gp'"):
        VGPoissonRegressor(learn_hyperparameters=False).fit(X, rng.poisson(np.exp(0.5 * X[:, 0])))
    with pytest.warns(LargeGPWarning, match="VGClassifier: a dense GP on 40 rows"):
        VGClassifier(learn_hyperparameters=False).fit(X, np.digitize(X[:, 0], [-0.5, 0.5]))      # three classes
    with warnings.catch_warnings():
        warnings.simplefilter("error", LargeGPWarning)
        VGPoissonRegressor(latent="sparse_gp", n_inducing=10, learn_hyperparameters=False).fit(X, rng.poisson(np.ones(40)))


def test_numbers_written_as_numpy_reprs_are_not_one_hot_encoded(tmp_path, capsys):
    "NumPy 2 writes repr(np.float64(0.5)) as 'np.float64(0.5)': such a column is text, one category per row, and refused."
    rng = np.random.default_rng(0); X = rng.standard_normal((40, 3))
    p = tmp_path / "np.csv"
    with open(p, "w", newline="") as fh:
        w = csv.writer(fh); w.writerow(["a", "b", "c", "y"])
        for x in X: w.writerow([repr(v) for v in x] + [int(x[0] > 0)])
    err = _error(["fit", str(p), "--target", "y", "--no-progress", "--no-learn"], capsys)
    assert "column 'a': text with 40 distinct values in 40 rows" in err and "np.float64(" in err, err


def test_a_few_text_categories_are_still_one_hot(capsys):
    src = _need("bikeshare.csv")
    assert main(["fit", str(src), "--target", "bikers", "--features", "mnth,weathersit,temp", "--model", "glm",
                 "--no-learn", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "categories mnth: one-hot, 12 columns" in out and "weathersit=clear" in out, out


def test_a_real_target_gp_returns_to_the_targets_level_far_from_the_data(tmp_path, capsys):
    "housing's median value (mean 22.5): far from every training input the GP predicts the mean, not 0."
    D = np.loadtxt(_need("housing.data"))[:80]
    tr, far = tmp_path / "h.csv", tmp_path / "far.csv"
    with open(tr, "w", newline="") as fh:
        w = csv.writer(fh); w.writerow([f"x{j}" for j in range(13)] + ["medv"]); w.writerows(D.tolist())
    with open(far, "w", newline="") as fh:
        w = csv.writer(fh); w.writerow([f"x{j}" for j in range(13)]); w.writerow((D[0, :13] * 50).tolist())
    for lik in ("gaussian", "student-t"):
        assert main(["fit", str(tr), "--target", "medv", "--likelihood", lik, "--no-learn", "--no-progress",
                     "--predict", str(far), "--predictions", str(tmp_path / "p.csv")]) == 0, capsys.readouterr().err
        with open(tmp_path / "p.csv") as fh: row = list(csv.DictReader(fh))[0]
        assert abs(float(row["f_mean"]) - D[:, 13].mean()) < 1e-6 * D[:, 13].mean(), (lik, row, D[:, 13].mean())


def test_recommender_clones_and_sets_params():
    from sklearn.base import clone
    from vgi_lit.apps.recommender import VGRecommender
    r = clone(VGRecommender(K=3, likelihood="ordinal"))
    assert r.get_params()["K"] == 3 and r.get_params(deep=False)["likelihood"] == "ordinal"
    assert r.set_params(K=5) is r and r.K == 5
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['k'\]"): r.set_params(k=2)


def test_a_fit_options_typo_names_fit_options():
    from vgi_lit.apps.sklearn import VGClassifier
    X = np.random.default_rng(0).standard_normal((20, 2)); y = (X[:, 0] > 0).astype(int)
    for learn, who in ((True, "hyperparameter learner"), (False, "inference method")):
        with pytest.raises(TypeError, match=f"fit_options=.*max_iters.*not accepted by the {who}"):
            VGClassifier(latent="glm", learn_hyperparameters=learn, fit_options={"max_iters": 5}).fit(X, y)


def test_a_byte_order_mark_does_not_rename_the_first_column(tmp_path, capsys):
    "Spreadsheets save 'CSV UTF-8' with a byte-order mark; the first column keeps its name."
    p = tmp_path / "bom.csv"; p.write_bytes(b"\xef\xbb\xbfx1,x2,y\r\n1,2,1\r\n3,4,0\r\n5,1,1\r\n2,2,0\r\n")
    assert read_table(p)[0] == ["x1", "x2", "y"]
    assert main(["fit", str(p), "--target", "y", "--features", "x1", "--model", "glm", "--no-learn", "--no-progress"]) == 0
    assert "x1" in capsys.readouterr().out


def test_a_latin1_file_is_named_as_not_utf8(tmp_path):
    p = tmp_path / "l.csv"; p.write_bytes(b"x1,city,y\n1,Z\xfcrich,1\n3,Bern,0\n")
    with pytest.raises(TableError, match="not UTF-8 text: byte fc at offset 13"): read_table(p)


def test_a_non_count_target_is_named_by_its_row():
    from vgi_lit.apps.sklearn import VGPoissonRegressor
    X = np.random.default_rng(0).standard_normal((30, 2)); y = np.arange(30.0) % 5; y[17] = 3.5
    with pytest.raises(ValueError, match="the first at row 17 of y: 3.5; 1 such row"): VGPoissonRegressor(latent="glm").fit(X, y)
    VGPoissonRegressor(latent="glm", learn_hyperparameters=False).fit(X, np.round(y))      # 3.0, 4.0, ...: counts as floats


def test_one_hot_coefficients_come_with_their_differences(capsys):
    "bikeshare's weather: each one-hot coefficient's interval is wide (a common shift the prior sets), a difference's narrow."
    src = _need("bikeshare.csv")
    assert main(["fit", str(src), "--target", "bikers", "--features", "temp,weathersit", "--model", "glm",
                 "--likelihood", "poisson", "--no-learn", "--no-progress"]) == 0
    out = capsys.readouterr().out
    coef = [l.split() for l in out.splitlines() if l.strip().startswith("weathersit=cloudy/misty ")][0]
    diff = [l.split() for l in out.splitlines() if l.strip().startswith("weathersit=cloudy/misty - weathersit=clear")][0]
    assert float(diff[-3]) < 0.2 * float(coef[-3]), (coef, diff)        # the sd of the difference, of the coefficient


def test_unscaled_inputs_used_as_read_are_warned_about(tmp_path, capsys):
    rng = np.random.default_rng(0); X = rng.standard_normal((40, 2)); p = tmp_path / "h.csv"
    with open(p, "w", newline="") as fh:
        w = csv.writer(fh); w.writerow(["income", "ratio", "y"])
        for x in X: w.writerow([1e6 * x[0], 1e9 + 1e-3 * x[1], int(x[0] > 0)])
    assert main(["fit", str(p), "--target", "y", "--model", "glm", "--no-standardize", "--no-learn", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "used as read (--no-standardize)" in err and "(ratio) to" in err and "(income)" in err and "mean 1e+09" in err, err
    assert main(["fit", str(p), "--target", "y", "--model", "glm", "--no-learn", "--no-progress"]) == 0
    assert "used as read" not in capsys.readouterr().err
