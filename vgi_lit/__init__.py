__version__ = "0.1.0"
# Hand-maintained (not generated). The package has five tiers, each importing only the tiers before it:
#   foundation (this folder): linalg, quadrature, likelihoods, softmax, kernels, sites, models/ (every model: GLM, GP, SparseGP, PMF, CTM, GME), covariance, vlb, inference, datasets,
#               corpora, io; dask_sites (a dask-array site matrix) is imported only when a dask array is given, so dask stays optional
#   methods/      inference methods; importing them registers each with `fit` for the model kinds it accepts
#   experiments/  the papers' figures and tables, the demo
#   bench/        benchmark suites (`python -m vgi_lit.bench SUITE`)
#   apps/         scikit-learn estimators and the command line (`vgi-lit`, `python -m vgi_lit`: vgi_lit/__main__.py)
# Every notebook kernel and command-line run pays this import: scipy.stats, scipy.optimize, scipy.integrate and scipy.cluster are
# imported inside the functions that use them, not at module level (tests/test_repo.py checks the ones in LAZY_SCIPY).
from . import linalg, quadrature, kernels, models, covariance, vlb, inference
from .models import LGM, GLM, GP, SparseGP
from .inference import fit, Posterior, VGPosterior, History, METHODS, MODEL_METHODS, register_method, methods_for
from . import likelihoods, datasets, corpora, io                   # io: save/load a fitted posterior (.npz)
from . import sites                                                 # the site-matrix protocol (dense, CSR, blocked; Dask lazily)
from . import methods
from .methods import grad, fixed_point, dual, proximal, laplace, svi   # registers every method with `fit`
from .methods import hyper                                           # fit(model, learn=True)
from .models import PMF, CTM, GME                                    # the two-level models (vgi_lit/models/): fit(PMF(...)), ...
from .methods import pmf, ctm, gme                                   # their algorithms, registered with `fit` for their model kinds
from . import softmax                                                # the softmax likelihood (a C-vector per site)
from .models import MultiGLM, MultiGP, MultiSparseGP                 # several latent functions per site (models/multi.py, models/multi_sparse.py)
from .methods import multiclass                                      # their FPi and GRAD, registered with `fit` for the kind 'multi'
from .methods import multi_output                                    # the multi-output Gaussian likelihood
from .methods import multi_hyper                                     # their hyperparameters: fit(multi_model, learn=True)
from .methods import multi_svi                                       # natural-gradient SVI for the multi-latent models with rows (fit(..., 'svi'))
from .methods import ctm_meanfield, ctm_eval                         # the topic model's mean-field baseline and evaluation
from .methods.pmf import PMFOptions, PMFPosterior
from .methods.ctm import CTMOptions, CTMPosterior
from .methods.gme import GMEOptions, GMEMeanFieldOptions, GMEPosterior
