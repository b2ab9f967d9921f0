__version__ = "0.1.0"
# Hand-maintained (not generated). The package has five tiers, each importing only the tiers before it:
#   foundation (this folder): linalg, quadrature, likelihoods, kernels, sites, models, covariance, vlb, inference, datasets,
#               corpora, io; dask_sites (a dask-array site matrix) is imported only when a dask array is given, so dask stays optional
#   methods/      inference methods; importing them registers each with `fit`
#   experiments/  the papers' figures and tables, the demo
#   bench/        benchmark suites (`python -m vgi_lit.bench SUITE`)
#   apps/         scikit-learn estimators and the command line (`vgi-lit`, `python -m vgi_lit`: vgi_lit/__main__.py)
from . import linalg, quadrature, kernels, models, covariance, vlb, inference
from .models import LGM, GLM, GP, SparseGP
from .inference import fit, VGPosterior, History, METHODS, register_method
from . import likelihoods, datasets, corpora, io                   # io: save/load a fitted posterior (.npz)
from . import sites                                                 # the site-matrix protocol (dense, CSR, blocked; Dask lazily)
from . import methods
from .methods import grad, fixed_point, dual, proximal, laplace, svi   # registers every method with `fit`
from .methods import hyper                                           # fit(model, learn=True)
from .methods import pmf                                             # matrix factorisation (not an LGM: fit_pmf)
from .methods import ctm, ctm_meanfield, ctm_eval                    # correlated topic model (not an LGM: fit_ctm), its baseline and evaluation
