"""Cost-model quality on one workload's held-out configurations.

All metrics compare predicted scores with measured log-throughput. MSE is taken on
per-workload standardised values (predictions standardised over the same query set), so it
measures the *shape* of the prediction identically for every method and every k, including
k = 0 where no method knows the workload's scale. MSE(D) restricts it to the fastest 25%
(MetaTune §7.3). Peak score@k is TenSet's: best latency overall / best latency among the
model's top-k picks (1.0 = the model's top-k contains the optimum).
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

import numpy as np


def standardize(values: np.ndarray) -> np.ndarray:
    std = values.std()
    return (values - values.mean()) / (std if std > 1e-12 else 1.0)


def mse(pred: np.ndarray, true_log_thr: np.ndarray) -> float:
    return float(np.mean((standardize(pred) - standardize(true_log_thr)) ** 2))


def mse_top(pred: np.ndarray, true_log_thr: np.ndarray, fraction: float = 0.25) -> float:
    """MSE over the fastest `fraction` of configurations (MetaTune's MSE(D))."""
    p, t = standardize(pred), standardize(true_log_thr)
    top = t >= np.quantile(t, 1.0 - fraction)
    return float(np.mean((p[top] - t[top]) ** 2))


def pairwise_accuracy(pred: np.ndarray, true_log_thr: np.ndarray) -> float:
    """Fraction of pairs with different measured speed that the prediction orders correctly, a pair
    it scores alike counting half (a coin flip): tree models (XGBoost) predict many equal scores,
    and counting their ties as wrong would rank a constant predictor at 0, not 0.5."""
    dp = np.sign(pred[:, None] - pred[None, :])
    dt = np.sign(true_log_thr[:, None] - true_log_thr[None, :])
    pairs = np.triu(dt != 0, k=1)
    if not pairs.any():
        return float("nan")
    return float(np.mean(np.where(dp == 0, 0.5, dp == dt)[pairs]))


def peak_score(pred: np.ndarray, true_log_thr: np.ndarray, k: int) -> float:
    """best throughput among the model's top-k / best throughput overall (≤ 1)."""
    top = np.argsort(-pred, kind="stable")[:k]
    return float(2.0 ** (true_log_thr[top].max() - true_log_thr.max()))


def median_defined(values: Sequence[float]) -> float:
    """Median over workloads, leaving out those where a metric is undefined (NaN: e.g. pairwise accuracy
    where every configuration measured alike); `statistics.median` with a NaN depends on the order."""
    defined = [v for v in values if not math.isnan(v)]
    return float(statistics.median(defined)) if defined else float("nan")


def all_metrics(pred: np.ndarray, true_log_thr: np.ndarray) -> dict[str, float]:
    return {
        "mse": mse(pred, true_log_thr),
        "mse_d": mse_top(pred, true_log_thr),
        "pairwise_acc": pairwise_accuracy(pred, true_log_thr),
        "peak@1": peak_score(pred, true_log_thr, 1),
        "peak@5": peak_score(pred, true_log_thr, 5),
    }
