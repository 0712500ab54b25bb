"""Binary classification metrics: AUROC (area under the ROC curve) and AUPRC (average precision)."""

import numpy as np
from sklearn.metrics import average_precision_score, roc_auc_score

__all__ = ["binary_metrics"]


def binary_metrics(y_true, y_score) -> dict:
    """AUROC and AUPRC of scores against 0/1 labels; NaN (with a reason) when a class is absent."""
    y_true = np.asarray(y_true).astype(int)
    y_score = np.asarray(y_score, dtype=float)
    positives = int(y_true.sum())
    out = {"n": int(y_true.size), "positives": positives}
    if positives in (0, y_true.size):
        return out | {"auroc": float("nan"), "auprc": float("nan"), "note": "only one class present"}
    return out | {"auroc": float(roc_auc_score(y_true, y_score)),
                  "auprc": float(average_precision_score(y_true, y_score))}
