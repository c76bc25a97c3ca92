"""The provider contract suite, part of the distribution: what a provider package declares about its sample data
(`from server.contract import Samples, Scope, Search, Subject`), the server built over it (server.contract.context)
and the checks (server.contract.checks), which the pytest plugin server.contract.plugin runs. Guide: the section
"Run the contract suite" of orgunit-fhir's plugins/README.md."""
from server.contract.loading import load_files
from server.contract.samples import Samples, Scope, Search, Subject, load_subjects

__all__ = ["Samples", "Scope", "Search", "Subject", "load_files", "load_subjects"]
