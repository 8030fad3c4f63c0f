"""Raw mixed-type CSV in, original labels and units out; public bounds enforced."""

import io
from pathlib import Path

import numpy as np
import pytest

from jaxdp.domain import DataError, load_domain, read_csv, write_rows

SCHEMA = Path(__file__).resolve().parent.parent / "examples" / "adult_schema.json"
RAW = "\n".join(
    [
        "age,workclass,fnlwgt,education,education-num,marital-status,occupation,relationship,race,sex,"
        "capital-gain,capital-loss,hours-per-week,native-country,income>50K",
        "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, "
        "2174, 0, 40, United-States, <=50K",
        "50, Self-emp-not-inc, 1484705, Bachelors, 13, Married-civ-spouse, Exec-managerial, Husband, "
        "White, Male, 0, 0, 13, United-States, <=50K",
        "90, ?, 12285, Doctorate, 16, Widowed, ?, Unmarried, Other, Female, 99999, 4356, 99, "
        "Outlying-US(Guam-USVI-etc), >50K",
    ]
)


def test_raw_adult_rows_round_trip_in_labels_and_units():
    domain = load_domain(SCHEMA)
    data = read_csv(io.StringIO(RAW), domain)
    assert data.codes.shape == (3, 9) and data.numeric.shape == (3, 6)
    assert data.numeric.min() >= 0.0 and data.numeric.max() <= 1.0
    out = io.StringIO()
    write_rows(out, data)
    text = out.getvalue()
    expected = [line.replace(", ", ",") for line in RAW.strip().splitlines()]
    assert text.strip().splitlines() == expected  # labels and integer units exactly as read
    again = read_csv(io.StringIO(text), domain)
    np.testing.assert_array_equal(again.codes, data.codes)
    np.testing.assert_allclose(again.numeric, data.numeric, atol=1e-6)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (0, "16", "'age': 1 value(s) outside the declared bounds"),
        (2, "", "'fnlwgt': 1 empty cell(s)"),
        (1, "Space-force", "'workclass': 1 value(s) are not among its 9 declared categories"),
        (10, "lots", "'capital-gain': 1 value(s) are not numbers"),
    ],
)
def test_bad_values_are_refused_naming_column_and_count_not_value(field, value, message):
    lines = RAW.strip().splitlines()
    cells = lines[1].split(", ")
    cells[field] = value
    lines[1] = ", ".join(cells)
    with pytest.raises(DataError) as err:
        read_csv(io.StringIO("\n".join(lines)), load_domain(SCHEMA))
    assert message in str(err.value)
    if value:
        assert value not in str(err.value)


def test_schema_declares_public_bounds_for_the_six_numeric_columns():
    domain = load_domain(SCHEMA)
    assert [a.name for a in domain.numeric] == [
        "age",
        "fnlwgt",
        "education-num",
        "capital-gain",
        "capital-loss",
        "hours-per-week",
    ]
    assert domain.target == "income>50K" and len(domain.categorical) == 9
