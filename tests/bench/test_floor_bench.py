"""The floor table's measurement (`vgi_lit.bench.fixed_point.bench_floor`): every run divided by the Cholesky timed just
before and after it, medians and ranges over the runs, bad input refused."""
import numpy as np
import pytest
import vgi_lit.bench.fixed_point as bfp
from vgi_lit.bench.fixed_point import bench_floor, format_floor, floor_problem, CHOLESKY_ROUTES


@pytest.fixture(scope="module")
def small():
    return floor_problem("gp-logistic-ionosphere60")[0]


@pytest.mark.slow   # 4.6 s of timed runs
def test_bench_floor_brackets_every_run_with_a_reference_timing(small):
    variants = {"FPi": {}, "plain": dict(newton=False, mean_steps=0)}
    res = bench_floor(small, variants=variants, repeats=2)
    assert res['n'] == 60 and res['repeats'] == 2 and res['chol_route'] in CHOLESKY_ROUTES
    assert res['chol_timings'] == 1 + 2 * len(variants) and res['chol_calls'] >= 3
    lo, hi = res['t_chol_range']
    assert 0 < lo <= res['t_chol'] <= hi
    for r in res['rows'].values():
        assert r['iterations'] is not None and r['final_gap'] <= 1e-6
        assert 0 < r['chol_eq_range'][0] <= r['chol_eq'] <= r['chol_eq_range'][1]
        assert r['seconds'] > 0 and r['n_potrf'] >= r['iterations']
    text = format_floor("gp-logistic-ionosphere60", res)
    assert "timings between the runs" in text and "(range)" in text and text.count("\n") == 1 + len(variants)


@pytest.mark.slow   # 2.8 s of timed runs
def test_bench_floor_unit_is_the_mean_of_the_two_neighbouring_timings(small, monkeypatch):
    "With reference timings 1, 3, 5 (seconds), the units of the two runs are 2 and 4, the median unit 3, its range 1 to 5."
    seq = iter([1.0, 3.0, 5.0])
    monkeypatch.setattr(bfp, "_cpu_median", lambda f, k, setup=None: next(seq))
    res = bench_floor(small, variants={"FPi": {}}, repeats=2)
    assert res['t_chol'] == 3.0 and res['t_chol_range'] == (1.0, 5.0) and res['chol_timings'] == 3
    r = res['rows']['FPi']
    (c1, u1), (c2, u2) = r['runs']
    assert (u1, u2) == (2.0, 4.0) and c1 > 0 and c2 > 0
    assert r['chol_eq'] == pytest.approx(np.median([c1 / 2.0, c2 / 4.0])) and r['seconds'] == pytest.approx(np.median([c1, c2]))
    assert r['chol_eq_range'] == (min(c1 / 2.0, c2 / 4.0), max(c1 / 2.0, c2 / 4.0))


def test_the_unit_is_potrf_in_place_as_the_fits_factorise(monkeypatch):
    """The reference is the fits' own factorisation: LAPACK potrf in place on a Fortran-ordered matrix, so no copy of its
    input is timed with it (a copy made the unit 5-12% larger at n = 1000-2000 and every ratio as much smaller)."""
    seen, real = [], bfp.dpotrf
    def record(A, *args, **kw):
        seen.append((A.flags.f_contiguous, kw.get("overwrite_a", 0))); return real(A, *args, **kw)
    monkeypatch.setattr(bfp, "dpotrf", record)
    route, calls, unit = bfp._cholesky_unit(40)
    seen.clear(); t = unit()
    assert t >= 0 and route == "LAPACK potrf" and len(seen) == calls and all(f and ow for f, ow in seen), (route, calls, seen)


@pytest.mark.parametrize("repeats", [0, -1, 1.5])
def test_bench_floor_refuses_bad_repeats(small, repeats):
    with pytest.raises(ValueError, match="repeats must be a positive integer"):
        bench_floor(small, variants={"FPi": {}}, repeats=repeats)
