#!/usr/bin/env bash
# `make install`: puts the library and scripts that `make` staged (cargo pgrx package) into a
# pg_config's installation, with every release's install scripts. Each file is written under a
# temporary name and renamed over the old one, so a running server keeps the library it has
# mapped: a copy in place (cargo pgrx install, install(1)) rewrites the file under it, and its
# backends crash. New backends load the new library.
#   install-staged.sh PG_CONFIG STAGE_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
pg_config=$1 stage=$2
lib=$("$pg_config" --pkglibdir)
extension=$("$pg_config" --sharedir)/extension
put() {
    local mode=$1 file=$2 dir=$3 name
    name=$(basename "$file")
    install -m "$mode" "$file" "$dir/.$name.new"
    mv -f "$dir/.$name.new" "$dir/$name"
}
install -d "$lib" "$extension"
put 755 "$stage$lib/fenced_lock.so" "$lib"
for file in "$stage$extension"/fenced_lock* $(scripts/released-scripts.sh); do
    put 644 "$file" "$extension"
done
echo "installed fenced_lock $(scripts/version.sh) into $lib and $extension"
