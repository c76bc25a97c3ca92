"""The FHIR engine: provider declarations, registry, interactions, bundles, capabilities."""
