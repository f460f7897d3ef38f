"""The serving layer: one exact answer from the batch and speed views, with provenance.

Library (`Serving`), CLI (`pos-serve`), HTTP API and dashboard (`pos-serve http`,
`make serve`). The merge rule is in `pos_lambda.serving.merge`; see docs/serving.md.
"""

from pos_lambda.serving.service import Serving

__all__ = ["Serving"]
