#!/bin/bash
# A real Slurm on one machine, for the tests and the README's run: Debian's
# slurmctld, slurmd, slurm-client and munge, no systemd, no cgroups.
#
#   NODES=4 SLURM_BASE=/tmp/zlslurm tests/slurm/start_slurm.sh
#   export SLURM_CONF=/tmp/zlslurm/slurm.conf     # what every Slurm command reads
#
# NODES=N>1 starts N slurmd "nodes" n1..nN on this host (one CPU each: N
# tasks at once). Everything lives under $SLURM_BASE; SLURMCTLD_PORT and
# SLURMD_PORT (the first node's; the others follow) let two clusters run on
# one machine. Nothing outside $SLURM_BASE is touched: no /etc/slurm link,
# so SLURM_CONF must be exported. Idempotent: what runs is left running.
# Stop it with tests/slurm/stop_slurm.sh (same SLURM_BASE).
# Adapted from ../shared/slurm/ (seen to work on Debian 12, Slurm 22.05).
set -euo pipefail
B=${SLURM_BASE:-/tmp/zlslurm}; R=$B/run; NODES=${NODES:-1}; H=$(hostname -s)
CTLD_PORT=${SLURMCTLD_PORT:-6817}; D_PORT=${SLURMD_PORT:-17001}
export SLURM_CONF=$B/slurm.conf
alive() { [ -f "$1" ] && [ "$(cat /proc/$(cat "$1")/comm 2>/dev/null)" = "$2" ]; }
mkdir -p $R/munge $R/state $R/log; chmod 755 $R/munge
if [ $NODES -gt 1 ]; then NAMES=$(seq -f n%g 1 $NODES); else NAMES=$H; fi
for n in $NAMES; do mkdir -p $R/spool/$n; done
cat > $SLURM_CONF <<CONF
ClusterName=zlstore
SlurmctldHost=$H
SlurmctldPort=$CTLD_PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$R/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$R/state
SlurmdSpoolDir=$R/spool/%n
SlurmctldPidFile=$R/slurmctld.pid
SlurmdPidFile=$R/slurmd-%n.pid
SlurmctldLogFile=$R/log/slurmctld.log
SlurmdLogFile=$R/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=batch_sched_delay=0
KillWait=5
ReturnToService=2
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
$(if [ $NODES -gt 1 ]; then for i in $(seq 1 $NODES); do
  echo "NodeName=n$i NodeHostname=$H NodeAddr=127.0.0.1 Port=$((D_PORT+i-1)) CPUs=1 RealMemory=1000"; done
else echo "$(slurmd -C | head -1) Port=$D_PORT State=UNKNOWN"; fi)
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
[ -f $R/munge/munge.key ] || mungekey --create --keyfile=$R/munge/munge.key
alive $R/munge/munged.pid munged || munged --key-file=$R/munge/munge.key \
  --socket=$R/munge/munge.socket --pid-file=$R/munge/munged.pid \
  --log-file=$R/munge/munged.log --seed-file=$R/munge/munged.seed
alive $R/slurmctld.pid slurmctld || slurmctld
for n in $NAMES; do alive $R/slurmd-$n.pid slurmd || slurmd -N $n; done
for i in $(seq 1 120); do  # wait <=30s for idle
  [ "$(sinfo -h -o %T 2>/dev/null | sort -u)" = idle ] && { sinfo; exit 0; }; sleep 0.25
done
echo "slurm did not become idle; see $R/log" >&2; sinfo >&2 || true; exit 1
