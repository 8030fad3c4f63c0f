"""The host-driven mechanisms (AIM, MST) reproduce what `tests/goldens/host_goldens.json`
recorded (`tests/goldens/host.py` says what is pinned and why): exactly for the ledger, the plan,
the picks, the noisy counts and the compressed domain; the model's answers within a tolerance
derived from the measurements' noise, tight enough to see a changed fit (negative controls)."""

import json

import numpy as np
import pytest

from tests.goldens.host import CASES, CHANGED, OUT, answers_tolerance, outputs
from tests.mechanisms.test_goldens import at_sse42

pytest.importorskip("mbi")

RECORDED = json.loads(OUT.read_text())


def differences(got: dict, expected: dict, atol: float) -> list[str]:
    wrong = [k for k in expected if k != "answers" and got[k] != expected[k]]
    if not np.allclose(got["answers"], expected["answers"], rtol=0.0, atol=atol):
        wrong.append("answers")
    return wrong


@pytest.mark.parametrize("name", sorted(CASES))
def test_outputs_match_the_goldens(name):
    mechanism = CASES[name]()
    expected = RECORDED["cases"][name]
    assert not differences(outputs(mechanism), expected, answers_tolerance(mechanism, expected))


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_changed_mechanism_matches_no_golden(name):
    mechanism = CHANGED[name]()
    expected = RECORDED["cases"][name]
    assert differences(outputs(mechanism), expected, answers_tolerance(mechanism, expected))


def test_a_changed_output_matches_no_golden():
    """Negative control on the comparison: one moved pick, one moved noisy count, or answers
    moved by twice their tolerance are each found."""
    expected = RECORDED["cases"]["mst"]
    atol = answers_tolerance(CASES["mst"](), expected)
    picks = {**expected, "picks": [expected["picks"][0] + 1, *expected["picks"][1:]]}
    assert differences(picks, expected, atol) == ["picks"]
    first = expected["measurements"][0]
    moved = [[first[0], [first[1][0] + 1, *first[1][1:]]], *expected["measurements"][1:]]
    assert differences({**expected, "measurements": moved}, expected, atol) == ["measurements"]
    answers = {**expected, "answers": [a + 2 * atol for a in expected["answers"]]}
    assert differences(answers, expected, atol) == ["answers"]


def test_the_goldens_name_their_commit_and_every_case():
    assert len(RECORDED["commit"]) == 40 and set(RECORDED["cases"]) == set(CASES) == set(CHANGED)
    for case in RECORDED["cases"].values():
        assert case["ledger"] and all(entry["rho"] > 0 for entry in case["ledger"])


def test_the_goldens_hold_at_another_vector_width():
    """As `test_goldens`' test of the same name: the fits' sums in SSE4.2's order."""
    done = at_sse42(f"{__file__}::test_outputs_match_the_goldens")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"{len(CASES)} passed" in done.stdout
