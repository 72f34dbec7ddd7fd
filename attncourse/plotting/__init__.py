"""The book's figures, drawn from the package's own code (course scaffolding, not the library).

* :mod:`~attncourse.plotting.weights`: attention weights as heat maps (every chapter).
* :mod:`~attncourse.plotting.diagrams`: schematics of the mechanisms (chapters 1-10).
* :mod:`~attncourse.plotting.measurements`: measured times and the roofline (chapters 6, 8, 10).

Every public function of the three is importable from here, ``from attncourse.plotting import
heatmap``, as the chapters do. The library (``attncourse`` itself) never imports this package.
"""

from . import diagrams, measurements
from .diagrams import *  # noqa: F403
from .measurements import *  # noqa: F403
from .weights import heatmap, plot_attention, plot_heads

#: weights' functions (not its type ``ArrayLike``), then every public name of diagrams and
#: measurements, each module's ``__all__`` in its order.
__all__ = ["heatmap", "plot_attention", "plot_heads", *diagrams.__all__, *measurements.__all__]
