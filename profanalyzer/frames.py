"""DataFrame construction for the analysis stage.

pandas 3 infers its `str` dtype for string columns, converting every string
on construction; with hundreds of thousands of op names per trace that costs
more than the analysis itself. String columns here stay plain object columns.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd


def frame(cols: Mapping[str, object], index=None) -> pd.DataFrame:
    """A DataFrame whose string-like columns keep object dtype."""
    out = {}
    for k, v in cols.items():
        if isinstance(v, (list, tuple)) or (isinstance(v, np.ndarray) and v.dtype == object):
            out[k] = pd.Series(np.asarray(v, dtype=object), dtype=object, index=index, copy=False)
        else:
            out[k] = v
    return pd.DataFrame(out, index=index)
