"Tests of vgi_lit.datasets: real files, search order, missing-file errors, malformed files, zscore, splits, generators."
import bz2, os, shutil, warnings
from pathlib import Path
import numpy as np
import pytest
from vgi_lit import datasets as ds
from vgi_lit.datasets import (DataNotFoundError, load_a1a, load_a7a, load_colon_cancer, load_ionosphere, load_sonar,
                              load_housing, zscore, random_split, synthetic_glm, synthetic_gp, simulated_counts_on)

DATA = ds.shared_data_dir(Path(__file__).resolve().parent.parent) or (Path(os.environ[ds.ENV_VAR]) if os.environ.get(ds.ENV_VAR) else None)


@pytest.fixture(scope="module")
def data_dir():
    assert DATA is not None and (DATA / "a1a").is_file(), \
        "real data not found: put shared/data beside the repository (../shared/data) or set VGI_LIT_DATA"
    return DATA


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    "Empty cache, no VGI_LIT_DATA, and a download function that fails as if there were no network."
    monkeypatch.delenv(ds.ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    calls = []
    def no_network(url, dest, timeout=30.0):
        calls.append(url); raise OSError("network is unreachable (simulated)")
    monkeypatch.setattr(ds, "_download", no_network)
    return tmp_path, calls


# ---------------------------------------------------------------- real files
EXPECTED = {  # loader: (train shape, test shape, first file, first-file format)
    "a1a": (load_a1a, (1605, 123), (30956, 123), "a1a", "libsvm"),
    "a7a": (load_a7a, (16100, 123), (16461, 123), "a7a", "libsvm"),
    "colon-cancer": (load_colon_cancer, (62, 2000), None, "colon-cancer", "libsvm"),
    "ionosphere": (load_ionosphere, (280, 34), (71, 34), "ionosphere.data-tra.csv", "csv"),
    "sonar": (load_sonar, (165, 60), (43, 60), "sonar.all-data-tra.csv", "csv"),
    "housing": (load_housing, (506, 13), None, "housing.data", "ws"),
}


def _first_row_raw(path, fmt, D):
    "Independent parse of the first line of a file: (x, y)."
    line = Path(path).read_text().split("\n")[0]
    if fmt == "libsvm":
        toks = line.split(); x = np.zeros(D)
        for t in toks[1:]:
            i, v = t.split(":"); x[int(i) - 1] = float(v)
        return x, float(toks[0])
    vals = [float(t) for t in (line.split(",") if fmt == "csv" else line.split())]
    return np.array(vals[:-1]), vals[-1]


@pytest.mark.parametrize("key", list(EXPECTED))
def test_real_loader(key, data_dir, isolated):
    loader, tr, te, first, fmt = EXPECTED[key]
    d = loader(data_dir=data_dir)
    assert isolated[1] == []                                   # nothing downloaded
    assert d.X.shape == tr and d.y.shape == (tr[0],) and d.X.dtype == np.float64 and d.y.dtype == np.float64
    if te is None: assert d.X_test is None and d.y_test is None
    else: assert d.X_test.shape == te and d.y_test.shape == (te[0],)
    for A in (d.X, d.y, d.X_test, d.y_test):
        if A is not None: assert np.all(np.isfinite(A))
    if key != "housing":
        assert set(np.unique(d.y)) == {-1.0, 1.0}
        if d.y_test is not None: assert set(np.unique(d.y_test)) == {-1.0, 1.0}
    x0, y0 = _first_row_raw(data_dir / first, fmt, tr[1])
    assert np.array_equal(d.X[0], x0) and d.y[0] == y0
    assert not d.synthetic and str(data_dir) in d.source and d.name == key


def test_a1a_needs_123_features(data_dir):
    d = load_a1a(data_dir=data_dir)
    assert d.X[:, 119:].sum() == 0 and d.X_test[:, 119:].sum() > 0   # train file stops at index 119
    assert set(np.unique(d.X)) == {0.0, 1.0}


def test_housing_feature_names(data_dir):
    d = load_housing(data_dir=data_dir)
    assert d.feature_names[0] == "CRIM" and d.feature_names[-1] == "LSTAT" and len(d.feature_names) == 13


# ---------------------------------------------------------------- search order
def _housing_variant(dirpath, target0, data_dir):
    "A copy of housing.data in dirpath whose first target is target0 (to tell copies apart)."
    dirpath.mkdir(parents=True, exist_ok=True)
    lines = (data_dir / "housing.data").read_text().split("\n")
    toks = lines[0].split(); toks[-1] = str(target0); lines[0] = " ".join(toks)
    (dirpath / "housing.data").write_text("\n".join(lines))


def test_search_order(data_dir, isolated, monkeypatch):
    tmp, calls = isolated
    arg, env, cache = tmp / "arg", tmp / "env", ds.cache_dir()
    for p, t in ((arg, 1.0), (env, 2.0), (cache, 3.0)): _housing_variant(p, t, data_dir)
    monkeypatch.setenv(ds.ENV_VAR, str(env))
    assert ds.data_dirs(arg) == [arg, env, cache]
    assert load_housing(data_dir=arg).y[0] == 1.0             # argument first
    assert load_housing().y[0] == 2.0                         # then the environment variable
    (env / "housing.data").unlink()
    assert load_housing(data_dir=arg).y[0] == 1.0
    assert load_housing().y[0] == 3.0                         # then the cache
    (arg / "housing.data").unlink()
    assert load_housing(data_dir=arg).y[0] == 3.0             # missing in the argument's folder falls through
    monkeypatch.delenv(ds.ENV_VAR)
    assert load_housing().y[0] == 3.0
    assert calls == []


def test_bad_directories(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="data_dir=.*not an existing directory"):
        load_housing(data_dir=tmp_path / "nope")
    monkeypatch.setenv(ds.ENV_VAR, str(tmp_path / "nope2"))
    with pytest.raises(ValueError, match="VGI_LIT_DATA=.*not an existing directory"):
        load_housing()


def test_xdg_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert ds.cache_dir() == tmp_path / "vgi_lit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert ds.cache_dir() == Path.home() / ".cache" / "vgi_lit"


# ---------------------------------------------------------------- missing files, downloads
@pytest.mark.parametrize("loader,fname", [(load_a1a, "a1a"), (load_colon_cancer, "colon-cancer"), (load_housing, "housing.data"),
                                          (load_sonar, "sonar.all-data"), (load_ionosphere, "ionosphere.data")])
def test_missing_file_no_network(loader, fname, isolated, monkeypatch):
    tmp, calls = isolated
    empty = tmp / "empty"; empty.mkdir(); env = tmp / "envdir"; env.mkdir()
    monkeypatch.setenv(ds.ENV_VAR, str(env))
    with pytest.raises(DataNotFoundError) as ei, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader(data_dir=empty)
    msg = str(ei.value)
    assert repr(fname) in msg and str(empty) in msg and str(env) in msg and str(ds.cache_dir()) in msg
    assert "VGI_LIT_DATA" in msg and "data_dir=" in msg and "network is unreachable" in msg
    assert len(calls) == 1 and calls[0] in msg
    assert isinstance(ei.value, FileNotFoundError)
    assert not any(ds.cache_dir().glob("*")) if ds.cache_dir().exists() else True   # no partial file left


def test_download_off(isolated):
    tmp, calls = isolated
    with pytest.raises(DataNotFoundError, match="download=False"):
        load_housing(data_dir=tmp, download=False)
    assert calls == []


def test_download_into_cache(data_dir, isolated, monkeypatch):
    "A successful (simulated) download lands in the cache, is decompressed, and is not repeated."
    tmp, _ = isolated
    calls = []
    def fake(url, dest, timeout=30.0):
        calls.append(url); name = url.rsplit("/", 1)[1]
        if name.endswith(".bz2"):
            Path(dest).write_bytes(bz2.compress((data_dir / name[:-4]).read_bytes()))
        else:
            shutil.copy(data_dir / name, dest)
    monkeypatch.setattr(ds, "_download", fake)
    d = load_colon_cancer(data_dir=tmp)
    assert calls == [ds.LIBSVM_URL + "colon-cancer.bz2"]
    assert (ds.cache_dir() / "colon-cancer").read_bytes() == (data_dir / "colon-cancer").read_bytes()
    ref = load_colon_cancer(data_dir=data_dir)
    assert np.array_equal(d.X, ref.X) and np.array_equal(d.y, ref.y)
    load_colon_cancer(); assert len(calls) == 1                # second call reads the cache
    assert sorted(p.name for p in ds.cache_dir().iterdir()) == ["colon-cancer"]


def _uci_original(data_dir, stem, letters):
    "Rebuild a UCI-format file (letter labels) from the project's split files."
    rows = []
    for part in ("tra", "tst"):
        for line in (data_dir / f"{stem}-{part}.csv").read_text().split("\n"):
            if line.strip():
                *xs, lab = line.split(","); rows.append(",".join(xs) + "," + letters[float(lab)])
    return "\n".join(rows) + "\n"


@pytest.mark.parametrize("loader,stem,letters,n_tr,n_te", [
    (load_ionosphere, "ionosphere.data", {-1.0: "g", 1.0: "b"}, 280, 71),
    (load_sonar, "sonar.all-data", {-1.0: "R", 1.0: "M"}, 165, 43)])
def test_resplit_from_uci_original(loader, stem, letters, n_tr, n_te, data_dir, isolated, monkeypatch):
    tmp, _ = isolated
    text = _uci_original(data_dir, stem, letters)
    monkeypatch.setattr(ds, "_download", lambda url, dest, timeout=30.0: Path(dest).write_text(text))
    with pytest.warns(UserWarning, match="re-split"):
        d = loader(data_dir=tmp)
    assert d.X.shape[0] == n_tr and d.X_test.shape[0] == n_te and "RE-SPLIT" in d.source
    ref = loader(data_dir=data_dir)
    key = lambda X, y: sorted(map(tuple, np.c_[X, y]))
    assert key(np.r_[d.X, d.X_test], np.r_[d.y, d.y_test]) == key(np.r_[ref.X, ref.X_test], np.r_[ref.y, ref.y_test])
    with pytest.warns(UserWarning):
        d2 = loader(data_dir=tmp); d3 = loader(data_dir=tmp, split_seed=1)
    assert np.array_equal(d.X, d2.X) and not np.array_equal(d.X, d3.X)
    with pytest.raises(DataNotFoundError, match="project split files"):
        loader(data_dir=tmp, resplit=False)


def test_only_one_split_file(data_dir, tmp_path, isolated):
    shutil.copy(data_dir / "sonar.all-data-tra.csv", tmp_path / "sonar.all-data-tra.csv")
    with pytest.raises(DataNotFoundError, match="only one of"):
        load_sonar(data_dir=tmp_path)


# ---------------------------------------------------------------- malformed files
@pytest.mark.parametrize("text,match", [
    ("+1 1:1\n-1 2:1 1:1\n", "line 2: index 1 does not increase"),
    ("+1 1:1\n\n2 1:1\n", "line 3: label '2' not in"),
    ("x 1:1\n", "line 1: label 'x' is not a number"),
    ("+1 0:1\n", "index 0 outside 1..123"),
    ("+1 1.5:1\n", "index must be an integer"),
    ("+1 1:abc\n", "index must be an integer and value a number"),
    ("+1 5\n", "not index:value"),
    ("+1 1:inf\n", "not finite"),
])
def test_malformed_libsvm(text, match, isolated):
    tmp, _ = isolated
    (tmp / "a1a").write_text(text)
    with pytest.raises(ValueError, match=match) as ei:
        load_a1a(data_dir=tmp)
    assert "a1a, line" in str(ei.value)


def test_wrong_shape_libsvm(data_dir, isolated):
    tmp, _ = isolated
    lines = (data_dir / "a1a").read_text().split("\n")
    (tmp / "a1a").write_text("\n".join(lines[:100]) + "\n")
    shutil.copy(data_dir / "a1a.t", tmp / "a1a.t")
    with pytest.raises(ValueError, match="read 100 rows x 123 features, expected 1605 x 123"):
        load_a1a(data_dir=tmp)


@pytest.mark.parametrize("edit,match", [
    (lambda l: l.rsplit(",", 1)[0], "line 3: 34 fields, expected 35"),
    (lambda l: l.rsplit(",", 1)[0] + ",0", r"line 3: label '0' not in the expected set"),
    (lambda l: "abc," + l.split(",", 1)[1], "line 3: a feature field is not a number"),
    (lambda l: "nan," + l.split(",", 1)[1], "line 3: a feature value is not finite"),
])
def test_malformed_csv(edit, match, data_dir, isolated):
    tmp, _ = isolated
    for part in ("tra", "tst"):
        lines = (data_dir / f"ionosphere.data-{part}.csv").read_text().split("\n")
        if part == "tra": lines[2] = edit(lines[2])
        (tmp / f"ionosphere.data-{part}.csv").write_text("\n".join(lines))
    with pytest.raises(ValueError, match=match) as ei:
        load_ionosphere(data_dir=tmp)
    assert "ionosphere.data-tra.csv" in str(ei.value)


def test_malformed_housing(data_dir, isolated):
    tmp, _ = isolated
    lines = (data_dir / "housing.data").read_text().split("\n")
    lines[4] = lines[4] + " 7"
    (tmp / "housing.data").write_text("\n".join(lines))
    with pytest.raises(ValueError, match="housing.data, line 5: 15 fields, expected 14"):
        load_housing(data_dir=tmp)


def test_uci_letter_labels(isolated):
    tmp, _ = isolated
    row = ",".join(["0.5"] * 60)
    (tmp / "sonar.all-data").write_text(f"{row},R\n{row},X\n")
    with pytest.raises(ValueError, match="sonar.all-data, line 2: label 'X' not one of"):
        load_sonar(data_dir=tmp)


# ---------------------------------------------------------------- zscore
def test_zscore_basic_and_test_uses_train_stats():
    rng = np.random.default_rng(0)
    X = rng.normal(3.0, [1.0, 5.0, 1e-3], size=(50, 3)); Xt = rng.normal(size=(7, 3))
    z = zscore(X, Xt)
    # standardised mean is zero up to the rounding limit eps*|mean|/sd (the exact mean is not a float)
    assert np.all(np.abs(z.X.mean(0)) <= 1e-14 * (1 + np.abs(z.X).max(0) + np.abs(z.mean) / z.scale))
    np.testing.assert_allclose(z.X.var(0), 1, rtol=1e-12)
    np.testing.assert_allclose(z.mean, np.mean(X.astype(np.longdouble), 0), rtol=1e-15)
    np.testing.assert_allclose(z.X_test, (Xt - X.mean(0)) / X.std(0), rtol=1e-12)
    assert not z.constant.any() and zscore(X).X_test is None


def test_zscore_constant_columns():
    X = np.c_[np.full(5, 0.1), np.arange(5.0), np.zeros(5)]
    Xt = np.array([[0.3, 2.0, 1.0]])
    z = zscore(X, Xt)
    assert z.constant.tolist() == [True, False, True] and np.all(z.scale[[0, 2]] == 1.0)
    assert np.all(z.X[:, [0, 2]] == 0.0) and np.all(np.isfinite(z.X))
    np.testing.assert_allclose(z.X_test[0, [0, 2]], [0.2, 1.0], rtol=1e-12)
    one = zscore(np.array([[1.0, 2.0]]))                         # a single row: everything constant
    assert one.constant.all() and np.all(one.X == 0)
    tiny = zscore(np.array([[0.0], [1e-200]]))                  # spread so small that the sd underflows
    assert np.all(np.isfinite(tiny.X)) and tiny.constant[0]


@pytest.mark.parametrize("args,match", [
    ((np.array([1.0, 2.0]),), "X_train must be a 2-D array"),
    ((np.array([[1.0, np.nan]]),), "X_train contains NaN or inf"),
    ((np.ones((3, 2)), np.ones((2, 3))), "X_test has 3 columns, X_train has 2"),
    ((np.ones((3, 2)), np.array([[np.inf, 1.0]])), "X_test contains NaN or inf"),
    ((np.ones((0, 2)),), "no rows"),
])
def test_zscore_bad_input(args, match):
    with pytest.raises(ValueError, match=match): zscore(*args)


def test_zscore_real(data_dir):
    d = load_a1a(data_dir=data_dir)
    z = zscore(d.X, d.X_test)
    assert np.flatnonzero(z.constant).tolist() == [11, 59, 88, 95, 110, 115, 119, 120, 121, 122]
    assert np.all(np.isfinite(z.X_test)) and np.abs(z.X.mean(0)).max() < 1e-12


# ---------------------------------------------------------------- random_split
@pytest.mark.parametrize("n,frac", [(2, 0.5), (62, 0.5), (351, 0.8), (10, 0.05)])
def test_random_split(n, frac):
    if round(frac * n) < 1:
        with pytest.raises(ValueError, match="empty part"): random_split(np.ones((n, 2)), np.ones(n), frac, 0)
        return
    X = np.arange(2.0 * n).reshape(n, 2); y = np.arange(float(n))
    s, s2 = random_split(X, y, frac, 5), random_split(X, y, frac, 5)
    assert len(s.y) == round(frac * n) and len(s.y) + len(s.y_test) == n
    assert np.array_equal(np.sort(np.r_[s.train_idx, s.test_idx]), np.arange(n))
    assert np.array_equal(s.X[:, 0] / 2, s.y) and np.array_equal(s.train_idx, s2.train_idx)


def test_random_split_seeds_differ_and_bad_input():
    X, y = np.ones((100, 1)), np.arange(100.0)
    assert len({tuple(random_split(X, y, 0.5, s).train_idx) for s in range(10)}) == 10
    for frac in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="frac"): random_split(X, y, frac, 0)
    with pytest.raises(ValueError, match="y must have shape"): random_split(X, y[:5], 0.5, 0)


# ---------------------------------------------------------------- synthetic generators
class _LogisticStandIn:          # test-only stand-in for likelihoods.Logistic().sample
    def sample(self, f, rng): return np.where(rng.uniform(size=np.shape(f)) < 1 / (1 + np.exp(-f)), 1.0, -1.0)

class _PoissonStandIn:           # test-only stand-in for likelihoods.Poisson().sample
    def sample(self, f, rng): return rng.poisson(np.exp(f)).astype(float)

class _GaussianStandIn:          # test-only stand-in for likelihoods.Gaussian(0.1).sample
    def sample(self, f, rng): return f + np.sqrt(0.1) * rng.standard_normal(np.shape(f))


@pytest.mark.parametrize("lik", [_LogisticStandIn(), _PoissonStandIn(), _GaussianStandIn()])
@pytest.mark.parametrize("gen", ["glm", "gp"])
def test_synthetic_reproducible(lik, gen):
    make = (lambda s: synthetic_glm(lik, 40, 3, s, n_test=10)) if gen == "glm" else (lambda s: synthetic_gp(lik, 40, 3, s, n_test=10))
    a, b, c = make(7), make(7), make(8)
    for k in ("X", "y", "X_test", "y_test"):
        assert np.array_equal(getattr(a, k), getattr(b, k))
    assert not np.array_equal(a.X, c.X) and not np.array_equal(a.truth["f"], c.truth["f"])
    assert a.synthetic and a.source.startswith("synthetic: ") and type(lik).__name__ in a.source
    assert a.X.shape == (40, 3) and a.X_test.shape == (10, 3) and a.truth["f_test"].shape == (10,)
    assert a.X.dtype == np.float64 and a.y.dtype == np.float64


def test_synthetic_glm_truth_and_no_test():
    d = synthetic_glm(_GaussianStandIn(), 500, 4, 0, prior_var=3.0)
    assert d.X_test is None and d.y_test is None and d.truth["f_test"] is None
    np.testing.assert_allclose(d.truth["f"], d.X @ d.truth["w"], rtol=1e-12)
    assert abs(np.std(d.y - d.truth["f"]) - np.sqrt(0.1)) < 0.03


def test_synthetic_gp_kernel_argument_and_jitter():
    class Lin:
        def K(self, X): return X @ X.T + 1.0        # rank d+1 matrix: needs the jitter
    d = synthetic_gp(_GaussianStandIn(), 30, 2, 0, kernel=Lin(), jitter=1e-6)
    assert d.truth["jitter"] == 1e-6 and "1e-06" in d.source
    with pytest.raises(ValueError, match="not positive definite"):
        synthetic_gp(_GaussianStandIn(), 30, 2, 0, kernel=Lin(), jitter=0.0)


@pytest.mark.parametrize("kw,match", [(dict(n=0), "n must be an integer >= 1"), (dict(d=2.5), "d must be"),
                                      (dict(n_test=-1), "n_test must be"), (dict(prior_var=0.0), "prior_var must be positive")])
def test_synthetic_bad_input(kw, match):
    args = dict(likelihood=_LogisticStandIn(), n=10, d=2, seed=0); args.update(kw)
    with pytest.raises(ValueError, match=match): synthetic_glm(**args)


def test_synthetic_bad_likelihood():
    with pytest.raises(ValueError, match="no sample"): synthetic_glm(object(), 5, 2, 0)
    class Wrong:
        def sample(self, f, rng): return np.ones(3)
    with pytest.raises(ValueError, match="returned shape"): synthetic_gp(Wrong(), 5, 2, 0)


def test_with_library_likelihoods_if_present():
    lk = pytest.importorskip("vgi_lit.likelihoods")
    if not hasattr(getattr(lk, "Logistic", None), "sample"): pytest.skip("likelihoods.Logistic.sample not available yet")
    d = synthetic_glm(lk.Logistic(), 100, 3, 0)
    lk.Logistic().check_y(d.y)
    assert set(np.unique(d.y)) <= {-1.0, 1.0, 0.0}


def test_simulated_counts(data_dir):
    h = load_housing(data_dir=data_dir); tr = random_split(h.X, h.y, 0.5, 0); z = zscore(tr.X, tr.X_test)
    a = simulated_counts_on(z.X, 3, X_test=z.X_test, scale=0.7, offset=0.5, inputs="housing")
    b = simulated_counts_on(z.X, 3, X_test=z.X_test, scale=0.7, offset=0.5, inputs="housing")
    assert np.array_equal(a.y, b.y) and np.array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.y, simulated_counts_on(z.X, 4).y)
    f = a.truth["b"] + z.X @ a.truth["w"]
    assert abs(f.std() - 0.7) < 1e-12 and abs(f.mean() - 0.5) < 1e-12
    np.testing.assert_allclose(a.truth["f_test"], a.truth["b"] + z.X_test @ a.truth["w"], rtol=1e-12)
    assert a.synthetic and "SIMULATED" in a.source and "housing" in a.name
    assert np.all(a.y >= 0) and np.all(a.y == np.round(a.y)) and a.y_test.shape == (len(tr.y_test),)
    with pytest.raises(ValueError, match="constant"): simulated_counts_on(np.ones((5, 2)), 0)
    with pytest.raises(ValueError, match="X_test has 3 columns"): simulated_counts_on(z.X, 0, X_test=np.ones((2, 3)))


def test_shared_data_dir_none(tmp_path):
    before = ds.shared_data_dir(tmp_path)     # None, or a shared/data of an ancestor of tmp_path (e.g. /tmp/shared)
    assert before is None or not before.is_relative_to(tmp_path)
    (tmp_path / "shared" / "data").mkdir(parents=True)
    sub = tmp_path / "a" / "b"; sub.mkdir(parents=True)
    assert ds.shared_data_dir(sub) == tmp_path / "shared" / "data"


def test_bad_download_not_cached(isolated, monkeypatch):
    "An error page served instead of the data is rejected by the reader and never cached."
    tmp, _ = isolated
    monkeypatch.setattr(ds, "_download", lambda url, dest, timeout=30.0: Path(dest).write_text("<html>404 Not Found</html>\n"))
    with pytest.raises(DataNotFoundError, match=r"download from .*housing.data failed: ValueError: .*line 1"):
        load_housing(data_dir=tmp)
    assert list(ds.cache_dir().iterdir()) == []
    monkeypatch.setattr(ds, "_download", lambda url, dest, timeout=30.0: Path(dest).write_bytes(b"not bz2 data"))
    with pytest.raises(DataNotFoundError, match="colon-cancer.bz2 failed: OSError"):
        load_colon_cancer(data_dir=tmp)
    assert list(ds.cache_dir().iterdir()) == []


# ---------------------------------------------------------------- MovieLens 100K (ratings)
def test_movielens_100k_shared_copy(data_dir, isolated):
    from vgi_lit.datasets import load_movielens_100k, MOVIELENS_SIZE
    r = load_movielens_100k(data_dir=data_dir)
    assert isolated[1] == []
    assert (len(r.ratings), r.n_users, r.n_items) == MOVIELENS_SIZE
    assert r.users.min() == 0 and r.items.min() == 0 and set(np.unique(r.ratings)) == {1.0, 2.0, 3.0, 4.0, 5.0}
    first = (data_dir / "movielens-100k" / "ml-100k.inter").read_text().split("\n")[1].split("\t")
    assert (r.users[0], r.items[0], r.ratings[0], r.timestamps[0]) == (int(first[0]) - 1, int(first[1]) - 1, float(first[2]), float(first[3]))
    assert "RecBole" in r.source and str(data_dir) in r.source


def _u_data_from(data_dir, tmp):
    "GroupLens layout (u.data, no header) written from the shared copy."
    lines = (data_dir / "movielens-100k" / "ml-100k.inter").read_text().split("\n")[1:]
    p = tmp / "u.data"; p.write_text("\n".join(l for l in lines if l) + "\n")
    return p


@pytest.mark.slow   # 3.2 s: reads and writes the 100,000 ratings twice
def test_movielens_100k_grouplens_layout_and_download(data_dir, isolated, monkeypatch):
    import zipfile
    from vgi_lit.datasets import load_movielens_100k
    tmp, calls = isolated
    src = _u_data_from(data_dir, tmp)
    a, b = load_movielens_100k(data_dir=data_dir), load_movielens_100k(data_dir=tmp)
    assert np.array_equal(a.ratings, b.ratings) and np.array_equal(a.users, b.users) and "GroupLens" in b.source
    zpath = tmp / "ml.zip"
    with zipfile.ZipFile(zpath, "w") as z: z.write(src, "ml-100k/u.data")
    def fake(url, dest, timeout=30.0):
        calls.append(url); shutil.copyfile(zpath, dest)
    monkeypatch.setattr(ds, "_download", fake)
    empty = tmp / "empty"; empty.mkdir()
    c = load_movielens_100k(data_dir=empty)
    assert calls == [ds.MOVIELENS_URL] and np.array_equal(c.items, a.items)
    assert (ds.cache_dir() / "ml-100k-u.data").is_file()
    load_movielens_100k(data_dir=empty)                        # now from the cache: no second download
    assert len(calls) == 1


def test_movielens_100k_missing_or_malformed(data_dir, isolated):
    from vgi_lit.datasets import load_movielens_100k
    tmp, calls = isolated
    with pytest.raises(DataNotFoundError, match="ml-100k.zip"): load_movielens_100k(data_dir=tmp)
    assert calls == [ds.MOVIELENS_URL]
    with pytest.raises(DataNotFoundError, match="download=False"): load_movielens_100k(data_dir=tmp, download=False)
    (tmp / "u.data").write_text("1\t2\t3\t881250949\n2\t5\t4\t881250950\n")
    with pytest.raises(ValueError, match="2 ratings"): load_movielens_100k(data_dir=tmp)
    (tmp / "u.data").write_text("1\t2\t3\n")
    with pytest.raises(ValueError, match="line 1: 3 tab-separated fields"): load_movielens_100k(data_dir=tmp)


def test_rating_folds():
    from vgi_lit.datasets import rating_folds, fold_split
    f = rating_folds(103, 5, seed=1)
    assert sorted(np.bincount(f).tolist()) == [20, 20, 21, 21, 21] and not np.array_equal(f, rating_folds(103, 5, seed=2))
    parts = [fold_split(f, k)[1] for k in range(5)]
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(103))
    for bad in (dict(n=0), dict(n=10, n_folds=1), dict(n=3, n_folds=4)):
        with pytest.raises(ValueError): rating_folds(**{"n_folds": 5, **bad})


def test_libsvm_sparse_equals_dense(data_dir):
    "sparse=True returns CSR matrices with exactly the dense loader's entries (a1a); a CSV file refuses it by name."
    import scipy.sparse as sps
    (Xs, ys, _), (Xd, yd, _) = ds.read_file("a1a", data_dir, sparse=True), ds.read_file("a1a", data_dir)   # training file only
    assert sps.issparse(Xs) and Xs.format == "csr" and Xs.shape == Xd.shape
    assert np.array_equal(Xs.toarray(), Xd) and np.array_equal(ys, yd) and Xs.nnz == np.count_nonzero(Xd)
    assert load_a7a.__defaults__[-1] is False and load_a1a.__defaults__[-1] is False     # dense unless asked
    with pytest.raises(ValueError, match="sparse=True is for the LIBSVM"): ds.read_file("housing.data", data_dir, sparse=True)


@pytest.mark.slow
def test_a7a_sparse_fpi_equals_dense_and_is_faster(data_dir):
    "FPi on a7a with X as CSR reaches the dense path's VLB and mean to 1e-10 relative; the sparse run is the faster (slow: ~3-10 s)."
    import time
    from vgi_lit import models, likelihoods
    from vgi_lit.methods.fixed_point import fpi
    s, d = load_a7a(data_dir=data_dir, sparse=True), load_a7a(data_dir=data_dir)
    t = {}
    for k, X in (("dense", d.X), ("csr", s.X)):
        t0 = time.perf_counter(); p = fpi(models.GLM(X, d.y, likelihoods.Logistic(), prior_cov=1.0)); t[k] = (time.perf_counter() - t0, p)
    (td, pd), (ts, ps) = t["dense"], t["csr"]
    assert pd.converged and ps.converged
    assert abs(pd.vlb - ps.vlb) <= 1e-10 * abs(pd.vlb) and np.max(np.abs(pd.m - ps.m)) <= 1e-10 * np.max(np.abs(pd.m))
    assert ts < td, (ts, td)


def _outcome(fn, *args):
    "What a reader does with a file: its arrays, or the type and text of its error."
    try: return fn(*args)
    except ValueError as e: return (type(e).__name__, str(e))


def test_libsvm_whole_file_parse_equals_the_line_reader(data_dir, tmp_path):
    """`read_libsvm` parses a file whole and falls back to the line-by-line reader only when a check fails: on every real
    LIBSVM file tried (a1a, as the Adult sets are written) the whole-file parse succeeds and gives exactly the line reader's arrays; on 400 random files from good
    and malformed tokens (two colons, an empty side, no colon, a float or out-of-range index, falling indices, nan,
    a bad label, non-ASCII and odd whitespace) `read_libsvm` returns or raises exactly what the line reader does."""
    for name, nf in [("a1a", 123)]:
        fast, slow = ds._libsvm_arrays(data_dir / name, nf, {-1.0, 1.0}), ds._libsvm_lines(data_dir / name, nf, {-1.0, 1.0})
        assert fast is not None and all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(fast, slow)), name
    rng = np.random.default_rng(0)
    good = ["1:1", "2:0.5", "3:-2e-3", "4:7", "5:1"]
    bad = ["1:2:3", ":4", "4:", "7", "1.5:1", "0:1", "6:1", "3:nan", "2:inf", "4:１", "2\x0c3:1", "3:1\u2028", "+2:1", "2:1_0"]
    heads = ["+1", "-1", "1", "-1.0", "0", "x", "nan"]
    seen_fast = seen_error = 0
    for case in range(400):
        lines = []
        for _ in range(rng.integers(0, 5)):
            k = sorted(rng.choice(len(good), size=rng.integers(0, 4), replace=False))
            toks = [good[i] for i in k]
            if rng.random() < 0.15 and toks: toks[rng.integers(len(toks))] = bad[rng.integers(len(bad))]
            if rng.random() < 0.1: toks = toks[::-1]
            head = heads[rng.integers(len(heads))] if rng.random() < 0.1 else ["+1", "-1"][rng.integers(2)]
            lines.append(("\t" if rng.random() < 0.2 else " ").join([head] + toks) + ("  " if rng.random() < 0.2 else ""))
            if rng.random() < 0.1: lines.append("")
        p = tmp_path / f"r{case}.libsvm"; p.write_text(("\r\n" if rng.random() < 0.2 else "\n").join(lines), encoding="utf-8")
        labels = None if rng.random() < 0.2 else (-1.0, 1.0)
        labset = None if labels is None else {-1.0, 1.0}
        got, want = _outcome(ds.read_libsvm, p, 5, labels), _outcome(ds._libsvm_lines, p, 5, labset)
        if isinstance(want, tuple) and isinstance(want[0], str):
            assert got == want, (case, p.read_text(), got, want); seen_error += 1
        else:
            X, y = got; yw, r, c, v = want
            Xw = np.zeros((len(yw), 5)); Xw[r, c] = v
            assert np.array_equal(X, Xw) and np.array_equal(y, yw), (case, p.read_text())
            seen_fast += ds._libsvm_arrays(p, 5, labset) is not None
    assert seen_error > 50 and seen_fast > 100, (seen_error, seen_fast)
