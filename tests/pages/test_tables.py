"""Tables on the pages: a missing value reads "—", not "None" (which looks like a value)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fl_ui.widgets import MISSING_CELL, dashed


def test_missing_cells_read_as_a_dash_and_complete_columns_are_left_as_they_are() -> None:
    frame = pd.DataFrame({"layer": ["a", "b"], "resolution": [None, None], "top1": [0.25, np.nan], "n": [1, 2]})
    shown = dashed(frame)
    assert shown["resolution"].tolist() == [MISSING_CELL] * 2 and shown["top1"].tolist() == ["0.25", MISSING_CELL]
    assert shown[["layer", "n"]].equals(frame[["layer", "n"]])
    assert frame["top1"].isna().sum() == 1  # the data behind the table (and its CSV) is unchanged
    complete = frame[["layer", "n"]]
    assert dashed(complete) is complete
