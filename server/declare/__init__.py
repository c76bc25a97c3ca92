"""What a provider declares (providers, operations, tenancy, versioning), the registry that collects them, and the
other declarations plugins make (commands, load formats, demo data): the bottom layer, imported by every other."""
