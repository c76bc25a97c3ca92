"""Engine-level storage: connections, replicas, timeouts, migrations, pre-rendered bodies, freshness."""
