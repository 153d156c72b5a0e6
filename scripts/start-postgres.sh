#!/usr/bin/env bash
# Start the local PostgreSQL cluster (Debian's postgresql package) and create the test database, so that
# postgresql://postgres:postgres@127.0.0.1:5432/reinloop_test works. Idempotent; needs root.
set -euo pipefail
if [ -z "$(pg_lsclusters --no-header 2>/dev/null)" ]; then
  version=$(ls /usr/lib/postgresql | sort -V | tail -1)
  pg_createcluster "$version" main --port 5432
fi
read -r version name port status _ <<<"$(pg_lsclusters --no-header | head -1)"
if [ "$status" != "online" ]; then
  pg_ctlcluster "$version" "$name" start
fi
as_postgres() { su postgres -c "$1"; }
as_postgres "psql -q -p $port -c \"ALTER USER postgres PASSWORD 'postgres'\""
if ! as_postgres "psql -p $port -tAc \"SELECT 1 FROM pg_database WHERE datname = 'reinloop_test'\"" | grep -q 1; then
  as_postgres "createdb -p $port reinloop_test"
fi
echo "postgresql://postgres:postgres@127.0.0.1:$port/reinloop_test"
