"`in_child`: a peer's side in a process of its own (spawned from the test process, not from a notebook's kernel)."
import os
import numpy as np
import pytest
from threadpoolctl import threadpool_limits
from vgi_lit.bench import core
from vgi_lit.bench.core import in_child, blas_threads


def test_in_child_runs_in_another_process_and_returns_or_raises():
    assert in_child(os.getpid) != os.getpid()                                            # a process of its own
    assert in_child(np.add, 2, 3) == 5 and in_child(np.full, 2, fill_value=7.0).tolist() == [7.0, 7.0]   # results and keywords
    with pytest.raises(ValueError, match="not a number"): in_child(int, "not a number")  # the child's exception, raised here


@pytest.mark.skipif(blas_threads() is None, reason="no BLAS library seen by threadpoolctl")
def test_in_child_carries_the_blas_thread_count():
    with threadpool_limits(1, user_api="blas"): assert in_child(core.blas_threads) == 1


def test_in_child_refuses_a_function_of_main():
    def here(): return 1
    here.__module__ = "__main__"                                                         # as a script's or a notebook's function
    with pytest.raises(ValueError, match="__main__"): in_child(here)
