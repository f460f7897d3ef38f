"""The serving layer: one exact answer from the batch and speed views, with provenance.

Library (`Serving`), CLI (`pos-serve`), HTTP API and dashboard (`pos-serve http`,
`make serve`). The merge rule is in `serving.merge`; see README, "Serving layer".
"""

from serving.service import Serving

__all__ = ["Serving"]
