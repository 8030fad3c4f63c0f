"""A release's model: the releasable part of a run, which samples, conditions, answers and saves.

`jaxdp.synthesize` returns it as `Result.model`; `jaxdp.model(mechanism, state)` makes one from a
run of your own. It holds what the release already made public and nothing else:

- the mechanism's public part (`jaxdp.contract.public_mechanism`: settings, plan, workload, the
  family and rule bound to the domain; its private inputs withheld, and under add-remove its
  record count dropped) and the run's final state (the family's fitted state: graphical-model
  potentials, generator weights, relaxed rows, histogram weights; the noisy measurements; the
  compression decided from them);
- the coded domain, and for a table schema its coding (the schema and the released cut points);
- the privacy report (without its timing) and the ledger.

It holds no key, no true answer and no record of the table. Sampling is post-processing: it
spends nothing, and the report states the model's budget once, whatever is sampled from it.

`sample(key, rows=, where=)` runs the release's own program on the model's state, so
`model.sample(root_key)` returns exactly what `synthesize` released from that root key (same
rows). A `where` condition (`jaxdp.conditions`) is met exactly where the family allows it:

- graphical models (AIM, MST, PrivBayes): the evidence is clamped in the junction tree
  (`pgm_marginals.conditioned`), and the rest of each record is sampled from the model's conditional by the
  release's own sampler (merged values of a compressed attribute spread in proportion to their
  share under the condition; a numeric range drawn within its bins' part of the range);
- histograms (MWEM, PEP, PMW-Pub, PEP-Pub): the output distribution restricted to the points
  that meet the condition (`Family.conditioned`), renormalised, and sampled as the release is;
- every other family: rejection. Batches of the model's release are drawn from keys folded from
  the sample's key and the records that meet the condition are kept, so the records follow the
  model's conditional up to the release's rounding; a condition on which fewer than
  `ACCEPTANCE_FLOOR` of the first batch's records land is refused (the model gives it too little
  mass for its records to say anything about it).

`save(path)` writes one versioned file (`jaxdp._serial`: a checksummed zip of JSON and arrays that
runs no code when read), owner-only by default but safe to publish; `jaxdp.load_model(path)` reads
it back without the data, refusing a truncated, changed or foreign file with a line saying so.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from jaxdp import _checks, contract
from jaxdp._io import atomic_open
from jaxdp._serial import UnreadableFile, decode, encode, read_path, write_zip
from jaxdp._version import __version__
from jaxdp.coding import TableCoding
from jaxdp.conditions import Condition, condition
from jaxdp.domain import Dataset, Domain, RawTable
from jaxdp.families._sampling import padded_length
from jaxdp.keys import decode_key, fold_in, require_key
from jaxdp.ledger import LedgerEntry
from jaxdp.model_marginals import marginals_table
from jaxdp.releasing import released
from jaxdp.types import Key

FORMAT = "jaxdp-model"
FORMAT_VERSION = 1
# rejection sampling: the least share of a batch's records a condition must hold, and the least
# records a batch draws
ACCEPTANCE_FLOOR = 0.01
MIN_BATCH = 1024


class ModelFileError(ValueError):
    """A model file that cannot be read: missing, truncated, changed, foreign or of another version."""


@dataclasses.dataclass(frozen=True)
class Model:
    """The releasable part of a run (module docstring).

    Attributes:
        name: the registry name of the mechanism ("aim", ...), or the mechanism's own.
        mechanism: its public part (`jaxdp.contract.public_mechanism`).
        state: the run's final state.
        domain: the coded domain the mechanism fitted.
        coding: how a table schema's columns were coded (None for a coded release).
        report: the privacy report, without `seconds`.
        ledger: the release's ledger (preprocessing included).
        rows: the first release's row count: `sample`'s default.
    """

    name: str
    mechanism: Any
    state: Any
    domain: Domain
    coding: TableCoding | None
    report: dict
    ledger: tuple[LedgerEntry, ...]
    rows: int

    def with_release(self, *, report: dict, ledger, coding: TableCoding | None) -> Model:
        """This model with a table schema's coding, and the report and ledger that include the
        preprocessing (private bins), as `synthesize` finishes a release."""
        kept = {k: v for k, v in report.items() if k != "seconds"}
        return dataclasses.replace(self, report=kept, ledger=tuple(ledger), coding=coding)

    # -- sampling -------------------------------------------------------------------------------

    def sample(self, key: Key, *, rows: int | None = None, where: dict | None = None) -> Dataset | RawTable:
        """Records from the model (post-processing: no privacy is spent).

        Args:
            key: a typed key; the root key of a release gives that release again.
            rows: how many records (default: the first release's count).
            where: a condition the records must meet (`jaxdp.conditions`): {column: value,
                list of values, (lower, upper) range or None}.

        Returns:
            A `RawTable` in the table's columns, labels and units for a model of a table schema,
            else a `Dataset` over the coded domain.

        Raises:
            ValueError: a release of answers (no records), bad rows, a condition outside the
                schema, or one the model gives no (or, by rejection, too little) mass.
        """
        key = require_key(key)
        if contract.releases(self.mechanism) == "answers":
            raise ValueError(
                f"{self.name} releases noisy answers, not records: its model has nothing to sample"
            )
        rows = self.rows if rows is None else _checks.positive_int(rows, "rows")
        if where is None:
            return self._decoded(key, self._draw(key, self.state, rows))
        wanted = condition(where, self.domain, self.coding)
        exact = self._conditioned_state(wanted)
        if exact is None:
            return self._rejected(key, rows, wanted)
        table = self._decoded(key, self._draw(key, exact, rows), wanted)
        if not wanted.holds(table).all():  # the samplers give a ruled-out value probability 0
            raise AssertionError(f"a conditioned sample broke its condition {wanted.text}")
        return table

    def _draw(self, key: Key, state: Any, rows: int) -> Dataset:
        out = released(self.mechanism, state, key, rows)
        if isinstance(out, Dataset):
            return out
        if isinstance(out, tuple):  # (codes, numeric in [0, 1]): a mixed-type release
            return Dataset(self.domain, *(np.asarray(x) for x in out))
        codes = np.asarray(out)
        return Dataset(self.domain, codes, np.zeros((codes.shape[0], 0), np.float32))

    def _decoded(self, key: Key, synthetic: Dataset, wanted: Condition | None = None) -> Dataset | RawTable:
        if self.coding is None:
            return synthetic
        return self.coding.decode(synthetic, decode_key(key), ranges=wanted.ranges if wanted else None)

    def _conditioned_state(self, wanted: Condition) -> Any | None:
        """The state whose release is the model's conditional, where the family has one exactly;
        None where it samples by rejection."""
        conditioned = getattr(self.mechanism, "conditioned", None)
        exact = conditioned(self.state, wanted.weights) if conditioned is not None and wanted.coded else None
        if exact is None:
            return None
        state, probability = exact
        if not probability > 0.0:
            raise ValueError(f"where: the model gives {wanted.text} no mass; no record can meet it")
        return state

    def _rejected(self, key: Key, rows: int, wanted: Condition) -> Dataset | RawTable:
        """`rows` records of the model's release that meet the condition (module docstring)."""
        batch = padded_length(max(rows, MIN_BATCH))  # one compiled shape for every batch
        kept: list[Dataset | RawTable] = []
        found = 0
        most = math.ceil(rows / (batch * ACCEPTANCE_FLOOR)) + 1
        for i in range(most):
            batch_key = fold_in(key, i)
            table = self._decoded(batch_key, self._draw(batch_key, self.state, batch))
            meets = wanted.holds(table)
            if i == 0 and meets.mean() < ACCEPTANCE_FLOOR:
                raise ValueError(
                    f"where: {meets.mean():.2%} of {self.name}'s records meet {wanted.text}, below "
                    f"the {ACCEPTANCE_FLOOR:.0%} its rejection sampler accepts: the model gives it too "
                    "little mass"
                )
            kept.append(_rows(table, meets))
            found += int(meets.sum())
            if found >= rows:
                return _rows(_concatenated(kept), np.arange(rows))
        raise ValueError(f"where: {wanted.text} took more than {most} batches of {batch} records")

    # -- answers --------------------------------------------------------------------------------

    def marginals(self) -> dict[str, list]:
        """The model's public answers as columns (a table, labels in the release's terms):

        - `kind` "measured": every marginal a round measured, each cell's noisy count and the
          standard deviation of its noise (host-rule mechanisms: AIM, MST, PrivBayes, AIM-GEM;
          over the compressed domain where the run compressed it: `domain`);
        - `kind` "model": every workload marginal's cells, the model's count (its fraction
          times its total), and the marginal's L1 error bound where the mechanism has one
          (AIM's: the report's `error_bounds`, over the domain it states).

        Columns: kind, marginal ("a|b"), cell ("label|label"), value, std, l1_bound, domain.
        """
        return marginals_table(self)

    # -- files ----------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> Path:
        """Write the model to one file (atomically, owner-only; module docstring). Returns the path."""
        path = Path(path)
        with atomic_open(path, "wb") as fh:
            fh.write(self.to_bytes())
        return path

    def to_bytes(self) -> bytes:
        """The model file's bytes (`save` writes them)."""
        arrays: list[np.ndarray] = []
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "jaxdp_version": __version__,
            "name": self.name,
            "rows": self.rows,
            "report": self.report,
            "tree": encode(
                {
                    "mechanism": self.mechanism,
                    "state": self.state,
                    "domain": self.domain,
                    "coding": self.coding,
                    "ledger": tuple(self.ledger),
                },
                arrays,
            ),
        }
        buffer = io.BytesIO()
        write_zip(buffer, manifest, arrays)
        return buffer.getvalue()


def model(
    mechanism: Any,
    state: Any,
    *,
    name: str | None = None,
    rows: int | None = None,
    domain: Domain | None = None,
    coding: TableCoding | None = None,
    report: dict | None = None,
    ledger: list[LedgerEntry] | tuple[LedgerEntry, ...] = (),
) -> Model:
    """The model of a run: `mechanism` (as built; its private inputs are withheld here) and the
    final `state` of `jaxdp.run`.

    Args:
        name: what to call the mechanism (default: its `name`, or its type's).
        rows: `sample`'s default row count (default: the mechanism's, from the state).
        domain: the coded domain (default: the mechanism's).
        coding, report, ledger: what `synthesize` adds for a table schema and its report.

    Privacy:
        The model holds only released values and public settings (module docstring).
    """
    if rows is None:
        rows = (
            mechanism.default_rows(state)
            if hasattr(mechanism, "default_rows")
            else getattr(mechanism, "public_rows", None)
        )
    if rows is None:
        raise ValueError("give rows: the mechanism cannot say how many records its release has")
    domain = domain if domain is not None else getattr(mechanism, "domain", None)
    if domain is None:
        raise ValueError("give the domain: the mechanism does not hold it")
    kept = {k: v for k, v in (report or {}).items() if k != "seconds"}  # a timing side channel
    return Model(
        name or getattr(mechanism, "name", type(mechanism).__name__),
        contract.public_mechanism(mechanism),
        state,
        domain,
        coding,
        kept,
        tuple(ledger),
        int(rows),
    )


def load_model(path: str | os.PathLike) -> Model:
    """A model `Model.save` wrote. Reading it runs no code and needs no data.

    Raises:
        ModelFileError: the file is missing, unreadable, truncated, changed since it was written,
            not a jaxdp model, or from another format version.
    """
    shown = str(path)
    try:
        manifest, arrays = read_path(path, "model")
    except UnreadableFile as err:
        raise ModelFileError(str(err)) from None
    if manifest.get("format") != FORMAT:
        raise ModelFileError(f"{shown!r} is not a jaxdp model file")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ModelFileError(
            f"model {shown!r} is format {manifest.get('format_version')} (jaxdp "
            f"{manifest.get('jaxdp_version')}); this jaxdp {__version__} reads format {FORMAT_VERSION}"
        )
    try:
        tree = decode(manifest["tree"], arrays)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, ImportError) as err:
        raise ModelFileError(f"model {shown!r} holds what this version cannot read: {err}") from None
    return Model(
        manifest["name"],
        tree["mechanism"],
        tree["state"],
        tree["domain"],
        tree["coding"],
        manifest["report"],
        tuple(tree["ledger"]),
        int(manifest["rows"]),
    )


def _rows(table: Dataset | RawTable, index: np.ndarray) -> Dataset | RawTable:
    """The records of a table at `index` (a mask or positions)."""
    if isinstance(table, Dataset):
        return Dataset(table.domain, table.codes[index], table.numeric[index])
    return RawTable(
        table.schema,
        {k: v[index] for k, v in table.codes.items()},
        {k: v[index] for k, v in table.values.items()},
    )


def _concatenated(tables: list[Dataset | RawTable]) -> Dataset | RawTable:
    first = tables[0]
    if isinstance(first, Dataset):
        return Dataset(
            first.domain,
            np.concatenate([t.codes for t in tables]),
            np.concatenate([t.numeric for t in tables]),
        )
    return RawTable(
        first.schema,
        {k: np.concatenate([t.codes[k] for t in tables]) for k in first.codes},
        {k: np.concatenate([t.values[k] for t in tables]) for k in first.values},
    )
