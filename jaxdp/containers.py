"""The containers a raw table comes in and its release goes back out in: names kept importable
from here.

A pandas DataFrame, a dict of columns or a 2-D NumPy array becomes a `RawTable` through the one
encoder (`table_from`), and a table goes back into its input's container (`like`); both live in
`jaxdp.domain.encode`, where new code imports them from (`jaxdp.domain`).
"""

from jaxdp.domain import is_dataframe, like, table_from

__all__ = ["is_dataframe", "like", "table_from"]
