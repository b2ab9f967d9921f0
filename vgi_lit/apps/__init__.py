"""Applications (tier 5): scikit-learn estimators and the command line (`vgi-lit`, `python -m vgi_lit`).
They import the foundation, the methods and (the command line) the experiments and benchmarks."""
