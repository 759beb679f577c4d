"""The webhook: CRD conversion between v1beta1 and v1beta2, validation, clique placement."""
