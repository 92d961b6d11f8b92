"""What a run directory shows a reader: the evaluation table (eval.md) and the training curves (curves.png)."""

from __future__ import annotations

from pathlib import Path

from metatune.learn.evaluate import EvalResult, format_table
from metatune.learn.maml import TrainLog

EVAL_TABLE_FILE = "eval.md"
CURVES_PLOT_FILE = "curves.png"


def plot_curves(log: TrainLog, result: EvalResult, out: Path) -> None:
    # imported here: matplotlib is slow to import and its backend choice is global
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for name, values in log.curves.items():
        ax = axes[0] if "pretrain" in name else axes[1]
        ax.plot(values, label=name)
    axes[0].set_title("pretraining (per epoch)")
    axes[1].set_title("MAML (per iteration / validation)")
    axes[1].set_yscale("log")
    for method, by_k in result.metrics.items():
        ks = sorted(by_k, key=int)
        axes[2].plot([int(k) for k in ks], [by_k[k]["pairwise_acc"] for k in ks], marker="o", label=method)
    axes[2].set_title("held-out pairwise ranking accuracy vs k")
    axes[2].set_xlabel("k support samples")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def write_evaluation(out: Path, result: EvalResult, log: TrainLog) -> None:
    (out / EVAL_TABLE_FILE).write_text(format_table(result) + "\n")
    plot_curves(log, result, out / CURVES_PLOT_FILE)
    print(format_table(result))
