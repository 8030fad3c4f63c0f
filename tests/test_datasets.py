"""The bundled data loads with no network and matches its declared domain; its labels name each
record's raw census value."""

import csv
import re

import numpy as np
import pytest

from jaxdp import datasets
from jaxdp.domain import load_domain


def test_adult_is_bundled():
    data = datasets.load("adult")
    assert len(data) == 48842
    assert data.domain.sizes == (9, 16, 7, 15, 6, 5, 2, 42, 2, 10, 13, 6, 10)
    assert data.codes.dtype == np.int32
    assert (data.codes >= 0).all() and (data.codes < np.array(data.domain.sizes)).all()


def test_adult_reduced_is_enumerable():
    data = datasets.load("adult-reduced")
    assert len(data) == 48842 and data.domain.n_cells == 336000


def test_bundled_adult_equals_the_shared_copy(shared_data):
    from jaxdp.domain import read_csv

    src = shared_data / "dp-query-release"
    ref = read_csv(src / "adult.csv", load_domain(src / "adult-domain.json"))
    np.testing.assert_array_equal(ref.codes, datasets.load("adult").codes)


def test_bundled_tables_are_labelled_and_round_trip_through_their_labels(tmp_path):
    from jaxdp.domain import read_csv, write_csv

    for name in datasets.NAMES:
        data = datasets.load(name)
        assert all(a.labels is not None for a in data.domain.attributes), name
        write_csv(tmp_path / f"{name}.csv", data)
        with open(tmp_path / f"{name}.csv") as fh:
            first = next(csv.DictReader(fh))
        assert first["sex"] in {"Female", "Male"} and first["age"].endswith(("9", "+"))
        np.testing.assert_array_equal(read_csv(tmp_path / f"{name}.csv", data.domain).codes, data.codes)
    reduced, full = datasets.domain("adult-reduced"), datasets.domain("adult")
    assert all(a == full[a.name] for a in reduced.attributes)


def _in_bin(value: int, label: str) -> bool:
    """Whether a raw number lies in a bin labelled "lo-hi" or "lo+" (whole numbers)."""
    low, high = re.fullmatch(r"(\d+)(?:-(\d+)|\+)", label).groups()
    return int(low) <= value and (high is None or value <= int(high))


def test_bundled_labels_name_each_records_raw_value(shared_data):
    """Every record of the bundled ADULT against UCI's raw rows (train then test, in order): its
    categories' labels are the raw values, its bins' labels hold the raw numbers."""
    raw = shared_data / "dp-data-raw-adult"
    rows = []
    for part in ("train", "test"):
        with open(raw / f"{part}.csv") as fh:
            rows += [{k: v.strip() for k, v in r.items()} for r in csv.DictReader(fh) if r["age"]]
    data = datasets.load("adult")
    assert len(rows) == len(data)
    for j, attribute in enumerate(data.domain.attributes):
        labels = np.asarray(attribute.labels, dtype=object)[data.codes[:, j]]
        if attribute.name in ("age", "capital-gain", "capital-loss", "hours-per-week"):
            assert all(_in_bin(int(r[attribute.name]), label) for r, label in zip(rows, labels, strict=True))
        else:
            assert [r[attribute.name] for r in rows] == labels.tolist(), attribute.name


def test_unknown_name_is_refused():
    with pytest.raises(ValueError, match="unknown bundled dataset 'nope'"):
        datasets.load("nope")
