"""Gradient-based schedule search (Felix, Zhao et al. 2024) through differentiable super-graph features.

For one design space with its compute locations and categorical decisions fixed (a *variant*),
every loop extent and access stride of the scheduled program is a product of tile factors, so
the GCN's node features are functions of the log tile factors:

* `program` reads the variant's program before postprocessing and expresses every extent and
  stride symbolically (monomials in the tile factors; compute-at regions as affine spans);
* `postproc` replays MetaSchedule's postprocessors (parallel/vectorize/unroll rewriting and
  reduction decomposition) on that symbolic program at given extents, giving the final loop
  structure, its super-graph slots, and a key that identifies it;
* `features` turns a structure into a torch function of the log factors that reproduces the
  encoder's normalised node features exactly at every valid integer configuration;
* `relax` parametrises log factors so that each loop's factors multiply to its extent, adds
  Felix's penalty terms and rounds continuous points to the nearest valid factorisation;
* `search` is `GradientSearch`, the MetaSchedule search strategy (Adam through the online-adapted
  cost model from many seeds, rounding, top-n).

Submodules import TVM and torch lazily; importing this package is cheap.
"""

from metatune import MetatuneError


class NotDifferentiable(MetatuneError):
    """A design space whose program the symbolic model cannot express exactly."""
