"""Inference methods (tier 2): each module registers its methods with `vgi_lit.fit`.

Methods import the foundation modules at the top of `vgi_lit` and each other, never the
experiments or benchmarks."""
