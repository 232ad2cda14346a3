#!/usr/bin/env bash
# The numpy-only reader (python/cohort_store.py) against a store written by the C++ side from
# real Fashion-MNIST data: import, split, remove, move back, compact.
#   tests/python_reader_test.sh COHORT_BINARY SCRATCH_DIR
set -euo pipefail
cohort=$1
scratch=$2
here=$(cd "$(dirname "$0")/.." && pwd)
data=/usr/share/datasets/fashion-mnist
images=$data/t10k-images-idx3-ubyte.gz
labels=$data/t10k-labels-idx1-ubyte.gz
n=2000

rm -rf "$scratch"
mkdir -p "$scratch"
store=$scratch/store
"$cohort" data init "$store"
"$cohort" data import "$store" --table train --idx "$images" "$labels" --limit $n
"$cohort" data split "$store" --from train --to pool --count $((n / 5)) --seed 7
# Remove two ids that are surely still in train (the split moved only ids it chose).
keep=$(${COHORT_PYTHON:-/usr/bin/python3} -c "
import sys; sys.path.insert(0, '$here/python'); import cohort_store
ids = cohort_store.open('$store').table('train').ids
print(','.join(str(i) for i in ids[:2]))")
"$cohort" data remove "$store" --table train --ids "$keep"
${COHORT_PYTHON:-/usr/bin/python3} -c "
import sys; sys.path.insert(0, '$here/python'); import cohort_store
print('\n'.join(str(i) for i in cohort_store.open('$store').table('pool').ids[::3]))" > "$scratch/back.txt"
"$cohort" data split "$store" --from pool --to train --ids-file "$scratch/back.txt"
"$cohort" data compact "$store" --threshold 0.001

${COHORT_PYTHON:-/usr/bin/python3} "$here/python/cohort_store_test.py" --store "$store" \
  --images "$images" --labels "$labels" --count $n
${COHORT_PYTHON:-/usr/bin/python3} "$here/python/cohort_store_test.py" --self-test \
  --images "$images" --labels "$labels" --count 500
