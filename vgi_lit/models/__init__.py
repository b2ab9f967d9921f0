"""Models (foundation, tier 1): each model is a value holding its data, prior and likelihood, with no optimisation state.
The algorithms that fit a model are in `vgi_lit.methods`, under the same name where a model has its own algorithms.

Hand-maintained (not generated); every name below is exported from its notebook:
  lgm   the latent Gaussian models `GLM`, `GP`, `SparseGP` (`LGM`, `PriorCov` and its structures, `GaussianPrior`)   nbs/03_models.ipynb
  blocks  many small Gaussians with a shared prior (`Blocks`, `natural_step`, `blocks_kl`, `closed_form_prior`)  nbs/models/03b_blocks.ipynb
  pmf   probabilistic matrix factorisation `PMF`                                  nbs/models/03c_pmf.ipynb   (algorithms: methods/pmf.py)
  ctm   the correlated topic model `CTM`                                          nbs/models/03d_ctm.ipynb   (algorithms: methods/ctm.py)
  gme   the mixed-effects GLM with Rayleigh noise variance `GME`                  nbs/models/03e_gme.ipynb   (algorithms: methods/gme.py)
  multi several latent values per site: `MultiLGM`, `MultiGLM`, `MultiGP`, `CoregionalGP`, `KronPrior`, `LMCGP`, `LMCPrior`, `MultiCov`,
        `psd_part` (the nearest PSD part of C × C site blocks)
        nbs/models/03f_multi.ipynb (algorithms: methods/multiclass.py, methods/multi_output.py, methods/multi_svi.py)
  multi_sparse  the sparse multiclass GP with shared inducing inputs `MultiSparseGP` (a `MultiLGM`)   nbs/models/03g_multi_sparse.ipynb"""
from .lgm import PriorCov, ScalarPriorCov, DiagPriorCov, DensePriorCov, GaussianPrior, LGM, GLM, GP, inducing_prior, sparse_gp_site_map, SparseGP, dask_site_matrix
from .blocks import Blocks, BlockStep, natural_step, block_kl, blocks_kl, block_sum, block_gram, closed_form_prior, stacked_cholesky, stacked_solve, try_stacked_cholesky
from .pmf import PMF, check_indices
from .ctm import CTM, DocRows, check_counts, init_beta, check_beta
from .gme import GME
from .multi import MultiLGM, MultiGLM, MultiGP, MultiCov, KronPrior, CoregionalGP, LMCPrior, LMCGP, psd_part
from .multi_sparse import MultiSparseGP
