#!/bin/bash
# Stop what start_slurm.sh started under $SLURM_BASE (by PID file: nothing
# else is touched) and remove its runtime state.
B=${SLURM_BASE:-/tmp/zlslurm}; R=$B/run; export SLURM_CONF=$B/slurm.conf
J=$(squeue -h -o %A 2>/dev/null); [ -n "$J" ] && { scancel $J; sleep 1; }
P=
for f in $R/slurmd-*.pid $R/slurmctld.pid $R/munge/munged.pid; do
  [ -f "$f" ] || continue; pid=$(cat "$f")
  case "$(cat /proc/$pid/comm 2>/dev/null)" in slurmd|slurmctld|munged) P="$P $pid";; esac
done
[ -n "$P" ] && kill $P
for i in $(seq 1 40); do  # <=10s, then SIGKILL
  L=; for p in $P; do kill -0 $p 2>/dev/null && L="$L $p"; done; P=$L
  [ -z "$P" ] && break; sleep 0.25
done
[ -n "$P" ] && kill -9 $P
rm -rf $R
exit 0
