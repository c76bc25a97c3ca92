"""Engine-level storage: connections, replicas, timeouts, migrations, pre-rendered bodies, freshness; the one
backend per database (server.storage.backend) and the SQL that differs per database (server.storage.dialects,
imported here so that its renderings are registered before any statement is compiled)."""
from server.storage import dialects as dialects
