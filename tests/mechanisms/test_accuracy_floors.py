"""Accuracy floors: every registry mechanism, with its registry defaults, stays under a ceiling of
its own recorded error, and below the Independent baseline's, on the error its paper optimises, on
the bundled ADULT-reduced table (48,842 records, 7 attributes, all 35 3-way marginals) at epsilon
1, delta 1e-9, seeds 0-2 (the public variants get every tenth record as their public table).

The paper's error: max absolute error of the workload's answers for the Adaptive Measurements
family (MWEM, DualQuery, FEM, RAP, RAP-softmax, GEM, PEP and the public variants), RAP++ and
Independent; the mean L1 over the workload's marginals for AIM, AIM-GDP, AIM-GEM, MST, PrivBayes and
SWIFT;
Gaussian is judged on its noisy answers.

Ceilings (`CEILINGS`): each seed's error at most margin x the mechanism's recorded mean over seeds
0-2, from `bench/bench_accuracy_floors.py` (`bench/results/accuracy_floors.jsonl`, which runs
this job in fresh processes over seeds 0-4: the extra two sample the spread). The margin is
max(1.25, 1 + 4 sd / mean), rounded up to 0.05, sd the standard deviation of the recorded errors
over seeds 0-4: 1.25 where the seeds agree within a sixteenth of the mean (AIM, AIM-GEM, MST,
MWEM, GEM, PMW-Pub, PEP-Pub, Gaussian, Independent), up to 1.80 for RAP++ (sd 19% of its mean).

Why a working mechanism stays under its ceiling on any x86-64 machine (no false failure): the test
runs the recorded seeds through the recorded code, so where the floats come out the same it scores
the recorded errors, the worst of which is 1.22 x its mean (RAP-softmax's seed 4, margin 1.50;
seeds 0-2 at most 1.17 x, RAP++'s seed 2 against 1.80). The noise, the picks and the records are
drawn from the key by integer arithmetic (exact discrete Gaussian, exponential mechanism on int64
scores, systematic rounding), so another vector width or processor moves only the float fits, by
reordered sums (`test_goldens.py` pins the integer leaves bit for bit at SSE4.2 width and the
floats within 1e-3 of their scale), far inside a margin of 25% or more. If such a move ever flips
a pick or a rounded count, the run goes on as another draw of the same mechanism, whose error is
one from the seed-to-seed distribution that seeds 0-4 sample: every ceiling is at least 4 of its
recorded sd above the mean (4.0-4.5 for the mechanisms whose margin the spread sets, 5-160 for the
rest). The same holds for a change that only reorders a fit's arithmetic (a fitting program
replaced by an equivalent one): it moves the errors by rounding, not by seeds' widths.

The Independent comparison: each seed's error below Independent's mean over the same seeds (the
README's claim: every mechanism beats Independent on its paper's error). Every ceiling is already
below it (the closest, RAP's 0.0997 against Independent's max error 0.108); the check guards the
claim should Independent itself get better. It was 0.8 x Independent before the ceilings, which
was the only floor and let a data-blind MST through (below); at 0.8 RAP's limit would sit 1.17 x
its mean, inside the 1.35 its spread asks for, so it is 1.0 x now.

Negative controls, each run against this module and reverted (seeds 0-2, errors against the
ceilings):

- MST whose edge selection scores no data: `MSTSelection.__call__` handed the model's counts,
  rounded, in place of the data's (every score about 0, so the edges are picked uniformly among
  those Kruskal's rule allows).
  `test_every_mechanism_stays_under_its_own_ceiling_and_below_independent[mst]` fails: mean L1
  0.3252, 0.2928, 0.2940 against the ceiling 0.2400 (real MST: 0.1918-0.1924); the old floor,
  0.8 x Independent's mean L1 (0.8 x 0.4167 = 0.3334), passed it.
- AIM whose selection scores are constant (`AIMSelection.__call__` drawing the exponential
  mechanism on zeros: uniform over the eligible marginals): `[aim]` fails, mean L1 0.3486,
  0.1242, 0.2472 against the ceiling 0.0674 (real AIM: 0.0530-0.0557); the old floor caught
  seed 0 only.
- `test_a_data_blind_selection_breaks_its_ceiling` keeps the same kind of mutation in the module,
  through monkeypatch: MST's, AIM's and PrivBayes's selections handed zero counts (scores that
  read no data), each seed's error above the mechanism's ceiling (mean L1: MST 0.3133, 0.3037,
  0.3059 against 0.2400; AIM 0.3419, 0.3417, 0.4063 against 0.0674; PrivBayes 0.2255, 0.2451,
  0.2573 against 0.1520, all but AIM's seed 2 under the old floor's 0.3334).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import api
from jaxdp.queries import all_kway
from jaxdp.selection import AIMSelection, MSTSelection, PrivBayesSelection

SEEDS = (0, 1, 2)
BELOW_INDEPENDENT = 1.0
MEAN_L1 = ("aim", "aim-gdp", "aim-gem", "mst", "privbayes", "swift")

# name: (the paper's error, its recorded mean over seeds 0-2, the margin), from the records at
# 10e5584-dirty (the library as 10e5584 with uncommitted work in jaxdp/) on a 2-core AMD EPYC of
#     PYTHONPATH=. python bench/bench_accuracy_floors.py --out bench/results/accuracy_floors.jsonl
# (printed by `... --table --out bench/results/accuracy_floors.jsonl`). Ceiling: margin x mean.
CEILINGS = {
    "aim": ("mean_l1", 0.0539495, 1.25),
    "aim-gdp": ("mean_l1", 0.0554951, 1.25),  # recorded at 9316295 (its default conversion "gdp")
    "aim-gem": ("mean_l1", 0.0657276, 1.25),
    "dualquery": ("max_abs", 0.0365532, 1.35),
    "fem": ("max_abs", 0.0311412, 1.30),
    "gaussian": ("max_abs", 0.00407436, 1.25),
    "gem": ("max_abs", 0.0057396, 1.25),
    "gem-pub": ("max_abs", 0.00395834, 1.35),
    "independent": ("max_abs", 0.108227, 1.25),
    "mst": ("mean_l1", 0.191983, 1.25),
    "mwem": ("max_abs", 0.0336596, 1.25),
    "pmw-pub": ("max_abs", 0.00413578, 1.25),
    "pep": ("max_abs", 0.00659269, 1.60),
    "pep-pub": ("max_abs", 0.00462717, 1.25),
    "privbayes": ("mean_l1", 0.112606, 1.35),
    "rap": ("max_abs", 0.0738777, 1.35),
    "rap-softmax": ("max_abs", 0.00347379, 1.50),
    "rap++": ("max_abs", 0.0190546, 1.80),
    "swift": ("mean_l1", 0.0473232, 1.25),  # recorded at 9316295 (its default conversion "gdp")
}


def ceiling(name: str) -> float:
    _, mean, margin = CEILINGS[name]
    return margin * mean


@pytest.fixture(scope="module")
def adult_reduced():
    data = jaxdp.datasets.load("adult-reduced")
    return data, all_kway(data.domain.sizes, 3)


def _errors(name: str, data, workload) -> list[dict]:
    spec = api.mechanism_spec(name)
    public = jaxdp.Dataset.from_codes(data.domain, data.codes[::10]) if spec.public else None
    errors = []
    for seed in SEEDS:
        mechanism = api.build(name, data, workload, epsilon=1.0, delta=1e-9, public=public)
        result = api.execute(name, mechanism, jax.random.key(seed), data.domain)
        errors.append(api.release_errors(data, result, workload))
    return errors


@pytest.fixture(scope="module")
def independent(adult_reduced) -> list[dict]:
    return _errors("independent", *adult_reduced)


def test_every_registry_mechanism_has_a_ceiling_on_its_papers_error():
    assert sorted(CEILINGS) == sorted(api.MECHANISMS)
    for name, (metric, _, margin) in CEILINGS.items():
        assert metric == ("mean_l1" if name in MEAN_L1 else "max_abs"), name
        assert 1.25 <= margin <= 2.0, name


@pytest.mark.parametrize("name", list(api.MECHANISMS))
def test_every_mechanism_stays_under_its_own_ceiling_and_below_independent(name, adult_reduced, independent):
    metric = CEILINGS[name][0]
    errors = independent if name == "independent" else _errors(name, *adult_reduced)
    baseline = float(np.mean([e[metric] for e in independent]))
    for seed, e in zip(SEEDS, errors, strict=True):
        assert e[metric] <= ceiling(name), (seed, metric, e[metric], ceiling(name))
        if name != "independent":
            assert e[metric] < BELOW_INDEPENDENT * baseline, (seed, metric, e[metric], baseline)


def _reading_zero_counts(call):
    """The rule `call`, handed zero counts in place of the data's: scores that read no data."""

    def blind(self, key, counts, *args, **kwargs):
        return call(self, key, counts.map(jnp.zeros_like), *args, **kwargs)

    return blind


@pytest.mark.parametrize(
    "name, rule", [("mst", MSTSelection), ("aim", AIMSelection), ("privbayes", PrivBayesSelection)]
)
def test_a_data_blind_selection_breaks_its_ceiling(name, rule, adult_reduced, monkeypatch):
    monkeypatch.setattr(rule, "__call__", _reading_zero_counts(rule.__call__))
    metric = CEILINGS[name][0]
    for seed, e in zip(SEEDS, _errors(name, *adult_reduced), strict=True):
        assert e[metric] > ceiling(name), (seed, metric, e[metric], ceiling(name))
