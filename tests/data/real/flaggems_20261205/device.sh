#!/bin/bash
# zlstore issue 35 on the device: FlagGems screened and campaigned by zlstore.
# bash device.sh TAG STEPS   (STEPS: any of setup,nosqla,screen,campaign)
set -u
TAG=${1:-a}; STEPS=${2:-setup,nosqla,screen,campaign}
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
mkdir -p /tmp/site /tmp/site-fg /tmp/bin /tmp/w
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  $(ls $B/whl/*.whl | grep -v -e sqlalchemy -e greenlet) || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-fg \
  $B/whl/sqlalchemy-*.whl $B/whl/greenlet-*.whl || exit 1
export PYTHONPATH=/tmp/site:$B/zl
printf '#!/bin/sh\nexec python3 -m zlstore "$@"\n' > /tmp/bin/zlstore && chmod +x /tmp/bin/zlstore
export PATH=/tmp/bin:$PATH
[ -d /tmp/FlagGems ] || cp -r $B/fg /tmp/FlagGems
cd /tmp/w
[ -f $B/z_prev.db.xz ] && [ ! -f z.db ] && xz -dc $B/z_prev.db.xz > z.db   # the store of the run before
export ZL_BACKEND=cuda BENCH_LEVEL=core ZL_ENABLE_CUDAGRAPH=0 ZL_ISOLATE_TUNER_CACHE=1 ZL_DIRECT_REPEAT=1 \
       SHAPE_MODE=default USE_FLAGTUNE=0
cmd 'nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv'
cmd 'python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, torch.version.cuda, triton.__version__)"'
cmd 'env | grep -E "^(ZL_|BENCH_LEVEL|SHAPE_MODE|USE_FLAGTUNE)" | sort'
PYTEST_ARGS="-- --warmup ${WARMUP:-10} --iter ${ITER:-50}"
CELL="zlstore flaggems cell --flaggems /tmp/FlagGems $PYTEST_ARGS"
REPEAT="zlstore flaggems repeat {op} {dtype} --flaggems /tmp/FlagGems $PYTEST_ARGS"

if has nosqla; then
  step "FlagGems' checkout without sqlalchemy: found before the first cell"
  cmd "zlstore flaggems probe --flaggems /tmp/FlagGems"
  cmd "zlstore run screen --ops bmm:float32,softmax:float32,abs:float16 --switch TRITON_F32_DEFAULT --values ieee,tf32 --cell-timeout 240 --root runs/screen_nosqlalchemy_$TAG --db z.db --command '$CELL'"
  cmd "ls runs 2>&1"
fi
export PYTHONPATH=/tmp/site-fg:$PYTHONPATH
touch /tmp/marker; sleep 1
if has screen; then
  step "probe, then the screen"
  cmd "zlstore flaggems probe --flaggems /tmp/FlagGems"
  cmd "timeout -s INT ${SCREEN_S:-330} zlstore run screen --ops ${OPS:-bmm:float32,softmax:float32,abs:float16} --switch TRITON_F32_DEFAULT --values ieee,tf32 --cell-timeout 240 --root runs/screen_$TAG --db z.db --command '$CELL'"
  cmd "zlstore screen runs/screen_$TAG --db z.db"
  cmd "zlstore screen runs/screen_$TAG --rule v4 --db z.db"
fi
if has campaign; then
  step "the campaign: 2 cards sharing the one GPU"
  cmd "timeout -s INT ${CAMPAIGN_S:-300} zlstore run campaign --screen-root runs/screen_$TAG --cards 2 --devices 0,0 --rounds ${ROUNDS:-3} ${EXTRA:-} --cell-timeout 240 --status-every 60 --root runs/campaign_$TAG --db z.db --command '$REPEAT'"
  cmd "zlstore ab runs/campaign_$TAG --db z.db"
fi
if has after; then
  step "what was written outside the cells, and the provenance stored"
  cmd "find /tmp/FlagGems /root /tmp -xdev -newer /tmp/marker -type f -not -path '/tmp/w/runs/*' -not -path '/tmp/site*' 2>/dev/null | grep -v -e '^/tmp/w/z.db' | head -20"
  cmd "cat runs/screen_$TAG/bmm_float32_before/cell.env"
  cmd "zlstore history bmm:float32 --db z.db"
fi
step "done"
