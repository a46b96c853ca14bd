#!/bin/sh
# migplan pre_apply hook for Slurm: drain the node before its MIG change and wait until no job runs on it.
# docs/slurm.md. Run by `migplan apply` on the GPU host (inventory `hooks: {pre_apply: [...]}`, through the host's
# `become`), or by hand; it needs `scontrol` and `sinfo` talking to slurmctld as root (or the SlurmUser).
#
#   pre-apply.sh [--node NAME] [--short-names] [--timeout SECONDS] [--interval SECONDS] [--on-timeout resume|keep]
#
#   --node NAME      the Slurm NodeName [default: $MIGPLAN_HOST, which migplan apply sets]
#   --short-names    use NAME up to its first dot (inventory host gpu01.example.org, Slurm node gpu01)
#   --timeout S      how long jobs may take to end [default: 3600]; keep it below `migplan apply --timeout`,
#                    which bounds every command it runs on a host, hooks included
#   --interval S     seconds between looks [default: 10]
#   --on-timeout     resume (default): jobs still running after S seconds: the drain this script set is undone
#                    (`State=RESUME`), exit 1, so migplan skips the host with nothing changed; keep: leave it drained
#
# The drain: `scontrol update NodeName=NAME State=DRAIN Reason="migplan: MIG change ..."` (scontrol(1)). A node an
# operator drained already (another reason) is left exactly as it is: its reason is kept, and post-apply.sh will
# not resume it. Done when sinfo's long state (%T) is `drained` (or down: no job runs there); `draining` means
# jobs still run (sinfo(1) NODE STATE CODES). Exit 0 drained; 1 not drained in time or Slurm refused; 2 usage.
set -eu

PREFIX="migplan:"
node=${MIGPLAN_HOST:-}
short=0
timeout=3600
interval=10
on_timeout=resume

say() { printf '%s\n' "pre-apply.sh: $*" >&2; }
usage() { say "$*"; exit 2; }
number() { case $2 in '' | *[!0-9]*) usage "$1 needs a whole number of seconds, not '$2'" ;; esac; }

while [ $# -gt 0 ]; do
  case $1 in
    --node) [ $# -ge 2 ] || usage "--node needs a value"; node=$2; shift 2 ;;
    --short-names) short=1; shift ;;
    --timeout) [ $# -ge 2 ] || usage "--timeout needs a value"; number --timeout "$2"; timeout=$2; shift 2 ;;
    --interval) [ $# -ge 2 ] || usage "--interval needs a value"; number --interval "$2"; interval=$2; shift 2 ;;
    --on-timeout)
      [ $# -ge 2 ] || usage "--on-timeout needs a value"
      case $2 in resume | keep) on_timeout=$2 ;; *) usage "--on-timeout is resume or keep, not '$2'" ;; esac
      shift 2 ;;
    -h | --help) awk 'NR > 1 && /^set -eu$/ { exit } NR > 1' "$0"; exit 0 ;;
    *) usage "unknown argument '$1' (see --help)" ;;
  esac
done

[ "$short" = 1 ] && node=${node%%.*}
# A Slurm node name as migplan writes it (migplan/slurm.py): nothing that could be another scontrol argument.
if ! printf '%s' "$node" | grep -Eqx '[A-Za-z0-9]([A-Za-z0-9._-]{0,126}[A-Za-z0-9])?'; then
  usage "'$node' is not a Slurm node name (give --node, or run under migplan apply, which sets MIGPLAN_HOST)"
fi
[ "$interval" -ge 1 ] || interval=1
plan=${MIGPLAN_PLAN:-}
plan=$(printf '%s' "$plan" | tr -cd 'A-Za-z0-9:' | cut -c1-19)

# "STATE|REASON" of the node as sinfo prints it (long state names), empty when Slurm does not know it.
look() { sinfo -h -N -n "$node" -o '%T|%E' 2>/dev/null | head -n 1; }

now=$(look) || now=""
[ -n "$now" ] || { say "Slurm knows no node '$node' (sinfo -n $node printed nothing)"; exit 1; }
state=${now%%|*}
reason=${now#*|}
we_drained=0
case $state in
  drain* | *drain*)
    case $reason in
      "$PREFIX"*) say "$node is already drained by migplan ($reason)" ;;
      *) say "$node is already drained ($reason): left as it is; post-apply.sh will not resume it" ;;
    esac ;;
  *)
    why="$PREFIX MIG change${plan:+ (plan $plan)}"
    scontrol update NodeName="$node" State=DRAIN Reason="$why" || { say "scontrol refused to drain $node"; exit 1; }
    we_drained=1
    say "$node: drain set ($why); waiting up to ${timeout}s for its jobs to end" ;;
esac

waited=0
while :; do
  now=$(look) || now=""
  state=${now%%|*}
  case $state in
    drained | drained\* | down | down\* | "down+drain"*) say "$node is $state: no job runs there"; exit 0 ;;
  esac
  if [ "$waited" -ge "$timeout" ]; then
    say "$node is still ${state:-unknown} after ${timeout}s: jobs are running"
    if [ "$we_drained" = 1 ] && [ "$on_timeout" = resume ]; then
      reason=${now#*|}
      case $reason in
        "$PREFIX"*) scontrol update NodeName="$node" State=RESUME && say "$node: drain undone; nothing changed" ;;
      esac
    fi
    exit 1
  fi
  sleep "$interval"
  waited=$((waited + interval))
done
