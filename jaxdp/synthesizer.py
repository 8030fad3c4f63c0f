"""The familiar shape: `Synthesizer("aim", epsilon=1, schema=...)`, `.fit`, `.sample`, `.save`,
`.load`, `.report`, as thin glue over `jaxdp.synthesize` and the release's model (one path: a
fit is `synthesize`, a sample is `Model.sample`).

    synthesizer = jaxdp.Synthesizer("aim", epsilon=1.0, schema="schema.json")
    synthesizer.fit(frame, key=jaxdp.secure_root_key())      # spends the budget, once
    more = synthesizer.sample(10_000, key=jax.random.key(1), where={"sex": "Female"})
    synthesizer.save("model.jaxdp")                          # no private value in it
    later = jaxdp.Synthesizer.load("model.jaxdp")            # no data needed, nothing spent
    numbers = synthesizer.report(frame, more, html="report.html")  # reads the real data: not private
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from jaxdp import api
from jaxdp.domain import (
    Dataset,
    Domain,
    RawTable,
    TableSchema,
    is_arrow_table,
    is_dataframe,
    like,
    table_from,
)
from jaxdp.models import Model, load_model
from jaxdp.quality import quality
from jaxdp.quality_html import write_html
from jaxdp.types import Key


class Synthesizer:
    """A mechanism with its budget and schema, fitted once, sampled any number of times.

    Args:
        mechanism: a registry name (`jaxdp.api.MECHANISMS`).
        epsilon, delta: the budget `fit` spends (`synthesize`'s).
        schema: the declared schema or domain (a table schema's dict, a JSON path, a `Domain`).
        **options: anything else `synthesize` takes (workload, rounds, relation, ...).
    """

    def __init__(
        self,
        mechanism: str = api.DEFAULT_MECHANISM,
        *,
        epsilon: float,
        delta: float = api.DEFAULT_DELTA,
        schema: Domain | Mapping[str, Any] | str | os.PathLike | None = None,
        **options: Any,
    ):
        if mechanism not in api.MECHANISMS:
            raise ValueError(f"unknown mechanism {mechanism!r}; choose one of: {', '.join(api.MECHANISMS)}")
        self.mechanism, self.epsilon, self.delta, self.schema = mechanism, epsilon, delta, schema
        self.options = options
        self.model: Model | None = None
        # the container the table came in, emptied (a table of no rows: the records stay out of
        # a pickled synthesizer), for the samples to come back in
        self._container: Any = None

    def fit(self, data: Any, *, key: Key) -> Synthesizer:
        """Run the mechanism on the private table (spends the budget) and keep its model.

        Privacy:
            `synthesize`'s: (epsilon, delta)-DP for the mechanism's relation. The root key is as
            secret as the data.
        """
        result = api.synthesize(
            data,
            self.schema,
            mechanism=self.mechanism,
            epsilon=self.epsilon,
            delta=self.delta,
            key=key,
            **self.options,
        )
        if result.answers is not None:
            raise ValueError(f"{self.mechanism} releases noisy answers, not records: use jaxdp.synthesize")
        self.model, self._container = result.model, _template(data)
        return self

    @property
    def privacy_report(self) -> dict:
        """The release's privacy report (safe to publish)."""
        return self._fitted().report

    def sample(self, rows: int | None = None, *, key: Key, where: dict | None = None) -> Any:
        """Records from the model, in the container the fitted table came in (a DataFrame for a
        DataFrame, a `Dataset` for a `Dataset`; after `load`, a DataFrame where pandas is
        installed, else a dict of columns). Post-processing: spends nothing."""
        table = self._fitted().sample(key, rows=rows, where=where)
        if isinstance(table, Dataset):
            if isinstance(self._container, Dataset):
                return table
            table = table.to_table()
        if self._container is not None:
            return like(self._container, table)
        try:
            import pandas as pd
        except ImportError:
            return table.columns()
        return pd.DataFrame(table.columns())

    def save(self, path: str | os.PathLike) -> None:
        """Write the model (`Model.save`: owner-only, no private value in it)."""
        self._fitted().save(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Synthesizer:
        """A fitted synthesizer from a saved model (`jaxdp.load_model`); it samples, it cannot fit."""
        model = load_model(path)
        synthesizer = cls.__new__(cls)  # its settings are the model's: nothing to check, nothing to fit
        synthesizer.mechanism, synthesizer.schema, synthesizer.options = model.name, None, {}
        synthesizer.epsilon, synthesizer.delta = model.report.get("epsilon"), model.report.get("delta")
        synthesizer.model, synthesizer._container = model, None
        return synthesizer

    def report(
        self,
        real: Any,
        synthetic: Any = None,
        *,
        html: str | os.PathLike | None = None,
        target: str | None = None,
        seed: int = 0,
    ) -> dict:
        """The quality report (`jaxdp.quality`) of `synthetic` (default: a sample of the model's
        first release's size, key from `seed`) against the real table; the page too with `html`.

        Reads the real data: NOT differentially private, for the data holder only.
        """
        model = self._fitted()
        schema = model.coding.schema if model.coding is not None else TableSchema.from_domain(model.domain)
        if synthetic is None:
            synthetic = model.sample(jax.random.key(seed))
        numbers = quality(
            _read(real, schema),
            _read(synthetic, schema),
            schema,
            coding=model.coding,
            target=target,
            seed=seed,
        )
        if html is not None:
            write_html(numbers, html)
        return numbers

    def _fitted(self) -> Model:
        if self.model is None:
            raise ValueError("fit the synthesizer first (or load a saved model)")
        return self.model


def _template(data: Any) -> Any:
    """The table's container with no rows (`like` reads only its kind, columns and dtypes)."""
    if isinstance(data, Dataset):
        return Dataset(data.domain, data.codes[:0], data.numeric[:0])
    if is_dataframe(data):
        return data.iloc[:0]
    if is_arrow_table(data):
        return data.slice(0, 0)
    if isinstance(data, Mapping):
        return {name: None for name in data}
    return np.asarray(data)[:0] if isinstance(data, np.ndarray) else None


def _read(table: Any, schema: TableSchema) -> RawTable | Dataset:
    """A table in any supported container, validated against the schema (a `Dataset` or a
    `RawTable` as it is)."""
    return table if isinstance(table, RawTable | Dataset) else table_from(table, schema)
