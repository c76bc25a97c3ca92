"""The facility owners of the Kenya Master Facility List: each owner an Organization (published with the org-unit
plugin's `load organizations`), linked to its facilities by an mCSD OrganizationAffiliation served here."""
PLUGIN_API = "1.1"
