#!/usr/bin/env bash
# scripts/check-layers.sh — the one-way layer rule of src/ and include/ (docs/architecture.md, "The layers").
#
# A folder (with its sub-folders: src/source/oplog/ is source/) may include its own headers and those of the folders
# below it, never those above:
#   util  <  core  <  map  <  source, sink  <  copy  <  daemon
# (source and sink sit side by side and never include each other). Prints every offending #include and exits 1.
#
# Inside sink/, the files are layers too (docs/architecture.md, "The sink's layers"), lowest first in SINK_LAYERS: a
# file calls the functions of its own and of files in layers below it, never those of a file above it or beside it.
# That is checked on the calls: a function a sink file defines (not static) and a file of a lower or the same layer
# names is an arrow pointing up or sideways. A new file of sink/ must be given its layer here.
set -euo pipefail
cd "$(dirname "$0")/.."

allowed() { # allowed LAYER: the folders LAYER may include
    case $1 in
    util) echo "util" ;;
    core) echo "util core" ;;
    map) echo "util core map" ;;
    source) echo "util core map source" ;;
    sink) echo "util core map sink" ;;
    copy) echo "util core map source sink copy" ;;
    daemon) echo "util core map source sink copy daemon" ;;
    *) echo "" ;;
    esac
}

bad=0
for dir in src/* include/*; do
    [ -d "$dir" ] || continue
    layer=${dir#*/}
    ok=$(allowed "$layer")
    if [ -z "$ok" ]; then
        echo "check-layers: $dir is not a known layer: add it to scripts/check-layers.sh and docs/architecture.md"
        bad=1
        continue
    fi
    while IFS= read -r line; do
        file=${line%%:*}
        target=$(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([a-z_]*\)\/.*/\1/p' <<<"${line#*:}")
        [ -n "$target" ] || continue
        case " $ok " in
        *" $target "*) ;;
        *)
            echo "check-layers: $file includes $target/, a layer above $layer/ or beside it: ${line#*:}"
            bad=1
            ;;
        esac
    done < <(grep -rH --include='*.[ch]' '#[[:space:]]*include[[:space:]]*"[a-z_]*/' "$dir" 2>/dev/null || true)
done
SINK_LAYERS=(
    "pgerror.c"              # the one error policy
    "pgconn.c"               # the libpq layer: connect, waits, exec, COPY
    "batch.c mapped_sql.c"   # runs of rows and COPY bodies; a typed map's tables' SQL
    "rows.c"                 # the row writer: COPY of a batch, upserts of whole documents
    "failure.c"              # the group's first failure, the keep point
    "pipeline.c"             # the channel: pipeline mode, pending results, the COPY it may carry
    "stmt.c"                 # statements over the channel: the jsonb shape's, prepares, catalog calls
    "jsonb.c mapped.c"       # the table kinds: the jsonb shape; a typed map with its child tables
    "tseries.c"              # the time-series kind: buckets to measurements (names and DDL as the jsonb shape's)
    "backfill.c reconcile.c" # a map's new columns at connect; the delete reconciliation's anti-join
    "shards.c"               # a sharded cluster's checkpoints: one row per shard, written with each commit
    "pg.c"                   # the core: connect, tables, writes, streaming, DDL, commit
    "connect.c deadletter.c probe.c" # connecting; guarded ops and dead letters; the look for check and status
    "batcher_pg.c"           # the batcher's adapter, on the public interface only
)
declare -A layer_of # file name -> its layer's number
for i in "${!SINK_LAYERS[@]}"; do
    for f in ${SINK_LAYERS[$i]}; do layer_of[$f]=$i; done
done
sink_layer() { echo "${layer_of[$1]:-}"; }
defined() { # defined FILE: the functions FILE defines with external linkage
    grep -v '^static' "$1" | sed -n 's/^[a-z][a-z_0-9 ]*[ *]\([a-z_][a-z_0-9]*\)(.*/\1/p' || true
}
for f in src/sink/*.c; do
    [ -n "$(sink_layer "${f##*/}")" ] && continue
    echo "check-layers: $f has no layer: add it to SINK_LAYERS in scripts/check-layers.sh and to docs/architecture.md"
    bad=1
done
declare -A defs # file -> the functions it defines, as an alternation
for g in src/sink/*.c; do
    defs[$g]=$(defined "$g" | paste -sd'|' -)
done
for f in src/sink/*.c; do
    fl=${layer_of[${f##*/}]:-}
    [ -n "$fl" ] || continue
    for g in src/sink/*.c; do
        gl=${layer_of[${g##*/}]:-}
        [ "$f" != "$g" ] && [ -n "$gl" ] && [ "$gl" -ge "$fl" ] && [ -n "${defs[$g]}" ] || continue
        while IFS= read -r hit; do
            fn=${hit#*:}
            fn=${fn%(}
            fn=${fn##*[^a-z_0-9]}
            echo "check-layers: $f:${hit%%:*} calls $fn of ${g##*/}, a sink layer above it or beside it"
            bad=1
        done < <(grep -noE "(^|[^a-z_0-9])(${defs[$g]})\(" "$f" || true)
    done
done
layers=$(printf '%s < ' "${SINK_LAYERS[@]}")
[ $bad -eq 0 ] && echo "check-layers: every include points down (util < core < map < source, sink < copy < daemon)" &&
    echo "check-layers: every call inside sink/ points down (${layers% < })"
exit $bad
