"""The ComputeDomain API: names, CRDs and typed models shared by every component."""
