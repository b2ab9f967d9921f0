"""The sparse-GP benchmark's MovieLens problem (`vgi_lit.bench.sparse.movielens_rows`, `problem('movielens')`): the feature
rows against the raw RecBole files read another way, and the errors on malformed, incomplete or missing side files."""
import dataclasses, shutil
import numpy as np
import pytest
import vgi_lit.bench.sparse as bs
from vgi_lit.datasets import DataNotFoundError, load_movielens_100k, shared_data_dir
from vgi_lit.bench.sparse import movielens_rows, problem, ML_GENRES

ML = shared_data_dir(__file__) / "movielens-100k" if shared_data_dir(__file__) else None
pytestmark = pytest.mark.skipif(ML is None or not (ML / "ml-100k.user").is_file(), reason="shared MovieLens 100K not found")

@pytest.fixture(scope="module")
def ratings():
    "The ratings, read once: the side-file checks below reuse them (reading 100,000 lines is most of a call's time)."
    return load_movielens_100k(data_dir=shared_data_dir(__file__), download=False)

def _reuse(monkeypatch, R, folder=None):
    "`movielens_rows` given the ratings `R` as read from `folder` (default: where they were read)."
    R = R if folder is None else dataclasses.replace(R, files=(folder / "ml-100k.inter",))
    monkeypatch.setattr(bs, "load_movielens_100k", lambda **kw: R)

def _table(path):
    "{id: fields} of a RecBole file, by csv's tab dialect (another reader than the module's)."
    import csv
    with open(path, newline="") as fh:
        r = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE); next(r)
        return {int(row[0]): row for row in r if row}

def test_rows_match_the_raw_files():
    X, y, names = movielens_rows()
    users, items = _table(ML / "ml-100k.user"), _table(ML / "ml-100k.item")
    inter = [line.split("\t") for line in (ML / "ml-100k.inter").read_text().splitlines()[1:]]
    rng = np.random.default_rng(1)
    for k in rng.choice(len(inter), 200, replace=False):
        u, i, r = int(inter[k][0]), int(inter[k][1]), float(inter[k][2])
        assert y[k] == r
        assert X[k, names.index("age")] == float(users[u][1]) and X[k, names.index("female")] == (users[u][2] == "F")
        assert X[k, names.index(f"occupation={users[u][3]}")] == 1.0
        genres = set(items[i][3].split())
        assert {g for g in ML_GENRES if X[k, names.index(f"genre={g}")] == 1.0} == genres
        if items[i][2].isdigit(): assert X[k, names.index("year")] == float(items[i][2]) and X[k, names.index("year unknown")] == 0.0
        else: assert X[k, names.index("year unknown")] == 1.0
    known = [int(it[2]) for it in items.values() if it[2].isdigit()]
    no_year = X[:, names.index("year unknown")] == 1.0
    assert no_year.any() and np.all(X[no_year, names.index("year")] == np.mean(known))   # the films without a year: the mean, flagged

def test_problem_split_and_scaling(ratings, monkeypatch):
    _reuse(monkeypatch, ratings)
    X, y, Xt, yt, lik, ell = problem("movielens")
    assert X.shape == (90_000, 44) and Xt.shape == (10_000, 44) and lik == "gaussian" and ell > 0
    yy = np.concatenate([y, yt]); assert abs(yy.mean()) < 1e-12 and abs(yy.std() - 1.0) < 1e-12
    X2, y2, Xt2, yt2, lik2, _ = problem("movielens-liked")
    assert lik2 == "probit" and np.array_equal(X2, X) and np.array_equal(Xt2, Xt)          # the same rows and split
    r = movielens_rows()[1]; four = (4.0 - r.mean()) / r.std()                              # a rating of 4 on the scaled axis
    assert np.array_equal(y2 > 0, y >= four - 1e-12) and set(np.unique(y2)) == {-1.0, 1.0}
    with pytest.raises(ValueError, match="unknown problem"): problem("movielens-1m")

def _copy(tmp_path):
    d = tmp_path / "movielens-100k"; d.mkdir()
    for f in ("ml-100k.user", "ml-100k.item"): shutil.copy(ML / f, d / f)
    return d

def _edit(path, lineno, fn):
    lines = path.read_text().split("\n"); lines[lineno - 1] = fn(lines[lineno - 1]); path.write_text("\n".join(lines))

def test_bad_side_files(tmp_path, monkeypatch, ratings):
    d = _copy(tmp_path)
    _reuse(monkeypatch, ratings, d)                                                  # the side files read from d
    _edit(d / "ml-100k.user", 3, lambda s: s.replace("\tF\t", "\tX\t"))             # user 2: gender X
    with pytest.raises(ValueError, match="gender 'X'"): movielens_rows(tmp_path)
    shutil.copy(ML / "ml-100k.user", d / "ml-100k.user")
    _edit(d / "ml-100k.item", 5, lambda s: s.rsplit("\t", 1)[0])                     # a line with three fields
    with pytest.raises(ValueError, match="line 5: 3 tab-separated fields"): movielens_rows(tmp_path)
    shutil.copy(ML / "ml-100k.item", d / "ml-100k.item")
    _edit(d / "ml-100k.item", 2, lambda s: s + " Noir")                             # a genre outside the list
    with pytest.raises(ValueError, match="genres \\['Noir'\\]"): movielens_rows(tmp_path)
    shutil.copy(ML / "ml-100k.item", d / "ml-100k.item")
    _edit(d / "ml-100k.item", 3, lambda s: "1" + s[1:])                             # item 2's line says item 1
    with pytest.raises(ValueError, match="item id 1 listed twice"): movielens_rows(tmp_path)
    shutil.copy(ML / "ml-100k.item", d / "ml-100k.item")
    _edit(d / "ml-100k.user", 4, lambda s: s.replace("\t", "\tx", 1))                # user 3: age 'x32'
    with pytest.raises(ValueError, match="line 4: fields \\[1, 2\\] must be integers"): movielens_rows(tmp_path)
    shutil.copy(ML / "ml-100k.user", d / "ml-100k.user")
    _edit(d / "ml-100k.user", 2, lambda s: "")                                      # user 1 missing: rated, not described
    with pytest.raises(ValueError, match="rated but not described"): movielens_rows(tmp_path)
    (d / "ml-100k.user").unlink()
    with pytest.raises(DataNotFoundError, match="ml-100k.user not found"): movielens_rows(tmp_path)
