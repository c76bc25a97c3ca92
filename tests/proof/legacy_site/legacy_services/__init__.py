"""A third-party orgunit-fhir provider package: FHIR R4 HealthcareService (issue 13's proof). It imports nothing
of the engine but `from server import ...`, and is found through its entry point (see its dist-info)."""
