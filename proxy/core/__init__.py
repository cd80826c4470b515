"""Pure core: no I/O. Message normalisation, identifiers, lineage, transitions, diff, policy."""
