#!/bin/sh
# migplan post_apply hook for Slurm: after the node's MIG change, install the exported config, make Slurm read it,
# wait until Slurm shows the planned Gres, and resume the node if migplan drained it. docs/slurm.md.
# Run by `migplan apply` on the GPU host (inventory `hooks: {post_apply: [...]}`), or by hand anywhere scontrol
# reaches slurmctld as root (or the SlurmUser), e.g. on the controller for several nodes after restarting it.
#
#   post-apply.sh [--node NAME]... [--short-names] [--gres-conf FILE] [--slurm-conf FILE] [--conf-dir DIR]
#                 [--reconfigure | --restart-slurmd] [--expect-gres GRES | --expect-from SLURM_CONF]
#                 [--timeout SECONDS] [--interval SECONDS] [--no-resume]
#
#   --node NAME        a Slurm NodeName, repeatable [default: $MIGPLAN_HOST, which migplan apply sets]
#   --short-names      use each NAME up to its first dot
#   --gres-conf FILE   install FILE (from `migplan export slurm -o gres.conf`) as DIR/gres.conf
#   --slurm-conf FILE  install FILE (from `migplan export slurm --slurm-conf ... -o slurm.conf`) as DIR/slurm.conf
#   --conf-dir DIR     where Slurm reads them [default: the directory of $SLURM_CONF, else /etc/slurm]
#   --reconfigure      run `scontrol reconfigure`: slurmd re-reads gres.conf; Slurm 23.11 and later start new
#                      slurmctld and slurmd processes for it (scontrol(1)), which is not verified here to take a
#                      GPU count change; 22.05 keeps the old count (tests/test_slurm_real.py)
#   --restart-slurmd   run `systemctl restart slurmd` on this host and wait for the new slurmd to register
#   --expect-gres G    the Gres Slurm must show for the node, e.g. gpu:3g.40gb:2,gpu:h100:1
#   --expect-from F    take it from the node's own NodeName line in F (the slurm.conf migplan rewrote, or the
#                      lines `migplan export slurm -o slurm.conf` prints)
#   --timeout S        how long to wait for that [default: 300]
#   --interval S       seconds between looks [default: 5]
#   --no-resume        install and reconfigure/restart only: the node stays drained (for Slurm 22.05, where a GPU
#                      count change needs slurmctld restarted first; run this again without it afterwards)
#
# Resumes (`scontrol update NodeName=N State=RESUME`) only a node whose drain reason starts with "migplan:" (set
# by pre-apply.sh); a node drained for another reason is left drained. Exit 0: every node shows the planned Gres
# and is resumed (or left as it was); 1: not in time, an apply that was not complete (MIGPLAN_RESULT=partial), or
# Slurm refused: the node stays drained, with what Slurm shows; 2: usage.
set -eu

PREFIX="migplan:"
nodes=""
short=0
gres_src=""
slurm_src=""
conf_dir=""
action=none
expect=""
expect_from=""
timeout=300
interval=5
resume=1

say() { printf '%s\n' "post-apply.sh: $*" >&2; }
usage() { say "$*"; exit 2; }
number() { case $2 in '' | *[!0-9]*) usage "$1 needs a whole number of seconds, not '$2'" ;; esac; }
# A Slurm node name as migplan writes it (migplan/slurm.py): nothing that could be another scontrol argument.
node_name() {
  printf '%s' "$1" | grep -Eqx '[A-Za-z0-9]([A-Za-z0-9._-]{0,126}[A-Za-z0-9])?' ||
    usage "'$1' is not a Slurm node name (give --node, or run under migplan apply, which sets MIGPLAN_HOST)"
}
file_arg() {
  case $2 in /*) ;; *) usage "$1 needs an absolute path, not '$2'" ;; esac
  case $2 in *'
'*) usage "$1: a path with a newline" ;; esac
}

while [ $# -gt 0 ]; do
  case $1 in
    --node) [ $# -ge 2 ] || usage "--node needs a value"; node_name "$2"; nodes="$nodes $2"; shift 2 ;;
    --short-names) short=1; shift ;;
    --gres-conf) [ $# -ge 2 ] || usage "--gres-conf needs a file"; file_arg "$1" "$2"; gres_src=$2; shift 2 ;;
    --slurm-conf) [ $# -ge 2 ] || usage "--slurm-conf needs a file"; file_arg "$1" "$2"; slurm_src=$2; shift 2 ;;
    --conf-dir) [ $# -ge 2 ] || usage "--conf-dir needs a directory"; file_arg "$1" "$2"; conf_dir=$2; shift 2 ;;
    --reconfigure) action=reconfigure; shift ;;
    --restart-slurmd) action=restart; shift ;;
    --expect-gres) [ $# -ge 2 ] || usage "--expect-gres needs a value"; expect=$2; shift 2 ;;
    --expect-from) [ $# -ge 2 ] || usage "--expect-from needs a file"; file_arg "$1" "$2"; expect_from=$2; shift 2 ;;
    --timeout) [ $# -ge 2 ] || usage "--timeout needs a value"; number --timeout "$2"; timeout=$2; shift 2 ;;
    --interval) [ $# -ge 2 ] || usage "--interval needs a value"; number --interval "$2"; interval=$2; shift 2 ;;
    --no-resume) resume=0; shift ;;
    -h | --help) awk 'NR > 1 && /^set -eu$/ { exit } NR > 1' "$0"; exit 0 ;;
    *) usage "unknown argument '$1' (see --help)" ;;
  esac
done

if [ -z "$nodes" ]; then
  [ -n "${MIGPLAN_HOST:-}" ] || usage "no node: give --node NAME (or run under migplan apply, which sets MIGPLAN_HOST)"
  node_name "$MIGPLAN_HOST"
  nodes=$MIGPLAN_HOST
fi
checked=""
for n in $nodes; do
  [ "$short" = 1 ] && n=${n%%.*}
  node_name "$n"
  checked="$checked $n"
done
[ -z "$expect" ] || [ -z "$expect_from" ] || usage "give --expect-gres or --expect-from, not both"
if [ -n "$expect" ] && ! printf '%s' "$expect" | grep -Eqx '[A-Za-z0-9._+:,-]{1,4096}'; then
  usage "--expect-gres '$expect' is not a Gres value (name:type:count,...)"
fi
[ "$interval" -ge 1 ] || interval=1

if [ "${MIGPLAN_RESULT:-ok}" != ok ]; then
  say "the apply on this host was not complete (MIGPLAN_RESULT=${MIGPLAN_RESULT}): the GPUs are not as planned;" \
      "nothing installed, the node stays drained (fix it, then run this again)"
  exit 1
fi

if [ -z "$conf_dir" ]; then
  if [ -n "${SLURM_CONF:-}" ]; then conf_dir=$(dirname -- "$SLURM_CONF"); else conf_dir=/etc/slurm; fi
fi

# Replace DIR/NAME by SRC atomically (a temporary file in DIR, then rename), only when the content differs.
install_conf() {
  src=$1 dest=$conf_dir/$2
  [ -f "$src" ] && [ ! -L "$src" ] || { say "$src is not a regular file"; exit 1; }
  [ -d "$conf_dir" ] && [ ! -L "$conf_dir" ] || { say "$conf_dir is not a directory"; exit 1; }
  if [ -f "$dest" ] && cmp -s -- "$src" "$dest"; then
    say "$dest is already as exported"
    return 0
  fi
  tmp=$conf_dir/.$2.migplan.$$
  rm -f -- "$tmp"
  cp -- "$src" "$tmp" && chmod 0644 -- "$tmp" && mv -f -- "$tmp" "$dest" || { rm -f -- "$tmp"; say "cannot install $dest"; exit 1; }
  say "installed $dest"
}
[ -z "$gres_src" ] || install_conf "$gres_src" gres.conf
[ -z "$slurm_src" ] || install_conf "$slurm_src" slurm.conf

# One `scontrol show node -o` field (Gres=, State=, SlurmdStartTime=) of node $1; its drain reason from sinfo.
field() { scontrol show node -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }
reason_of() { sinfo -h -N -n "$1" -o '%E' 2>/dev/null | head -n 1; }
# A Gres value in one order, without socket or index details: gpu:a:1(S:0),gpu:b:2 -> gpu:a:1,gpu:b:2
normal() { printf '%s' "$1" | sed 's/([^)]*)//g' | tr ',' '\n' | sed '/^$/d' | LC_ALL=C sort | paste -sd, -; }

started=""
for n in $checked; do started="$started $n=$(field "$n" SlurmdStartTime)"; done
case $action in
  reconfigure) scontrol reconfigure || { say "scontrol reconfigure failed"; exit 1; } ;;
  restart) systemctl restart slurmd || { say "systemctl restart slurmd failed"; exit 1; } ;;
esac
if [ "$resume" = 0 ]; then
  say "left drained (--no-resume):$checked"
  exit 0
fi

want_for() {
  if [ -n "$expect" ]; then printf '%s' "$expect"; return; fi
  [ -n "$expect_from" ] || return 0
  [ -f "$expect_from" ] || { say "$expect_from is not a file"; exit 1; }
  # the node's own line: NodeName=<node> with nothing else in the name (a range or list is not read here)
  awk -v node="$1" '{ sub(/#.*/, ""); eq = index($1, "=")
      if (tolower(substr($1, 1, eq)) != "nodename=" || substr($1, eq + 1) != node) next
      for (i = 2; i <= NF; i++) { e = index($i, "="); if (tolower(substr($i, 1, e)) == "gres=") { print substr($i, e + 1); exit } } }' \
    "$expect_from"
}

failed=0
for n in $checked; do
  want=$(want_for "$n")
  if [ -n "$expect_from" ] && [ -z "$want" ]; then
    say "$expect_from has no line 'NodeName=$n ... Gres=...' (a node of a range is not read): use --expect-gres"
    exit 1
  fi
  before=$(printf '%s\n' $started | sed -n "s/^$n=//p")
  waited=0
  while :; do
    gres=$(field "$n" Gres)
    state=$(field "$n" State)
    ok=1
    [ -z "$want" ] || [ "$(normal "$gres")" = "$(normal "$want")" ] || ok=0
    case $state in '' | *INVALID_REG* | *NOT_RESPONDING* | *'*'* | DOWN*) ok=0 ;; esac  # '*': not responding
    if [ "$action" = restart ] && [ "$(field "$n" SlurmdStartTime)" = "$before" ]; then ok=0; fi
    [ "$ok" = 0 ] || break
    if [ "$waited" -ge "$timeout" ]; then
      say "$n: Slurm shows Gres=${gres:-none} State=${state:-unknown} Reason=$(reason_of "$n")${want:+; planned Gres=$want}."
      say "$n stays drained. Slurm 22.05 keeps a node's GPU count until slurmctld restarts with the new slurm.conf" \
          "(scontrol(1), node Gres=): update slurm.conf, restart slurmctld, then run this again"
      failed=1
      break
    fi
    sleep "$interval"
    waited=$((waited + interval))
  done
  [ "$ok" = 1 ] || continue
  reason=$(reason_of "$n")
  case $state in
    *DRAIN*)
      case $reason in
        "$PREFIX"*) scontrol update NodeName="$n" State=RESUME || { say "scontrol refused to resume $n"; failed=1; continue; }
                    say "$n: Gres=$gres, resumed" ;;
        *) say "$n: Gres=$gres; left drained: its reason '$reason' is not migplan's" ;;
      esac ;;
    *) say "$n: Gres=$gres, $state (not drained)" ;;
  esac
done
exit "$failed"
