#!/bin/bash
# zlstore issues 41/42 on the device: FlagGems screened by zlstore, full autotune lists.
# bash device.sh TAG STEPS   (STEPS: any of setup,screen,dead,campaign)
set -u
TAG=${1:-a}; STEPS=${2:-screen,dead}
B=$(cd "$(dirname "$0")" && pwd)
exec > >(tee "$OUT/device_$TAG.log") 2>&1
T0=$(date +%s)
step() { echo; echo "### $(date -u '+%F %T') UTC (+$(( $(date +%s) - T0 )) s) $*"; }
cmd() { echo "\$ $1"; bash -c "$1"; echo "[exit status $?, +$(( $(date +%s) - T0 )) s]"; }
has() { [[ ",$STEPS," == *",$1,"* ]]; }
pack() {
  step "packing"
  cd /tmp/w && tar cJf "$OUT/runs_$TAG.txz" --exclude='*.cubin' --exclude='*.ptx' --exclude='*.llir' \
      --exclude='*.so' --exclude='*.hsaco' --exclude='__pycache__' runs 2>/dev/null
  [ -f /tmp/w/z.db ] && xz -T4 -c /tmp/w/z.db > "$OUT/z_$TAG.db.xz"
  ls -la "$OUT"
}
trap pack EXIT
step "setup"
mkdir -p /tmp/site /tmp/bin /tmp/w
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $B/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$B/zl
printf '#!/bin/sh\nexec python3 -m zlstore "$@"\n' > /tmp/bin/zlstore && chmod +x /tmp/bin/zlstore
export PATH=/tmp/bin:$PATH
[ -d /tmp/FlagGems ] || cp -r $B/fg /tmp/FlagGems
cd /tmp/w
[ -f $B/z_prev.db.xz ] && [ ! -f z.db ] && xz -dc $B/z_prev.db.xz > z.db
[ -f $B/runs_prev.txz ] && [ ! -d runs ] && tar xJf $B/runs_prev.txz
export ZL_BACKEND=cuda BENCH_LEVEL=core ZL_ENABLE_CUDAGRAPH=0 ZL_ISOLATE_TUNER_CACHE=1 ZL_DIRECT_REPEAT=1 \
       SHAPE_MODE=default USE_FLAGTUNE=0
cmd 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv'
cmd 'python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__)"'
PYTEST_ARGS="-- --warmup ${WARMUP:-10} --iter ${ITER:-50}"
CELL="zlstore flaggems cell --flaggems /tmp/FlagGems $PYTEST_ARGS"
REPEAT="zlstore flaggems repeat {op} {dtype} --flaggems /tmp/FlagGems $PYTEST_ARGS"
if has screen; then
  step "probe, then the screen (full autotune lists)"
  cmd "zlstore flaggems probe --flaggems /tmp/FlagGems"
  cmd "timeout -s INT ${SCREEN_S:-330} zlstore run screen --ops ${OPS:-baddbmm:float32,bmm:float32,softmax:float32,abs:float16} --switch TRITON_F32_DEFAULT --values ieee,tf32 --cell-timeout 240 --root runs/screen_tf32_$TAG --db z.db --command '$CELL'"
  cmd "zlstore screen runs/screen_tf32_$TAG --db z.db"
  cmd "for d in runs/screen_tf32_$TAG/*_before; do echo \$d \$(find \$d -name '*.ttgir' | wc -l); done"
fi
if has dead; then
  step "an A/A screen on a dead axis"
  cmd "timeout -s INT ${DEAD_S:-150} zlstore run screen --ops ${DEAD_OPS:-softmax:float32,abs:float16} --switch ZL_DEAD_AXIS --values off,on --cell-timeout 120 --root runs/screen_dead_$TAG --db z.db --command '$CELL'"
  cmd "zlstore screen runs/screen_dead_$TAG --db z.db"
fi
if has campaign; then
  step "the campaign: ${CARDS:-2} cards sharing the one GPU"
  cmd "timeout -s INT ${CAMPAIGN_S:-300} zlstore run campaign --screen-root ${CSCREEN:-runs/screen_tf32_$TAG} ${CEXTRA:-} --cards ${CARDS:-2} --devices ${DEVICES:-0,0} --rounds ${ROUNDS:-3} --cell-timeout 240 --status-every 60 --root runs/campaign_$TAG --db z.db --command '$REPEAT'"
  cmd "zlstore ab runs/campaign_$TAG --db z.db"
  cmd "zlstore ab runs/campaign_$TAG --db z.db --json > $OUT/ab_$TAG.json; echo written"
fi
step "done"
