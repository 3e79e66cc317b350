"""Tables shown whole in a notebook. pandas cuts each cell's text at `display.max_colwidth` (50
characters) with "…", which hid most of the gallery's reasons, its groups' why and the hazards'
stories; `whole` draws a table with every cell's full text and leaves pandas' own options as they are.
"""
from __future__ import annotations

import pandas as pd


class Whole:
    """A DataFrame drawn with its cells' full text (HTML in a notebook, text elsewhere)."""

    def __init__(self, df: pd.DataFrame):
        if not isinstance(df, pd.DataFrame):
            raise TypeError(f"whole() takes a pandas DataFrame; got {type(df).__name__}")
        self.df = df

    def _repr_html_(self) -> str:
        with pd.option_context("display.max_colwidth", None, "display.max_rows", None):
            return self.df._repr_html_()

    def __repr__(self) -> str:
        with pd.option_context("display.max_colwidth", None, "display.max_rows", None, "display.width", None):
            return repr(self.df)


def whole(df: pd.DataFrame) -> Whole:
    return Whole(df)
