#!/bin/bash
# Copy what the device needs into /work/main/build/h35dev (ignored by main's /build/ rule): the device
# tool sends the session's checkout (/work/main), not this worktree.
set -e
W=/work/wt-h35; D=/work/main/build/h35dev
rm -rf $D; mkdir -p $D/zl $D/whl
cp -r $W/zlstore $W/schema.sql $W/pyproject.toml $D/zl/
find $D/zl -name __pycache__ -prune -exec rm -rf {} +
cp $W/.whl/*.whl $D/whl/
cp -r $W/.flaggems $D/fg
cp $W/.flaggems-run/device.sh $D/
du -sh $D
[ -n "${PREV_DB:-}" ] && cp "$PREV_DB" $D/z_prev.db.xz
du -sh $D
