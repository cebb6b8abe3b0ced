"""GDN spec-decode kernels: `reference` (float64 torch), `gdn_spec` (Triton), `fla_check` (fla)."""
