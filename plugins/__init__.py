"""Plugins shipped with orgunit-fhir; each is loaded through the `orgunit_fhir` entry-point group."""
