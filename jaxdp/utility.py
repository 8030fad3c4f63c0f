"""ML utility of a synthetic table: logistic regression trained on it, tested on real rows.

Features: one-hot categorical columns (the target excluded) and the numeric columns in their
normalised [0, 1] units; a multinomial logistic regression fitted by full-batch Adam (optax) with
a small L2 penalty. The score is macro F1 (mean over classes of per-class F1) on held-out real
rows, as in RAP++ Section 5.2. Uses real data: an evaluation for the data holder, not a release.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxdp.domain import Categorical, Dataset


def features(data: Dataset, target: str) -> tuple[np.ndarray, np.ndarray]:
    """(features (n, width) float32, labels (n,) int32) with the target column left out."""
    dom = data.domain
    if not isinstance(dom[target], Categorical):
        raise ValueError(f"target {target!r} must be a categorical column")
    cat_names = [a.name for a in dom.categorical]
    y = cat_names.index(target)
    blocks = [
        np.eye(a.size, dtype=np.float32)[data.codes[:, j]] for j, a in enumerate(dom.categorical) if j != y
    ]
    blocks.append(data.numeric.astype(np.float32))
    return np.concatenate(blocks, axis=1), data.codes[:, y].astype(np.int32)


def fit_logistic(
    x: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    *,
    steps: int = 500,
    learning_rate: float = 0.05,
    l2: float = 1e-4,
) -> tuple[jax.Array, jax.Array]:
    """(weights (width, n_classes), bias (n_classes,)) of a multinomial logistic regression."""
    x, y = jnp.asarray(x), jnp.asarray(y)

    def loss(params):
        w, b = params
        logits = x @ w + b[None, :]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean() + l2 * jnp.sum(w**2)

    optimizer = optax.adam(learning_rate)

    @jax.jit
    def train(params):
        def step(carry, _):
            params, state = carry
            grads = jax.grad(loss)(params)
            updates, state = optimizer.update(grads, state, params)
            return (optax.apply_updates(params, updates), state), None

        (params, _), _ = jax.lax.scan(step, (params, optimizer.init(params)), None, length=steps)
        return params

    init = (jnp.zeros((x.shape[1], n_classes), jnp.float32), jnp.zeros(n_classes, jnp.float32))
    return train(init)


def predict(w: jax.Array, b: jax.Array, x: np.ndarray) -> np.ndarray:
    """(n,) int the most likely class of each row of `x` under the fitted regression."""
    return np.asarray(jnp.argmax(jnp.asarray(x) @ w + b[None, :], axis=1))


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int) -> float:
    """Mean over classes of 2 TP / (2 TP + FP + FN) (a class absent from both counts as 0)."""
    scores = []
    for c in range(n_classes):
        tp = np.sum((y_pred == c) & (y_true == c))
        fp = np.sum((y_pred == c) & (y_true != c))
        fn = np.sum((y_pred != c) & (y_true == c))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return float(np.mean(scores))


def logistic_f1(train: Dataset, test: Dataset, target: str, **fit_options) -> float:
    """Macro F1 on `test` of a logistic regression trained on `train` (same domain)."""
    if train.domain != test.domain:
        raise ValueError("train and test tables must share the same domain")
    n_classes = train.domain[target].size
    x, y = features(train, target)
    w, b = fit_logistic(x, y, n_classes, **fit_options)
    x_test, y_test = features(test, target)
    predicted = predict(w, b, x_test)
    return macro_f1(y_test, predicted, n_classes)
