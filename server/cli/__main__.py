"""`python -m server.cli`: the orgunit-fhir command line."""
import sys

from server.cli.main import main

sys.exit(main())
