"""pytest configuration shared by tests/ and the notebooks run by nbval.

The notebooks are committed with their outputs (the rendered site shows them) but, after
`nbdev_clean`, without execution counts. nbval treats a cell with outputs and no execution count
as an error ("Unrun reference cell has outputs") even in --nbval-lax mode, where outputs are not
compared. For cells whose output is not checked we drop the stored reference outputs before they
run; cells marked `# NBVAL_CHECK_OUTPUT` get a reference execution count so their output is compared.
"""
import os
import sys

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
# One BLAS thread per process: the notebook kernels run beside the pytest process, and on a busy
# 2-core machine threaded OpenBLAS was measured 30-50x slower than single-threaded on these sizes.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def pytest_configure(config):
    # Every notebook runs in a kernel of its own that imports the package. Where the environment forbids writing bytecode
    # (PYTHONDONTWRITEBYTECODE set), each of those imports would compile the package's source again
    # (0.3-0.4 s of the 0.8 s import); compiled once here, before the workers start, the kernels read the bytecode.
    if os.environ.get("PYTEST_XDIST_WORKER") is None and sys.dont_write_bytecode:
        import compileall
        compileall.compile_dir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "vgi_lit"), quiet=1)


# A notebook cell with a line that is SLOW_CELL (alone or followed by a space and a reason) runs only with `pytest -m slow`, like the tests
# marked slow: a long experiment or a full-size table, whose names no later cell of the notebook reads (tests/test_repo.py
# checks that, so the default run of the rest of the notebook does not depend on a cell it skips).
SLOW_CELL = "# pytest: slow"


def is_slow_cell(source):
    "Whether a notebook cell's source (a string or a list of lines) carries the SLOW_CELL line."
    text = source if isinstance(source, str) else "".join(source)
    return any(l == SLOW_CELL or l.startswith(SLOW_CELL + " ") for l in (line.strip() for line in text.splitlines()))


def _selects_slow(config):
    "Whether the run's -m expression selects a test marked slow (`pytest -m slow`), not the default 'not slow'."
    from _pytest.mark import MarkMatcher
    from _pytest.mark.expression import Expression
    expr = config.option.markexpr
    return not expr or Expression.compile(expr).evaluate(MarkMatcher.from_markers([pytest.mark.slow.mark]))


@pytest.hookimpl(tryfirst=True)   # before pytest's own hook deselects by mark (-m "not slow" in pytest.ini)
def pytest_collection_modifyitems(session, config, items):
    # A slow cell is marked slow; where the run selects slow tests, every cell of a notebook with a slow cell is marked
    # too, so that `pytest -m slow` runs such a notebook whole (a slow cell needs the cells before it).
    slow_nbs = {item.path for item in items
                if getattr(item, "cell", None) is not None and is_slow_cell(item.cell.get("source", ""))}
    whole = _selects_slow(config)
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is None or not hasattr(item, "options"):
            continue
        if item.path in slow_nbs and (whole or is_slow_cell(cell.get("source", ""))):
            item.add_marker(pytest.mark.slow)
        if item.options.get("check"):
            if cell.get("execution_count") is None:
                cell["execution_count"] = 1
        elif cell.get("execution_count") is None:
            cell["outputs"] = []
