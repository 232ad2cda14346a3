#!/usr/bin/env bash
# gpu_check.sh: build cohort against a CUDA-enabled PyTorch's libtorch, compare one member's
# training throughput on the GPU (batches from the table's resident copy on the device, and
# from the host) and on the CPU, then run the loop benchmark on the GPU (docs/benchmarks.md,
# "Training" and "On a GPU").
#
# Needs: an NVIDIA GPU with a working driver (nvidia-smi), a python3 whose torch was built
# with CUDA, cmake, ninja (or make), a C++20 compiler, and cohort's other build dependencies
# (scripts/bootstrap installs them on Debian/Ubuntu). The Fashion-MNIST training IDX files come
# from --data DIR, else /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist),
# else torchvision's download layout (DIR/FashionMNIST/raw) under ~/.torch, ~/data, ./data.
#
# Without Debian's -dev packages (most GPU machines), pass --deps-bundle DIR, a bundle made by
# scripts/deps-bundle on a Debian machine (docs/development.md, "Offline builds").
#
# Usage: bench/gpu_check.sh [--data DIR] [--python PY] [--device cuda:0] [--epochs 3]
#                           [--batch-size 256] [--threads N] [--build-dir DIR] [--work DIR]
#                           [--loop-settings short] [--members-per-device 1] [--no-loop]
# Prints the throughput of `cohort train` on the GPU with resident and host-gathered batches
# and on the CPU with the same settings, their ratios and whether the two GPU members predict
# alike; then bench/loop_bench.py on the GPU, cohort against the seed's design in the same
# PyTorch (needs the four Fashion-MNIST .gz IDX files in the data directory). It never asserts
# figures.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data=""
python="${PYTHON:-python3}"
device="cuda:0"
epochs=3
batch=256
threads="$(nproc)"
build_dir="$repo/build-gpu"
work=""
bundle=""
model="dense 256 relu, dropout 0.1, dense 10"
loop=1
loop_settings="short"
members_per_device=1

die() {  # the message may come in several arguments, joined by spaces
  echo "gpu_check: error: $*" >&2
  exit 1
}

usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) data="${2:?--data needs a directory}"; shift 2 ;;
    --python) python="${2:?--python needs an interpreter}"; shift 2 ;;
    --device) device="${2:?--device needs a value, e.g. cuda:0}"; shift 2 ;;
    --epochs) epochs="${2:?}"; shift 2 ;;
    --batch-size) batch="${2:?}"; shift 2 ;;
    --threads) threads="${2:?}"; shift 2 ;;
    --build-dir) build_dir="${2:?}"; shift 2 ;;
    --work) work="${2:?}"; shift 2 ;;
    --deps-bundle) bundle="$(cd "${2:?--deps-bundle needs a directory}" && pwd)"; shift 2 ;;
    --loop-settings) loop_settings="${2:?}"; shift 2 ;;
    --members-per-device) members_per_device="${2:?}"; shift 2 ;;
    --no-loop) loop=0; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

# --- 1. A GPU, and a PyTorch that can use it -------------------------------------------------
command -v nvidia-smi >/dev/null 2>&1 ||
  die "nvidia-smi not found: this check needs a machine with an NVIDIA GPU and its driver"
nvidia-smi -L >/dev/null 2>&1 ||
  die "nvidia-smi cannot list a GPU (no GPU, or the driver is not loaded)"
command -v "$python" >/dev/null 2>&1 || die "no Python interpreter '$python' (pass --python PY)"

torch_info="$("$python" - <<'EOF' 2>&1
import sys
try:
    import torch
except Exception as e:
    print(f"ERROR cannot import torch: {e}")
    sys.exit(0)
print("VERSION", torch.__version__)
print("CUDA", torch.version.cuda or "none")
print("AVAILABLE", int(torch.cuda.is_available()))
print("COUNT", torch.cuda.device_count())
print("PREFIX", torch.utils.cmake_prefix_path)
print("CXX11_ABI", int(torch.compiled_with_cxx11_abi()))
if torch.cuda.is_available():
    print("NAME", torch.cuda.get_device_name(0))
EOF
)" || die "running $python failed: $torch_info"
field() { awk -v k="$1" '$1 == k { $1 = ""; sub(/^ /, ""); print; exit }' <<<"$torch_info"; }
if grep -q '^ERROR' <<<"$torch_info"; then
  die "$python: $(sed -n 's/^ERROR //p' <<<"$torch_info")" \
    "(install a CUDA build of PyTorch, or pass --python PY)"
fi
torch_version="$(field VERSION)"
[[ "$(field CUDA)" != none ]] ||
  die "$python has torch $torch_version built without CUDA (a CPU-only build); install a CUDA build"
[[ "$(field AVAILABLE)" == 1 ]] ||
  die "torch $torch_version (CUDA $(field CUDA)) sees no usable GPU:" \
    "torch.cuda.is_available() is False (driver/CUDA mismatch?)"
prefix="$(field PREFIX)"
[[ -d "$prefix/Torch" ]] || die "torch's CMake files are missing: $prefix/Torch does not exist"
echo "torch $torch_version, CUDA $(field CUDA), $(field COUNT) GPU(s): $(field NAME)"
echo "libtorch CMake prefix: $prefix (C++11 ABI: $(field CXX11_ABI))"

# --- 2. Build cohort against that libtorch ---------------------------------------------------
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
cmake -S "$repo" -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" -DCOHORT_BUILD_TESTS=OFF -DCOHORT_BUILD_BENCH=OFF \
  ${bundle:+-DCOHORT_DEPS_BUNDLE="$bundle"} ||
  die "cmake configure failed in $build_dir (see above)"
if ! cmake --build "$build_dir" --target cohort cohort-member -j "$(nproc)"; then
  if [[ "$(field CXX11_ABI)" == 0 ]]; then
    die "building cohort failed; this torch uses the old C++ ABI (_GLIBCXX_USE_CXX11_ABI=0), so
libraries from the system (fmt) may not link with it: use a PyTorch built with the C++11 ABI"
  fi
  die "building cohort failed (see above)"
fi
cohort="$build_dir/src/cli/cohort"
[[ -x "$cohort" ]] || die "the build did not produce $cohort"
# The CUDA libtorch's shared libraries live next to the Python package.
torch_lib="$(dirname "$prefix")/../lib"
export LD_LIBRARY_PATH="$torch_lib:${LD_LIBRARY_PATH:-}"

# --- 3. The Fashion-MNIST training images ----------------------------------------------------
find_idx() {  # prints the directory holding both training IDX files (plain or .gz)
  local d
  for d in "$@"; do
    [[ -n "$d" && -d "$d" ]] || continue
    if { [[ -f "$d/train-images-idx3-ubyte" ]] || [[ -f "$d/train-images-idx3-ubyte.gz" ]]; } &&
      { [[ -f "$d/train-labels-idx1-ubyte" ]] || [[ -f "$d/train-labels-idx1-ubyte.gz" ]]; }; then
      echo "$d"
      return 0
    fi
  done
  return 1
}
if [[ -n "$data" ]]; then
  data_dir="$(find_idx "$data" "$data/FashionMNIST/raw")" ||
    die "--data $data holds no train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz]"
else
  data_dir="$(find_idx /usr/share/datasets/fashion-mnist \
    "$HOME/.torch/datasets/FashionMNIST/raw" "$HOME/data/FashionMNIST/raw" \
    "$PWD/data/FashionMNIST/raw" "$repo/data/FashionMNIST/raw")" ||
    die "Fashion-MNIST training data not found. Pass --data DIR with
train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz] (for example from
https://github.com/zalandoresearch/fashion-mnist), install Debian's dataset-fashion-mnist,
or download it with torchvision:
  $python -c \"import torchvision; torchvision.datasets.FashionMNIST('data', download=True)\"
and pass --data data/FashionMNIST/raw"
fi
pick() { if [[ -f "$1" ]]; then echo "$1"; else echo "$1.gz"; fi; }
images="$(pick "$data_dir/train-images-idx3-ubyte")"
labels="$(pick "$data_dir/train-labels-idx1-ubyte")"
echo "data: $images"

own_work=0
if [[ -z "$work" ]]; then
  work="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")"
  own_work=1
fi
mkdir -p "$work" || die "cannot create the work directory $work"
cleanup() { if [[ "$own_work" == 1 ]]; then rm -rf "$work"; fi; }
trap cleanup EXIT
store="$work/store"
rm -rf "$store"
"$cohort" data init "$store" >/dev/null || die "cohort data init $store failed"
"$cohort" data import "$store" --table train --idx "$images" "$labels" >/dev/null ||
  die "importing $images into $store failed"
echo "store: $store (60,000 rows)"

# --- 4. Train one member on the GPU and on the CPU -------------------------------------------
train() {  # $1 device, $2 checkpoint name; prints the JSON summary of `cohort train --json`
  "$cohort" train --store "$store" --table train --model "$model" --epochs "$epochs" --seed 1 \
    --batch-size "$batch" --threads "$threads" --device "$1" --out "$work/$2.ckpt" --json
}
report() {  # $1 label, $2 the JSON summary; prints samples/s and the per-step split (ms)
  "$python" - "$1" "$batch" "$2" <<'EOF'
import json, sys
label, batch, text = sys.argv[1], int(sys.argv[2]), sys.argv[3]
r = json.loads(text[text.index("{"):])
steps = max(1, -(-r["samples"] // batch))
st = r["step_times"]
parts = ("data", "forward", "backward", "optimizer")
split = "  ".join(f"{k} {1e3 * st[k] / steps:.3f}" for k in parts)
print(f"{label:<8} {r['samples_per_second']:>12.0f} samples/s   ms/step: {split}")
EOF
}
sps() {  # stdin the JSON summary; prints samples/s
  "$python" -c 'import json, sys; t = sys.stdin.read()
print(json.loads(t[t.index("{"):])["samples_per_second"])'
}

echo
echo "model \"$model\", batch $batch, $epochs epochs, Adam 1e-3, CPU threads $threads"
# One short unmeasured run warms up CUDA (context creation, kernel loading) and the page cache.
"$cohort" train --store "$store" --table train --model "$model" --epochs 1 --seed 1 \
  --batch-size "$batch" --device "$device" --out "$work/warmup.ckpt" --json >/dev/null ||
  die "training on $device failed (see above)"
gpu_json="$(COHORT_RESIDENT_DATA=on train "$device" gpu-resident)" ||
  die "training on $device failed (see above)"
host_json="$(COHORT_RESIDENT_DATA=off train "$device" gpu-host)" ||
  die "training on $device with host batches failed (see above)"
cpu_json="$(train cpu cpu)" || die "training on cpu failed (see above)"
report "resident" "$gpu_json"
report "host" "$host_json"
report "cpu" "$cpu_json"
gpu_sps="$(sps <<<"$gpu_json")"
host_sps="$(sps <<<"$host_json")"
cpu_sps="$(sps <<<"$cpu_json")"
awk -v g="$gpu_sps" -v h="$host_sps" -v c="$cpu_sps" -v d="$device" 'BEGIN {
  printf "ratio    %12.2fx (%s resident / cpu), %.2fx (resident / host batches)\n", g / c, d, g / h }'

# The two GPU members saw the same batches: their predictions of the training table agree.
for name in gpu-resident gpu-host; do
  "$cohort" predict --checkpoint "$work/$name.ckpt" --store "$store" --table train \
    --device "$device" --out "$work/$name.npy" >/dev/null || die "predicting with $name failed"
done
"$python" - "$work/gpu-resident.npy" "$work/gpu-host.npy" <<'EOF'
import sys
import numpy as np
a, b = (np.load(p) for p in sys.argv[1:3])
print(f"resident vs host batches on the GPU: predictions of {a.shape[0]} rows differ by at most "
      f"{float(np.abs(a - b).max()):.3g}, argmax agrees on {float((a.argmax(1) == b.argmax(1)).mean()):.4f}")
EOF

# --- 5. The loop benchmark on the GPU --------------------------------------------------------
if [[ "$loop" == 1 ]]; then
  echo
  echo "loop benchmark on $device (settings $loop_settings, $members_per_device member(s) per device):"
  COHORT_FASHION_MNIST="$data_dir" "$python" "$repo/bench/loop_bench.py" --cohort "$cohort" \
    --devices "$device" --members-per-device "$members_per_device" --python "$python" \
    --settings "$loop_settings" --make-store --store "$work/loop-store" \
    --scratch "$work/loop-bench" || die "the loop benchmark failed (see above)"
fi
