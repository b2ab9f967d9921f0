"The experiment problems of Sheth & Khardon (2016), §4: `make_problem`'s sizes."
import numpy as np
import pytest
from vgi_lit.experiments.fp_experiments import make_problem


def test_n_max_cuts_every_problem_and_none_keeps_the_tables_sizes():
    """n_max=None: the table's sizes (all 280 ionosphere rows, 500 of housing for a GP, all 506 for a GLM); a given n_max
    draws that many seeded rows of any problem (it was ignored for the fixed training sets), the same rows for the same seed."""
    assert make_problem("gp-logistic-ionosphere")[0].n == 280
    assert make_problem("gp-laplace-housing")[0].n == 500 and make_problem("glm-laplace-housing")[0].n == 506
    a, b = make_problem("gp-logistic-ionosphere", n_max=60)[0], make_problem("gp-logistic-ionosphere", n_max=60)[0]
    assert a.n == 60 and np.array_equal(a.X, b.X) and set(np.unique(a.y)) == {-1.0, 1.0}
    assert make_problem("glm-laplace-housing", n_max=100)[0].n == 100 and make_problem("gp-logistic-sonar", n_max=1000)[0].n == 165
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="n_max must be a positive integer or None"):
            make_problem("gp-logistic-sonar", n_max=bad)
