__version__ = "0.1.0"
# Hand-maintained (not generated): import every module so that each inference method registers
# itself with `fit`, and expose the public names.
from . import gaussian, kernels, models, posterior, vlb, inference, grad
from .models import LGM, GLM, GP, SparseGP
from .inference import fit, VGPosterior, History, METHODS, register_method
from . import likelihoods, datasets
from . import fixed_point                  # fpb, fpi
from . import dual                         # dual
from . import proximal, laplace            # prox, laplace
from . import svi                          # svi, mc-ssvi, h-mc-ssvi, s-dsvi
