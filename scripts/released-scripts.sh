#!/usr/bin/env bash
# The install scripts of earlier releases, as shipped (sql/shipped.sha256 lists every released
# script): installed beside the new release's own, so that a database of any release can be
# created and upgraded. The one list that make install and make package read.
sed -n 's|^[0-9a-f]*  \(sql/fenced_lock--[0-9.]*\.sql\)$|\1|p' "$(dirname "$0")/../sql/shipped.sha256"
