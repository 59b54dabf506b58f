#!/usr/bin/env bash
# Compares what libtandem.so exports with the checked-in list
# (abi/tandem.symbols), so that no change adds or drops a symbol of the ABI
# by accident, and that nothing but td_ names leaks out of the library.
#   check_symbols.sh NM LIBRARY LIST           compare; fail naming each difference
#   check_symbols.sh NM LIBRARY LIST --update  rewrite LIST from LIBRARY (its # lines kept)
set -euo pipefail
nm_prog=$1 library=$2 list=$3 mode=${4:-}

# Global symbols the library defines (functions and data), one a line. The
# upper-case nm types are the global ones; U (undefined) is left out by
# --defined-only, and the weak and versioned forms are kept in the list so
# that they show up too.
exported=$("$nm_prog" -D --defined-only "$library" | awk '$2 ~ /^[A-Z]$/ { print $3 }' | LC_ALL=C sort -u)
expected=$(awk '!/^#/ && NF { print $1 }' "$list" | LC_ALL=C sort -u)

if [ "$mode" = --update ]; then
    { grep '^#' "$list" || true; printf '%s\n' "$exported"; } > "$list.new"
    mv "$list.new" "$list"
    echo "$list now lists the $(printf '%s\n' "$exported" | wc -l) exported symbols"
    exit 0
fi

status=0
added=$(LC_ALL=C comm -23 <(printf '%s\n' "$exported") <(printf '%s\n' "$expected") | grep -v '^$' || true)
removed=$(LC_ALL=C comm -13 <(printf '%s\n' "$exported") <(printf '%s\n' "$expected") | grep -v '^$' || true)
for symbol in $added; do
    echo "added to the ABI, not in $(basename "$list"): $symbol"
    status=1
done
for symbol in $removed; do
    echo "removed from the ABI, still in $(basename "$list"): $symbol"
    status=1
done
for symbol in $exported; do
    case $symbol in
    td_*) ;;
    *)
        echo "exported without the td_ prefix (hide it: only TD_API functions are public): $symbol"
        status=1
        ;;
    esac
done
if [ "$status" -ne 0 ]; then
    echo "An intended ABI change? Update the list and commit it: tests/abi/check_symbols.sh nm $library abi/tandem.symbols --update"
else
    echo "libtandem exports the $(printf '%s\n' "$exported" | wc -l) symbols of $(basename "$list")"
fi
exit "$status"
