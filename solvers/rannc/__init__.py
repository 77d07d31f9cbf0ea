"""RaNNC (Tanaka et al., IPDPS 2021): atomic-, block- and stage-level partitioning (docs/rannc.md)."""
