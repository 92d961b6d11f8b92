"""xgb's best after 16 trials, every core (new/) vs one TVM search thread (old/), paired by layer and seed:
geomean ratio with a t-interval on the log ratios, per seed too.

    python docs/bench/xgb-threads-ab/pairs.py docs/bench/xgb-threads-ab
"""
import json
import math
import statistics
import sys
from pathlib import Path

from scipy import stats


def main(root: Path) -> None:
    pairs = []
    for new in sorted((root / "new").glob("*.json")):
        old = root / "old" / new.name
        if old.exists():
            ratio = json.loads(new.read_text())["best_gflops"] / json.loads(old.read_text())["best_gflops"]
            pairs.append((new.stem, math.log(ratio)))
    logs = [r for _, r in pairs]
    n, mean, sd = len(logs), statistics.mean(logs), statistics.stdev(logs)
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    print(f"{n} pairs: every core / one thread = {math.exp(mean):.3f}x (95% interval {math.exp(mean - half):.3f}-"
          f"{math.exp(mean + half):.3f}), median {math.exp(statistics.median(logs)):.3f}, "
          f"every core ahead in {sum(r > 0 for r in logs)}")
    for seed in sorted({name.rsplit("-s", 1)[1] for name, _ in pairs}):
        per_seed = [r for name, r in pairs if name.endswith(f"-s{seed}")]
        print(f"  seed {seed}: {len(per_seed)} pairs, {math.exp(statistics.mean(per_seed)):.3f}x")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
