"""Benchmarks (tier 4): `python -m vgi_lit.bench SUITE` runs one suite and prints ratios measured
in one run. Benchmarks may import every other tier; nothing imports them."""
