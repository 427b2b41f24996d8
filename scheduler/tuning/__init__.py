"""The tuners: the cluster tuner's model and table, --tune-leaves, --calibrate."""
