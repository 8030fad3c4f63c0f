"""ML utility (`jaxdp.utility`): the logistic regression learns what the features say, and macro
F1 is its definition."""

import numpy as np

import jaxdp
from jaxdp import utility


def test_macro_f1_is_the_mean_of_per_class_f1():
    y_true = np.array([0, 0, 1, 1, 2, 2, 2])
    y_pred = np.array([0, 1, 1, 1, 2, 0, 2])
    # class 0: tp 1, fp 1, fn 1 -> 0.5; class 1: tp 2, fp 1, fn 0 -> 0.8; class 2: tp 2, fp 0, fn 1 -> 0.8
    assert utility.macro_f1(y_true, y_pred, 3) == np.mean([0.5, 0.8, 0.8])
    assert utility.macro_f1(y_true, y_true, 4) == np.mean([1.0, 1.0, 1.0, 0.0])  # class 3 absent


def test_a_regression_trained_on_a_table_predicts_its_copy_and_not_noise():
    """The target is a function of one feature: trained on a table, the regression predicts a
    held-out copy of its law near perfectly; trained on a table whose target ignores the
    features (the negative control) it does no better than a coin."""
    domain = jaxdp.Domain.from_sizes({"a": 4, "b": 3, "y": 2})
    rng = np.random.default_rng(0)

    def table(n, informative):
        a, b = rng.integers(0, 4, n), rng.integers(0, 3, n)
        y = (a >= 2).astype(int) if informative else rng.integers(0, 2, n)
        return jaxdp.Dataset.from_codes(domain, np.stack([a, b, y], axis=1))

    test = table(2000, True)
    assert utility.logistic_f1(table(2000, True), test, "y") > 0.97
    assert utility.logistic_f1(table(2000, False), test, "y") < 0.7
