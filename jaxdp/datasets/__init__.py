"""Small datasets bundled with jaxdp, so examples and tests run with no network.

`load("adult")` gives the 13-attribute discretised UCI Adult table (48,842 records, all 286 3-way
marginals = 312,798 counting queries); `load("adult-reduced")` its 7-attribute projection whose
full domain (336,000 cells) fits a dense histogram. Origin and licence: LICENSE-DATA.md here
(UCI Adult, CC BY 4.0).

The files hold integer codes; their domains carry each code's label (`adult-labels.json`: the
census's own categories, and each numeric bin's range, e.g. age "30-39"), so a release decodes and
writes as people, not codes.

Shipped workloads, by name (`workload(name)`, or `--workload NAME` on the command line):
"adult-target", the 12 two-way marginals of each ADULT attribute with the income>50K target
(what a classifier trained on the release needs; README's first command runs AIM on it).
"""

from __future__ import annotations

import json
from importlib import resources

from jaxdp.domain import Categorical, Dataset, Domain, load_domain, read_csv

NAMES = ("adult", "adult-reduced")
WORKLOADS = ("adult-target",)


def _check(name: str) -> None:
    if name not in NAMES:
        raise ValueError(f"unknown bundled dataset {name!r}; available: {list(NAMES)}")


def domain(name: str) -> Domain:
    """The declared domain of a bundled dataset, its categories labelled."""
    _check(name)
    with resources.as_file(resources.files(__name__) / f"{name}-domain.json") as path:
        sizes = load_domain(path)
    labels = json.loads((resources.files(__name__) / "adult-labels.json").read_text())
    return Domain(
        tuple(Categorical(a.name, a.size, tuple(labels[a.name])) for a in sizes.attributes), sizes.target
    )


def load(name: str) -> Dataset:
    """Load a bundled dataset, validated against its domain (the file holds codes; the dataset's
    domain labels them)."""
    labelled = domain(name)
    with resources.as_file(resources.files(__name__) / f"{name}.csv.gz") as path:
        coded = read_csv(path, labelled.without_labels())
    return Dataset(labelled, coded.codes, coded.numeric)


def workload(name: str) -> list[list[str]]:
    """A shipped workload: its marginals as lists of attribute names."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown shipped workload {name!r}; available: {list(WORKLOADS)}")
    return json.loads((resources.files(__name__) / f"{name}.workload.json").read_text())
