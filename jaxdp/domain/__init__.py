"""Declared domains and schemas, the one encoder every table enters through, and CSV text.

- `coded`: `Domain` (the declared attributes a mechanism's index space is made of), `DataError`;
- `schema`: `TableSchema`, the one parser of the ``"columns"`` JSON form (a `Domain` is a schema
  without bins, integer or nullable keys);
- `encode`: the one encoder: raw columns in any container checked against a schema into a
  `RawTable`, and a table back into its input's container;
- `dataset`: `Dataset`, records coded against a `Domain`, built through the encoder;
- `text`: files: CSV in (NumPy's compiled reader for a file of numbers) and out, Parquet in.

Every validation error names the column and how many values are wrong, never a value itself:
the records are private.
"""

from jaxdp.domain.coded import Attribute, Categorical, DataError, Domain, Numeric, read_json
from jaxdp.domain.dataset import Dataset
from jaxdp.domain.encode import (
    RawTable,
    checked_numeric,
    columns_like,
    empty_cells,
    is_arrow_table,
    is_dataframe,
    like,
    parse_table,
    table_from,
)
from jaxdp.domain.schema import (
    BINNINGS,
    CategoricalColumn,
    Column,
    NumericColumn,
    TableSchema,
    domain_from_schema,
    is_table_schema,
    load_declaration,
    load_domain,
)
from jaxdp.domain.text import read_columns, read_csv, read_table, write_columns, write_csv, write_rows

__all__ = [
    "BINNINGS",
    "Attribute",
    "Categorical",
    "CategoricalColumn",
    "Column",
    "DataError",
    "Dataset",
    "Domain",
    "Numeric",
    "NumericColumn",
    "RawTable",
    "TableSchema",
    "checked_numeric",
    "columns_like",
    "domain_from_schema",
    "empty_cells",
    "is_arrow_table",
    "is_dataframe",
    "is_table_schema",
    "like",
    "load_declaration",
    "load_domain",
    "parse_table",
    "read_columns",
    "read_csv",
    "read_json",
    "read_table",
    "table_from",
    "write_columns",
    "write_csv",
    "write_rows",
]
