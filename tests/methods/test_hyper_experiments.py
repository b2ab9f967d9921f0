"Fast checks of the hyperparameter experiments and benchmark modules (the joint reference against `learn` is checked on the benchmark page; the full runs are their commands)."
import numpy as np, pytest
from vgi_lit.bench import hyper as bh
from vgi_lit.experiments import hyper_experiments as hx

def test_generated_gp_is_seeded_and_checked():
    X, y = bh.generated_gp(n=40, d=3, seed=1)
    assert X.shape == (40, 3) and set(np.unique(y)) <= {-1.0, 1.0}
    assert np.array_equal(bh.generated_gp(n=40, d=3, seed=1)[1], y)
    with pytest.raises(ValueError, match="n must be"): bh.generated_gp(n=1)

def test_time_to():
    tr = [(0.1, -5.0), (0.2, -3.0), (0.3, -1.0)]
    assert bh.time_to(tr, -3.0) == 0.2 and bh.time_to(tr, 0.0) is None

def test_unknown_problem_is_refused():
    with pytest.raises(ValueError, match="unknown problem"): bh.problems(which=("mnist",))
    with pytest.raises(ValueError, match="'a1a' or 'colon'"): hx.glm_delta("mnist")
