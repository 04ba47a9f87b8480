#!/usr/bin/env bash
# scripts/check-layers.sh — the one-way layer rule of src/ and include/ (docs/architecture.md, "The layers").
#
# A folder may include its own headers and those of the folders below it, never those above:
#   util  <  core  <  map  <  source, sink  <  copy  <  daemon
# (source and sink sit side by side and never include each other). Prints every offending #include and exits 1.
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
    done < <(grep -H '#[[:space:]]*include[[:space:]]*"[a-z_]*/' "$dir"/*.[ch] 2>/dev/null || true)
done
[ $bad -eq 0 ] && echo "check-layers: every include points down (util < core < map < source, sink < copy < daemon)"
exit $bad
