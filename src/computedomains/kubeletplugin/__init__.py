"""The DRA kubelet plugin of the compute-domain.nvidia.com driver."""
