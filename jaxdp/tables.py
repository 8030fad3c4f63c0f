"""Raw tables and their declared schema: names kept importable from here.

The schema (`TableSchema`, its columns and the ``"columns"`` JSON form it parses) lives in
`jaxdp.domain.schema`, and the one encoder that checks raw values against it (`parse_table`,
`RawTable`, `empty_cells`, `read_table`) in `jaxdp.domain.encode` and `jaxdp.domain.text`: a
coded `Domain` reads its records through the same code. New code imports them from
`jaxdp.domain`.
"""

from jaxdp.domain import (
    BINNINGS,
    CategoricalColumn,
    Column,
    NumericColumn,
    RawTable,
    TableSchema,
    empty_cells,
    is_table_schema,
    parse_table,
    read_table,
)

__all__ = [
    "BINNINGS",
    "CategoricalColumn",
    "Column",
    "NumericColumn",
    "RawTable",
    "TableSchema",
    "empty_cells",
    "is_table_schema",
    "parse_table",
    "read_table",
]
