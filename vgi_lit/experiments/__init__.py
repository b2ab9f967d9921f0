"""Experiments (tier 3): the papers' figures and tables and the demo, run from the command line
(`python -m vgi_lit.experiments.NAME`). They import the foundation and the methods."""
