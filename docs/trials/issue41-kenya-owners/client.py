import sys
from fhirpy import SyncFHIRClient
c = SyncFHIRClient("http://127.0.0.1:8941/fhir", authorization="Bearer " + sys.argv[1])
chak = c.resources("Organization").search(identifier="https://mfl.health.go.ke/owner|christian-health-association-of-kenya").first()
print("owner", chak.id, chak["name"])
n = c.resources("OrganizationAffiliation").search(**{"primary-organization": chak.id}).count()
print("facilities owned by CHAK:", n)
aff = c.resources("OrganizationAffiliation").search(**{"primary-organization.identifier": "christian-health-association-of-kenya"}).include("OrganizationAffiliation", "location").limit(3).fetch()
print([a["location"][0]["reference"] for a in aff])
loc = c.resources("Location").search(identifier="19680").first()
owners = c.resources("Organization").search(**{"_has:OrganizationAffiliation:primary-organization:location": loc.id}).fetch()
print("owner of", loc["name"], ":", [o["name"] for o in owners])
