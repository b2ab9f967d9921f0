"""Applications (tier 5): scikit-learn estimators, the command line (`vgi-lit`, `python -m vgi_lit`), and the table
handling, input standardisation and fit diagnostics they share (`vgi_lit.apps.tables`). They import the foundation,
the methods and (the command line) the experiments and benchmarks."""
