#!/bin/bash
# xgb's first 16 trials with the code of b82b7d6 (TVM's search on one thread) and this checkout's (every core),
# interleaved per layer and seed. Needs the old code beside it: git worktree add ../metatune-b82b7d6 b82b7d6
root=$(git rev-parse --show-toplevel); cd $root
old=${OLD:-$root/../metatune-b82b7d6}
out=$root/runs/xgb-threads-ab; mkdir -p $out
i=0
for seed in ${SEEDS:-0 1 2}; do
  while read -r name wl; do
    i=$((i+1))
    if [ $((i % 2)) -eq 0 ]; then order="old new"; else order="new old"; fi
    for v in $order; do
      if [ $v = old ]; then pp=$old; else pp=$root; fi
      [ -f $out/$v/$name-s$seed.json ] && continue
      mkdir -p $out/$v
      (cd $pp && PYTHONPATH=$pp $root/.venv/bin/python -m metatune tune --workload "$wl" --strategy xgb --trials 16 --seed $seed \
        --db $out/$v/$name-s$seed --json $out/$v/$name-s$seed.json > $out/$v/$name-s$seed.log 2>&1)
      echo "$(date +%T) $v $name s$seed $(python3 -c "import json;print(json.load(open('$out/$v/$name-s$seed.json'))['best_gflops'])" 2>/dev/null)"
    done
  done < <(python3 -c "
import yaml
for e in yaml.safe_load(open('bench/suites/other-networks.yaml')): print(e['name'], e['workload'])")
done
echo done
